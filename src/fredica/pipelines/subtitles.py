"""Subtitle burning with the conditional routing of seed 001 §2.6 (DESIGN §4.3).

Template `burn_subtitles` (source = a video on this node; params `subtitle_path`,
`audio_mode` original | dubbed, optional `audio_path` for the dubbed sound, `blur_method`,
`blur_strength`, style keys) lays out

    DETECT_HARDCODED_SUBTITLE -> BURN_SUBTITLE

and, when the detection completes, the owner routes in the same transaction:
- Case A, no hard subtitles: BURN_SUBTITLE runs on the original picture;
- Case B, hard subtitles and original audio: BURN_SUBTITLE is written `skipped` (the picture
  already carries subtitles for this sound); a skipped task counts as done;
- Case C, hard subtitles and dubbed audio: a BLUR_SUBTITLE_REGION task over the detected band
  is added, BURN_SUBTITLE gains it as a dependency and burns onto its output.
`route_plan` does this for any template that contains these tasks (the `dub` template too).
"""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fredica.domain import errors, models
from fredica.domain.spawn import SpawnInput, SpawnPlan
from fredica.executors import emotion, hardsub, outputs, speech, subsync, subtitles, translate, tts
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext, Template

if TYPE_CHECKING:
    from fredica.pipelines.templates import Registrar

DETECT = hardsub.DETECT_HARDCODED_SUBTITLE
BURN, BLUR = subtitles.BURN_SUBTITLE, subtitles.BLUR_SUBTITLE_REGION
AUDIO_MODES = ("original", "dubbed")
STYLE_KEYS = frozenset({"font", "font_size", "colour", "outline_colour", "outline", "position",
                        "margin_v"})  # fmt: skip
PARAMS = frozenset(
    {"subtitle_path", "audio_mode", "audio_path", "blur_method", "blur_strength",
     "sample_frames", "sample_skip_pct", "output_path"} | STYLE_KEYS
)  # fmt: skip
CASE_B_REASON = "case B: the video already has hard subtitles and keeps its original audio"


def route(result: dict[str, Any], audio_mode: str) -> str:
    """The seed's routing case for a detection result: "A", "B" or "C"."""
    if not result.get("has_subtitle"):
        return "A"
    return "C" if audio_mode == "dubbed" else "B"


def local_file(value: Any, what: str) -> Path:
    """An existing absolute file on this node (InvalidRequest otherwise)."""
    if not isinstance(value, str) or not value.strip():
        raise errors.InvalidRequest(f"{what}: an absolute path to a file on this node is required")
    path = Path(value.strip().removeprefix("file://"))
    if not path.is_absolute():
        raise errors.InvalidRequest(f"{what}: {value!r} is not an absolute path")
    if not path.is_file():
        raise errors.InvalidRequest(f"{what}: file not found on this node: {path}")
    return path


def burn_tasks(
    params: dict[str, Any],
    video: str | None,
    subtitle: str | None,
    audio: str | None,
    node_id: str,
    deps: tuple[str, ...] = (),
) -> tuple[models.NewTask, models.NewTask]:
    """DETECT_HARDCODED_SUBTITLE and BURN_SUBTITLE (which waits for it) for one video; a None
    input is filled in later by the template's hook."""
    detect_id, burn_id = str(uuid.uuid4()), str(uuid.uuid4())
    detect = models.NewTask(
        id=detect_id,
        type=DETECT,
        payload={
            "video_path": video,
            "sample_frames": params.get("sample_frames", 8),
            "sample_skip_pct": params.get("sample_skip_pct", 0.05),
        },
        depends_on=deps,
        max_retries=2,
        is_pausable=True,
        file_node_id=node_id,
        affinity=models.Affinity.soft(node_id),
    )
    style = {k: params[k] for k in STYLE_KEYS if k in params}
    burn = models.NewTask(
        id=burn_id,
        type=BURN,
        payload={
            "video_path": video,
            "subtitle_path": subtitle,
            "audio_path": audio,
            # by default in the task's result directory, which the files API serves
            "output_path": params.get("output_path"),
            **style,
        },
        depends_on=(*deps, detect_id),
        max_retries=1,
        is_pausable=True,
        file_node_id=node_id,
        affinity=models.Affinity.hard(node_id),
    )
    return detect, burn


def _pending(done: SpawnInput, task_type: str) -> list[models.Task]:
    return [
        t for t in done.siblings if t.type == task_type and t.status is models.TaskStatus.PENDING
    ]


def route_plan(done: SpawnInput) -> SpawnPlan | None:
    """The routing of §2.6 when DETECT_HARDCODED_SUBTITLE or BLUR_SUBTITLE_REGION completes."""
    task, result = done.task, done.task.result or {}
    if task.type == BLUR and "video_path" in result:
        return SpawnPlan(
            patch_payloads={
                t.id: {"video_path": result["video_path"]} for t in _pending(done, BURN)
            }
        )
    if task.type != DETECT:
        return None
    burns = _pending(done, BURN)
    if not burns:
        return None
    mode = str(done.pipeline.params.get("audio_mode", "original"))
    case = route(result, mode)
    if case == "A":
        return SpawnPlan(patch_payloads={b.id: {"route": "A"} for b in burns})
    if case == "B":
        return SpawnPlan(skip=tuple(b.id for b in burns), skip_reason=CASE_B_REASON)
    region = result.get("region") or {}
    params = done.pipeline.params
    blur = models.NewTask(
        id=str(uuid.uuid4()),
        type=BLUR,
        payload={
            "video_path": task.payload.get("video_path"),
            "y_top_pct": region.get("y_top_pct", 0.84),
            "y_bottom_pct": region.get("y_bottom_pct", 0.96),
            "blur_method": params.get("blur_method", "gaussian"),
            "blur_strength": params.get("blur_strength", 30),
        },
        depends_on=(task.id,),
        max_retries=1,
        is_pausable=True,
        file_node_id=task.file_node_id,
        affinity=models.Affinity.hard(task.file_node_id) if task.file_node_id else None,
        publisher_id=done.pipeline.publisher_id,
    )
    return SpawnPlan(
        new_tasks=(blur,),
        add_dependencies={b.id: (str(blur.id),) for b in burns},
        patch_payloads={b.id: {"route": "C", "video_path": None} for b in burns},
    )


def validate_params(params: dict[str, Any]) -> None:
    unknown = set(params) - PARAMS
    if unknown:
        raise errors.InvalidRequest(
            f"params: unknown key(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(PARAMS))}"
        )
    if params.get("audio_mode", "original") not in AUDIO_MODES:
        raise errors.InvalidRequest("params.audio_mode must be original or dubbed")
    if params.get("blur_method", "gaussian") not in subtitles.BLUR_METHODS:
        raise errors.InvalidRequest(
            f"params.blur_method must be one of {', '.join(subtitles.BLUR_METHODS)}"
        )
    try:
        subtitles.style_from(params)
        outputs.payload_number(params, "sample_frames", 8, low=1, high=64)
        outputs.payload_number(params, "sample_skip_pct", 0.05, low=0, high=0.45)
        outputs.payload_number(params, "blur_strength", 30, low=1, high=500)
    except errors.TaskError as exc:
        raise errors.InvalidRequest(f"params: {exc.message}") from exc


class BurnSubtitlesTemplate(Template):
    name = "burn_subtitles"
    description = (
        "Burn a subtitle file into a video, routed by DETECT_HARDCODED_SUBTITLE: burn (no hard "
        "subtitles), skip (hard subtitles, original audio), or blur them first (dubbed audio)."
    )

    def build(self, request: PipelineRequest, ctx: BuildContext) -> models.NewPipeline:
        params = dict(request.params)
        validate_params(params)
        video = local_file(request.source, "source")
        subtitle = local_file(params.get("subtitle_path"), "params.subtitle_path")
        try:
            subtitles.read_cues(subtitle)
        except errors.TaskError as exc:
            raise errors.InvalidRequest(f"params.subtitle_path: {exc.message}") from exc
        audio = None
        if params.get("audio_path") is not None:
            audio = str(local_file(params["audio_path"], "params.audio_path"))
        mode = params.get("audio_mode", "original")
        digest = hashlib.sha256(f"{video}|{subtitle}|{mode}|{audio}".encode()).hexdigest()[:16]
        material = request.material_id or f"burn-{digest}"
        detect, burn = burn_tasks(params, str(video), str(subtitle), audio, ctx.node_id)
        tasks = tuple(_with_request(t, request, ctx.publisher_id) for t in (detect, burn))
        return models.NewPipeline(
            template=self.name,
            material_id=material,
            tasks=tasks,
            params={**params, "audio_mode": mode, "source": str(video)},
            publisher_id=ctx.publisher_id,
        )

    def on_task_completed(self, done: SpawnInput) -> SpawnPlan | None:
        return route_plan(done)


def _with_request(
    task: models.NewTask, request: PipelineRequest, publisher_id: str | None
) -> models.NewTask:
    from dataclasses import replace

    return replace(
        task,
        priority=request.priority if request.priority is not None else task.priority,
        cloud_preference=request.cloud_preference,
        publisher_id=publisher_id,
    )


def register_subtitles(registry: Registrar) -> None:
    """Add the subtitle and speech executors and the `burn_subtitles` template to `registry`
    (the templates built on them are in `pipelines.dubbing`)."""

    for executor in (
        subtitles.ExtractSubtitleExecutor(),
        subtitles.FormatSubtitleExecutor(),
        subtitles.BurnSubtitleExecutor(),
        subtitles.BlurSubtitleRegionExecutor(),
        subsync.SyncSubtitleExecutor(),
        hardsub.DetectHardcodedSubtitleExecutor(),
        translate.TranslateTextExecutor(),
        tts.GenerateTtsExecutor(),
        speech.EnhanceAudioExecutor(),
        speech.DiarizeAudioExecutor(),
        speech.FingerprintAudioExecutor(),
        emotion.DetectEmotionExecutor(),
    ):
        registry.add_executor(executor)
    registry.add_template(BurnSubtitlesTemplate())


register = register_subtitles
