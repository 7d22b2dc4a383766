"""A 60-minute recording through the steps of `transcribe_long` with bounded memory.

The file is generated here in seconds: one espeak-ng clip of three sentences, padded to a
12 s period, written 300 times (60 min of 16 kHz mono PCM, 115 MB on disk). The test runs,
for real, DETECT_LANGUAGE (multilingual base, windows spread over the hour), SPLIT_AUDIO (the
VAD in the resident inference worker, then the chunk files) and TRANSCRIBE_CHUNK on the first
and the last of the 30 chunks (tiny.en; all 30 would take ~5 minutes on 2 cores, too slow for
the suite, and each reads only its own chunk file). The peak resident memory of each process
that reads the audio is measured from a reset high-water mark (`/proc/PID/clear_refs`) and
must stay far below what holding the whole recording costs: 60 min as float32 is 230 MB,
as int16 115 MB.
"""

from __future__ import annotations

import math
import os
import subprocess
import wave
from pathlib import Path

import pytest
from bench.talks import word_error_rate

from fredica.cli.demo_media import speak
from fredica.executors import ffmpeg, inference_worker, split, transcribe
from tests.media_support import REFERENCE, SENTENCES, make_context, require_media_tools

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

PERIOD_SEC = 12.0
PERIODS = 300  # 60 minutes
CHUNK_SEC = 121.0  # a nominal boundary falls 1 s into a period: the cut goes back to its pause
WHOLE_FLOAT32_MB = 60 * 60 * 16_000 * 4 / 2**20  # 220 MiB (230 MB)
GROWTH_BOUND_MB = 100.0  # a process reading the audio may grow by this much at most


def _kb(pid: int | str, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/{pid}/status")


def _reset_peak(pid: int | str) -> int:
    """Reset the process's peak RSS to its current RSS (Linux); the current RSS in KiB."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _kb(pid, "VmRSS")


def _growth_mb(pid: int | str, before_kb: int) -> float:
    return (_kb(pid, "VmHWM") - before_kb) / 1024


def _hour_of_speech(directory: Path) -> Path:
    clip22k = speak(SENTENCES, directory / "clip22k.wav", pause_sec=0.6)
    clip = directory / "clip.wav"
    to_16k = ["-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le", str(clip)]
    subprocess.run([ffmpeg.executable(), "-v", "error", "-i", str(clip22k), *to_16k], check=True)
    with wave.open(str(clip), "rb") as wav:
        params = wav.getparams()
        frames = wav.readframes(wav.getnframes())
    period = int(PERIOD_SEC * 16_000) * 2
    assert len(frames) < period, "the clip must fit in one period"
    padded = frames + b"\0" * (period - len(frames))
    out = directory / "hour.wav"
    with wave.open(str(out), "wb") as wav:
        wav.setparams(params)
        for _ in range(PERIODS - 1):
            wav.writeframes(padded)
        wav.writeframes(frames + b"\0" * 3200)  # the file ends 0.1 s after the last word
    return out


def _only_worker() -> inference_worker.Worker:
    workers = [w for w in inference_worker.pool().workers if w.alive]
    assert len(workers) == 1, [w.key for w in workers]
    return workers[0]


async def test_an_hour_splits_and_transcribes_in_bounded_memory(tmp_path: Path) -> None:
    require_media_tools()
    hour = _hour_of_speech(tmp_path)
    with wave.open(str(hour), "rb") as wav:
        duration = wav.getnframes() / wav.getframerate()
    assert 3599 < duration <= 3600
    inference_worker.pool().shutdown()  # fresh workers: their peaks are this test's
    me = os.getpid()

    # DETECT_LANGUAGE (language auto): windows spread over the hour, never the whole file
    (tmp_path / "warm").mkdir()
    base = transcribe.default_model_for("auto")  # what transcribe_long detects with
    warm = await make_context(
        tmp_path / "warm",
        "DETECT_LANGUAGE",
        {"audio_path": str(tmp_path / "clip.wav"), "model_name": base},
    )
    await transcribe.DetectLanguageExecutor().execute(warm.task, warm)  # loads the model
    detector = _only_worker()
    before = _reset_peak(detector.pid)
    payload = {"audio_path": str(hour), "model_name": base}
    ctx = await make_context(tmp_path, "DETECT_LANGUAGE", payload)
    detected = (await transcribe.DetectLanguageExecutor().execute(ctx.task, ctx)).result_json
    assert detected is not None and detected["language"] == "en", detected
    detect_growth = _growth_mb(detector.pid, before)
    inference_worker.pool().shutdown()

    # SPLIT_AUDIO: the VAD reads the hour window by window in a resident worker (warmed on
    # the clip: its imports and the VAD model are loaded before the peak is reset); the chunk
    # files are copied span by span in this process
    clip = {"audio_path": str(tmp_path / "clip.wav")}
    await inference_worker.pool().run(None, split.speech_in_child, clip, warm.control)
    vad = _only_worker()
    vad_before = _reset_peak(vad.pid)
    payload = {"audio_path": str(hour), "chunk_duration_sec": CHUNK_SEC, "output_dir": "hour"}
    ctx = await make_context(tmp_path, "SPLIT_AUDIO", payload)
    before_me = _reset_peak(me)
    result = (await split.SplitAudioExecutor().execute(ctx.task, ctx)).result_json
    split_growth = _growth_mb(me, before_me)
    assert _only_worker() is vad, "the VAD ran in the warmed worker"
    vad_growth = _growth_mb(vad.pid, vad_before)
    assert result is not None

    print(
        f"\n60 min, 30 chunks: peak RSS growth: DETECT_LANGUAGE worker {detect_growth:.1f} MB, "
        f"VAD worker {vad_growth:.1f} MB (RSS {vad_before / 1024:.0f} MB before), SPLIT "
        f"process {split_growth:.1f} MB; the whole audio as float32 is {WHOLE_FLOAT32_MB:.0f} MiB"
    )
    assert detect_growth < GROWTH_BOUND_MB
    assert vad_growth < GROWTH_BOUND_MB
    assert split_growth < GROWTH_BOUND_MB

    # the chunking rules: 30 chunks of at most CHUNK_SEC, each cut in the pause of a period
    chunks = result["chunks"]
    assert result["chunk_count"] == len(chunks) == 30, [c["own_end_sec"] for c in chunks]
    assert result["split_at"] == "vad pause"
    for i, cut in enumerate(result["cut_points"], start=1):
        assert abs(cut - 120.0 * i) < 1.5, (i, cut)
    for chunk in chunks:
        assert chunk["own_end_sec"] - chunk["own_start_sec"] <= CHUNK_SEC
        with wave.open(chunk["path"]) as wav:
            assert wav.getnframes() / 16_000 == pytest.approx(chunk["duration_sec"], abs=0.002)
    assert chunks[-1]["own_end_sec"] == pytest.approx(duration, abs=0.01)

    # TRANSCRIBE_CHUNK on the first and the last chunk: each reads its own file only
    texts = []
    for chunk in (chunks[0], chunks[-1]):
        payload = {
            "audio_path": chunk["path"],
            "chunk_index": chunk["index"],
            "chunk_start_sec": chunk["start_sec"],
            "language": "en",
        }
        ctx = await make_context(tmp_path / f"c{chunk['index']}", "TRANSCRIBE_CHUNK", payload)
        out = (await transcribe.TranscribeChunkExecutor().execute(ctx.task, ctx)).result_json
        assert out is not None
        segments = out["segments"]
        # the words are at the chunk's own place in the hour (its offsets), spread over it
        assert segments[0]["start"] >= chunk["start_sec"]
        assert segments[-1]["end"] <= chunk["end_sec"] + 0.5
        assert segments[0]["start"] - chunk["start_sec"] < PERIOD_SEC
        assert chunk["end_sec"] - segments[-1]["end"] < 4 * PERIOD_SEC
        texts.append(out["text"])
    for chunk, text in zip((chunks[0], chunks[-1]), texts, strict=True):
        periods = math.floor((chunk["end_sec"] - chunk["start_sec"]) / PERIOD_SEC)
        # The same three sentences said 10 times over are the worst case for Whisper's
        # conditioning on what it wrote: it skips or rewrites repeats, and its temperature
        # fallback samples at random, so the word error rate of one chunk moves from run to
        # run and CPU to CPU (measured on the same code: 0.28 to 0.63). A chunk that lost its
        # audio would be near 1.0 and hear none of the sentences; every sentence must be heard.
        wer = word_error_rate(" ".join([REFERENCE] * periods), text)
        assert wer < 0.8, (chunk["index"], wer, text[:300])
        heard = text.lower()
        assert all(word in heard for word in ("lazy", "cluster", "processor")), text[:300]

    inference_worker.pool().shutdown()
