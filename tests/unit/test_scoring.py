"""The unified scoring model against every worked example of seed 001 §2.5, §2.7, §3."""

from __future__ import annotations

import pytest

from fredica.capabilities import catalog, scoring
from fredica.domain import errors

F = catalog.CapabilityFunction
CP = scoring.CloudPreference
QM = scoring.QualityMode

GPU_4070 = catalog.LocalGPU("NVIDIA GeForce RTX 4070", 12282)
GPU_3060 = catalog.LocalGPU("NVIDIA GeForce RTX 3060", 12288)
CPU = catalog.LocalCPU()
NEUTRAL = scoring.NodeProfile(gpu_score=70, cpu_score=50)  # hardware modifier 0
IDLE = scoring.LoadInfo()


def cap(
    backend: str,
    score: int,
    *,
    function: F = F.TRANSCRIBE,
    accelerator: catalog.Accelerator | None = None,
    models: tuple[str, ...] = (),
    metadata: dict[str, str] | None = None,
) -> catalog.Capability:
    if accelerator is None:
        provider = catalog.cloud_provider(function, backend)
        accelerator = catalog.CloudAPI(provider, "") if provider else CPU
    return catalog.Capability(function, backend, accelerator, models, score, metadata or {})


def transcribe(language: str = "auto", **kw: object) -> scoring.TaskDemand:
    return scoring.TaskDemand("TRANSCRIBE_CHUNK", {"language": language}, **kw)  # type: ignore[arg-type]


def best_score(
    caps: list[catalog.Capability],
    task: scoring.TaskDemand,
    node: scoring.NodeProfile = NEUTRAL,
    load: scoring.LoadInfo = IDLE,
) -> int | None:
    choice = scoring.best_backend(caps, task, node, load)
    return None if choice is None else choice.score


# --- §2.7 formula --------------------------------------------------------------------------------


def test_effective_score_is_floored_at_10() -> None:
    assert scoring.effective_score(15, cloud=-30) == 10
    assert scoring.effective_score(5) == 10


def test_effective_score_rounds_half_up() -> None:
    assert scoring.effective_score(72.5) == 73
    assert scoring.effective_score(100.2) == 100


def test_section_2_7_3_components_as_stated_in_the_seed() -> None:
    # Given the seed's table row by row (hardware shown rounded, language +5 for every node)
    a = scoring.effective_score(95, hardware=5, cloud=0, language=5, load=-5)
    b = scoring.effective_score(72, hardware=-5, cloud=0, language=5, load=0)
    c = scoring.effective_score(68, hardware=0, cloud=0, language=5, load=0)
    # Then A 100, C 73, B 72: the cloud API slots in just above the loaded-free local medium
    assert (a, c, b) == (100, 73, 72)


def test_section_2_7_3_with_exact_hardware_modifiers() -> None:
    a_hw = scoring.hardware_modifier(F.TRANSCRIBE, catalog.AcceleratorKind.GPU, 83, None)
    b_hw = scoring.hardware_modifier(F.TRANSCRIBE, catalog.AcceleratorKind.GPU, 58, None)
    assert a_hw == pytest.approx(5.2)
    assert b_hw == pytest.approx(-4.8)
    half_loaded_balanced = scoring.load_modifier(1, 2, 20, QM.BALANCED)
    assert scoring.effective_score(95, a_hw, 0, 5, half_loaded_balanced) == 100
    assert scoring.effective_score(72, b_hw, 0, 5, 0) == 72


def test_section_2_7_3_end_to_end_uses_the_section_3_2_language_table() -> None:
    # The §3.2 table gives medium +2 and xunfei +20 for zh (the §2.7.3 table uses +5 for all);
    # the seed's conclusion holds: A first, and the cloud API C ahead of the local medium B.
    task = transcribe("zh", quality=scoring.QualityContext(pipeline_mode=QM.BALANCED))
    node_a = scoring.NodeProfile(gpu_score=83)
    node_b = scoring.NodeProfile(gpu_score=58)
    node_c = scoring.NodeProfile()
    half = scoring.LoadInfo(pending_tasks=1)
    a = best_score([cap("faster-whisper", 95, accelerator=GPU_4070, models=("large-v3",))],
                   task, node_a, half)  # fmt: skip
    b = best_score([cap("faster-whisper", 72, accelerator=GPU_3060, models=("medium",))],
                   task, node_b)  # fmt: skip
    c = best_score([cap("xunfei-iat-api", 68)], task, node_c)
    assert (a, c, b) == (100, 88, 69)


# --- §3.2 language-aware examples -------------------------------------------------------------


def section_3_2_nodes() -> dict[str, catalog.Capability]:
    return {
        "A": cap("faster-whisper", 95, accelerator=GPU_4070, models=("large-v3",)),
        "B": cap("faster-whisper", 72, accelerator=GPU_3060, models=("medium",)),
        "C": cap("xunfei-iat-api", 68),
        "D": cap("deepgram-api", 55),
        "E": cap("faster-whisper", 38, accelerator=CPU, models=("medium",)),
        "F": cap("assemblyai-api", 55),
        "G": cap("azure-speech-api", 52),
    }


def test_section_3_2_zh_example() -> None:
    nodes = section_3_2_nodes()
    scores = {n: best_score([nodes[n]], transcribe("zh")) for n in "ABCDE"}
    assert scores == {"A": 100, "C": 88, "B": 74, "D": 47, "E": 40}
    assert sorted(scores, key=lambda n: -(scores[n] or 0)) == ["A", "C", "B", "D", "E"]


def test_section_3_2_ja_example() -> None:
    nodes = section_3_2_nodes()
    scores = {n: best_score([nodes[n]], transcribe("ja")) for n in "ACFG"}
    assert scores == {"A": 107, "F": 60, "G": 57, "C": 50}


def test_section_3_2_best_backend_on_one_node_picks_the_language_specialist() -> None:
    nodes = section_3_2_nodes()
    caps = [nodes["B"], nodes["C"]]
    zh = scoring.best_backend(caps, transcribe("zh"), NEUTRAL, IDLE)
    ja = scoring.best_backend(caps, transcribe("ja"), NEUTRAL, IDLE)
    assert zh is not None and zh.backend == "xunfei-iat-api"
    assert ja is not None and ja.backend == "faster-whisper" and ja.model == "medium"


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        # chinese cloud (xunfei), chinese cloud (aliyun), whisper large, whisper small/medium,
        # english-first, multilingual
        ("zh", (20, 18, 5, 2, -8, 0)),
        ("zh-yue", (5, -5, 3, 0, -8, 0)),
        ("en", (-18, -18, 8, 5, 10, 5)),
        ("ja", (-18, -18, 12, 5, 5, 5)),
        ("ko", (-15, -15, 5, 2, 3, 5)),
        ("auto", (0, 0, 0, 0, 0, 0)),
    ],
)
def test_transcribe_language_table(language: str, expected: tuple[int, ...]) -> None:
    m = scoring.transcribe_language_modifier
    got = (
        m("xunfei-iat-api", "", language),
        m("aliyun-nls-api", "", language),
        m("faster-whisper", "large-v3", language),
        m("whisper.cpp", "medium", language),
        m("deepgram-api", "", language),
        m("google-speech-api", "", language),
    )
    assert got == expected


def test_transcribe_language_chinese_cloud_ranges_and_aliases() -> None:
    m = scoring.transcribe_language_modifier
    for backend in ("xunfei-iat-api", "aliyun-nls-api", "volcengine-asr-api", "tencent-asr-api",
                    "baidu-asr-api"):  # fmt: skip
        assert 15 <= m(backend, "", "zh") <= 20
        assert -20 <= m(backend, "", "en") <= -15
        assert -18 <= m(backend, "", "ko") <= -12
    assert m("groq-whisper-api", "", "ja") == 12  # cloud Whisper runs large models
    assert m("faster-whisper", "large-v3", "zh-CN") == 5
    assert m("faster-whisper", "large-v3", "yue") == 3
    assert m("faster-whisper", "large-v3", "fr") == 0


def test_english_only_model_cannot_serve_other_languages_or_detect() -> None:
    tiny_en = cap("faster-whisper", 10, accelerator=CPU, models=("tiny.en",))
    assert best_score([tiny_en], transcribe("en")) == 15  # 10 + en small-model +5
    assert best_score([tiny_en], transcribe("auto")) == 10
    assert best_score([tiny_en], transcribe("zh")) is None
    detect = scoring.TaskDemand("DETECT_LANGUAGE", {})
    assert scoring.best_backend([tiny_en], detect, NEUTRAL, IDLE) is None


# --- §3.6 OCR language table ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("zh", (15, 15, 5, 3, 5)),
        ("en", (-5, -5, 8, 10, 0)),
        ("ja", (-8, -8, 10, 5, 3)),
        ("ko", (-10, -10, 8, 3, 3)),
        ("zh+en", (8, 8, 5, -5, 3)),
        ("en+zh", (8, 8, 5, -5, 3)),
        ("auto", (0, 0, 0, 0, 0)),
    ],
)
def test_ocr_language_table(language: str, expected: tuple[int, ...]) -> None:
    m = scoring.ocr_language_modifier
    got = (
        m("paddleocr-gpu", language),
        m("rapidocr", language),
        m("easyocr", language),
        m("tesseract", language),
        m("baidu-ocr-api", language),
    )
    assert got == expected


def test_ocr_task_gets_the_language_modifier() -> None:
    task = scoring.TaskDemand("OCR_FRAME_BATCH", {"language": "zh", "frame_paths": ["a.png"]})
    caps = [cap("rapidocr", 60, function=F.OCR), cap("tesseract", 40, function=F.OCR)]
    choice = scoring.best_backend(caps, task, NEUTRAL, IDLE)
    assert choice is not None and (choice.backend, choice.score) == ("rapidocr", 75)


# --- §2.5 cloud preference and the decision matrix ---------------------------------------------

LOCAL = cap("faster-whisper", 72, accelerator=GPU_3060, models=("medium",))
CLOUD = cap("xunfei-iat-api", 68)


def node_with(cloud_allowed: bool, allowed: frozenset[str] = frozenset()) -> scoring.NodeProfile:
    rule = scoring.CloudRule(cloud_allowed=cloud_allowed, allowed_backends=allowed)
    return scoring.NodeProfile(gpu_score=70, cloud_policy={F.TRANSCRIBE: rule})


def candidates(preference: CP, cloud_allowed: bool) -> dict[str, int]:
    ev = scoring.evaluate(
        [LOCAL, CLOUD], transcribe(cloud_preference=preference), node_with(cloud_allowed), IDLE
    )
    return {c.backend: c.score for c in ev.choices}


@pytest.mark.parametrize(
    ("preference", "allowed", "decision", "expected"),
    [
        (CP.AUTO, True, scoring.CloudDecision.SCORE_DECIDES,
         {"faster-whisper": 72, "xunfei-iat-api": 68}),
        (CP.PREFER_CLOUD, True, scoring.CloudDecision.CLOUD_FIRST,
         {"xunfei-iat-api": 98, "faster-whisper": 72}),
        (CP.CLOUD_ONLY, True, scoring.CloudDecision.CLOUD_ONLY, {"xunfei-iat-api": 68}),
        (CP.PREFER_CLOUD, False, scoring.CloudDecision.FALLBACK_AUTO, {"faster-whisper": 72}),
        (CP.CLOUD_ONLY, False, scoring.CloudDecision.REFUSE, {}),
        (CP.PREFER_LOCAL, True, scoring.CloudDecision.LOCAL_FIRST,
         {"faster-whisper": 72, "xunfei-iat-api": 38}),
        (CP.PREFER_LOCAL, False, scoring.CloudDecision.LOCAL_FIRST, {"faster-whisper": 72}),
        (CP.LOCAL_ONLY, True, scoring.CloudDecision.LOCAL_ONLY, {"faster-whisper": 72}),
        (CP.LOCAL_ONLY, False, scoring.CloudDecision.LOCAL_ONLY, {"faster-whisper": 72}),
    ],
)  # fmt: skip
def test_decision_matrix(
    preference: CP, allowed: bool, decision: scoring.CloudDecision, expected: dict[str, int]
) -> None:
    assert scoring.cloud_decision(preference, allowed) is decision
    assert candidates(preference, allowed) == expected


def test_cloud_only_refused_node_explains_why() -> None:
    ev = scoring.evaluate(
        [LOCAL, CLOUD], transcribe(cloud_preference=CP.CLOUD_ONLY), node_with(False), IDLE
    )
    assert ev.best is None
    assert {r.backend for r in ev.rejected} == {"faster-whisper", "xunfei-iat-api"}
    assert any("refuse" in r.reason for r in ev.rejected)


def test_allowed_backends_whitelist_limits_cloud_preference() -> None:
    groq = cap("groq-whisper-api", 64)
    node = node_with(True, frozenset({"groq-whisper-api"}))
    task = transcribe(cloud_preference=CP.CLOUD_ONLY)
    ev = scoring.evaluate([LOCAL, CLOUD, groq], task, node, IDLE)
    assert [c.backend for c in ev.choices] == ["groq-whisper-api"]


def test_unlisted_function_allows_cloud_by_default() -> None:
    tts = cap("elevenlabs-api", 77, function=F.TTS)
    task = scoring.TaskDemand("GENERATE_TTS", {"text": "hi"}, cloud_preference=CP.CLOUD_ONLY)
    assert best_score([tts], task, scoring.NodeProfile()) == 77


# --- §2.7.2 load and quality mode -------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "expected"), [(QM.QUALITY, 0.0), (QM.BALANCED, -5.0), (QM.SPEED, -10.0)]
)
def test_load_examples_half_loaded(mode: QM, expected: float) -> None:
    assert scoring.load_modifier(1, 2, 20, mode) == expected


def test_load_ratio_is_capped_and_can_be_disabled() -> None:
    assert scoring.load_modifier(9, 2, 20, QM.SPEED) == -20.0
    assert scoring.load_modifier(0, 2, 20, QM.SPEED) == 0.0
    assert scoring.load_modifier(2, 2, 20, QM.SPEED, enabled=False) == 0.0


def test_quality_mode_precedence() -> None:
    defaults = {"TRANSCRIBE_CHUNK": QM.QUALITY, "AI_ANALYZE": QM.BALANCED}
    r = scoring.resolve_quality_mode
    ctx = scoring.QualityContext
    assert r("GENERATE_THUMBNAIL", F.FFMPEG, ctx(), {}) is QM.BALANCED  # global default
    assert r("AI_ANALYZE", F.AI_ANALYZE, ctx(), defaults) is QM.BALANCED  # node default
    assert r("AI_ANALYZE", F.AI_ANALYZE, ctx(pipeline_mode=QM.SPEED), defaults) is QM.SPEED
    both = ctx(task_override=QM.QUALITY, pipeline_mode=QM.SPEED)
    assert r("AI_ANALYZE", F.AI_ANALYZE, both, defaults) is QM.QUALITY  # task override wins
    # A function-named default (SUPER_RESOLUTION) applies to its task types.
    assert r("UPSCALE_VIDEO", F.SUPER_RESOLUTION, ctx(), {"SUPER_RESOLUTION": QM.QUALITY}) is (
        QM.QUALITY
    )


def test_quality_default_is_only_lowered_when_acknowledged() -> None:
    defaults = {"TRANSCRIBE_CHUNK": QM.QUALITY}
    r = scoring.resolve_quality_mode
    speed = scoring.QualityContext(pipeline_mode=QM.SPEED)
    acked = scoring.QualityContext(pipeline_mode=QM.SPEED, acknowledged=True)
    assert r("TRANSCRIBE_CHUNK", F.TRANSCRIBE, speed, defaults) is QM.QUALITY
    assert r("TRANSCRIBE_CHUNK", F.TRANSCRIBE, acked, defaults) is QM.SPEED
    needed = scoring.tradeoff_confirmation_needed(
        ["DOWNLOAD_VIDEO", "TRANSCRIBE_CHUNK", "AI_ANALYZE"], QM.SPEED, {}, defaults
    )
    assert needed == ["TRANSCRIBE_CHUNK"]


def test_load_penalty_follows_the_resolved_quality_mode() -> None:
    quality_node = scoring.NodeProfile(
        gpu_score=70, quality_defaults={"TRANSCRIBE_CHUNK": QM.QUALITY}
    )
    full = scoring.LoadInfo(pending_tasks=4)
    assert best_score([LOCAL], transcribe(), quality_node, full) == 72
    speed = transcribe(quality=scoring.QualityContext(pipeline_mode=QM.SPEED, acknowledged=True))
    assert best_score([LOCAL], speed, quality_node, full) == 52


# --- §3.1 downloads ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mbps", "bonus"), [(1000, 15), (500, 15), (499, 8), (100, 8), (99, 0), (20, 0), (19, -10),
                        (0, 0)]
)  # fmt: skip
def test_bandwidth_bonus(mbps: int, bonus: float) -> None:
    assert scoring.bandwidth_bonus(mbps) == bonus


def download_caps() -> list[catalog.Capability]:
    net = catalog.LocalNetwork(600, "CN", False)
    return [
        cap("bilibili-pyutil", 70, function=F.DOWNLOAD_BILIBILI, accelerator=net),
        cap("ffmpeg-cpu", 40, function=F.FFMPEG, accelerator=CPU),
    ]


def test_download_composite_bandwidth_and_storage_affinity() -> None:
    payload = {"source_platform": "bilibili", "url": "https://www.bilibili.com/video/BV1"}
    nas = scoring.NodeProfile(bandwidth_mbps=600, is_storage_node=True)
    to_nas = scoring.TaskDemand("DOWNLOAD_VIDEO", payload, storage_preference="nas")
    anywhere = scoring.TaskDemand("DOWNLOAD_VIDEO", payload)
    assert best_score(download_caps(), to_nas, nas) == 70 + 15 + 20
    assert best_score(download_caps(), anywhere, nas) == 70 + 15
    slow = scoring.NodeProfile(bandwidth_mbps=10)
    assert best_score(download_caps(), to_nas, slow) == 60


def test_download_video_needs_ffmpeg_on_the_same_node() -> None:
    task = scoring.TaskDemand("DOWNLOAD_VIDEO", {"source_platform": "bilibili"})
    only_download = download_caps()[:1]
    ev = scoring.evaluate(only_download, task, scoring.NodeProfile(), IDLE)
    assert ev.best is None and "FFMPEG" in ev.rejected[0].reason


def test_download_subtitle_does_not_need_ffmpeg() -> None:
    task = scoring.TaskDemand("DOWNLOAD_SUBTITLE", {})
    assert best_score(download_caps()[:1], task, scoring.NodeProfile(bandwidth_mbps=50)) == 70


# --- TTS, cost, concurrency, builtin tasks --------------------------------------------------------


def test_voice_clone_routes_only_to_cloning_backends() -> None:
    gpu = catalog.LocalGPU("RTX 4090", 24564)
    caps = [
        cap("kokoro", 70, function=F.TTS, accelerator=CPU),
        cap("f5-tts", 84, function=F.TTS, accelerator=gpu),
        cap("chattts", 90, function=F.TTS, accelerator=gpu),
    ]
    plain = scoring.TaskDemand("GENERATE_TTS", {"text": "hi"})
    clone = scoring.TaskDemand("GENERATE_TTS", {"text": "hi", "voice_clone": True})
    node = scoring.NodeProfile(gpu_score=70, cpu_score=50)
    first = scoring.best_backend(caps, plain, node, IDLE)
    cloned = scoring.best_backend(caps, clone, node, IDLE)
    assert first is not None and first.backend == "chattts"
    assert cloned is not None and cloned.backend == "f5-tts"
    assert scoring.best_backend(caps[:1], clone, node, IDLE) is None


def test_max_cost_per_task_excludes_expensive_cloud_calls() -> None:
    priced = cap("xunfei-iat-api", 68,
                 metadata={"cost_unit": "audio_minute", "cost_per_unit_usd": "0.1"})  # fmt: skip
    rule = scoring.CloudRule(max_cost_per_task_usd=0.5)
    node = scoring.NodeProfile(cloud_policy={F.TRANSCRIBE: rule})
    long_chunk = scoring.TaskDemand("TRANSCRIBE_CHUNK", {"start_sec": 0, "end_sec": 600})
    short_chunk = scoring.TaskDemand("TRANSCRIBE_CHUNK", {"duration_sec": 120})
    unknown = scoring.TaskDemand("TRANSCRIBE_CHUNK", {})
    ev = scoring.evaluate([priced], long_chunk, node, IDLE)
    assert ev.best is None and "exceeds max_cost_per_task_usd" in ev.rejected[0].reason
    assert best_score([priced], short_chunk, node) == 68
    assert best_score([priced], unknown, node) == 68  # size unknown: cannot enforce
    assert scoring.estimate_cost_usd(priced, {"duration_sec": 120}) == pytest.approx(0.2)


def test_backend_at_max_concurrent_is_skipped() -> None:
    deepseek = cap("deepseek-api", 75, function=F.AI_ANALYZE, metadata={"max_concurrent": "2"})
    ollama = cap("ollama", 30, function=F.AI_ANALYZE, accelerator=CPU)
    task = scoring.TaskDemand("AI_ANALYZE", {"text": "summarize"})
    busy = scoring.LoadInfo(active_by_backend={"deepseek-api": 2})
    choice = scoring.best_backend([deepseek, ollama], task, NEUTRAL, busy)
    assert choice is not None and choice.backend == "ollama"


def test_tasks_without_a_function_run_anywhere_with_load_only() -> None:
    for task_type in ("MERGE_TRANSCRIPTION", "FORMAT_SUBTITLE", "NETWORK_TEST"):
        task = scoring.TaskDemand(task_type, {})
        idle = scoring.best_backend([], task, scoring.NodeProfile(), IDLE)
        assert idle is not None and (idle.backend, idle.score) == ("builtin", 50)
    busy = scoring.best_backend(
        [], scoring.TaskDemand("MERGE_OCR_RESULTS", {}), scoring.NodeProfile(),
        scoring.LoadInfo(pending_tasks=2),
    )  # fmt: skip
    assert busy is not None and busy.score == 40  # balanced: -20 x 0.5


def test_missing_capability_and_unknown_task_type() -> None:
    ev = scoring.evaluate([LOCAL], scoring.TaskDemand("OCR_FRAME_BATCH", {}), NEUTRAL, IDLE)
    assert ev.best is None and "no OCR capability" in ev.rejected[0].reason
    with pytest.raises(errors.PayloadError):
        scoring.best_backend([LOCAL], scoring.TaskDemand("NOPE", {}), NEUTRAL, IDLE)
    extra = {"MY_PLUGIN_TASK": F.TRANSCRIBE}
    plugin = scoring.best_backend([LOCAL], scoring.TaskDemand("MY_PLUGIN_TASK", {}), NEUTRAL,
                                  IDLE, extra)  # fmt: skip
    assert plugin is not None and plugin.backend == "faster-whisper"


def test_object_detect_pinned_model_must_be_available() -> None:
    gpu = catalog.LocalGPU("RTX 4090", 24564)
    nano = cap("yolo-gpu", 80, function=F.OBJECT_DETECT, accelerator=gpu, models=("yolov8n",))
    medium = cap("yolo-gpu", 88, function=F.OBJECT_DETECT, accelerator=gpu, models=("yolov8m",))
    task = scoring.TaskDemand("DETECT_FRAME_BATCH", {"model": "yolov8n"})
    choice = scoring.best_backend([nano, medium], task, NEUTRAL, IDLE)
    assert choice is not None and choice.model == "yolov8n"


def test_ties_break_deterministically() -> None:
    a = cap("alass", 80, function=F.SUBTITLE_SYNC, accelerator=CPU)
    b = cap("ffsubsync", 80, function=F.SUBTITLE_SYNC, accelerator=CPU)
    task = scoring.TaskDemand("SYNC_SUBTITLE", {})
    first = scoring.best_backend([b, a], task, NEUTRAL, IDLE)
    assert first is not None and first.backend == "alass"


def test_plain_strings_from_stored_pipelines_are_accepted() -> None:
    task = scoring.TaskDemand(
        "TRANSCRIBE_CHUNK",
        {"language": "auto"},
        cloud_preference="prefer_cloud",  # type: ignore[arg-type]
        quality=scoring.QualityContext(pipeline_mode="speed", acknowledged=True),  # type: ignore[arg-type]
    )
    assert task.cloud_preference is CP.PREFER_CLOUD
    assert task.quality.pipeline_mode is QM.SPEED
    node = scoring.NodeProfile(gpu_score=70, quality_defaults={"TRANSCRIBE_CHUNK": "quality"})  # type: ignore[dict-item]
    full = scoring.LoadInfo(pending_tasks=2)
    choice = scoring.best_backend([LOCAL, CLOUD], task, node, full)
    assert choice is not None and (choice.backend, choice.score) == ("xunfei-iat-api", 78)
    with pytest.raises(ValueError):
        scoring.TaskDemand("AI_ANALYZE", {}, cloud_preference="cloudy")  # type: ignore[arg-type]
