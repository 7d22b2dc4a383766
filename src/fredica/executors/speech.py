"""Speech analysis tasks (seed 001 §3.10, §3.11, §3.14): ENHANCE_AUDIO, DIARIZE_AUDIO and
FINGERPRINT_AUDIO.

- ENHANCE_AUDIO with `noisereduce` (spectral gating, no model): `mode` denoise (or full, which
  is denoise for this backend); `strength` 0-1 is the share of the noise taken out. Dereverb and
  source separation need DeepFilterNet / Demucs, which this node does not run: a PERMANENT
  error says so. The work runs in a child process (CPU-bound numpy).
- DIARIZE_AUDIO with `resemblyzer-cpu` (the speaker encoder shipped in the resemblyzer wheel,
  run in numpy by `voice_encoder.py`) or `builtin-mfcc-cluster` (see `diarization.py`):
  `min_speakers`, `max_speakers` (0 = infer, up to 8), `min_segment_sec`; the seed's result
  shape, with the backend and model that ran.
- FINGERPRINT_AUDIO with `chromaprint` (the fpcalc tool): the Chromaprint fingerprint of the
  first `duration_sec` seconds (0 = all); the `acoustid-api` backend computes the same and looks
  it up in AcoustID with the node's key (`POST {endpoint}/v2/lookup`).
"""

from __future__ import annotations

import json
import shutil
import wave
from pathlib import Path
from typing import Any

import numpy as np

from fredica.domain import errors, models
from fredica.executors import (
    diarization,
    ffmpeg,
    httperrors,
    outputs,
    subsync,
    subtitles,
    voice_encoder,
)
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext
from fredica.executors.process import SubprocessReporter as Reporter

ENHANCE_AUDIO = "ENHANCE_AUDIO"
DIARIZE_AUDIO = "DIARIZE_AUDIO"
FINGERPRINT_AUDIO = "FINGERPRINT_AUDIO"
NOISEREDUCE = "noisereduce"
DIARIZE_BUILTIN = "builtin-mfcc-cluster"
DIARIZE_RESEMBLYZER = "resemblyzer-cpu"
CHROMAPRINT, ACOUSTID = "chromaprint", "acoustid-api"
ACOUSTID_URL = "https://api.acoustid.org"
MAX_AUTO_SPEAKERS = 8
ENHANCE_MODES = ("denoise", "dereverb", "dereverberate", "separate", "full")


async def decode(ctx: TaskContext, source: Path, rate: int, work: Path) -> np.ndarray:
    """Mono float32 samples of any media at `rate` Hz (through ffmpeg)."""
    raw = work / f".{source.stem}.{rate}.s16le"
    try:
        await ffmpeg.run(
            ctx,
            ["-i", str(source), "-vn", "-ac", "1", "-ar", str(rate), "-f", "s16le", str(raw)],
            what=f"decoding {source.name}",
            span=(0, 20),
            note="decoding",
        )
        return subsync.decode_mono(raw)
    finally:
        raw.unlink(missing_ok=True)


def write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    pcm = np.clip(samples * 32768.0, -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def reduce_noise_in_child(
    reporter: Reporter, samples: np.ndarray, rate: int, strength: float
) -> np.ndarray:
    """noisereduce in a child process (the seed 000 protocol reports progress through
    `reporter`)."""
    import noisereduce  # optional: imported where it runs

    reporter.progress(30, "noisereduce: spectral gating")
    out: np.ndarray = noisereduce.reduce_noise(
        y=samples, sr=rate, prop_decrease=strength, stationary=False
    ).astype(np.float32)
    reporter.progress(90, "noisereduce: done")
    return out


class EnhanceAudioExecutor(TaskExecutor):
    task_type = ENHANCE_AUDIO
    capability = "SPEECH_ENHANCE"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        source = await ctx.payload_input(payload, "audio_path")
        mode = str(payload.get("mode") or ctx.backend_config.get("default_mode") or "denoise")
        if mode not in ENHANCE_MODES:
            raise errors.PayloadError(f"payload.mode must be one of {', '.join(ENHANCE_MODES)}")
        if mode not in ("denoise", "full"):
            raise errors.PermanentError(
                f"mode {mode!r} needs DeepFilterNet or Demucs; {NOISEREDUCE} only denoises"
            )
        strength = outputs.payload_number(payload, "strength", 0.8, low=0.0, high=1.0)
        fmt = str(payload.get("output_format") or "wav")
        if fmt not in ("wav", "flac"):
            raise errors.PayloadError("payload.output_format must be wav or flac")
        info = await ffmpeg.probe(ctx, source)
        if not info.has_audio:
            raise errors.PermanentError(f"{source} has no audio stream")
        rate = info.sample_rate or 16_000
        samples = await decode(ctx, source, rate, ctx.output_dir)
        ctx.event("tool", NOISEREDUCE)
        cleaned: np.ndarray = await ctx.run_in_subprocess(
            reduce_noise_in_child, samples, rate, strength
        )
        target = subtitles.output_file(ctx, payload, f"{source.stem}.enhanced.{fmt}")
        with subtitles.temp_output(target, "." + fmt) as tmp:
            if fmt == "wav":
                write_wav(tmp, cleaned, rate)
            else:
                wav = tmp.with_suffix(".wav")
                write_wav(wav, cleaned, rate)
                try:
                    await ffmpeg.run(ctx, ["-i", str(wav), str(tmp)], what="encoding flac")
                finally:
                    wav.unlink(missing_ok=True)
        ctx.progress(100, "enhanced")
        return ExecuteResult(
            {
                "audio_path": str(target),
                "mode": "denoise",
                "strength": strength,
                "sample_rate": rate,
                "duration_sec": round(len(cleaned) / rate, 3),
                "backend": NOISEREDUCE,
            }
        )


class DiarizeAudioExecutor(TaskExecutor):
    task_type = DIARIZE_AUDIO
    capability = "SPEAKER_DIARIZE"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        source = await ctx.payload_input(payload, "audio_path")
        low = int(outputs.payload_number(payload, "min_speakers", 1, low=0, high=50))
        high = int(outputs.payload_number(payload, "max_speakers", 10, low=0, high=50))
        min_seg = outputs.payload_number(payload, "min_segment_sec", 0.5, low=0, high=60)
        low, high = max(1, low), (high or MAX_AUTO_SPEAKERS)
        if low > high:
            raise errors.PayloadError(f"min_speakers ({low}) is above max_speakers ({high})")
        backend = ctx.backend or DIARIZE_BUILTIN
        if backend not in (DIARIZE_BUILTIN, DIARIZE_RESEMBLYZER):
            raise errors.PermanentError(f"SPEAKER_DIARIZE backend {backend!r} is not run here")
        model = None
        if backend == DIARIZE_RESEMBLYZER:
            weights = voice_encoder.weights_path()  # ResourceError when the wheel is missing
            model = voice_encoder.MODEL
            ctx.event("tool", f"{backend} ({model}, {weights}, numpy)")
        else:
            ctx.event("tool", backend)
        samples = await decode(ctx, source, diarization.RATE, ctx.output_dir)
        voiced = subsync.speech_frames(samples)
        segments = await ctx.run_in_subprocess(
            diarize_in_child, samples, voiced, low, high, min_seg, backend
        )
        if payload.get("turns_dir"):  # one WAV per turn, for per-turn transcription
            write_turns(outputs.resolve(ctx.data_dir, str(payload["turns_dir"])), samples, segments)
        ctx.progress(100, f"{len({s['speaker'] for s in segments})} speaker(s)")
        return ExecuteResult(
            {
                "num_speakers": len({s["speaker"] for s in segments}),
                "segments": segments,
                "duration_sec": round(len(samples) / diarization.RATE, 3),
                "audio_path": str(source),
                "backend": backend,
                "model": model,
            }
        )


def write_turns(directory: Path, samples: np.ndarray, segments: list[dict[str, Any]]) -> None:
    """Each segment's audio as `turn_NNN.wav` (its path added to the segment)."""
    with outputs.disk_errors(f"writing turns into {directory}"):
        directory.mkdir(parents=True, exist_ok=True)
        for i, seg in enumerate(segments):
            lo, hi = (int(seg[k] * diarization.RATE) for k in ("start_sec", "end_sec"))
            path = directory / f"turn_{i:03d}.wav"
            write_wav(path, samples[lo:hi], diarization.RATE)
            seg["path"] = str(path)


def diarize_in_child(
    reporter: Reporter,
    samples: np.ndarray,
    voiced: np.ndarray,
    low: int,
    high: int,
    min_seg: float,
    backend: str = DIARIZE_BUILTIN,
) -> list[dict[str, Any]]:
    encoder = voice_encoder.VoiceEncoder() if backend == DIARIZE_RESEMBLYZER else None
    reporter.progress(30, "voice prints and clustering")
    found = diarization.diarize(samples, voiced, low, high, min_seg, encoder)
    return [
        {"speaker": f"SPEAKER_{s.speaker:02d}", "start_sec": s.start, "end_sec": s.end}
        for s in found
    ]


async def fpcalc(
    ctx: TaskContext, exe: str, source: Path, length: int, raw: bool
) -> dict[str, Any]:
    """fpcalc's JSON for `source` (the compressed fingerprint, or the integers with `raw`)."""
    # fpcalc reports the decoder's end of file as an error after printing a complete
    # fingerprint: read what it printed, fail only when nothing came out
    flags = ["-json", "-ignore-errors", "-length", str(length), *(["-raw"] if raw else [])]
    run = await ctx.run_process([exe, *flags, str(source)], check=False)
    try:
        data = json.loads(run.stdout)
        if isinstance(data, dict) and "fingerprint" in data and "duration" in data:
            return data
    except ValueError:
        pass
    raise errors.PermanentError(f"fpcalc could not read {source}: {run.stderr.strip()[-300:]}")


class FingerprintAudioExecutor(TaskExecutor):
    task_type = FINGERPRINT_AUDIO
    capability = "AUDIO_FINGERPRINT"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        source = await ctx.payload_input(payload, "audio_path")
        length = int(outputs.payload_number(payload, "duration_sec", 120, low=0, high=86_400))
        backend = ctx.backend or CHROMAPRINT
        if backend not in (CHROMAPRINT, ACOUSTID):
            raise errors.PermanentError(f"AUDIO_FINGERPRINT backend {backend!r} is not run here")
        exe = ctx.backend_config.get("fpcalc_path") or shutil.which("fpcalc")
        if not exe:
            raise errors.PermanentError("fpcalc is not installed (Debian: libchromaprint-tools)")
        ctx.event("tool", f"{backend} (fpcalc {exe})")
        data = await fpcalc(ctx, str(exe), source, length, raw=False)
        result: dict[str, Any] = {
            "fingerprint": data["fingerprint"],
            "duration_sec": float(data["duration"]),
            "backend": backend,
        }
        if payload.get("include_raw"):  # the integers, for similarity by the caller
            result["fingerprint_raw"] = (await fpcalc(ctx, str(exe), source, length, True))[
                "fingerprint"
            ]
        if payload.get("lookup_acoustid"):
            if backend != ACOUSTID:
                result["acoustid_note"] = "lookup needs the acoustid-api backend on this node"
            else:
                result["acoustid_result"] = await self._lookup(ctx, result)
        return ExecuteResult(result)

    async def _lookup(self, ctx: TaskContext, found: dict[str, Any]) -> dict[str, Any]:
        key = ctx.backend_config.get("api_key")
        if not key:
            raise errors.AwaitingCredentialError("acoustid-api needs api_key in this node's config")
        base = str(ctx.backend_config.get("endpoint") or ACOUSTID_URL).rstrip("/")
        data = await httperrors.post_json(
            ctx,
            f"{base}/v2/lookup",
            what="acoustid-api",
            provider="acoustid",
            data={
                "client": key,
                "duration": str(int(found["duration_sec"])),
                "fingerprint": found["fingerprint"],
                "meta": "recordings",
            },
        )
        if data.get("status") != "ok":
            message = (data.get("error") or {}).get("message", "lookup failed")
            raise errors.PermanentError(f"acoustid-api: {message}")
        best = max(data.get("results") or [], key=lambda r: r.get("score", 0), default=None)
        if best is None:
            return {"score": 0.0, "recordings": []}
        recordings = best.get("recordings") or []
        first = recordings[0] if recordings else {}
        artists = first.get("artists") or [{}]
        return {
            "score": best.get("score", 0.0),
            "title": first.get("title"),
            "artist": artists[0].get("name"),
            "recordings": [{"id": r.get("id")} for r in recordings],
        }
