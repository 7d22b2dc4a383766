"""GENERATE_TTS: text, or a subtitle file aligned to its timeline, into speech (seed 001 §3.5).

With `srt_path`, every cue is synthesised on its own and placed at its start time in one track
as long as the subtitle timeline; a cue whose speech is longer than its slot (up to the next
cue) is spoken faster (the synthesiser's rate first, then ffmpeg `atempo`), so the audio keeps
the video's timing. With `text`, the text is spoken as one piece.

Backends, as the node chose:
- espeak-ng (Debian's espeak-ng; formant synthesis: robotic, offline, many languages);
- openai-tts-api: `POST {endpoint}/audio/speech` of the OpenAI protocol (`tts-1` / `tts-1-hd`).
Cloning backends are chosen by the scheduler only for `voice_clone: true`; none runs here, so a
cloning request never lands on these backends.
"""

from __future__ import annotations

import shutil
import wave
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fredica.domain import errors, models
from fredica.executors import ffmpeg, httperrors, outputs, subtitles, usage
from fredica.executors import subtitle_format as sf
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext

GENERATE_TTS = "GENERATE_TTS"
ESPEAK = "espeak-ng"
OPENAI_TTS = "openai-tts-api"
RATE = 24_000
ESPEAK_WPM = 165
ESPEAK_MAX_WPM = 450
ESPEAK_VOICES = {"zh": "cmn", "en": "en-us", "ja": "ja", "ko": "ko", "de": "de", "fr": "fr",
                 "es": "es", "it": "it", "pt": "pt", "ru": "ru", "zh-yue": "yue"}  # fmt: skip
FORMATS = ("wav", "mp3", "flac")


def read_wav(path: Path) -> np.ndarray:
    """Mono int16 samples of a 16-bit WAV (PermanentError otherwise)."""
    try:
        with wave.open(str(path), "rb") as w:
            if w.getsampwidth() != 2 or w.getnchannels() != 1 or w.getframerate() != RATE:
                raise errors.PermanentError(f"{path}: expected {RATE} Hz mono 16-bit audio")
            samples: np.ndarray = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
            return samples
    except (wave.Error, EOFError, OSError) as exc:
        raise errors.PermanentError(f"{path}: not a readable WAV file: {exc}") from exc


def write_wav(path: Path, samples: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(samples.astype("<i2").tobytes())


def place(clips: list[tuple[float, np.ndarray]], total_sec: float) -> np.ndarray:
    """One track of `total_sec` with each clip mixed in at its start time."""
    track = np.zeros(round(total_sec * RATE), dtype=np.int32)
    for start, clip in clips:
        at = round(start * RATE)
        end = min(len(track), at + len(clip))
        track[at:end] += clip[: end - at].astype(np.int32)
    mixed: np.ndarray = np.clip(track, -32768, 32767).astype(np.int16)
    return mixed


def slots(cues: list[sf.Cue]) -> list[float]:
    """Seconds each cue may speak: until the next cue starts (its own end for the last)."""
    out = []
    for i, cue in enumerate(cues):
        nxt = cues[i + 1].start if i + 1 < len(cues) else cue.end
        out.append(max(cue.duration, nxt - cue.start, 0.05))
    return out


class Synth:
    """One backend's synthesis of a line into a RATE Hz mono WAV."""

    def __init__(self, ctx: TaskContext, backend: str, payload: dict[str, Any]) -> None:
        self.ctx, self.backend = ctx, backend
        self.language = str(payload.get("language") or "en")
        self.speed = outputs.payload_number(payload, "speed", 1.0, low=0.5, high=2.0)
        voice = str(payload.get("voice") or "default")
        if backend == ESPEAK:
            code = self.language if self.language != "auto" else "en"
            default = ESPEAK_VOICES.get(code, ESPEAK_VOICES.get(code.split("-")[0], code))
            self.voice = default if voice == "default" else voice
            exe = ctx.backend_config.get("path") or shutil.which("espeak-ng")
            if not exe:
                raise errors.PermanentError("espeak-ng is not installed on this node")
            self.exe = str(exe)
        elif backend == OPENAI_TTS:
            self.voice = "alloy" if voice == "default" else voice
        else:
            raise errors.PermanentError(f"TTS backend {backend!r} is not supported here")

    async def say(self, text: str, out: Path, rate: float = 1.0) -> np.ndarray:
        """`text` spoken `rate` times faster than the payload's speed, as samples."""
        raw = out.with_suffix(".raw.wav")
        if self.backend == ESPEAK:
            wpm = int(min(ESPEAK_MAX_WPM, ESPEAK_WPM * self.speed * rate))
            await self.ctx.run_process(
                [self.exe, "-v", self.voice, "-s", str(wpm), "-w", str(raw), text]
            )
        else:
            await self._openai(text, raw, rate)
        # resample to the track's rate and drop the synthesiser's silent padding at both ends
        trim = "silenceremove=start_periods=1:start_threshold=-60dB"
        await ffmpeg.run(
            self.ctx,
            ["-i", str(raw), "-af", f"{trim},areverse,{trim},areverse", "-ac", "1",
             "-ar", str(RATE), "-c:a", "pcm_s16le", str(out)],
            what="normalising synthesised speech",
        )  # fmt: skip
        raw.unlink(missing_ok=True)
        return read_wav(out)

    async def _openai(self, text: str, out: Path, rate: float) -> None:
        cfg = self.ctx.backend_config
        key = cfg.get("api_key")
        if not key:
            raise errors.AwaitingCredentialError(
                "openai-tts-api needs an API key: set api_key for it in this node's config"
            )
        base = str(cfg.get("endpoint") or cfg.get("base_url") or "https://api.openai.com/v1")
        body = {"model": cfg.get("model") or "tts-1", "voice": self.voice, "input": text,
                "response_format": "wav", "speed": min(4.0, self.speed * rate)}  # fmt: skip
        url = base.rstrip("/") + "/audio/speech"
        async with httpx.AsyncClient(timeout=120.0, trust_env=False) as client:
            try:
                response = await httperrors.cancellable(
                    self.ctx,
                    client.post(url, json=body, headers={"Authorization": f"Bearer {key}"}),
                )
            except httpx.HTTPError as exc:
                raise httperrors.for_transport(exc, url, OPENAI_TTS) from exc
        if response.status_code >= 400:
            raise httperrors.for_status(response, OPENAI_TTS, provider="openai")
        usage.charge(self.ctx, len(text) / 1000, "1k_chars")  # billed per input character
        out.write_bytes(response.content)

    async def fit(self, text: str, out: Path, slot: float) -> tuple[np.ndarray, float]:
        """Speech for `text` no longer than `slot` seconds; (samples, speed-up used)."""
        clip = await self.say(text, out)
        rate = len(clip) / RATE / slot
        if rate <= 1.0:
            return clip, 1.0
        clip = await self.say(text, out, rate * 1.05)
        if len(clip) > slot * RATE:  # the synthesiser's rate was not enough: stretch
            factor = len(clip) / RATE / slot
            stretched = out.with_suffix(".fit.wav")
            await ffmpeg.run(
                self.ctx,
                ["-i", str(out), "-af", f"atempo={min(100.0, factor):.4f}", "-ar", str(RATE),
                 "-ac", "1", "-c:a", "pcm_s16le", str(stretched)],
                what="fitting speech into its cue",
            )  # fmt: skip
            clip = read_wav(stretched)[: int(slot * RATE)]
            stretched.unlink(missing_ok=True)
            rate *= factor
        return clip, rate


class GenerateTtsExecutor(TaskExecutor):
    """payload.text or payload.srt_path -> speech (wav | mp3 | flac)."""

    task_type = GENERATE_TTS
    capability = "TTS"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        fmt = str(payload.get("output_format") or "wav")
        if fmt not in FORMATS:
            raise errors.PayloadError(f"payload.output_format must be one of {', '.join(FORMATS)}")
        if payload.get("voice_clone") is True:
            raise errors.PermanentError(f"{ctx.backend} cannot clone voices (voice_clone: true)")
        backend = ctx.backend or str(ctx.backend_config.get("backend") or ESPEAK)
        synth = Synth(ctx, backend, payload)
        ctx.event("tool", f"{backend} voice {synth.voice}")
        work = ctx.output_dir
        extra: dict[str, Any] = {}
        if payload.get("srt_path") or payload.get("subtitle_path"):
            source = await ctx.payload_input(payload, "srt_path", "subtitle_path")
            cues = [c for c in subtitles.read_cues(source)[0] if c.text.strip()]
            if not cues:
                raise errors.PermanentError(f"{source} has no text to speak")
            clips, fitted = [], []
            for i, (cue, slot) in enumerate(zip(cues, slots(cues), strict=True)):
                await ctx.checkpoint()
                clip, rate = await synth.fit(
                    cue.text.replace("\n", " "), work / f"cue{i}.wav", slot
                )
                clips.append((cue.start, clip))
                fitted.append({"index": i, "start_sec": cue.start, "speech_sec":
                               round(len(clip) / RATE, 3), "speed_up": round(rate, 3)})  # fmt: skip
                ctx.progress(5 + 85 * (i + 1) / len(cues), f"cue {i + 1}/{len(cues)}")
            samples = place(clips, max(c.end for c in cues))
            extra = {"cue_count": len(cues), "cues": fitted, "timeline_sec": cues[-1].end}
        elif isinstance(payload.get("text"), str) and payload["text"].strip():
            samples = await synth.say(" ".join(payload["text"].split()), work / "text.wav")
        else:
            raise errors.PayloadError("payload needs a non-empty text or srt_path")
        target = subtitles.output_file(ctx, payload, f"speech.{fmt}")
        wav = target if fmt == "wav" else target.with_suffix(".tmp.wav")
        tmp = outputs.temp_sibling(wav).with_suffix(".wav")
        with outputs.disk_errors(f"writing {target}"):
            write_wav(tmp, samples)
            if fmt == "wav":
                tmp.replace(target)
        if fmt != "wav":
            with subtitles.temp_output(target, "." + fmt) as out:
                await ffmpeg.run(ctx, ["-i", str(tmp), str(out)], what=f"encoding {fmt}")
            tmp.unlink(missing_ok=True)
        for part in [*work.glob("cue*.wav"), work / "text.wav"]:
            part.unlink(missing_ok=True)
        result = {"audio_path": str(target), "duration_sec": round(len(samples) / RATE, 3),
                  "sample_rate": RATE, "format": fmt, "backend": backend, "voice": synth.voice,
                  "language": synth.language, **extra}  # fmt: skip
        ctx.progress(100, "spoken")
        return ExecuteResult(result)
