"""worker.yaml building blocks: strict base model, bounded types, error formatting, and the
`capabilities` and `cloud_policy` sections (seed 001 §2.4).

A backend left empty (`backend: ""`, `providers: []`) means "auto": probes fill it in when the
section is enabled. Backend names are checked against the catalog with a "did you mean" hint.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from fredica.capabilities import catalog

F = catalog.CapabilityFunction


class PathError(ValueError):
    """A validation error found by a model-level check, located below the model by `subpath`."""

    def __init__(self, subpath: tuple[int | str, ...], message: str) -> None:
        super().__init__(message)
        self.subpath = subpath


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest option, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def none_to_list(value: object) -> object:
    """An empty YAML key (`seeds:` with every item commented out) means an empty list."""
    return [] if value is None else value


def _num(x: float) -> str:
    return f"{x:g}"


def between(lo: float, hi: float) -> AfterValidator:
    """Inclusive range check with the message `must be lo-hi, got x`."""

    def check(value: Any) -> Any:
        if not lo <= value <= hi:
            raise ValueError(f"must be {_num(lo)}-{_num(hi)}, got {_num(value)}")
        return value

    return AfterValidator(check)


def at_least(lo: float) -> AfterValidator:
    """Lower bound check with the message `must be >= lo, got x`."""

    def check(value: Any) -> Any:
        if value < lo:
            raise ValueError(f"must be >= {_num(lo)}, got {_num(value)}")
        return value

    return AfterValidator(check)


def _positive(value: Any) -> Any:
    if value <= 0:
        raise ValueError(f"must be > 0, got {_num(value)}")
    return value


def _non_empty(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


non_empty = AfterValidator(_non_empty)
Score = Annotated[int, between(0, 100)]
PositiveInt = Annotated[int, at_least(1)]
NonNegInt = Annotated[int, at_least(0)]
NonNegFloat = Annotated[float, at_least(0)]
PositiveFloat = Annotated[float, AfterValidator(_positive)]
AcceleratorSetting = Literal["gpu", "cpu", "cloud_api"]

ACCELERATOR_KINDS: dict[str, catalog.AcceleratorKind] = {
    "gpu": catalog.AcceleratorKind.GPU,
    "cpu": catalog.AcceleratorKind.CPU,
    "cloud_api": catalog.AcceleratorKind.CLOUD,
}


# --- error formatting: pydantic errors -> key path + what is expected --------------------------


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp = typing.get_args(tp)[0]
            continue
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if origin in (typing.Union, types.UnionType) and args:
            tp = args[0]
            continue
        return tp


def _keys_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[str, ...]:
    """The keys a model accepts at `loc` (for "did you mean" on unknown keys)."""
    tp: Any = root
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {f.alias or n: f for n, f in tp.model_fields.items()}
            fields.update(tp.model_fields)
            if not isinstance(part, str) or part not in fields:
                return ()
            tp = fields[part].annotation
        elif typing.get_origin(tp) is list and isinstance(part, int):
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) is dict and isinstance(part, str):
            tp = typing.get_args(tp)[1]
        else:
            return ()
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tuple(f.alias or n for n, f in tp.model_fields.items())
    return ()


def show_value(value: object) -> str:
    """A YAML-ish rendering of an offending value for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


_EXPECTED = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "datetime_type": "expected a date-time such as 2026-06-01T00:00:00Z",
    "datetime_parsing": "expected a date-time such as 2026-06-01T00:00:00Z",
    "datetime_from_date_parsing": "expected a date-time such as 2026-06-01T00:00:00Z",
}


def _describe(err: Any, root: type[BaseModel]) -> tuple[tuple[int | str, ...], str]:
    loc: tuple[int | str, ...] = tuple(err["loc"])
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        key = str(loc[-1]) if loc else ""
        return loc, "unknown key" + did_you_mean(key, _keys_at(root, loc[:-1]))
    if kind == "missing":
        return loc, "required key is missing"
    if kind == "literal_error":
        return loc, f"must be {ctx.get('expected')}, got {show_value(err.get('input'))}"
    if kind in _EXPECTED:
        return loc, f"{_EXPECTED[kind]}, got {show_value(err.get('input'))}"
    if kind == "value_error" and isinstance(ctx.get("error"), PathError):
        exc: PathError = ctx["error"]
        return loc + exc.subpath, str(exc)
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return loc, msg


def format_validation_error(source: str, exc: ValidationError, root: type[BaseModel]) -> str:
    """One line per problem: `<source>: <key path>: <what is expected>`."""
    lines = []
    for err in exc.errors():
        loc, message = _describe(err, root)
        lines.append(f"{source}: {_format_loc(loc)}: {message}")
    return "\n".join(dict.fromkeys(lines))


class Section(BaseModel):
    """Strict, frozen base: unknown keys and wrong types are errors; an empty section (`key:`
    with nothing below it) means all defaults."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _none_is_empty(cls, data: Any) -> Any:
        return {} if data is None else data


def _models_before(value: object) -> object:
    # Models may be plain names (`models: ["PP-OCRv4"]`) or `{name, score}` entries.
    if value is None:
        return []
    if isinstance(value, list):
        return [{"name": v} if isinstance(v, str) else v for v in value]
    return value


class ModelEntry(Section):
    """One model of a backend, optionally with its own base score."""

    name: Annotated[str, non_empty]
    score: Score | None = None


ModelList = Annotated[list[ModelEntry], BeforeValidator(_models_before)]


class ProviderConfig(Section):
    """One backend of a capability section (the keys of every seed example, all optional)."""

    backend: str
    accelerator: AcceleratorSetting | None = None
    models: ModelList = Field(default_factory=list)
    default_model: str = ""
    model: str = ""
    score: Score | None = None
    max_concurrent: Annotated[int, at_least(1)] | None = None
    api_key: str = ""
    secret_key: str = ""
    app_id: str = ""
    endpoint: str = ""
    hf_token: str = ""
    alass_path: str = ""
    fpcalc_path: str = ""
    model_path: str = ""  # our addition: a model file (yolo-onnx: the exported .onnx)
    default_scale: Literal[2, 4] | None = None
    tile_size: Annotated[int, at_least(0)] | None = None
    default_mode: Literal["denoise", "dereverberate", "separate", "full"] | None = None
    # Our addition: price per catalog cost unit, for cloud_policy.max_cost_per_task_usd.
    cost_per_unit_usd: Annotated[float, at_least(0)] | None = None
    # Our addition (AI_ANALYZE): false = the model takes no images, so hard-subtitle detection
    # uses its OCR fallback instead of sending it frames.
    vision: bool | None = None
    # Our additions (HTTP backends): seconds to wait for an answer; the largest upload the
    # server accepts (cloud ASR: audio over it is sent as FLAC, or refused before the upload).
    timeout_sec: PositiveFloat | None = None
    max_upload_mb: PositiveFloat | None = None


def check_backend(
    function: catalog.CapabilityFunction,
    backend: str,
    accelerator: str | None,
    where: tuple[int | str, ...],
) -> None:
    """Raise PathError unless `backend` is a catalog backend of `function` that fits
    `accelerator`."""
    names = catalog.backend_names(function)
    if backend not in names:
        raise PathError(
            (*where, "backend"),
            f"unknown {function.value} backend {backend!r}" + did_you_mean(backend, names),
        )
    kinds = catalog.accelerator_kinds(function, backend)
    if accelerator is not None and ACCELERATOR_KINDS[accelerator] not in kinds:
        runs_on = " or ".join(sorted(k.value for k in kinds))
        raise PathError(
            (*where, "accelerator"),
            f"{accelerator!r} does not fit backend {backend!r} (runs on {runs_on})",
        )


class ProviderSection(Section):
    """A capability section with a list of providers (ai_analyze, ocr, ...)."""

    FUNCTION: ClassVar[catalog.CapabilityFunction]

    enabled: bool = False
    max_concurrent: Annotated[int, at_least(1)] = 1
    providers: Annotated[list[ProviderConfig], BeforeValidator(none_to_list)] = Field(
        default_factory=list
    )

    @model_validator(mode="after")
    def _check_providers(self) -> ProviderSection:
        for i, p in enumerate(self.providers):
            check_backend(self.FUNCTION, p.backend, p.accelerator, ("providers", i))
        return self

    def all_providers(self) -> list[ProviderConfig]:
        """The configured providers (empty = auto-detect)."""
        return list(self.providers)


class TranscribeSection(ProviderSection):
    """capabilities.transcribe: the seed's flat single-backend form, plus optional `providers`
    for more backends (our addition)."""

    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.TRANSCRIBE
    enabled: bool = True
    backend: str = ""
    accelerator: AcceleratorSetting | None = None
    models: ModelList = Field(default_factory=list)
    api_key: str = ""
    secret_key: str = ""
    app_id: str = ""
    endpoint: str = ""
    score: Score | None = None
    cost_per_unit_usd: Annotated[float, at_least(0)] | None = None

    @model_validator(mode="after")
    def _check_flat(self) -> TranscribeSection:
        if self.backend:
            check_backend(self.FUNCTION, self.backend, self.accelerator, ())
        return self

    def all_providers(self) -> list[ProviderConfig]:
        """The flat backend (when set) followed by `providers`."""
        out = []
        if self.backend:
            out.append(
                ProviderConfig(
                    backend=self.backend,
                    accelerator=self.accelerator,
                    models=self.models,
                    api_key=self.api_key,
                    secret_key=self.secret_key,
                    app_id=self.app_id,
                    endpoint=self.endpoint,
                    score=self.score,
                    cost_per_unit_usd=self.cost_per_unit_usd,
                )
            )
        return out + list(self.providers)


class AiAnalyzeSection(ProviderSection):
    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.AI_ANALYZE
    enabled: bool = True
    max_concurrent: Annotated[int, at_least(1)] = 2


class OcrSection(ProviderSection):
    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.OCR
    max_concurrent: Annotated[int, at_least(1)] = 2


class ObjectDetectSection(ProviderSection):
    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.OBJECT_DETECT


class TranslateSection(ProviderSection):
    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.TRANSLATE
    max_concurrent: Annotated[int, at_least(1)] = 2


class SuperResolutionSection(ProviderSection):
    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.SUPER_RESOLUTION


class SpeechEnhanceSection(ProviderSection):
    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.SPEECH_ENHANCE
    max_concurrent: Annotated[int, at_least(1)] = 2


class SpeakerDiarizeSection(ProviderSection):
    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.SPEAKER_DIARIZE
    # The seed shows hf_token next to the providers; a provider's own hf_token wins.
    hf_token: str = ""


class EmotionDetectSection(ProviderSection):
    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.EMOTION_DETECT
    max_concurrent: Annotated[int, at_least(1)] = 2


class SubtitleSyncSection(ProviderSection):
    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.SUBTITLE_SYNC
    max_concurrent: Annotated[int, at_least(1)] = 4


class AudioFingerprintSection(ProviderSection):
    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.AUDIO_FINGERPRINT
    enabled: bool = True
    max_concurrent: Annotated[int, at_least(1)] = 8


class TtsSection(ProviderSection):
    """capabilities.tts: our addition (the seed's worker.yaml has no TTS section)."""

    FUNCTION: ClassVar[catalog.CapabilityFunction] = F.TTS
    enabled: bool = True


class BilibiliDownload(Section):
    enabled: bool = True
    backend: Literal["", "bilibili-pyutil", "bilibili-ytdlp"] = ""
    pyutil_path: str = ""
    sessdata: str = ""


class YoutubeDownload(Section):
    enabled: bool = True
    backend: Literal["", "youtube-ytdlp"] = ""
    ytdlp_path: str = ""
    proxy: str = ""

    @model_validator(mode="after")
    def _check_proxy(self) -> YoutubeDownload:
        schemes = ("http://", "https://", "socks4://", "socks5://", "socks5h://")
        if self.proxy and not self.proxy.lower().startswith(schemes):
            raise PathError(("proxy",), "must be a URL like socks5://127.0.0.1:7890")
        return self


class HttpDownload(Section):
    enabled: bool = True
    backend: Literal["", "http-aria2c", "http-ytdlp", "http-curl"] = ""
    aria2c_path: str = ""
    aria2c_connections: Annotated[int, between(1, 16)] = 16


class HlsDownload(Section):
    enabled: bool = True
    backend: Literal["", "hls-ffmpeg", "hls-ytdlp"] = ""


class DownloadSection(Section):
    disk_min_free_gb: Annotated[float, at_least(0)] = 20.0
    max_concurrent: Annotated[int, at_least(1)] = 2
    bilibili: BilibiliDownload = Field(default_factory=BilibiliDownload)
    youtube: YoutubeDownload = Field(default_factory=YoutubeDownload)
    http: HttpDownload = Field(default_factory=HttpDownload)
    hls: HlsDownload = Field(default_factory=HlsDownload)


class SceneDetect(Section):
    backend: Literal["", "pyscenedetect", "ffmpeg-scene"] = ""
    threshold: Annotated[float, between(0, 1)] = 0.4


class FfmpegSection(Section):
    enabled: bool = True
    backend: Literal["", "ffmpeg-nvenc", "ffmpeg-vaapi", "ffmpeg-videotoolbox", "ffmpeg-cpu"] = ""
    score: Score | None = None
    ffmpeg_path: str = ""  # our addition; empty = PATH, then the imageio-ffmpeg binary
    scene_detect: SceneDetect = Field(default_factory=SceneDetect)


class CapabilitiesConfig(Section):
    """capabilities: one section per capability function."""

    download: DownloadSection = Field(default_factory=DownloadSection)
    ffmpeg: FfmpegSection = Field(default_factory=FfmpegSection)
    transcribe: TranscribeSection = Field(default_factory=TranscribeSection)
    ai_analyze: AiAnalyzeSection = Field(default_factory=AiAnalyzeSection)
    ocr: OcrSection = Field(default_factory=OcrSection)
    object_detect: ObjectDetectSection = Field(default_factory=ObjectDetectSection)
    translate: TranslateSection = Field(default_factory=TranslateSection)
    super_resolution: SuperResolutionSection = Field(default_factory=SuperResolutionSection)
    speech_enhance: SpeechEnhanceSection = Field(default_factory=SpeechEnhanceSection)
    speaker_diarize: SpeakerDiarizeSection = Field(default_factory=SpeakerDiarizeSection)
    emotion_detect: EmotionDetectSection = Field(default_factory=EmotionDetectSection)
    subtitle_sync: SubtitleSyncSection = Field(default_factory=SubtitleSyncSection)
    audio_fingerprint: AudioFingerprintSection = Field(default_factory=AudioFingerprintSection)
    tts: TtsSection = Field(default_factory=TtsSection)

    def provider_sections(self) -> dict[str, ProviderSection]:
        """Sections with providers, keyed by their worker.yaml name."""
        out: dict[str, ProviderSection] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, ProviderSection):
                out[name] = value
        return out


# cloud_policy keys -> capability function.
POLICY_FUNCTIONS: dict[str, catalog.CapabilityFunction] = {
    "transcribe": F.TRANSCRIBE,
    "ai_analyze": F.AI_ANALYZE,
    "ocr": F.OCR,
    "object_detect": F.OBJECT_DETECT,
    "translate": F.TRANSLATE,
    "super_resolution": F.SUPER_RESOLUTION,
    "speech_enhance": F.SPEECH_ENHANCE,
    "speaker_diarize": F.SPEAKER_DIARIZE,
    "emotion_detect": F.EMOTION_DETECT,
    "subtitle_sync": F.SUBTITLE_SYNC,
    "audio_fingerprint": F.AUDIO_FINGERPRINT,
    "tts": F.TTS,
}


class CloudRule(Section):
    """The operator's cloud ceiling for one function (seed 001 §2.5)."""

    cloud_allowed: bool = True
    allowed_backends: Annotated[list[str], BeforeValidator(none_to_list)] = Field(
        default_factory=list
    )
    max_cost_per_task_usd: Annotated[float, at_least(0)] | None = None


def _deny() -> CloudRule:
    return CloudRule(cloud_allowed=False)


class CloudPolicyConfig(Section):
    """cloud_policy with the seed's per-function defaults; unlisted functions allow cloud."""

    transcribe: CloudRule = Field(default_factory=CloudRule)
    ai_analyze: CloudRule = Field(default_factory=CloudRule)
    ocr: CloudRule = Field(default_factory=_deny)
    object_detect: CloudRule = Field(default_factory=_deny)
    translate: CloudRule = Field(default_factory=CloudRule)
    super_resolution: CloudRule = Field(default_factory=_deny)
    speech_enhance: CloudRule = Field(default_factory=_deny)
    speaker_diarize: CloudRule = Field(default_factory=_deny)
    emotion_detect: CloudRule = Field(default_factory=_deny)
    subtitle_sync: CloudRule = Field(default_factory=_deny)
    audio_fingerprint: CloudRule = Field(
        default_factory=lambda: CloudRule(allowed_backends=["acoustid-api"])
    )
    tts: CloudRule = Field(default_factory=CloudRule)

    @model_validator(mode="after")
    def _check(self) -> CloudPolicyConfig:
        for key, function in POLICY_FUNCTIONS.items():
            rule: CloudRule = getattr(self, key)
            clouds = catalog.cloud_backend_names(function)
            if rule.cloud_allowed and not clouds:
                raise PathError(
                    (key, "cloud_allowed"),
                    f"{key} has no cloud backend; cloud_allowed is fixed to false",
                )
            for i, name in enumerate(rule.allowed_backends):
                if name not in clouds:
                    raise PathError(
                        (key, "allowed_backends", i),
                        f"{name!r} is not a cloud backend of {key}" + did_you_mean(name, clouds),
                    )
        return self

    def rule_for(self, function: catalog.CapabilityFunction) -> CloudRule:
        """The rule of a function; functions without a key allow cloud (seed default)."""
        for key, fn in POLICY_FUNCTIONS.items():
            if fn is function:
                rule: CloudRule = getattr(self, key)
                return rule
        return CloudRule()
