"""The media pipelines (seed 001 §2.6, §7.2): transcribe_short, transcribe_long, full_process
and bilibili_full_process, plus `register_media(registry)` adding their executors.

`build` validates the request and lays out the initial DAG; `on_task_completed` (run by the
store inside the transaction that accepts a completion, DESIGN §4.3) does the routing:
- DOWNLOAD_VIDEO done -> the downloaded path into EXTRACT_AUDIO's payload;
- SPLIT_AUDIO done -> one TRANSCRIBE_CHUNK per chunk, each depending on SPLIT_AUDIO and
  DETECT_LANGUAGE (and, in quality mode, on the previous chunk); MERGE_TRANSCRIPTION gains
  every chunk as a dependency;
- DETECT_LANGUAGE done -> its language into the waiting chunks and the pipeline row;
- TRANSCRIBE_CHUNK done -> its segments into MERGE's payload; its tail text into the
  initial_prompt of the next chunks that have not started (the nearest earlier text wins);
- MERGE_TRANSCRIPTION done -> the transcript text into AI_ANALYZE's payload.
Payloads carry paths relative to the executing node's data dir, named per material
(`audio/<material>/audio.wav`, as in seed §7.7), so CHECK_EXISTING finds earlier outputs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fredica.capabilities import packaged_models
from fredica.domain import errors, idempotency, models
from fredica.domain.spawn import Placement, SpawnInput, SpawnPlan
from fredica.executors import analyze, audio, download, merge, outputs, split, transcribe
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext, Registrar, Template

DL, SUB = download.DOWNLOAD_VIDEO, download.DOWNLOAD_SUBTITLE
EXTRACT, SPLIT = audio.EXTRACT_AUDIO, split.SPLIT_AUDIO
DETECT, CHUNK = transcribe.DETECT_LANGUAGE, transcribe.TRANSCRIBE_CHUNK
MERGE, ANALYZE = merge.MERGE_TRANSCRIPTION, analyze.AI_ANALYZE
CP = models.CachePolicy

PARAMS = frozenset(
    {
        "chunk_duration_sec",
        "model_name",
        "sample_sec",
        "initial_prompt",
        "beam_size",
        "vad_filter",
        "analyze",
        "prompt",
        "source_platform",
    }
)
TASK_FIELDS = frozenset({"priority", "max_retries", "cloud_preference"})
PROMPT_TAIL_CHARS = 800  # Whisper keeps the last 223 tokens of a prompt: about this much
PROMPT_AHEAD = 4  # a finished chunk's text is offered to this many of the chunks after it
_SENTENCE_END = re.compile(r"[.!?。！？]\s*")
SEGMENT_KEYS = ("start", "end", "text", "speaker", "words")
MAX_RETRIES = {DL: 3, SUB: 0, EXTRACT: 2, SPLIT: 2, DETECT: 2, CHUNK: 2, MERGE: 2, ANALYZE: 3}
CACHE = {
    DL: CP.CHECK_EXISTING,
    SUB: CP.NONE,
    EXTRACT: CP.CHECK_EXISTING,
    SPLIT: CP.PREFER_ORIGINAL,
    DETECT: CP.NONE,
    CHUNK: CP.NONE,
    MERGE: CP.CHECK_EXISTING,
    ANALYZE: CP.NONE,
}


def default_material_id(source: str) -> str:
    return "src-" + hashlib.sha256(source.encode()).hexdigest()[:16]


def _is_url(source: str) -> bool:
    return urlsplit(source).scheme in ("http", "https")


def _checked_params(raw: dict[str, Any]) -> dict[str, Any]:
    """The request's params, refused with the key named when unknown or of the wrong type."""
    params = dict(raw)
    unknown = set(params) - PARAMS
    if unknown:
        raise errors.InvalidRequest(
            f"params: unknown key(s) {', '.join(sorted(unknown))}; known: "
            + ", ".join(sorted(PARAMS))
        )
    for key in ("model_name", "initial_prompt"):
        if params.get(key) is not None and not isinstance(params[key], str):
            raise errors.InvalidRequest(f"params.{key}: expected a string")
    return params


def _validate_source(source: str | None) -> str:
    if not source or not source.strip():
        raise errors.InvalidRequest("source: a media pipeline needs a URL or an absolute file path")
    source = source.strip()
    if _is_url(source):
        return source
    local = download.local_source(source)
    if local is None:
        raise errors.InvalidRequest(
            f"source: {source!r} is neither an http(s) URL nor an absolute path / file:// URL"
        )
    if not local.is_file():
        raise errors.InvalidRequest(f"source: file not found on this node: {local}")
    return source


def _number(params: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise errors.InvalidRequest(f"params.{key}: expected a number in [{low}, {high}]")
    return float(value)


def _model_for(language: str, model_name: str | None) -> str:
    """The model for the chunks: the user's if given (and able to hear the language), else
    tiny.en for English and the multilingual base for any other language."""
    if model_name is None:
        return transcribe.default_model_for(language if language != "auto" else "en")
    if language not in ("auto", "en") and transcribe.is_english_only(model_name):
        raise errors.InvalidRequest(
            f"params.model_name: {model_name!r} is English-only and cannot transcribe "
            f"language {language!r}; name a multilingual model (e.g. base) or leave it out"
        )
    return model_name


def prompt_tail(result: dict[str, Any], before_sec: float | None) -> str:
    """The last ~PROMPT_TAIL_CHARS of a chunk's text that lies before `before_sec` (the next
    chunk's start: with overlapping chunks the next one hears the overlap itself). Pure."""
    segments = [s for s in result.get("segments") or [] if isinstance(s, dict)]
    limit = float("inf") if before_sec is None else before_sec + 0.01
    words = [w for s in segments for w in s.get("words") or []]
    if words:
        text = "".join(str(w["word"]) for w in words if float(w["end"]) <= limit)
    else:
        text = " ".join(str(s["text"]) for s in segments if float(s["end"]) <= limit)
    return tail_text(" ".join(text.split()), PROMPT_TAIL_CHARS)


def tail_text(text: str, limit: int) -> str:
    """The end of `text`, at most `limit` characters, starting at a sentence when one starts
    in the first half of that tail (a prompt that begins mid-sentence invites the model to
    continue it), else at a word. Pure."""
    if len(text) <= limit:
        return text
    tail = text[-limit:]
    ends = [m.end() for m in _SENTENCE_END.finditer(tail) if m.end() <= limit // 2]
    if ends:
        return tail[ends[0] :].strip()
    return tail.split(" ", 1)[-1] if " " in tail else tail


def _language_patch(payload: dict[str, Any], language: str) -> dict[str, Any]:
    """A chunk's language once detected, and its model when the pipeline left it to us."""
    patch: dict[str, Any] = {"language": language}
    if payload.get("model_auto"):
        patch["model_name"] = transcribe.default_model_for(language)
    return patch


@dataclass(frozen=True, slots=True)
class Layout:
    """Everything `build` decided that the hook needs later (kept in pipeline params)."""

    material_id: str
    language: str
    quality: bool
    chunk_payload: dict[str, Any]
    task_opts: dict[str, dict[str, Any]]


class MediaTemplate(Template):
    """download? -> EXTRACT_AUDIO -> (TRANSCRIBE_CHUNK | DETECT_LANGUAGE + SPLIT_AUDIO -> chunks)
    -> MERGE_TRANSCRIPTION -> AI_ANALYZE."""

    chunked: bool = True
    subtitles: bool = False

    def __init__(self, name: str, description: str, **flags: bool) -> None:
        self.name = name
        self.description = description
        for key, value in flags.items():
            setattr(self, key, value)

    # --- build ---------------------------------------------------------------------------
    def build(self, request: PipelineRequest, ctx: BuildContext) -> models.NewPipeline:
        source = _validate_source(request.source)
        params = _checked_params(request.params)
        material_id = request.material_id or default_material_id(source)
        mdir = outputs.safe_name(material_id)
        pipeline_id = str(uuid.uuid4())
        chunk_sec = _number(params, "chunk_duration_sec", split.DEFAULT_CHUNK_SEC, 1, 3600)
        model_name = params.get("model_name")
        prompt = params.get("initial_prompt")
        task_opts, payload_over = self._overrides(request)
        language = request.language or "auto"
        model = _model_for(language, model_name)
        detect_model = model
        if language == "auto" and transcribe.is_english_only(model):
            if model_name is None and packaged_models.BASE in packaged_models.available():
                # detection needs a multilingual model; chunks then get one for their language
                detect_model = packaged_models.BASE
            else:
                # an English-only model hears every language as English: nothing to detect
                language = "en"
        chunk_payload = {
            "model_name": model,
            "model_auto": model_name is None,
            "language": language,
            "beam_size": int(_number(params, "beam_size", 5, 1, 20)),
            "vad_filter": bool(params.get("vad_filter", False)),
            "word_timestamps": True,  # the merge reconciles overlaps and cuts cues by words
            **payload_over.get(CHUNK, {}),
        }
        layout = Layout(
            material_id, language, request.quality_mode == "quality", chunk_payload, task_opts
        )
        audio_rel = f"audio/{mdir}/audio.wav"
        specs: list[tuple[str, str, dict[str, Any], list[str]]] = []  # (ref, type, payload, deps)
        local = download.local_source(source)
        # a local file is read in place (it is on this node): only remote sources download
        if local is None:
            specs.append(
                (
                    "download",
                    DL,
                    {
                        "source_url": source,
                        "source_platform": params.get("source_platform"),
                        "output_dir": f"downloads/{mdir}",
                        "storage_preference": request.storage_preference,
                    },
                    [],
                )
            )
        if self.subtitles:
            specs.append(("subtitle", SUB, {"source_url": source}, []))
        before_extract = ["download"] if specs and specs[0][0] == "download" else []
        specs.append(
            (
                "extract",
                EXTRACT,
                {
                    "video_path": None if before_extract else str(local),
                    "output_path": audio_rel,
                    "sample_rate": audio.SAMPLE_RATE,
                },
                before_extract,
            )
        )
        if self.chunked:
            if language == "auto":
                specs.append(
                    (
                        "detect",
                        DETECT,
                        {
                            "audio_path": audio_rel,
                            "sample_sec": _number(params, "sample_sec", 30, 1, 600),
                            "model_name": detect_model,
                        },
                        ["extract"],
                    )
                )
            specs.append(
                (
                    "split",
                    SPLIT,
                    {
                        "audio_path": audio_rel,
                        "chunk_duration_sec": chunk_sec,
                        "output_dir": f"chunks/{mdir}/{chunk_sec:g}s",
                    },
                    ["extract"],
                )
            )
            specs.append(("merge", MERGE, {"chunks": []}, ["split"]))
        else:
            specs.append(
                (
                    "chunk-0",
                    CHUNK,
                    {
                        **chunk_payload,
                        "audio_path": audio_rel,
                        "chunk_index": 0,
                        "chunk_start_sec": 0.0,
                        "initial_prompt": prompt,
                    },
                    ["extract"],
                )
            )
            specs.append(("merge", MERGE, {"chunks": [], "chunk_count": 1}, ["chunk-0"]))
        if params.get("analyze", True):
            custom = params.get("prompt")
            if custom is not None and not isinstance(custom, str):
                raise errors.InvalidRequest("params.prompt: expected a string")
            specs.append(
                (
                    "analyze",
                    ANALYZE,
                    {
                        "text": None,
                        "prompt": custom,
                        "prompt_hash": analyze.prompt_hash(custom),
                        "title": models.display_title({"source": source}, material_id),
                    },
                    ["merge"],
                )
            )
        ids = {ref: str(uuid.uuid4()) for ref, *_ in specs}
        tasks = tuple(
            self._task(
                layout,
                ttype,
                {**payload, **payload_over.get(ttype, {})},
                tuple(ids[d] for d in deps),
                pipeline_id,
                request.priority,
                request.cloud_preference,
                ctx.publisher_id,
                task_id=ids[ref],
            )
            for ref, ttype, payload, deps in specs
        )
        if local is not None:
            # the file exists only on this node: its extraction must run here
            tasks = tuple(
                dataclasses.replace(
                    t, affinity=models.Affinity.hard(ctx.node_id), file_node_id=ctx.node_id
                )
                if t.type == EXTRACT
                else t
                for t in tasks
            )
        return models.NewPipeline(
            id=pipeline_id,
            template=self.name,
            material_id=material_id,
            tasks=tasks,
            params={
                "source": source,
                "language": language,
                "quality_mode": request.quality_mode or "speed",
                "storage_preference": request.storage_preference,
                "cloud_preference": request.cloud_preference.value,
                "priority": request.priority,
                "initial_prompt": prompt,
                "chunk_payload": chunk_payload,
                "task_opts": task_opts,
                "user_params": params,
                "refs": ids,
            },
            publisher_id=ctx.publisher_id,
        )

    def _overrides(
        self, request: PipelineRequest
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """Split `overrides` per task type into task columns and payload keys."""
        allowed = {DL, SUB, EXTRACT, SPLIT, DETECT, CHUNK, MERGE, ANALYZE}
        task_opts: dict[str, dict[str, Any]] = {}
        payloads: dict[str, dict[str, Any]] = {}
        for ttype, values in request.overrides.items():
            if ttype not in allowed:
                raise errors.InvalidRequest(
                    f"overrides: unknown task type {ttype!r}; known: {', '.join(sorted(allowed))}"
                )
            for key, value in values.items():
                if key == "cloud_preference":
                    try:
                        models.CloudPreference(value)
                    except ValueError:
                        raise errors.InvalidRequest(
                            f"overrides.{ttype}.cloud_preference: unknown value {value!r}"
                        ) from None
                if key in ("priority", "max_retries") and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 0
                ):
                    raise errors.InvalidRequest(f"overrides.{ttype}.{key}: expected an integer")
                target = task_opts if key in TASK_FIELDS else payloads
                target.setdefault(ttype, {})[key] = value
        return task_opts, payloads

    @staticmethod
    def _task(
        layout: Layout,
        ttype: str,
        payload: dict[str, Any],
        deps: tuple[str, ...],
        pipeline_id: str,
        priority: int | None,
        cloud: models.CloudPreference | str,
        publisher_id: str | None,
        task_id: str,
    ) -> models.NewTask:
        opts = layout.task_opts.get(ttype, {})
        return models.NewTask(
            id=task_id,
            type=ttype,
            payload=payload,
            depends_on=deps,
            priority=int(opts.get("priority", priority if priority is not None else 5)),
            max_retries=int(opts.get("max_retries", MAX_RETRIES[ttype])),
            cache_policy=CACHE[ttype],
            cloud_preference=models.CloudPreference(opts.get("cloud_preference", cloud)),
            idempotency_key=idempotency.compute_key(
                ttype, layout.material_id, payload, pipeline_id
            ),
            is_pausable=True,
            publisher_id=publisher_id,
        )

    # --- post-completion hook --------------------------------------------------------------
    def on_task_completed(self, done: SpawnInput) -> SpawnPlan | None:
        task, result = done.task, done.task.result or {}
        pending = [t for t in done.siblings if t.status is models.TaskStatus.PENDING]

        def waiting(ttype: str) -> list[models.Task]:
            return [t for t in pending if t.type == ttype]

        # the files a task wrote are on the node that ran it: what reads them follows it
        # (seed 001 §2.6): the extraction only there (HARD), the rest there first (SOFT; any
        # other node fetches the file from it)
        holder = task.claimed_by
        if task.type == DL and "video_path" in result:
            extract = waiting(EXTRACT)
            hard = Placement.follow(holder, hard=True)
            return SpawnPlan(
                patch_payloads={t.id: {"video_path": result["video_path"]} for t in extract},
                place={t.id: hard for t in extract if hard is not None},
            )
        if task.type == EXTRACT and "audio_path" in result:
            targets = waiting(SPLIT) + waiting(DETECT) + waiting(CHUNK)
            soft = Placement.follow(holder)
            return SpawnPlan(
                patch_payloads={t.id: {"audio_path": result["audio_path"]} for t in targets},
                place={t.id: soft for t in targets if soft is not None},
            )
        if task.type == DETECT:
            language = str(result.get("language") or "auto")
            return SpawnPlan(
                patch_payloads={
                    t.id: _language_patch(t.payload, language)
                    for t in waiting(CHUNK)
                    if t.payload.get("language_from") == "detect"
                },
                pipeline_updates={"detected_language": language},
            )
        if task.type == SPLIT:
            return self._spawn_chunks(done, result)
        if task.type == CHUNK:
            return self._chunk_done(done, task, result, waiting)
        if task.type == MERGE:
            return SpawnPlan(
                patch_payloads={
                    t.id: {
                        "text": result.get("text", ""),
                        "segments": result.get("segments", []),
                        "language": result.get("language"),
                    }
                    for t in waiting(ANALYZE)
                }
            )
        return None

    def _spawn_chunks(self, done: SpawnInput, result: dict[str, Any]) -> SpawnPlan | None:
        chunks = result.get("chunks")
        if not isinstance(chunks, list) or not chunks:
            return None
        params = done.pipeline.params
        layout = Layout(
            done.pipeline.material_id,
            str(params.get("language", "auto")),
            params.get("quality_mode") == "quality",
            dict(params.get("chunk_payload") or {}),
            dict(params.get("task_opts") or {}),
        )
        detect = next((t for t in done.siblings if t.type == DETECT), None)
        merge_task = next((t for t in done.siblings if t.type == MERGE), None)
        language = layout.language
        if detect is not None and detect.status is models.TaskStatus.COMPLETED:
            language = str((detect.result or {}).get("language") or "auto")
        new: list[models.NewTask] = []
        previous: str | None = None
        for chunk in chunks:
            index = int(chunk["index"])
            payload = {
                **layout.chunk_payload,
                "audio_path": chunk["path"],
                "chunk_index": index,
                "chunk_start_sec": float(chunk["start_sec"]),
                "chunk_duration_sec": float(chunk.get("duration_sec", 0)),
                "own_start_sec": chunk.get("own_start_sec"),
                "own_end_sec": chunk.get("own_end_sec"),
                "language": language,
                "initial_prompt": params.get("initial_prompt"),
            }
            if detect is not None:
                payload["language_from"] = "detect"
                if detect.status is models.TaskStatus.COMPLETED:
                    payload.update(_language_patch(payload, language))
            deps = [done.task.id] + ([detect.id] if detect is not None else [])
            if layout.quality and previous is not None:
                deps.append(previous)
            cloud = params.get("cloud_preference", models.CloudPreference.AUTO.value)
            spec = self._task(
                layout,
                CHUNK,
                payload,
                tuple(deps),
                done.pipeline.id,
                params.get("priority"),
                cloud,
                done.pipeline.publisher_id,
                task_id=str(uuid.uuid4()),
            )
            holder = done.task.claimed_by  # the chunk files are on the node that split
            if holder:
                spec = dataclasses.replace(
                    spec, affinity=models.Affinity.soft(holder), file_node_id=holder
                )
            new.append(spec)
            previous = spec.id
        plan_deps: dict[str, tuple[str, ...]] = {}
        patches: dict[str, dict[str, Any]] = {}
        if merge_task is not None and merge_task.status is models.TaskStatus.PENDING:
            plan_deps[merge_task.id] = tuple(str(t.id) for t in new)
            patches[merge_task.id] = {"chunk_count": len(new)}
        return SpawnPlan(new_tasks=tuple(new), add_dependencies=plan_deps, patch_payloads=patches)

    def _chunk_done(
        self,
        done: SpawnInput,
        task: models.Task,
        result: dict[str, Any],
        waiting: Callable[[str], list[models.Task]],
    ) -> SpawnPlan:
        collected: list[dict[str, Any]] = []
        for t in done.siblings:
            if t.type == CHUNK and t.status is models.TaskStatus.COMPLETED and t.result:
                r = t.result
                collected.append(
                    {
                        "index": int(r.get("chunk_index") or t.payload.get("chunk_index") or 0),
                        "task_id": t.id,
                        "start_sec": r.get("start_sec", t.payload.get("chunk_start_sec", 0)),
                        "end_sec": r.get("end_sec"),
                        "own_start_sec": t.payload.get("own_start_sec"),
                        "own_end_sec": t.payload.get("own_end_sec"),
                        "language": r.get("language"),
                        "segments": [
                            {k: s[k] for k in SEGMENT_KEYS if k in s}
                            for s in r.get("segments") or []
                        ],
                    }
                )
        collected.sort(key=lambda c: int(c["index"]))
        patches: dict[str, dict[str, Any]] = {m.id: {"chunks": collected} for m in waiting(MERGE)}
        # Context: the chunks after this one that have not started yet hear its tail as their
        # initial_prompt, unless a nearer earlier chunk's text is there already. The next chunk
        # always gets it in quality mode (chunks are chained); with parallel slots the next
        # chunk is usually running already, and the one after it starts when a slot frees,
        # so it hears the text of the chunk two before: not the words just before its audio,
        # but the talk's topic and names, which a chunk without any prompt gets wrong more
        # often ("bread" heard as "red" in a talk about bread).
        index = int(task.payload.get("chunk_index", 0))
        user_prompt = str(done.pipeline.params.get("initial_prompt") or "")
        for t in waiting(CHUNK):
            later = int(t.payload.get("chunk_index", -1))
            if not index < later <= index + PROMPT_AHEAD:
                continue
            nearer = t.payload.get("prompt_from_chunk")
            if isinstance(nearer, int) and nearer >= index:
                continue
            tail = prompt_tail(result, _float(t.payload.get("chunk_start_sec")))
            if tail:
                prompt = f"{user_prompt} {tail}".strip()
                patches[t.id] = {"initial_prompt": prompt, "prompt_from_chunk": index}
        return SpawnPlan(patch_payloads=patches)


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


TEMPLATES: tuple[tuple[str, str, dict[str, bool]], ...] = (
    (
        "transcribe_short",
        "Extract audio, transcribe in one piece, merge, analyse (short media; "
        "downloads first when the source is a URL).",
        {"chunked": False},
    ),
    (
        "transcribe_long",
        "Extract audio, detect the language while splitting into chunks, "
        "transcribe the chunks, merge, analyse.",
        {},
    ),
    (
        "full_process",
        "The seed's complete processing: download (a local file is read in place), extract, "
        "detect language + split, transcribe chunks, merge, analyse.",
        {},
    ),
    (
        "bilibili_full_process",
        "full_process for bilibili, plus its subtitles (needs login).",
        {"subtitles": True},
    ),
)


def register_media(registry: Registrar) -> None:
    """Add the media executors and the media templates to `registry`."""
    for executor in (
        download.DownloadVideoExecutor(),
        download.DownloadSubtitleExecutor(),
        audio.ExtractAudioExecutor(),
        split.SplitAudioExecutor(),
        transcribe.DetectLanguageExecutor(),
        transcribe.TranscribeChunkExecutor(),
        merge.MergeTranscriptionExecutor(),
        analyze.AiAnalyzeExecutor(),
    ):
        registry.add_executor(executor)
    for name, description, flags in TEMPLATES:
        registry.add_template(MediaTemplate(name, description, **flags))


register = register_media  # so the module also loads as a plugin (`plugins:` in worker.yaml)
