"""Speech analysis on generated audio: DIARIZE_AUDIO (two espeak-ng voices), ENHANCE_AUDIO
(noisereduce on speech under white noise), FINGERPRINT_AUDIO (fpcalc)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fredica.domain import errors
from fredica.executors import speech, subsync
from tests import subtitle_support as ss
from tests.e2e.conftest import on_node
from tests.media_support import make_context

pytestmark = pytest.mark.slow

DIALOGUE = [
    ("en-us", "Hello and welcome to our little podcast about computers."),
    ("en-us+f4", "Thanks for having me, I am happy to be here today."),
    ("en-us", "Let us talk about home media clusters and how they work."),
    ("en-us+f4", "Sure. Every machine claims the work it is best at."),
    ("en-us", "That sounds very practical for a family with many devices."),
]


@pytest.fixture(scope="module")
def dialogue(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    d = tmp_path_factory.mktemp("dialogue")
    truth = ss.timed_speech(DIALOGUE, d / "dialogue.wav", lead=0.8, pause=0.7)
    return d / "dialogue.wav", truth


async def run(tmp_path: Path, executor, task_type: str, payload: dict, **kw) -> dict:
    ctx = await make_context(tmp_path, task_type, payload, **kw)
    result = (await executor.execute(ctx.task, ctx)).result_json
    assert result is not None
    return result


async def test_two_voices_are_two_speakers_with_turns_at_the_right_times(
    tmp_path: Path, dialogue: tuple[Path, list]
) -> None:
    wav, truth = dialogue
    result = await run(
        tmp_path,
        speech.DiarizeAudioExecutor(),
        "DIARIZE_AUDIO",
        {"audio_path": str(wav), "min_speakers": 0, "max_speakers": 0},
        backend=speech.DIARIZE_BUILTIN,
    )
    segments = result["segments"]
    print(
        "\n"
        + "\n".join(f"{s['speaker']} {s['start_sec']:6.2f} {s['end_sec']:6.2f}" for s in segments)
    )
    assert result["num_speakers"] == 2
    assert len(segments) == len(truth)
    voices = {}
    for seg, (start, end, voice, _) in zip(segments, truth, strict=True):
        assert voices.setdefault(voice, seg["speaker"]) == seg["speaker"]  # one label per voice
        assert seg["start_sec"] == pytest.approx(start, abs=0.5)
        assert seg["end_sec"] == pytest.approx(end, abs=0.5)
    assert len(set(voices.values())) == 2


async def test_one_voice_is_one_speaker(tmp_path: Path) -> None:
    wav = tmp_path / "mono.wav"
    ss.timed_speech([("en-us", t) for _, t in DIALOGUE[:3]], wav)
    result = await run(
        tmp_path,
        speech.DiarizeAudioExecutor(),
        "DIARIZE_AUDIO",
        {"audio_path": str(wav), "max_speakers": 4},
        backend=speech.DIARIZE_BUILTIN,
    )
    assert result["num_speakers"] == 1


def level_db(samples: np.ndarray, frames: np.ndarray) -> float:
    step = 160
    chunks = samples[: len(frames) * step].reshape(-1, step)[frames.astype(bool)]
    return float(10 * np.log10(np.mean(chunks.astype(np.float64) ** 2) + 1e-12))


async def test_noisereduce_lowers_the_noise_and_keeps_the_speech(
    tmp_path: Path, dialogue: tuple[Path, list]
) -> None:
    wav, _ = dialogue
    noisy = tmp_path / "noisy.wav"
    ss.run_ffmpeg(
        "-i",
        str(wav),
        "-f",
        "lavfi",
        "-i",
        "anoisesrc=color=white:amplitude=0.03",
        "-filter_complex",
        "[0:a][1:a]amix=inputs=2:duration=first:normalize=0,atrim=end=9",
        "-ar",
        "16000",
        "-ac",
        "1",
        str(noisy),
    )
    result = await run(
        tmp_path,
        speech.EnhanceAudioExecutor(),
        "ENHANCE_AUDIO",
        {"audio_path": str(noisy), "strength": 0.9},
        backend=speech.NOISEREDUCE,
    )
    clean = speech_samples(wav)[: 9 * 16000]
    voiced = subsync.speech_frames(clean)
    before, after = speech_samples(noisy), speech_samples(Path(result["audio_path"]))
    # spectral gating: the noise floor in the pauses falls much more than the speech level, so
    # the contrast between speech and noise floor grows
    noise_drop = level_db(before, 1 - voiced) - level_db(after, 1 - voiced)
    speech_drop = level_db(before, voiced) - level_db(after, voiced)
    print(
        f"\nnoise floor -{noise_drop:.1f} dB, speech -{speech_drop:.1f} dB: contrast "
        f"+{noise_drop - speech_drop:.1f} dB"
    )
    assert noise_drop > 12 and noise_drop - speech_drop > 6
    assert result["duration_sec"] == pytest.approx(9.0, abs=0.05)


async def test_noisereduce_cannot_separate_sources(tmp_path: Path, dialogue: tuple[Path, list]):
    wav, _ = dialogue
    ctx = await make_context(
        tmp_path,
        "ENHANCE_AUDIO",
        {"audio_path": str(wav), "mode": "separate"},
        backend=speech.NOISEREDUCE,
    )
    with pytest.raises(errors.PermanentError, match="Demucs"):
        await speech.EnhanceAudioExecutor().execute(ctx.task, ctx)


def speech_samples(path: Path) -> np.ndarray:
    raw = path.with_suffix(".raw")
    ss.run_ffmpeg("-i", str(path), "-f", "s16le", "-ac", "1", "-ar", "16000", str(raw))
    return subsync.decode_mono(raw)


async def test_fingerprints_match_for_the_same_audio_and_differ_otherwise(
    tmp_path: Path, dialogue: tuple[Path, list]
) -> None:
    ss.require("fpcalc")
    wav, _ = dialogue
    mp3 = tmp_path / "same.mp3"
    ss.run_ffmpeg("-i", str(wav), "-b:a", "96k", str(mp3))
    other = tmp_path / "other.wav"
    ss.timed_speech(
        [("de", "Ein ganz anderer Text in einer anderen Sprache, bitte sehr.")] * 3, other
    )
    prints = []
    for path in (wav, mp3, other):
        result = await run(
            tmp_path,
            speech.FingerprintAudioExecutor(),
            "FINGERPRINT_AUDIO",
            {"audio_path": str(path), "duration_sec": 0, "include_raw": True},
            backend=speech.CHROMAPRINT,
        )
        prints.append(result)
    assert prints[0]["duration_sec"] == pytest.approx(prints[1]["duration_sec"], abs=0.2)
    assert prints[0]["fingerprint"].startswith("AQAA")
    same = similarity(prints[0]["fingerprint_raw"], prints[1]["fingerprint_raw"])
    different = similarity(prints[0]["fingerprint_raw"], prints[2]["fingerprint_raw"])
    print(f"\nchromaprint similarity: re-encoded {same:.2f}, other speech {different:.2f}")
    assert same > 0.85 and different < 0.7


def similarity(a: list[int], b: list[int]) -> float:
    """Share of equal bits of two raw Chromaprint fingerprints (32-bit integers)."""
    n = min(len(a), len(b))
    x = np.array(a[:n], dtype=np.int64) & 0xFFFFFFFF
    y = np.array(b[:n], dtype=np.int64) & 0xFFFFFFFF
    differing = sum(bin(int(v)).count("1") for v in x ^ y)
    return 1 - differing / (32 * n)


async def test_transcribe_speakers_turns_diarization_into_labelled_chunks(
    tmp_path: Path, dialogue: tuple[Path, list]
) -> None:
    from fredica.pipelines.request import PipelineRequest

    wav, truth = dialogue
    cfg = {"capabilities": {"speaker_diarize": {"enabled": True}}}
    request = PipelineRequest(
        template="transcribe_speakers",
        source=str(wav),
        language="en",
        params={"analyze": False, "max_speakers": 3},
    )
    done, tasks = await ss.run_on_node(tmp_path, cfg, request)
    assert done.status.value == "completed", [(t.type, t.error) for t in tasks]
    assert not [t for t in tasks if t.type == "SPLIT_AUDIO"]
    diarize = next(t for t in tasks if t.type == "DIARIZE_AUDIO")
    chunks = sorted(
        (t for t in tasks if t.type == "TRANSCRIBE_CHUNK"), key=lambda t: t.payload["chunk_index"]
    )
    assert len(chunks) == len(truth) == len(diarize.result["segments"])
    assert all(list(t.depends_on) == [diarize.id] for t in chunks)
    speakers = [t.payload["speaker_id"] for t in chunks]
    assert speakers == ["SPEAKER_00", "SPEAKER_01"] * 2 + ["SPEAKER_00"]
    merge = next(t for t in tasks if t.type == "MERGE_TRANSCRIPTION")
    by_speaker: dict[str, str] = {}
    for seg in merge.result["segments"]:
        by_speaker[seg["speaker"]] = by_speaker.get(seg["speaker"], "") + " " + seg["text"]
    print(f"\n{by_speaker}")
    assert "podcast" in by_speaker["SPEAKER_00"].lower()
    assert "having me" in by_speaker["SPEAKER_01"].lower()
    assert (
        "SPEAKER_01: Thanks for having me"
        in on_node(tmp_path, merge.result["files"]["txt"]).read_text()
    )
