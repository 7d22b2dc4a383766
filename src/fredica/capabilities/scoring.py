"""The unified scoring model (seed 001 §2.5, §2.7, §3.15). Pure: no I/O, no clock.

    effective_score = max(10, base + hardware + cloud + language + network + load)

`network` is the download composite of §3.1 (bandwidth and storage-affinity bonuses), which the
seed states separately for DOWNLOAD_*; every other function has network = 0. Components stay
floats (the seed's +1.5, -4.8); the effective score is rounded half up to an int, like the
seed's integer scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fredica.capabilities import catalog, task_types

F = catalog.CapabilityFunction
LC = catalog.LanguageClass

SCORE_FLOOR = 10
CLOUD_PREFERENCE_DELTA = 30.0
BUILTIN_BACKEND = "builtin"
BUILTIN_BASE_SCORE = 50  # tasks that need no capability (merges): only load tells nodes apart
GPU_NEUTRAL, GPU_FACTOR = 70.0, 0.4
CPU_NEUTRAL, CPU_FACTOR = 50.0, 0.3
LIGHT_CPU_LIMIT = 2.0  # §3.15: SUBTITLE_SYNC / AUDIO_FINGERPRINT move at most ±2
LIGHT_FUNCTIONS = frozenset({F.SUBTITLE_SYNC, F.AUDIO_FINGERPRINT})


class CloudPreference(StrEnum):
    """The publisher's cloud preference (seed 001 §2.5)."""

    AUTO = "auto"
    PREFER_LOCAL = "prefer_local"
    PREFER_CLOUD = "prefer_cloud"
    LOCAL_ONLY = "local_only"
    CLOUD_ONLY = "cloud_only"


class QualityMode(StrEnum):
    """How much a task trades quality for an idle node (seed 001 §2.7.2)."""

    QUALITY = "quality"
    BALANCED = "balanced"
    SPEED = "speed"


QUALITY_WEIGHT: Mapping[QualityMode, float] = {
    QualityMode.QUALITY: 0.0,
    QualityMode.BALANCED: 0.5,
    QualityMode.SPEED: 1.0,
}


class CloudDecision(StrEnum):
    """The result column of the §2.5 claim decision matrix."""

    SCORE_DECIDES = "local first (scores decide)"
    CLOUD_FIRST = "cloud first (+30)"
    CLOUD_ONLY = "cloud only"
    FALLBACK_AUTO = "back to auto (cloud preference ignored)"
    REFUSE = "refuse to claim; another node must take it"
    LOCAL_FIRST = "local first (-30 on cloud)"
    LOCAL_ONLY = "local only"


def cloud_decision(preference: CloudPreference, cloud_allowed: bool) -> CloudDecision:
    """The §2.5 decision matrix: publisher preference x operator `cloud_allowed`."""
    if preference is CloudPreference.PREFER_LOCAL:
        return CloudDecision.LOCAL_FIRST
    if preference is CloudPreference.LOCAL_ONLY:
        return CloudDecision.LOCAL_ONLY
    if preference is CloudPreference.PREFER_CLOUD:
        return CloudDecision.CLOUD_FIRST if cloud_allowed else CloudDecision.FALLBACK_AUTO
    if preference is CloudPreference.CLOUD_ONLY:
        return CloudDecision.CLOUD_ONLY if cloud_allowed else CloudDecision.REFUSE
    return CloudDecision.SCORE_DECIDES


@dataclass(frozen=True)
class CloudRule:
    """The operator's cloud_policy for one function."""

    cloud_allowed: bool = True
    allowed_backends: frozenset[str] = frozenset()
    max_cost_per_task_usd: float | None = None


@dataclass(frozen=True)
class QualityContext:
    """Quality-mode inputs from the pipeline (task override > pipeline > node default)."""

    task_override: QualityMode | None = None
    pipeline_mode: QualityMode | None = None
    acknowledged: bool = False  # quality_tradeoff_acknowledged

    def __post_init__(self) -> None:
        # Callers may pass the plain strings stored in pipelines; comparisons use identity.
        for name in ("task_override", "pipeline_mode"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, QualityMode(value))


@dataclass(frozen=True)
class TaskDemand:
    """What the scorer needs to know about a task."""

    task_type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    cloud_preference: CloudPreference = CloudPreference.AUTO
    quality: QualityContext = QualityContext()
    storage_preference: str = "any"  # any | nas

    def __post_init__(self) -> None:
        object.__setattr__(self, "cloud_preference", CloudPreference(self.cloud_preference))


@dataclass(frozen=True)
class NodeProfile:
    """Static scoring attributes of a node (from worker.yaml and hardware scores)."""

    gpu_score: float | None = None
    cpu_score: float | None = None
    bandwidth_mbps: int = 0
    is_storage_node: bool = False
    max_workers: int = 2
    load_penalty_enabled: bool = True
    max_penalty: float = 20.0
    quality_defaults: Mapping[str, QualityMode] = field(default_factory=dict)
    cloud_policy: Mapping[F, CloudRule] = field(default_factory=dict)

    def rule(self, function: F) -> CloudRule:
        """cloud_policy of a function; an unlisted function allows cloud (seed default)."""
        return self.cloud_policy.get(function, CloudRule())


@dataclass(frozen=True)
class LoadInfo:
    """Live load: queued tasks and active calls per backend (for max_concurrent)."""

    pending_tasks: int = 0
    active_by_backend: Mapping[str, int] = field(default_factory=dict)
    #: backends allowed fewer calls than their max_concurrent right now (seed 001 §7.8:
    #: halved after a 429, the cluster's room, the daily budget): backend -> (limit, why)
    ceilings: Mapping[str, tuple[int, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoreBreakdown:
    """Every modifier of one candidate, for logs and the UI."""

    base: float
    hardware: float = 0.0
    cloud: float = 0.0
    language: float = 0.0
    network: float = 0.0
    load: float = 0.0

    @property
    def total(self) -> float:
        return self.base + self.hardware + self.cloud + self.language + self.network + self.load

    @property
    def effective(self) -> int:
        return effective_score(
            self.base, self.hardware, self.cloud, self.language, self.load, self.network
        )


@dataclass(frozen=True)
class Choice:
    """A candidate backend for a task with its effective score."""

    backend: str
    capability: catalog.Capability | None
    breakdown: ScoreBreakdown
    quality_mode: QualityMode

    @property
    def score(self) -> int:
        return self.breakdown.effective

    @property
    def model(self) -> str | None:
        cap = self.capability
        return cap.models[0] if cap is not None and len(cap.models) == 1 else None


@dataclass(frozen=True)
class Rejection:
    """A declared capability that cannot serve the task, and why."""

    backend: str
    reason: str


@dataclass(frozen=True)
class Evaluation:
    """All candidates (best first) and the rejected capabilities of one task on one node."""

    choices: tuple[Choice, ...]
    rejected: tuple[Rejection, ...]

    @property
    def best(self) -> Choice | None:
        return self.choices[0] if self.choices else None


# --- the formula and its modifiers ---------------------------------------------------------------


def round_half_up(value: float) -> int:
    """Round like the seed's integer examples (72.5 -> 73), not banker's rounding."""
    return math.floor(value + 0.5)


def effective_score(
    base: float,
    hardware: float = 0.0,
    cloud: float = 0.0,
    language: float = 0.0,
    load: float = 0.0,
    network: float = 0.0,
) -> int:
    """`max(10, base + hardware + cloud + language + network + load)`, rounded half up."""
    return max(SCORE_FLOOR, round_half_up(base + hardware + cloud + language + network + load))


def hardware_modifier(
    function: F,
    accelerator: catalog.AcceleratorKind,
    gpu_score: float | None,
    cpu_score: float | None,
) -> float:
    """§2.7.1: GPU (gpu-70)x0.4, CPU (cpu-50)x0.3, cloud and network 0.

    An unknown score counts as neutral (0). SUBTITLE_SYNC and AUDIO_FINGERPRINT are clamped to
    ±2 (§3.15: CPU barely matters there).
    """
    if accelerator is catalog.AcceleratorKind.GPU:
        value = 0.0 if gpu_score is None else (gpu_score - GPU_NEUTRAL) * GPU_FACTOR
    elif accelerator is catalog.AcceleratorKind.CPU:
        value = 0.0 if cpu_score is None else (cpu_score - CPU_NEUTRAL) * CPU_FACTOR
    else:
        return 0.0
    if function in LIGHT_FUNCTIONS:
        value = max(-LIGHT_CPU_LIMIT, min(LIGHT_CPU_LIMIT, value))
    return value


def cloud_modifier(
    is_cloud: bool, backend: str, preference: CloudPreference, rule: CloudRule
) -> float | None:
    """§2.5 cloud_preference modifier under the operator's rule; None = excluded."""
    if not is_cloud:
        return None if preference is CloudPreference.CLOUD_ONLY else 0.0
    if not rule.cloud_allowed:
        return None
    if rule.allowed_backends and backend not in rule.allowed_backends:
        return None
    if preference is CloudPreference.LOCAL_ONLY:
        return None
    if preference is CloudPreference.PREFER_LOCAL:
        return -CLOUD_PREFERENCE_DELTA
    if preference is CloudPreference.PREFER_CLOUD:
        return CLOUD_PREFERENCE_DELTA
    return 0.0


_LANG_ALIASES = {
    "": "auto",
    "zh-cn": "zh",
    "zh-hans": "zh",
    "zh-tw": "zh",
    "zh-hant": "zh",
    "cmn": "zh",
    "chinese": "zh",
    "mandarin": "zh",
    "yue": "zh-yue",
    "zh-hk": "zh-yue",
    "cantonese": "zh-yue",
    "english": "en",
    "japanese": "ja",
    "korean": "ko",
}


def normalize_language(language: object) -> str:
    """A language code as the tables key it: zh, zh-yue, en, ja, ko, auto (others pass)."""
    if not isinstance(language, str):
        return "auto"
    code = language.strip().lower().replace("_", "-")
    if code in _TRANSCRIBE_TABLE or code in _OCR_TABLE:
        return code
    if code in _LANG_ALIASES:
        return _LANG_ALIASES[code]
    if "+" in code:
        return "+".join(normalize_language(p) for p in code.split("+"))
    base = code.split("-", 1)[0]
    return _LANG_ALIASES.get(base, base)


# §3.2. The Chinese-cloud column gives ranges; one value per backend, strongest Chinese engine
# highest (xunfei +20, as in the seed's example), negatives at the rounded midpoint (ja -18).
_CHINESE_CLOUD_ZH = {
    "xunfei-iat-api": 20,
    "aliyun-nls-api": 18,
    "volcengine-asr-api": 18,
    "tencent-asr-api": 16,
    "baidu-asr-api": 15,
}
_CHINESE_CLOUD_OTHER = {"en": -18, "ja": -18, "ko": -15}
# language -> (whisper large, whisper small/medium, english-first cloud, multilingual cloud)
_TRANSCRIBE_TABLE: Mapping[str, tuple[int, int, int, int]] = {
    "zh": (5, 2, -8, 0),
    "zh-yue": (3, 0, -8, 0),
    "en": (8, 5, 10, 5),
    "ja": (12, 5, 5, 5),
    "ko": (5, 2, 3, 5),
}


def transcribe_language_modifier(backend: str, model: str, language: object) -> float:
    """§3.2 language modifier of a TRANSCRIBE backend (model decides the Whisper column)."""
    lang = normalize_language(language)
    klass = catalog.language_class(F.TRANSCRIBE, backend)
    if lang == "auto" or klass is None:
        return 0.0
    if klass is LC.CHINESE_CLOUD:
        if lang == "zh":
            return float(_CHINESE_CLOUD_ZH.get(backend, 15))
        if lang == "zh-yue":
            return 5.0 if backend == "xunfei-iat-api" else -5.0  # only xunfei has Cantonese
        return float(_CHINESE_CLOUD_OTHER.get(lang, 0))
    row = _TRANSCRIBE_TABLE.get(lang)
    if row is None:
        return 0.0
    if klass is LC.WHISPER:
        # By the size the model's name states; a cloud API's own names (whisper-1) run large
        # models, an unknown local name counts as small.
        size = catalog.named_whisper_size(model)
        if size is None and catalog.rows(F.TRANSCRIBE, backend)[0].cloud:
            size = "large"
        return float(row[0] if size == "large" else row[1])
    if klass is LC.ENGLISH_FIRST_CLOUD:
        return float(row[2])
    return float(row[3])


# §3.6: language -> (PaddleOCR family, Surya/EasyOCR, Tesseract, cloud).
_OCR_TABLE: Mapping[str, tuple[int, int, int, int]] = {
    "zh": (15, 5, 3, 5),
    "en": (-5, 8, 10, 0),
    "ja": (-8, 10, 5, 3),
    "ko": (-10, 8, 3, 3),
    "zh+en": (8, 5, -5, 3),
}
_OCR_COLUMN = {LC.OCR_PADDLE: 0, LC.OCR_SURYA_EASYOCR: 1, LC.OCR_TESSERACT: 2, LC.OCR_CLOUD: 3}


def ocr_language_modifier(backend: str, language: object) -> float:
    """§3.6 language modifier of an OCR backend; `en+zh` counts as `zh+en`."""
    lang = normalize_language(language)
    if lang == "en+zh":
        lang = "zh+en"
    klass = catalog.language_class(F.OCR, backend)
    row = _OCR_TABLE.get(lang)
    if row is None or klass is None or klass not in _OCR_COLUMN:
        return 0.0
    return float(row[_OCR_COLUMN[klass]])


def bandwidth_bonus(bandwidth_mbps: int) -> float:
    """§3.1: >=500 +15, 100-499 +8, 20-99 0, <20 -10; 0 means unknown and scores 0."""
    if bandwidth_mbps <= 0:
        return 0.0
    if bandwidth_mbps >= 500:
        return 15.0
    if bandwidth_mbps >= 100:
        return 8.0
    if bandwidth_mbps >= 20:
        return 0.0
    return -10.0


def storage_bonus(is_storage_node: bool, storage_preference: str) -> float:
    """§3.1: +20 on a storage node when the pipeline asked for storage_preference=nas."""
    return 20.0 if is_storage_node and storage_preference == "nas" else 0.0


def resolve_quality_mode(
    task_type: str,
    function: F | None,
    quality: QualityContext,
    node_defaults: Mapping[str, QualityMode],
) -> QualityMode:
    """§2.7.2 precedence: task override > pipeline mode > node default > balanced.

    Lowering a type whose node default is `quality` needs quality_tradeoff_acknowledged; without
    it the default stands (the UI asks first, see `tradeoff_confirmation_needed`).
    """
    default = node_defaults.get(task_type)
    if default is None and function is not None:
        default = node_defaults.get(function.value)
    default = QualityMode(default) if default else QualityMode.BALANCED
    requested = quality.task_override or quality.pipeline_mode
    if requested is None:
        return default
    if default is QualityMode.QUALITY and requested is not default and not quality.acknowledged:
        return default
    return requested


def tradeoff_confirmation_needed(
    task_types_in_pipeline: Sequence[str],
    pipeline_mode: QualityMode | None,
    overrides: Mapping[str, QualityMode],
    node_defaults: Mapping[str, QualityMode],
) -> list[str]:
    """Task types whose `quality` default would be lowered: the WebUI's confirmation list."""
    out = []
    for t in dict.fromkeys(task_types_in_pipeline):
        requested = overrides.get(t) or pipeline_mode
        fn = task_types.TASK_FUNCTIONS.get(t)
        default = node_defaults.get(t) or (node_defaults.get(fn.value) if fn else None)
        if default == QualityMode.QUALITY and requested not in (None, QualityMode.QUALITY):
            out.append(t)
    return out


def load_modifier(
    pending_tasks: int,
    max_workers: int,
    max_penalty: float,
    mode: QualityMode,
    enabled: bool = True,
) -> float:
    """§2.7.2: -min(1, pending/max_workers) x max_penalty x quality_weight."""
    weight = QUALITY_WEIGHT[mode]
    if not enabled or max_penalty <= 0 or weight == 0:
        return 0.0
    ratio = 1.0 if max_workers <= 0 else min(1.0, max(0, pending_tasks) / max_workers)
    return -ratio * max_penalty * weight


# --- cost ---------------------------------------------------------------------------------------


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def estimate_units(cost_unit: str, payload: Mapping[str, Any]) -> float | None:
    """How many billing units a task payload represents; None when it cannot tell."""
    if cost_unit == "request":
        return 1.0
    if cost_unit == "audio_minute":
        # TRANSCRIBE_CHUNK: the chunk file's length (SPLIT_AUDIO), which is what is uploaded
        duration = _number(payload.get("duration_sec")) or _number(
            payload.get("chunk_duration_sec")
        )
        start, end = _number(payload.get("start_sec")), _number(payload.get("end_sec"))
        if duration is None and start is not None and end is not None:
            duration = end - start
        return None if duration is None or duration <= 0 else duration / 60.0
    text = payload.get("text")
    if cost_unit == "1k_chars" and isinstance(text, str):
        return len(text) / 1000.0
    if cost_unit == "1k_tokens" and isinstance(text, str):
        return len(text) / 4 / 1000.0  # ~4 characters per token
    if cost_unit == "image":
        frames = payload.get("frame_paths")
        if isinstance(frames, list):
            return float(len(frames))
        return _number(payload.get("sample_frames"))
    return None


def estimate_cost_usd(capability: catalog.Capability, payload: Mapping[str, Any]) -> float | None:
    """Estimated price of running the task on a cloud capability; None when unknown (no
    `cost_per_unit_usd` configured, or the payload does not tell the size)."""
    price = capability.metadata.get("cost_per_unit_usd", "")
    unit = capability.metadata.get("cost_unit", "")
    if not price or not unit:
        return None
    units = estimate_units(unit, payload)
    return None if units is None else units * float(price)


# --- selection ----------------------------------------------------------------------------------


def _gate(
    cap: catalog.Capability, function: F, task: TaskDemand, node: NodeProfile, load: LoadInfo
) -> str | None:
    """Why this capability cannot take the task, or None."""
    limit = cap.metadata.get("max_concurrent", "")
    active = load.active_by_backend.get(cap.backend, 0)
    if limit and active >= int(limit):
        return f"{cap.backend} is at max_concurrent {limit}"
    ceiling = load.ceilings.get(cap.backend)
    if ceiling is not None and active >= ceiling[0]:
        return f"{cap.backend} is at max_concurrent {ceiling[0]} now ({ceiling[1]})"
    payload = task.payload
    wants_clone = function is F.TTS and payload.get("voice_clone") is True
    if wants_clone and not catalog.supports_voice_clone(cap.backend):
        return "voice_clone requested and the backend cannot clone voices"
    if function is F.TRANSCRIBE and cap.models:
        english_only = all(catalog.is_english_only_model(m) for m in cap.models)
        lang = normalize_language(payload.get("language"))
        if english_only and (task.task_type == "DETECT_LANGUAGE" or lang not in ("en", "auto")):
            return "English-only model cannot serve this language"
    requested = payload.get("model")
    pinned = function is F.OBJECT_DETECT and isinstance(requested, str) and bool(requested)
    if pinned and cap.models and requested not in cap.models:
        return f"model {requested!r} not available"
    if cap.is_cloud:
        cap_usd = node.rule(function).max_cost_per_task_usd
        cost = estimate_cost_usd(cap, payload)
        if cap_usd is not None and cost is not None and cost > cap_usd:
            return f"estimated cost ${cost:.4f} exceeds max_cost_per_task_usd ${cap_usd:g}"
    return None


def score_capability(
    cap: catalog.Capability,
    task: TaskDemand,
    node: NodeProfile,
    load: LoadInfo,
    mode: QualityMode,
) -> ScoreBreakdown | None:
    """Every modifier for one capability; None when the cloud rules exclude it."""
    function = cap.function
    kind = cap.accelerator.kind
    cloud = cloud_modifier(cap.is_cloud, cap.backend, task.cloud_preference, node.rule(function))
    if cloud is None:
        return None
    model = cap.models[0] if cap.models else ""
    language = 0.0
    if function is F.TRANSCRIBE:
        language = transcribe_language_modifier(cap.backend, model, task.payload.get("language"))
    elif function is F.OCR:
        language = ocr_language_modifier(cap.backend, task.payload.get("language"))
    network = 0.0
    if function in catalog.DOWNLOAD_FUNCTIONS:
        network = bandwidth_bonus(node.bandwidth_mbps) + storage_bonus(
            node.is_storage_node, task.storage_preference
        )
    return ScoreBreakdown(
        base=float(cap.score),
        hardware=hardware_modifier(function, kind, node.gpu_score, node.cpu_score),
        cloud=cloud,
        language=language,
        network=network,
        load=load_modifier(
            load.pending_tasks, node.max_workers, node.max_penalty, mode, node.load_penalty_enabled
        ),
    )


def _rank_key(choice: Choice) -> tuple[int, float, float, str]:
    b = choice.breakdown
    return (-b.effective, -b.total, -b.base, choice.backend)


def evaluate(
    capabilities: Sequence[catalog.Capability],
    task: TaskDemand,
    node: NodeProfile,
    load: LoadInfo,
    extra_task_types: Mapping[str, F | None] | None = None,
) -> Evaluation:
    """Score every declared capability against a task: candidates best first, and rejections.

    Raises errors.PayloadError for an unknown task type or an unusable DOWNLOAD_VIDEO payload.
    """
    function = task_types.required_function(task.task_type, task.payload, extra_task_types)
    mode = resolve_quality_mode(task.task_type, function, task.quality, node.quality_defaults)
    have = {c.function for c in capabilities}
    missing = [f for f in task_types.co_required_functions(task.task_type) if f not in have]
    if missing:
        needs = ", ".join(f.value for f in missing)
        return Evaluation((), (Rejection("", f"{task.task_type} also needs {needs} here"),))
    if function is None:
        lm = load_modifier(
            load.pending_tasks, node.max_workers, node.max_penalty, mode, node.load_penalty_enabled
        )
        builtin = ScoreBreakdown(base=float(BUILTIN_BASE_SCORE), load=lm)
        return Evaluation((Choice(BUILTIN_BACKEND, None, builtin, mode),), ())
    choices: list[Choice] = []
    rejected: list[Rejection] = []
    for cap in capabilities:
        if cap.function is not function:
            continue
        reason = _gate(cap, function, task, node, load)
        if reason is not None:
            rejected.append(Rejection(cap.backend, reason))
            continue
        scored = score_capability(cap, task, node, load, mode)
        if scored is None:
            decision = cloud_decision(task.cloud_preference, node.rule(function).cloud_allowed)
            rejected.append(Rejection(cap.backend, f"excluded by cloud rules ({decision.value})"))
        else:
            choices.append(Choice(cap.backend, cap, scored, mode))
    if not choices and not rejected:
        rejected.append(Rejection("", f"no {function.value} capability declared"))
    return Evaluation(tuple(sorted(choices, key=_rank_key)), tuple(rejected))


def best_backend(
    capabilities: Sequence[catalog.Capability],
    task: TaskDemand,
    node: NodeProfile,
    load: LoadInfo,
    extra_task_types: Mapping[str, F | None] | None = None,
) -> Choice | None:
    """The backend this node would use for the task and its effective score, or None when the
    node cannot serve it (no capability, excluded by cloud rules, all at max_concurrent...)."""
    return evaluate(capabilities, task, node, load, extra_task_types).best
