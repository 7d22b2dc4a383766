"""Hardware scores (seed 001 §2.7.1): GPU ladder, LLM fallback, VRAM formula, cpu score.

Pure: the LLM is an injected `ask_llm(prompt) -> answer` callable, so nothing here touches the
network. Resolution order for gpu_score: override > cache (same GPU and driver) > built-in
ladder > LLM > VRAM formula.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

logger = logging.getLogger(__name__)

AskLlm = Callable[[str], str]

# Desktop GPUs, scored for local AI inference; 100 = RTX 4090. The first 26 names are the
# seed's table; the rest extend it on the same scale (newer cards above 100 are capped).
GPU_LADDER: tuple[tuple[str, int], ...] = (
    ("rtx 4090", 100),
    ("rtx 4080 super", 95),
    ("rtx 4070 ti super", 90),
    ("rtx 4070 super", 87),
    ("rtx 4070", 83),
    ("rtx 4060 ti", 76),
    ("rtx 4060", 68),
    ("rtx 2080 ti", 70),
    ("rtx 2070 super", 60),
    ("apple m4 max", 92),
    ("apple m3 max", 85),
    ("apple m3 pro", 72),
    ("apple m2 ultra", 88),
    ("rtx 3090 ti", 88),
    ("rtx 3090", 88),
    ("rtx 3080 ti", 85),
    ("rtx 3080", 80),
    ("rtx 3070 ti", 73),
    ("rtx 3070", 68),
    ("rtx 3060 ti", 63),
    ("rtx 3060", 58),
    ("gtx 1080 ti", 52),
    ("gtx 1070", 40),
    ("rx 7900 xtx", 90),
    ("rx 7800 xt", 72),
    ("rx 6800 xt", 65),
    ("arc a770", 55),
    # Extension.
    ("rtx 5090", 100),
    ("rtx 5080", 97),
    ("rtx 5070 ti", 91),
    ("rtx 5070", 85),
    ("rtx 4080", 92),
    ("rtx 4070 ti", 86),
    ("rtx 3050", 42),
    ("rtx 2080 super", 66),
    ("rtx 2080", 63),
    ("rtx 2070", 56),
    ("rtx 2060 super", 52),
    ("rtx 2060", 47),
    ("gtx 1660 ti", 36),
    ("gtx 1660 super", 36),
    ("gtx 1660", 33),
    ("gtx 1650", 25),
    ("gtx 1080", 46),
    ("gtx 1060", 30),
    ("rtx 6000 ada", 98),
    ("rtx a6000", 88),
    ("rtx a4000", 62),
    ("h100", 100),
    ("a100", 100),
    ("l40s", 95),
    ("l4", 62),
    ("a10", 70),
    ("v100", 68),
    ("t4", 42),
    ("rx 7900 xt", 84),
    ("rx 7700 xt", 62),
    ("rx 7600", 48),
    ("rx 6900 xt", 70),
    ("rx 6700 xt", 55),
    ("arc a750", 50),
    ("arc b580", 58),
    ("apple m4 pro", 75),
    ("apple m4", 50),
    ("apple m3 ultra", 95),
    ("apple m3", 45),
    ("apple m2 max", 75),
    ("apple m2 pro", 60),
    ("apple m2", 40),
    ("apple m1 ultra", 78),
    ("apple m1 max", 62),
    ("apple m1 pro", 48),
    ("apple m1", 32),
)

# Longest names first so "rtx 4070 ti super" is never read as "rtx 4070".
_LADDER_BY_LENGTH = tuple(sorted(GPU_LADDER, key=lambda item: -len(item[0])))
_NOISE = re.compile(r"\b(nvidia|geforce|amd|radeon|intel|tesla|quadro|graphics|generation)\b")
# Mobile parts are much slower than the desktop card of the same name: not in the ladder.
_MOBILE = re.compile(r"\b(laptop|mobile|max-q|maxq)\b")

LLM_PROMPT_TEMPLATE = (
    "You are an expert in AI inference performance. Rate the following GPU for local AI "
    "inference tasks (speech-to-text, object detection, image generation, ...) with an integer "
    "score from 0 to 100. 100 = RTX 4090 level, 50 = RTX 3060 level, 25 = GTX 1070 level.\n"
    "GPU: {gpu_name}, VRAM: {vram_gb}GB\n"
    "Reply with a single integer and no explanation."
)


class ScoreSource(StrEnum):
    """Where a hardware score came from (shown by `fredica capabilities`)."""

    OVERRIDE = "override"
    CACHE = "cache"
    LADDER = "ladder"
    LLM = "llm"
    VRAM_FORMULA = "vram_formula"
    CORES = "cores"
    NONE = "none"


@dataclass(frozen=True)
class GpuInfo:
    """A detected GPU."""

    name: str
    vram_mb: int
    vendor: str = ""  # nvidia | apple | amd
    driver: str = ""

    @property
    def vram_gb(self) -> float:
        return self.vram_mb / 1024

    @property
    def cache_key(self) -> str:
        """Identity of the GPU and driver; a driver update invalidates a cached score."""
        return f"{self.name}|{self.vram_mb}|{self.driver}"


@dataclass(frozen=True)
class HardwareScore:
    """A score with its source."""

    value: int | None
    source: ScoreSource


def normalize_gpu_name(name: str) -> str:
    """`NVIDIA GeForce RTX 3090Ti` -> `rtx 3090 ti` (ladder spelling)."""
    text = name.lower().replace("(r)", " ").replace("(tm)", " ")
    text = re.sub(r"[_\-/,]", " ", text)
    text = _NOISE.sub(" ", text)
    text = re.sub(r"(\d)(ti|xtx|xt|super)\b", r"\1 \2", text)
    return " ".join(text.split())


def ladder_score(name: str) -> int | None:
    """The ladder score of a GPU name, or None when it is not in the table."""
    if _MOBILE.search(name.lower()):
        return None
    text = normalize_gpu_name(name)
    for key, score in _LADDER_BY_LENGTH:
        if re.search(rf"(^|\s){re.escape(key)}($|\s)", text):
            return score
    return None


def vram_formula_score(vram_gb: float) -> int:
    """Last fallback: `min(100, max(10, vram_gb x 7))`."""
    return int(min(100, max(10, round(vram_gb * 7))))


def cpu_score_from_cores(logical_cores: int) -> int:
    """>=32: 90, 16-31: 75, 8-15: 55, 4-7: 35, <4: 15."""
    if logical_cores >= 32:
        return 90
    if logical_cores >= 16:
        return 75
    if logical_cores >= 8:
        return 55
    if logical_cores >= 4:
        return 35
    return 15


def build_llm_prompt(gpu_name: str, vram_gb: float) -> str:
    """The seed's scoring prompt for one GPU."""
    return LLM_PROMPT_TEMPLATE.format(gpu_name=gpu_name, vram_gb=f"{vram_gb:g}")


def parse_llm_score(answer: str) -> int | None:
    """The first integer of the answer if it is 0-100, else None."""
    match = re.search(r"-?\d+", answer)
    if match is None:
        return None
    value = int(match.group(0))
    return value if 0 <= value <= 100 else None


def llm_gpu_score(gpu: GpuInfo, ask_llm: AskLlm) -> int | None:
    """Ask the LLM; any failure or unusable answer gives None (the formula takes over)."""
    try:
        answer = ask_llm(build_llm_prompt(gpu.name, round(gpu.vram_gb, 1)))
    except Exception as exc:  # any provider error just means "no answer"
        logger.warning(
            "LLM GPU scoring failed: %s", exc, extra={"action": "hardware.llm_score_failed"}
        )
        return None
    return parse_llm_score(answer)


def resolve_gpu_score(
    gpu: GpuInfo | None,
    *,
    override: int | None = None,
    cached: int | None = None,
    cache_key: str = "",
    llm_enabled: bool = True,
    ask_llm: AskLlm | None = None,
) -> HardwareScore:
    """gpu_score by the seed's order: override > cache > ladder > LLM > VRAM formula."""
    if override is not None:
        return HardwareScore(override, ScoreSource.OVERRIDE)
    if gpu is None:
        return HardwareScore(None, ScoreSource.NONE)
    if cached is not None and cache_key == gpu.cache_key:
        return HardwareScore(cached, ScoreSource.CACHE)
    from_ladder = ladder_score(gpu.name)
    if from_ladder is not None:
        return HardwareScore(from_ladder, ScoreSource.LADDER)
    if llm_enabled and ask_llm is not None:
        from_llm = llm_gpu_score(gpu, ask_llm)
        if from_llm is not None:
            return HardwareScore(from_llm, ScoreSource.LLM)
    return HardwareScore(vram_formula_score(gpu.vram_gb), ScoreSource.VRAM_FORMULA)


def resolve_cpu_score(logical_cores: int, override: int | None = None) -> HardwareScore:
    """cpu_score: override, else from the number of logical cores (cheap: never cached)."""
    if override is not None:
        return HardwareScore(override, ScoreSource.OVERRIDE)
    return HardwareScore(cpu_score_from_cores(logical_cores), ScoreSource.CORES)
