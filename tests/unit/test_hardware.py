"""Hardware scores and the hardware modifier (seed 001 §2.7.1)."""

from __future__ import annotations

import pytest

from fredica.capabilities import catalog, hardware, scoring

F = catalog.CapabilityFunction
GPU = catalog.AcceleratorKind.GPU
CPU = catalog.AcceleratorKind.CPU


@pytest.mark.parametrize(
    ("gpu_score", "shown"), [(100, 12), (85, 6), (58, -5), (40, -12)]
)  # the seed's examples: RTX 4090, RTX 4070, RTX 3060, GTX 1070
def test_gpu_modifier_examples(gpu_score: int, shown: int) -> None:
    value = scoring.hardware_modifier(F.TRANSCRIBE, GPU, gpu_score, None)
    assert value == pytest.approx((gpu_score - 70) * 0.4)
    assert scoring.round_half_up(value) == shown


@pytest.mark.parametrize(("cpu_score", "expected"), [(90, 12.0), (55, 1.5), (15, -10.5)])
def test_cpu_modifier_examples(cpu_score: int, expected: float) -> None:
    assert scoring.hardware_modifier(F.FFMPEG, CPU, None, cpu_score) == pytest.approx(expected)


def test_cloud_and_network_have_no_hardware_modifier() -> None:
    for kind in (catalog.AcceleratorKind.CLOUD, catalog.AcceleratorKind.NETWORK):
        assert scoring.hardware_modifier(F.AI_ANALYZE, kind, 100, 90) == 0.0


def test_light_cpu_functions_are_clamped_to_two_points() -> None:
    assert scoring.hardware_modifier(F.SUBTITLE_SYNC, CPU, None, 90) == 2.0
    assert scoring.hardware_modifier(F.AUDIO_FINGERPRINT, CPU, None, 15) == -2.0
    assert scoring.hardware_modifier(F.AUDIO_FINGERPRINT, CPU, None, 55) == pytest.approx(1.5)


def test_unknown_hardware_score_is_neutral() -> None:
    assert scoring.hardware_modifier(F.OCR, GPU, None, None) == 0.0


@pytest.mark.parametrize(
    ("name", "score"),
    [
        ("NVIDIA GeForce RTX 4090", 100),
        ("NVIDIA GeForce RTX 4070", 83),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", 90),
        ("NVIDIA GeForce RTX 4070 SUPER", 87),
        ("NVIDIA GeForce RTX 4070 Ti", 86),
        ("NVIDIA GeForce RTX 3090Ti", 88),
        ("NVIDIA GeForce RTX 3060", 58),
        ("NVIDIA GeForce RTX 4060 Ti 16GB", 76),
        ("NVIDIA GeForce GTX 1070", 40),
        ("AMD Radeon RX 7900 XTX", 90),
        ("AMD Radeon RX 7900 XT", 84),
        ("Intel(R) Arc(TM) A770 Graphics", 55),
        ("Apple M2 Pro", 60),
        ("Apple M2 Ultra", 88),
        ("Apple M3", 45),
        ("NVIDIA A100-SXM4-80GB", 100),
        ("Tesla T4", 42),
        ("NVIDIA L40S", 95),
        ("NVIDIA RTX 6000 Ada Generation", 98),
    ],
)
def test_ladder_lookup(name: str, score: int) -> None:
    assert hardware.ladder_score(name) == score


def test_ladder_has_about_forty_gpus_and_keeps_the_seed_values() -> None:
    assert len(hardware.GPU_LADDER) >= 40
    ladder = dict(hardware.GPU_LADDER)
    seed = {"rtx 4090": 100, "rtx 3090": 88, "rtx 4080 super": 95, "rtx 3080 ti": 85,
            "rtx 4070 ti super": 90, "rtx 3080": 80, "rtx 4070 super": 87, "rtx 3070 ti": 73,
            "rtx 4070": 83, "rtx 3070": 68, "rtx 4060 ti": 76, "rtx 3060 ti": 63, "rtx 4060": 68,
            "rtx 3060": 58, "rtx 2080 ti": 70, "gtx 1080 ti": 52, "rtx 2070 super": 60,
            "gtx 1070": 40, "apple m4 max": 92, "rx 7900 xtx": 90, "apple m3 max": 85,
            "rx 7800 xt": 72, "apple m3 pro": 72, "rx 6800 xt": 65, "apple m2 ultra": 88,
            "arc a770": 55, "rtx 3090 ti": 88}  # fmt: skip
    for key, value in seed.items():
        assert ladder[key] == value
    assert all(0 <= v <= 100 for v in ladder.values())
    assert len(ladder) == len(hardware.GPU_LADDER)  # no duplicate names


def test_mobile_and_unknown_gpus_miss_the_ladder() -> None:
    assert hardware.ladder_score("NVIDIA GeForce RTX 4090 Laptop GPU") is None
    assert hardware.ladder_score("Moore Threads MTT S80") is None


@pytest.mark.parametrize(("vram_gb", "score"), [(0.5, 10), (1, 10), (8, 56), (12, 84), (24, 100)])
def test_vram_formula(vram_gb: float, score: int) -> None:
    assert hardware.vram_formula_score(vram_gb) == score


@pytest.mark.parametrize(
    ("cores", "score"), [(64, 90), (32, 90), (31, 75), (16, 75), (15, 55), (8, 55), (7, 35),
                         (4, 35), (3, 15), (1, 15)]
)  # fmt: skip
def test_cpu_score_from_cores(cores: int, score: int) -> None:
    assert hardware.cpu_score_from_cores(cores) == score


def test_llm_prompt_carries_the_gpu_and_the_reference_points() -> None:
    prompt = hardware.build_llm_prompt("Moore Threads MTT S80", 16)
    assert "GPU: Moore Threads MTT S80, VRAM: 16GB" in prompt
    assert "100 = RTX 4090" in prompt and "50 = RTX 3060" in prompt and "25 = GTX 1070" in prompt
    assert "single integer" in prompt


@pytest.mark.parametrize(
    ("answer", "score"), [("72", 72), (" 64\n", 64), ("Score: 55", 55), ("140", None),
                          ("-3", None), ("no idea", None)]
)  # fmt: skip
def test_parse_llm_score(answer: str, score: int | None) -> None:
    assert hardware.parse_llm_score(answer) == score


UNKNOWN_GPU = hardware.GpuInfo("Moore Threads MTT S80", 16384, vendor="other", driver="1.0")


def test_resolution_order() -> None:
    prompts: list[str] = []

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return "61"

    r = hardware.resolve_gpu_score
    assert r(UNKNOWN_GPU, override=77, ask_llm=ask).value == 77
    cached = r(UNKNOWN_GPU, cached=66, cache_key=UNKNOWN_GPU.cache_key, ask_llm=ask)
    assert (cached.value, cached.source) == (66, hardware.ScoreSource.CACHE)
    ladder = hardware.GpuInfo("NVIDIA GeForce RTX 4070", 12282, "nvidia", "550.54")
    assert r(ladder, ask_llm=ask).source is hardware.ScoreSource.LADDER
    assert prompts == []
    llm = r(UNKNOWN_GPU, ask_llm=ask)
    assert (llm.value, llm.source) == (61, hardware.ScoreSource.LLM)
    assert len(prompts) == 1 and "VRAM: 16GB" in prompts[0]
    formula = r(UNKNOWN_GPU, llm_enabled=False, ask_llm=ask)
    assert (formula.value, formula.source) == (100, hardware.ScoreSource.VRAM_FORMULA)
    assert r(None).value is None


def test_driver_update_invalidates_the_cache() -> None:
    old_driver = "Moore Threads MTT S80|16384|0.9"
    r = hardware.resolve_gpu_score(UNKNOWN_GPU, cached=66, cache_key=old_driver)
    assert (r.value, r.source) == (100, hardware.ScoreSource.VRAM_FORMULA)


def test_llm_failure_falls_back_to_the_formula() -> None:
    def broken(prompt: str) -> str:
        raise TimeoutError("no answer")

    small = hardware.GpuInfo("Some Old GPU", 4096)
    assert hardware.resolve_gpu_score(small, ask_llm=broken).value == 28
    assert hardware.resolve_gpu_score(small, ask_llm=lambda p: "lots").value == 28


def test_cpu_score_resolution() -> None:
    assert hardware.resolve_cpu_score(8).value == 55
    assert hardware.resolve_cpu_score(8, override=80).source is hardware.ScoreSource.OVERRIDE
