"""Templates built on the media transcription: `dub`, `summary_audio` (seed 001 §3.5, §3.8)
and `transcribe_speakers` (§3.11).

`dub` (source = a video on this node, params `target_lang`, optional `voice`, `burn`):

    EXTRACT_AUDIO -> TRANSCRIBE_CHUNK -> MERGE_TRANSCRIPTION -> TRANSLATE_TEXT (the SRT)
      -> GENERATE_TTS (the translated SRT, on its timeline)
    DETECT_HARDCODED_SUBTITLE -> BURN_SUBTITLE (translated subtitles + dubbed sound)

With `burn: false` it stops at the dubbed audio track. The burn branch is routed like
`burn_subtitles` with audio_mode dubbed: case A burns onto the original picture, case C blurs
the original's burned-in subtitles first.

`summary_audio`: EXTRACT_AUDIO -> TRANSCRIBE_CHUNK -> MERGE_TRANSCRIPTION -> AI_ANALYZE ->
GENERATE_TTS (the summary read aloud).

`transcribe_speakers`: EXTRACT_AUDIO -> DIARIZE_AUDIO (instead of SPLIT_AUDIO) -> one
TRANSCRIBE_CHUNK per speaker turn (payload `speaker_id`) -> MERGE_TRANSCRIPTION (segments labelled
with their speaker) -> AI_ANALYZE; with `emotion: true` also MERGE_TRANSCRIPTION ->
DETECT_EMOTION (one label per speaker segment; `emotion_set` basic | extended).

Each completion passes its output on to the waiting task in the owner's completion
transaction (DESIGN §4.3); the transcription part is the media template's own.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING, Any

from fredica.domain import errors, models
from fredica.domain.spawn import Placement, SpawnInput, SpawnPlan
from fredica.executors import (
    analyze,
    download,
    emotion,
    merge,
    outputs,
    speech,
    split,
    translate,
    tts,
)
from fredica.pipelines import media
from fredica.pipelines import subtitles as routing
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext

if TYPE_CHECKING:
    from fredica.pipelines.templates import Registrar

TRANSLATE, TTS = translate.TRANSLATE_TEXT, tts.GENERATE_TTS
MERGE, ANALYZE = merge.MERGE_TRANSCRIPTION, analyze.AI_ANALYZE
DUB_PARAMS = frozenset({"target_lang", "voice", "speed", "burn", "style", "blur_method",
                        "blur_strength", "sample_frames"}) | routing.STYLE_KEYS  # fmt: skip
SUMMARY_PARAMS = frozenset({"voice", "speed", "summary_language"})


def _waiting(done: SpawnInput, task_type: str) -> list[models.Task]:
    return [
        t for t in done.siblings if t.type == task_type and t.status is models.TaskStatus.PENDING
    ]


def _task(
    ttype: str, payload: dict[str, Any], deps: tuple[str, ...], **extra: Any
) -> models.NewTask:
    return models.NewTask(
        id=str(uuid.uuid4()), type=ttype, payload=payload, depends_on=deps, max_retries=2,
        is_pausable=True, **extra,
    )  # fmt: skip


class _Speaking(media.MediaTemplate):
    """A short media template (one transcription piece) followed by tasks of our own."""

    OWN: frozenset[str] = frozenset()

    def __init__(self, name: str, description: str, analyze_step: bool) -> None:
        super().__init__(name, description, chunked=False)
        self.analyze_step = analyze_step

    def _base(
        self, request: PipelineRequest, ctx: BuildContext
    ) -> tuple[models.NewPipeline, dict[str, Any]]:
        own = {k: v for k, v in request.params.items() if k in self.OWN}
        rest = {k: v for k, v in request.params.items() if k not in self.OWN}
        rest["analyze"] = self.analyze_step and rest.get("analyze", True)
        base = super().build(request.model_copy(update={"params": rest}), ctx)
        return base, own

    @staticmethod
    def _extend(
        base: models.NewPipeline, tasks: list[models.NewTask], params: dict[str, Any]
    ) -> models.NewPipeline:
        extra = tuple(
            dataclasses.replace(t, publisher_id=base.publisher_id, priority=base.tasks[0].priority)
            for t in tasks
        )
        return dataclasses.replace(base, tasks=base.tasks + extra, params={**base.params, **params})


class DubTemplate(_Speaking):
    OWN = DUB_PARAMS

    def build(self, request: PipelineRequest, ctx: BuildContext) -> models.NewPipeline:
        base, own = self._base(request, ctx)
        target = own.get("target_lang")
        if not isinstance(target, str) or not target.strip():
            raise errors.InvalidRequest("params.target_lang: the language to dub into is required")
        if own.get("style", "subtitle") not in translate.STYLES:
            raise errors.InvalidRequest(
                f"params.style must be one of {', '.join(translate.STYLES)}"
            )
        try:
            outputs.payload_number(own, "speed", 1.0, low=0.5, high=2.0)
        except errors.TaskError as exc:
            raise errors.InvalidRequest(f"params: {exc.message}") from exc
        refs = base.params["refs"]
        language = base.params.get("language", "auto")
        tr = _task(TRANSLATE, {"srt_path": None, "source_lang": language, "target_lang": target,
                               "style": own.get("style", "subtitle")},
                   (refs["merge"],))  # fmt: skip
        speech = _task(TTS, {"srt_path": None, "language": target,
                             "voice": own.get("voice", "default"), "speed": own.get("speed", 1.0)},
                       (str(tr.id),))  # fmt: skip
        tasks = [tr, speech]
        if own.get("burn", True):
            video = download.local_source(str(base.params["source"]))
            if video is None:
                raise errors.InvalidRequest("params.burn needs a local video as source")
            routing.validate_params({k: v for k, v in own.items() if k in routing.PARAMS})
            detect, burn = routing.burn_tasks(own, str(video), None, None, ctx.node_id)
            burn = dataclasses.replace(burn, depends_on=(*burn.depends_on, str(speech.id)))
            tasks += [detect, burn]
        return self._extend(base, tasks, {**own, "audio_mode": "dubbed"})

    def on_task_completed(self, done: SpawnInput) -> SpawnPlan | None:
        task, result = done.task, done.task.result or {}
        if task.type == MERGE:
            srt = (result.get("files") or {}).get("srt")
            return SpawnPlan(
                patch_payloads={t.id: {"srt_path": srt} for t in _waiting(done, TRANSLATE)}
            )
        if task.type == TRANSLATE:
            patches = {t.id: {"srt_path": result.get("srt_path")} for t in _waiting(done, TTS)}
            patches.update(
                {
                    t.id: {"subtitle_path": result.get("srt_path")}
                    for t in _waiting(done, routing.BURN)
                }
            )
            return SpawnPlan(patch_payloads=patches)
        if task.type == TTS:
            return SpawnPlan(
                patch_payloads={t.id: {"audio_path": result.get("audio_path")}
                                for t in _waiting(done, routing.BURN)}
            )  # fmt: skip
        if task.type in (routing.DETECT, routing.BLUR):
            return routing.route_plan(done)
        return super().on_task_completed(done)


class SummaryAudioTemplate(_Speaking):
    OWN = SUMMARY_PARAMS

    def build(self, request: PipelineRequest, ctx: BuildContext) -> models.NewPipeline:
        base, own = self._base(request, ctx)
        refs = base.params["refs"]
        speech = _task(TTS, {"text": None, "language": own.get("summary_language"),
                             "voice": own.get("voice", "default"), "speed": own.get("speed", 1.0)},
                       (refs["analyze"],))  # fmt: skip
        return self._extend(base, [speech], own)

    def on_task_completed(self, done: SpawnInput) -> SpawnPlan | None:
        task, result = done.task, done.task.result or {}
        if task.type == ANALYZE:
            patches: dict[str, dict[str, Any]] = {}
            for t in _waiting(done, TTS):
                patch: dict[str, Any] = {"text": result.get("summary") or ""}
                if not t.payload.get("language"):
                    patch["language"] = result.get("language") or "en"
                patches[t.id] = patch
            return SpawnPlan(patch_payloads=patches)
        return super().on_task_completed(done)


SPEAKER_PARAMS = frozenset({"min_speakers", "max_speakers", "min_segment_sec"})
EMOTION_PARAMS = frozenset({"emotion", "emotion_set"})


def _emotion_task(params: dict[str, Any], base: models.NewPipeline) -> models.NewTask | None:
    """DETECT_EMOTION after the merge when `params.emotion` asks for it (None otherwise)."""
    wanted = params.get("emotion", False)
    if not isinstance(wanted, bool):
        raise errors.InvalidRequest(f"params.emotion: expected true or false, got {wanted!r}")
    emotion_set = params.get("emotion_set", "basic")
    if emotion_set not in emotion.EMOTION_SETS:
        raise errors.InvalidRequest(
            f"params.emotion_set: expected one of {', '.join(emotion.EMOTION_SETS)}, "
            f"got {emotion_set!r}"
        )
    if not wanted:
        return None
    merge_task = next(t for t in base.tasks if t.type == MERGE)
    return models.NewTask(
        id=str(uuid.uuid4()),
        type=emotion.DETECT_EMOTION,
        payload={"segments": None, "language": None, "emotion_set": emotion_set},
        depends_on=(str(merge_task.id),),
        priority=merge_task.priority,
        max_retries=1,
        cloud_preference=merge_task.cloud_preference,
        is_pausable=True,
        publisher_id=merge_task.publisher_id,
    )


class SpeakersTemplate(media.MediaTemplate):
    """transcribe_long with DIARIZE_AUDIO deciding the pieces: one chunk per speaker turn."""

    def build(self, request: PipelineRequest, ctx: BuildContext) -> models.NewPipeline:
        own = {k: v for k, v in request.params.items() if k in SPEAKER_PARAMS}
        feel = {k: v for k, v in request.params.items() if k in EMOTION_PARAMS}
        rest = {k: v for k, v in request.params.items() if k not in SPEAKER_PARAMS | EMOTION_PARAMS}
        try:
            for key, default in (("min_speakers", 1), ("max_speakers", 0)):
                outputs.payload_number(own, key, default, low=0, high=50)
            outputs.payload_number(own, "min_segment_sec", 0.5, low=0, high=60)
        except errors.TaskError as exc:
            raise errors.InvalidRequest(f"params: {exc.message}") from exc
        base = super().build(request.model_copy(update={"params": rest}), ctx)
        tasks = []
        for t in base.tasks:
            if t.type == split.SPLIT_AUDIO:
                payload = {"audio_path": t.payload["audio_path"], **own,
                           "turns_dir": f"turns/{outputs.safe_name(base.material_id)}"}  # fmt: skip
                t = dataclasses.replace(t, type=speech.DIARIZE_AUDIO, payload=payload,
                                        cache_policy=models.CachePolicy.NONE,
                                        idempotency_key=None, max_retries=1)  # fmt: skip
            tasks.append(t)
        detect = _emotion_task(feel, base)
        if detect is not None:
            tasks.append(detect)
        params = {**base.params, **own, **feel}
        return dataclasses.replace(base, tasks=tuple(tasks), params=params)

    def on_task_completed(self, done: SpawnInput) -> SpawnPlan | None:
        task, result = done.task, done.task.result or {}
        if task.type == speech.DIARIZE_AUDIO:
            turns = [s for s in result.get("segments") or [] if s.get("path")]
            as_split = {"chunks": [
                {"index": i, "path": s["path"], "start_sec": s["start_sec"],
                 "duration_sec": round(s["end_sec"] - s["start_sec"], 3)}
                for i, s in enumerate(turns)]}  # fmt: skip
            plan = self._spawn_chunks(done, as_split)
            if plan is None:
                return None
            labelled = tuple(
                dataclasses.replace(t, payload={**t.payload, "speaker_id": turn["speaker"]})
                for t, turn in zip(plan.new_tasks, turns, strict=True)
            )
            return dataclasses.replace(plan, new_tasks=labelled)
        plan = super().on_task_completed(done)
        if task.type == media.EXTRACT and plan is not None and "audio_path" in result:
            # the acoustic backend hears the turns: the audio, and where it is
            feel = _waiting(done, emotion.DETECT_EMOTION)
            soft = Placement.follow(task.claimed_by)
            heard = {t.id: {"audio_path": result["audio_path"]} for t in feel}
            place = {t.id: soft for t in feel if soft is not None}
            return dataclasses.replace(
                plan,
                patch_payloads={**plan.patch_payloads, **heard},
                place={**plan.place, **place},
            )
        if task.type == MERGE and plan is not None:
            patch = {"segments": result.get("segments", []), "language": result.get("language")}
            waiting = {t.id: patch for t in _waiting(done, emotion.DETECT_EMOTION)}
            return dataclasses.replace(plan, patch_payloads={**plan.patch_payloads, **waiting})
        if task.type != media.CHUNK or plan is None:
            return plan
        speakers = {t.id: t.payload.get("speaker_id") for t in done.siblings}
        for patch in plan.patch_payloads.values():
            for chunk in patch.get("chunks") or []:
                who = speakers.get(chunk.get("task_id"))
                for seg in chunk["segments"] if who else []:
                    seg["speaker"] = who
        return plan


def register_dubbing(registry: Registrar) -> None:
    registry.add_template(
        DubTemplate(
            "dub",
            "Transcribe, translate the subtitles, speak them on their timeline, and (burn: true) "
            "burn them with the dubbed sound into the video, routed by hard-subtitle detection.",
            analyze_step=False,
        )
    )
    registry.add_template(
        SpeakersTemplate(
            "transcribe_speakers",
            "Extract audio, find the speaker turns (diarization instead of fixed chunks), "
            "transcribe each turn, merge with speaker labels, analyse.",
        )
    )
    registry.add_template(
        SummaryAudioTemplate(
            "summary_audio",
            "Transcribe, analyse, and read the summary aloud.",
            analyze_step=True,
        )
    )
