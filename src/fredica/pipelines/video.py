"""The video pipelines (seed 001 §3.4, §3.6, §3.7, §3.14) and `register_video(registry)`.

Templates: `ocr_video` (EXTRACT_FRAMES -> OCR_FRAME_BATCH x M -> MERGE_OCR_RESULTS),
`detect_objects` (EXTRACT_FRAMES -> DETECT_FRAME_BATCH x N -> MERGE_DETECT_RESULTS), `fingerprint`
(FINGERPRINT_VIDEO), `transcode` (TRANSCODE), `video_overview` (GENERATE_THUMBNAIL +
DETECT_SCENES), `upscale` (UPSCALE_VIDEO, then TRANSCODE spawned when it completes, HARD-affine
to the node that holds the upscaled file: seed §3.9), and `transcribe_ocr`: the seed's
combined pipeline, full_process plus the OCR branch, with AI_ANALYZE reading the transcript
and the on-screen text together.
A URL source is downloaded first (DOWNLOAD_VIDEO); a local file is read in place, so the tasks
that read it are HARD-affine to this node.

Batch splitting happens at the owner, in the transaction that accepts EXTRACT_FRAMES' result
(`on_task_completed`): its frames are cut into batches of `batch_size` (default 50), one batch
task each, SOFT-affine to the node that holds the frames (`Affinity.soft(node)`,
`file_node_id`), and the merge gains every batch as a dependency. Frames are extracted into
`frames/<material>/<fps>fps-<format>` so OCR and detection of one video share them
(CHECK_EXISTING).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fredica.domain import errors, idempotency, models
from fredica.domain.spawn import SpawnInput, SpawnPlan
from fredica.executors import (
    analyze,
    detect,
    download,
    frames,
    merge,
    ocr,
    outputs,
    scenes,
    upscale,
    video,
)
from fredica.pipelines import media
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext, Template

if TYPE_CHECKING:
    from fredica.pipelines.templates import Registrar

CP = models.CachePolicy
DL, ANALYZE = download.DOWNLOAD_VIDEO, analyze.AI_ANALYZE
FRAMES = video.EXTRACT_FRAMES
OCR_BATCH, OCR_MERGE = ocr.OCR_FRAME_BATCH, ocr.MERGE_OCR_RESULTS
DET_BATCH, DET_MERGE = detect.DETECT_FRAME_BATCH, detect.MERGE_DETECT_RESULTS
BATCH_OF = {OCR_MERGE: OCR_BATCH, DET_MERGE: DET_BATCH}
MERGE_OF = {OCR_BATCH: OCR_MERGE, DET_BATCH: DET_MERGE}
CACHE = {
    DL: CP.CHECK_EXISTING,
    FRAMES: CP.CHECK_EXISTING,
    OCR_BATCH: CP.NONE,
    OCR_MERGE: CP.CHECK_EXISTING,
    DET_BATCH: CP.NONE,
    DET_MERGE: CP.CHECK_EXISTING,
    video.TRANSCODE: CP.CHECK_EXISTING,
    video.GENERATE_THUMBNAIL: CP.CHECK_EXISTING,
    scenes.DETECT_SCENES: CP.CHECK_EXISTING,
    video.FINGERPRINT_VIDEO: CP.CHECK_EXISTING,
    upscale.UPSCALE_VIDEO: CP.CHECK_EXISTING,
    ANALYZE: CP.NONE,
}
# what reads the source video (their payloads get `video_path`, HARD affinity when local)
READS_SOURCE = frozenset(
    {
        FRAMES,
        video.TRANSCODE,
        video.GENERATE_THUMBNAIL,
        scenes.DETECT_SCENES,
        video.FINGERPRINT_VIDEO,
        upscale.UPSCALE_VIDEO,
    }
)
FRAME_PARAMS = ("fps", "format", "start_sec", "end_sec")
OCR_PARAMS = ("mode", "region_hint", "min_confidence")
DETECT_PARAMS = ("conf_threshold", "classes", "mode", "model")
TRANSCODE_PARAMS = (
    "video_codec",
    "crf",
    "bitrate",
    "container",
    "width",
    "height",
    "audio_codec",
    "audio_bitrate",
)
UPSCALE_PARAMS = ("scale", "model", "content_type", "tile_size")
PARAMS: dict[str, frozenset[str]] = {
    "ocr_video": frozenset({*FRAME_PARAMS, *OCR_PARAMS, "batch_size", "analyze", "prompt"}),
    "detect_objects": frozenset(
        {*FRAME_PARAMS, *DETECT_PARAMS, "batch_size", "min_frames", "analyze", "prompt"}
    ),
    "fingerprint": frozenset({"fps", "analyze"}),
    "transcode": frozenset({*TRANSCODE_PARAMS, "analyze"}),
    "video_overview": frozenset({"threshold", "count", "width", "columns", "analyze"}),
    "upscale": frozenset(
        {*UPSCALE_PARAMS, *(p for p in TRANSCODE_PARAMS if p not in ("width", "height"))}
    ),
}


@dataclass
class _Plan:
    """The tasks of a pipeline being built: (ref, type, payload, parent refs)."""

    material: str
    pipeline_id: str
    specs: list[tuple[str, str, dict[str, Any], list[str]]] = dataclasses.field(
        default_factory=list
    )

    def add(self, ref: str, ttype: str, payload: dict[str, Any], deps: list[str]) -> str:
        self.specs.append((ref, ttype, payload, deps))
        return ref


def _pick(params: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: params[k] for k in keys if k in params}


def _check_params(name: str, params: dict[str, Any]) -> None:
    unknown = set(params) - PARAMS[name]
    if unknown:
        raise errors.InvalidRequest(
            f"params: unknown key(s) {', '.join(sorted(unknown))}; known: "
            + ", ".join(sorted(PARAMS[name]))
        )


def batch_size(params: dict[str, Any]) -> int:
    value = params.get("batch_size", frames.DEFAULT_BATCH_SIZE)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise errors.InvalidRequest("params.batch_size: expected an integer in [1, 1000]")
    return value


def frames_dir(mdir: str, params: dict[str, Any]) -> str:
    fps = params.get("fps", 1)
    fmt = params.get("format", "png")
    return f"frames/{mdir}/{fps:g}fps-{fmt}" if isinstance(fps, int | float) else f"frames/{mdir}"


def task_spec(
    ttype: str,
    payload: dict[str, Any],
    deps: tuple[str, ...],
    pipeline: models.Pipeline | _Plan,
    priority: int,
    cloud: str,
    publisher: str | None,
    task_id: str,
) -> models.NewTask:
    """A task of a video pipeline; idempotency keys are scoped to the pipeline (outputs are
    shared across pipelines through CHECK_EXISTING instead)."""
    pid = pipeline.id if isinstance(pipeline, models.Pipeline) else pipeline.pipeline_id
    material = pipeline.material_id if isinstance(pipeline, models.Pipeline) else pipeline.material
    return models.NewTask(
        id=task_id,
        type=ttype,
        payload=payload,
        depends_on=deps,
        priority=priority,
        max_retries=3 if ttype == DL else 2,
        cache_policy=CACHE.get(ttype, CP.NONE),
        cloud_preference=models.CloudPreference(cloud),
        idempotency_key=idempotency.compute_key(
            ttype, material, {**payload, "_pipeline": pid}, pid
        ),
        is_pausable=True,
        publisher_id=publisher,
    )


class VideoTemplate(Template):
    """One of the video templates; `kind` picks the tasks (see the module docstring)."""

    def __init__(self, name: str, description: str) -> None:
        self.name = name
        self.description = description

    # --- build -----------------------------------------------------------------------------
    def build(self, request: PipelineRequest, ctx: BuildContext) -> models.NewPipeline:
        source = media._validate_source(request.source)
        params = dict(request.params)
        _check_params(self.name, params)
        material = request.material_id or media.default_material_id(source)
        plan = _Plan(material, str(uuid.uuid4()))
        local = download.local_source(source)
        first: list[str] = []
        if local is None:
            first = [
                plan.add(
                    "download",
                    DL,
                    {
                        "source_url": source,
                        "output_dir": f"downloads/{outputs.safe_name(material)}",
                    },
                    [],
                )
            ]
        src = {"video_path": None if local is None else str(local)}
        tail = self.lay_out(plan, params, src, first, request)
        if params.get("analyze", False) and tail is None:
            raise errors.InvalidRequest(f"params.analyze: {self.name} produces no text to analyse")
        if params.get("analyze", False) and tail is not None:
            custom = params.get("prompt")
            if custom is not None and not isinstance(custom, str):
                raise errors.InvalidRequest("params.prompt: expected a string")
            plan.add(
                "analyze",
                ANALYZE,
                {"text": None, "prompt": custom, "prompt_hash": analyze.prompt_hash(custom)},
                [tail],
            )
        return self.finish(plan, request, ctx, local is not None, params)

    def lay_out(
        self,
        plan: _Plan,
        params: dict[str, Any],
        src: dict[str, Any],
        first: list[str],
        request: PipelineRequest,
    ) -> str | None:
        """Add this template's tasks; returns the ref whose text AI_ANALYZE would read."""
        mdir = outputs.safe_name(plan.material)
        if self.name in ("ocr_video", "detect_objects"):
            batch_size(params)
            payload = {**src, **_pick(params, FRAME_PARAMS), "output_dir": frames_dir(mdir, params)}
            plan.add("frames", FRAMES, payload, first)
            if self.name == "ocr_video":
                return plan.add(
                    "merge",
                    OCR_MERGE,
                    {"batches": [], "output_path": f"ocr/{mdir}/ocr.json"},
                    ["frames"],
                )
            return plan.add(
                "merge",
                DET_MERGE,
                {
                    "batches": [],
                    "min_frames": params.get("min_frames", detect.DEFAULT_MIN_FRAMES),
                    "output_path": f"detect/{mdir}/detections.json",
                },
                ["frames"],
            )
        if self.name == "fingerprint":
            payload = {**src, **_pick(params, ("fps",)), "output_path": f"fingerprints/{mdir}.json"}
            plan.add("fingerprint", video.FINGERPRINT_VIDEO, payload, first)
        elif self.name == "upscale":
            upscale_plan(plan, params, src, first, mdir)
        elif self.name == "transcode":
            container = str(params.get("container") or "mp4")
            payload = {**src, **_pick(params, TRANSCODE_PARAMS)}
            key = outputs.input_hash(payload | {"video_path": None})[:10]
            payload["output_path"] = f"transcoded/{mdir}/{key}.{container}"
            try:  # a bad combination is a 4xx now, not a failed task later
                video.transcode_args("ffmpeg-cpu", payload)
            except errors.PayloadError as exc:
                raise errors.InvalidRequest(f"params: {exc.message}") from exc
            plan.add("transcode", video.TRANSCODE, payload, first)
        else:
            thumbs = {
                **src,
                **_pick(params, ("count", "width", "columns")),
                "output_dir": f"thumbnails/{mdir}",
            }
            plan.add("thumbnails", video.GENERATE_THUMBNAIL, thumbs, first)
            shots = {**src, **_pick(params, ("threshold",)), "output_dir": f"scenes/{mdir}"}
            plan.add("scenes", scenes.DETECT_SCENES, shots, first)
        return None

    def finish(
        self,
        plan: _Plan,
        request: PipelineRequest,
        ctx: BuildContext,
        local: bool,
        params: dict[str, Any],
    ) -> models.NewPipeline:
        ids = {ref: str(uuid.uuid4()) for ref, *_ in plan.specs}
        priority = request.priority if request.priority is not None else 5
        tasks = []
        for ref, ttype, payload, deps in plan.specs:
            spec = task_spec(
                ttype,
                payload,
                tuple(ids[d] for d in deps),
                plan,
                priority,
                request.cloud_preference.value,
                ctx.publisher_id,
                ids[ref],
            )
            if local and ttype in READS_SOURCE:
                # the file exists only on this node: what reads it must run here
                spec = dataclasses.replace(
                    spec, affinity=models.Affinity.hard(ctx.node_id), file_node_id=ctx.node_id
                )
            tasks.append(spec)
        return models.NewPipeline(
            id=plan.pipeline_id,
            template=self.name,
            material_id=plan.material,
            tasks=tuple(tasks),
            params={
                "source": request.source,
                "language": request.language or "auto",
                "batch_size": batch_size(params),
                "batch_payload": self.batch_payload(params, request.language or "auto"),
                "priority": priority,
                "cloud_preference": request.cloud_preference.value,
                "user_params": params,
                "refs": ids,
            },
            publisher_id=ctx.publisher_id,
        )

    @staticmethod
    def batch_payload(params: dict[str, Any], language: str) -> dict[str, dict[str, Any]]:
        """What every spawned batch of each kind carries besides its frames."""
        return {
            OCR_BATCH: {"language": language, **_pick(params, OCR_PARAMS)},
            DET_BATCH: {**_pick(params, DETECT_PARAMS)},
        }

    # --- post-completion hook ------------------------------------------------------------
    def on_task_completed(self, done: SpawnInput) -> SpawnPlan | None:
        return video_hook(done)


def video_hook(done: SpawnInput) -> SpawnPlan | None:
    """Routing of the video pipelines (shared with `transcribe_ocr`)."""
    task, result = done.task, done.task.result or {}
    if task.type == DL and "video_path" in result:
        return SpawnPlan(
            patch_payloads={
                t.id: {"video_path": result["video_path"]}
                for t in _waiting(done)
                if t.type in READS_SOURCE
            }
        )
    if task.type == FRAMES:
        return spawn_batches(done, result)
    if task.type == upscale.UPSCALE_VIDEO:
        return spawn_transcode(done, result)
    if task.type in MERGE_OF:
        return _batch_done(done, task.type)
    if task.type in (OCR_MERGE, DET_MERGE):
        return _analysis_text(done)
    return None


def _waiting(done: SpawnInput) -> list[models.Task]:
    return [t for t in done.siblings if t.status is models.TaskStatus.PENDING]


def spawned(
    done: SpawnInput,
    ttype: str,
    payload: dict[str, Any],
    affinity: Callable[[str], models.Affinity],
) -> models.NewTask:
    """A task spawned by `done`'s completion, depending on it, placed by `affinity` relative to
    the node that ran `done` (which holds its files)."""
    params = done.pipeline.params
    spec = task_spec(
        ttype,
        payload,
        (done.task.id,),
        done.pipeline,
        int(params.get("priority") or 5),
        str(params.get("cloud_preference") or "auto"),
        done.pipeline.publisher_id,
        str(uuid.uuid4()),
    )
    holder = done.task.claimed_by
    if holder:
        spec = dataclasses.replace(spec, affinity=affinity(holder), file_node_id=holder)
    return spec


def spawn_batches(done: SpawnInput, result: dict[str, Any]) -> SpawnPlan | None:
    """EXTRACT_FRAMES done: one batch task per `batch_size` frames for every merge waiting in
    the pipeline, SOFT-affine to the frame node; each merge depends on all its batches."""
    params = done.pipeline.params
    size = int(params.get("batch_size") or frames.DEFAULT_BATCH_SIZE)
    found = [
        {"path": f["path"], "timestamp_sec": f.get("timestamp_sec")}
        for f in result.get("frames") or []
    ]
    new: list[models.NewTask] = []
    deps: dict[str, tuple[str, ...]] = {}
    patches: dict[str, dict[str, Any]] = {}
    for merge_task in _waiting(done):
        kind = BATCH_OF.get(merge_task.type)
        if kind is None:
            continue
        extra = (params.get("batch_payload") or {}).get(kind, {})
        chunks = frames.split(found, size)
        for index, chunk in enumerate(chunks):
            payload = {
                **extra,
                "frames": chunk,
                "frame_paths": [f["path"] for f in chunk],
                "batch_index": index,
                "batch_count": len(chunks),
            }
            new.append(spawned(done, kind, payload, models.Affinity.soft))
        ids = tuple(str(t.id) for t in new if t.type == kind)
        deps[merge_task.id] = ids
        patches[merge_task.id] = {"batch_count": len(ids), "batches": []}
    return SpawnPlan(new_tasks=tuple(new), add_dependencies=deps, patch_payloads=patches)


def _upscaled_transcode(params: dict[str, Any], mdir: str) -> dict[str, Any]:
    """The TRANSCODE payload of an `upscale` pipeline (without its input); PayloadError if the
    parameters cannot work together."""
    payload = _pick(params, TRANSCODE_PARAMS)
    key = outputs.input_hash({k: params.get(k) for k in sorted(PARAMS["upscale"])})[:10]
    payload["output_path"] = f"upscaled/{mdir}/{key}.{payload.get('container') or 'mp4'}"
    video.transcode_args("ffmpeg-cpu", payload)
    return payload


def upscale_plan(
    plan: _Plan, params: dict[str, Any], src: dict[str, Any], first: list[str], mdir: str
) -> None:
    """UPSCALE_VIDEO now; its TRANSCODE is spawned on the node that ran it (`spawn_transcode`)."""
    if params.get("content_type") not in (None, "anime", "general"):
        raise errors.InvalidRequest("params.content_type: expected anime or general")
    try:  # a bad combination is a 4xx now, not a failed task later
        upscale.choose_scale(params, {})
        if params.get("model") is not None and not isinstance(params["model"], str):
            raise errors.PayloadError("payload.model must be a model name")
        _upscaled_transcode(params, mdir)
    except errors.PayloadError as exc:
        raise errors.InvalidRequest(f"params: {exc.message.removeprefix('payload.')}") from exc
    payload = {**src, **_pick(params, UPSCALE_PARAMS)}
    key = outputs.input_hash({**payload, "video_path": None})[:10]
    payload["output_path"] = f"upscaled/{mdir}/{key}.x{params.get('scale', 2)}.mkv"
    plan.add("upscale", upscale.UPSCALE_VIDEO, payload, first)


def spawn_transcode(done: SpawnInput, result: dict[str, Any]) -> SpawnPlan | None:
    """UPSCALE_VIDEO done: TRANSCODE its output on the same node (HARD: the intermediate file
    is large and exists only there, seed §3.9)."""
    if done.pipeline.template != "upscale" or "output_path" not in result:
        return None
    params = done.pipeline.params
    mdir = outputs.safe_name(done.pipeline.material_id)
    payload = {
        **_upscaled_transcode(dict(params.get("user_params") or {}), mdir),
        "input_path": result["output_path"],
    }
    return SpawnPlan(new_tasks=(spawned(done, video.TRANSCODE, payload, models.Affinity.hard),))


def _batch_done(done: SpawnInput, batch_type: str) -> SpawnPlan:
    """A batch done: every completed batch of its kind into the waiting merge's payload."""
    keys = ("path", "timestamp_sec", "texts", "detections")
    batches = [
        {
            "batch_index": t.payload.get("batch_index"),
            "frames": [
                {k: f[k] for k in keys if k in f} for f in (t.result or {}).get("frames", [])
            ],
        }
        for t in done.siblings
        if t.type == batch_type and t.status is models.TaskStatus.COMPLETED
    ]
    batches.sort(key=lambda b: int(str(b["batch_index"] or 0)))
    return SpawnPlan(
        patch_payloads={
            t.id: {"batches": batches} for t in _waiting(done) if t.type == MERGE_OF[batch_type]
        }
    )


def ocr_segments(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"start": s["start_sec"] or 0.0, "end": s["end_sec"] or 0.0, "text": s["text"]}
        for s in result.get("spans") or []
    ]


def detect_text(result: dict[str, Any]) -> str:
    lines = [
        f"{t['label']} from {t['start_sec']}s to {t['end_sec']}s" for t in result.get("tracks", [])
    ]
    return "Objects seen in the video:\n" + "\n".join(lines) if lines else ""


def _analysis_text(done: SpawnInput) -> SpawnPlan:
    """A merge done: the texts of every completed merge into the waiting AI_ANALYZE."""
    parts: list[str] = []
    segments: list[dict[str, Any]] = []
    for t in done.siblings:
        if t.status is not models.TaskStatus.COMPLETED or not t.result:
            continue
        if t.type == merge.MERGE_TRANSCRIPTION:
            parts.insert(0, str(t.result.get("text", "")))
            segments = list(t.result.get("segments") or []) + segments
        elif t.type == OCR_MERGE and t.result.get("text"):
            parts.append("On-screen text (OCR):\n" + str(t.result["text"]))
            segments += [{**s, "text": f"[on screen] {s['text']}"} for s in ocr_segments(t.result)]
        elif t.type == DET_MERGE:
            parts.append(detect_text(t.result))
    segments.sort(key=lambda s: float(s.get("start") or 0))
    text = "\n\n".join(p for p in parts if p.strip())
    return SpawnPlan(
        patch_payloads={
            t.id: {"text": text, "segments": segments} for t in _waiting(done) if t.type == ANALYZE
        }
    )


OCR_OWN = frozenset({*FRAME_PARAMS, *OCR_PARAMS, "batch_size"})


def combine(*plans: SpawnPlan | None) -> SpawnPlan | None:
    """Several hooks' plans as one (later patches of the same task win key by key)."""
    found = [p for p in plans if p is not None]
    if not found:
        return None
    patches: dict[str, dict[str, Any]] = {}
    deps: dict[str, tuple[str, ...]] = {}
    updates: dict[str, Any] = {}
    for p in found:
        for task_id, patch in p.patch_payloads.items():
            patches.setdefault(task_id, {}).update(patch)
        for task_id, parents in p.add_dependencies.items():
            deps[task_id] = deps.get(task_id, ()) + parents
        updates.update(p.pipeline_updates)
    return SpawnPlan(
        new_tasks=tuple(t for p in found for t in p.new_tasks),
        patch_payloads=patches,
        add_dependencies=deps,
        skip=tuple(t for p in found for t in p.skip),
        pipeline_updates=updates,
    )


class TranscribeOcrTemplate(media.MediaTemplate):
    """full_process plus EXTRACT_FRAMES -> OCR batches -> MERGE_OCR_RESULTS; AI_ANALYZE waits
    for both merges and reads the transcript and the on-screen text (seed 001 §3.6)."""

    def __init__(self) -> None:
        super().__init__(
            "transcribe_ocr",
            "Transcribe the speech and read the on-screen text (OCR), then analyse both.",
        )

    def build(self, request: PipelineRequest, ctx: BuildContext) -> models.NewPipeline:
        params = dict(request.params)
        mine = {k: params.pop(k) for k in list(params) if k in OCR_OWN}
        base = super().build(request.model_copy(update={"params": params}), ctx)
        size = batch_size(mine)
        by_type = {t.type: t for t in base.tasks}
        mdir = outputs.safe_name(base.material_id)
        local = download.local_source(str(base.params["source"]))
        plan = _Plan(base.material_id, str(base.id))
        download_task = by_type.get(DL)
        frames_id, merge_id = str(uuid.uuid4()), str(uuid.uuid4())
        priority = request.priority if request.priority is not None else 5
        cloud = request.cloud_preference.value
        frames_payload = {
            "video_path": None if local is None else str(local),
            **_pick(mine, FRAME_PARAMS),
            "output_dir": frames_dir(mdir, mine),
        }
        extra = [
            task_spec(
                FRAMES,
                frames_payload,
                (str(download_task.id),) if download_task else (),
                plan,
                priority,
                cloud,
                ctx.publisher_id,
                frames_id,
            ),
            task_spec(
                OCR_MERGE,
                {"batches": [], "output_path": f"ocr/{mdir}/ocr.json"},
                (frames_id,),
                plan,
                priority,
                cloud,
                ctx.publisher_id,
                merge_id,
            ),
        ]
        if local is not None:
            extra[0] = dataclasses.replace(
                extra[0], affinity=models.Affinity.hard(ctx.node_id), file_node_id=ctx.node_id
            )
        tasks = [
            dataclasses.replace(t, depends_on=(*t.depends_on, merge_id)) if t.type == ANALYZE else t
            for t in base.tasks
        ]
        batch = VideoTemplate.batch_payload(mine, request.language or "auto")
        return dataclasses.replace(
            base,
            # parents before children: the analysis comes after the OCR merge it waits for
            tasks=(
                *(t for t in tasks if t.type != ANALYZE),
                *extra,
                *(t for t in tasks if t.type == ANALYZE),
            ),
            params={
                **base.params,
                "batch_size": size,
                "batch_payload": batch,
                "user_params": {**params, **mine},
            },
        )

    def on_task_completed(self, done: SpawnInput) -> SpawnPlan | None:
        spoken = super().on_task_completed(done)
        if done.task.type == merge.MERGE_TRANSCRIPTION:
            # the analysis reads the transcript and (once there) the on-screen text
            return combine(spoken, _analysis_text(done))
        return combine(spoken, video_hook(done))


TEMPLATES: tuple[tuple[str, str], ...] = (
    (
        "ocr_video",
        "Extract frames (1 fps), read their text in batches of 50 (OCR), merge the "
        "text into timed spans.",
    ),
    (
        "detect_objects",
        "Extract frames (1 fps), detect objects in batches of 50, merge them "
        "into timed tracks per label.",
    ),
    ("fingerprint", "Perceptual hash (pHash) of one frame per second, for duplicate finding."),
    ("transcode", "Re-encode a video (codec, CRF or bitrate, container, resolution)."),
    ("video_overview", "Cover, thumbnails, a sprite sheet and the scene timeline."),
    (
        "upscale",
        "Super-resolution 2x/4x (Real-ESRGAN), then re-encode on the same node (TRANSCODE).",
    ),
)


def register_video(registry: Registrar) -> None:
    """Add the video executors and templates to `registry`."""
    for executor in (
        *video.executors(),
        scenes.DetectScenesExecutor(),
        *ocr.executors(),
        *detect.executors(),
        *upscale.executors(),
    ):
        registry.add_executor(executor)
    for name, description in TEMPLATES:
        registry.add_template(VideoTemplate(name, description))
    registry.add_template(TranscribeOcrTemplate())


register = register_video  # so the module also loads as a plugin
