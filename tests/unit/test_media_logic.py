"""Pure media logic: cut placement, boundary de-duplication, subtitle formats, the extractive
summariser, and the transcribe_long routing hook with a DETECT_LANGUAGE task (which needs a
multilingual model to run for real, so its routing is checked here on task rows)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from fredica.domain import models
from fredica.domain.spawn import SpawnInput
from fredica.executors import cues, extractive, merge, split
from fredica.pipelines import media
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext


def test_cuts_land_in_the_pause_nearest_before_each_boundary() -> None:
    pauses = [(2.0, 2.4), (4.1, 4.7), (7.0, 7.2), (8.8, 9.2), (9.5, 9.9)]
    cuts = split.plan_cuts(12.0, 5.0, pauses)
    assert [(c.at, c.method) for c in cuts] == [(4.4, "vad pause"), (9.0, "vad pause")]
    # no pause in reach: the cut stays at the boundary, reported as such
    cuts = split.plan_cuts(11.0, 5.0, [])
    assert [(c.at, c.method) for c in cuts] == [(5.0, "overlap"), (10.0, "overlap")]
    assert split.summarize(cuts) == "overlap"
    assert split.plan_cuts(4.0, 5.0, pauses) == []
    # pauses shorter than MIN_PAUSE_SEC (inside words) are never used
    assert split.plan_cuts(6.0, 5.0, [(4.5, 4.6)])[0].method == "overlap"
    mixed = split.plan_cuts(12.0, 5.0, [(4.1, 4.7)])
    assert split.summarize(mixed) == "mixed" and split.summarize([]) == "none"


def test_chunk_files_carry_context_beyond_their_cuts() -> None:
    cuts = split.plan_cuts(100.0, 40.0, [])  # owns 0-40, 40-80, 80-100
    spans = split.chunk_spans(100.0, cuts, [], context=3.0, min_file=30.0)
    assert [(s.own_start, s.own_end) for s in spans] == [(0.0, 40.0), (40.0, 80.0), (80.0, 100.0)]
    assert [(s.start, s.end) for s in spans] == [(0.0, 46.0), (37.0, 83.0), (70.0, 100.0)]
    # short chunks get a whole Whisper window of audio (here 20 s chunks -> 30 s files)
    short = split.chunk_spans(60.0, split.plan_cuts(60.0, 20.0, []), [], 3.0, 30.0)
    assert [(s.start, s.end) for s in short] == [(0.0, 30.0), (15.0, 45.0), (30.0, 60.0)]


def test_a_chunk_that_ends_in_a_pause_carries_no_audio_after_it() -> None:
    pauses = [(35.0, 36.0), (70.0, 71.0)]  # cuts at 35.5 and 70.5 are in pauses
    cuts = split.plan_cuts(100.0, 40.0, pauses)
    assert [(c.at, c.method) for c in cuts] == [(35.5, "vad pause"), (70.5, "vad pause")]
    spans = split.chunk_spans(100.0, cuts, pauses, context=3.0, min_file=30.0)
    # each end stops at its cut; each start keeps its context (snapped into the pause before)
    assert [s.end for s in spans] == [35.5, 70.5, 100.0]
    assert [s.start for s in spans] == [0.0, 32.5, 64.5]  # the last one takes all before
    # a cut with no pause (overlap) keeps context after it; so does a short chunk filled up
    # to a whole Whisper window
    overlap = split.chunk_spans(100.0, split.plan_cuts(100.0, 40.0, []), [], 3.0, 30.0)
    assert overlap[0].end == 46.0
    short = split.chunk_spans(60.0, split.plan_cuts(60.0, 20.0, [(19.5, 20.5)]), [], 3.0, 30.0)
    assert short[0].end == 30.0


def test_boundary_repeats_are_dropped_and_time_never_goes_back() -> None:
    chunks = [
        {"index": 0, "segments": [{"start": 0, "end": 4.0, "text": "we split the audio"},
                                  {"start": 4.0, "end": 6.2, "text": "into small chunks"}]},
        {"index": 1, "segments": [{"start": 5.0, "end": 6.2, "text": "into small chunks"},
                                  {"start": 6.1, "end": 9.0, "text": "and transcribe each"}]},
    ]  # fmt: skip
    merged = merge.merge_segments(chunks)
    segments = merged.segments
    assert merged.dropped == 1
    assert [s["text"] for s in segments] == [
        "we split the audio",
        "into small chunks",
        "and transcribe each",
    ]
    assert segments[2]["start"] == 6.2  # clamped to the previous end
    srt = cues.to_srt(segments)
    assert "3\n00:00:06,200 --> 00:00:09,000\nand transcribe each" in srt
    vtt = cues.to_vtt([{"start": 1.5, "end": 2.0, "text": "hi", "speaker": "A"}])
    assert vtt == "WEBVTT\n\n00:00:01.500 --> 00:00:02.000\n<v A>hi\n"


def test_speaker_labels_group_paragraphs() -> None:
    segs = [{"start": 0, "end": 1, "text": "hello", "speaker": "A"},
            {"start": 1, "end": 2, "text": "there", "speaker": "A"},
            {"start": 2, "end": 3, "text": "hi", "speaker": "B"}]  # fmt: skip
    assert cues.to_txt(segs) == "A: hello there\n\nB: hi\n"


def test_extractive_summary_keeps_order_and_finds_topics() -> None:
    text = (
        "Solar panels turn sunlight into electricity. The weather was nice today. "
        "Solar panels on a roof can power a house. Batteries store electricity from solar "
        "panels for the night. My cat likes the garden."
    )
    summary = extractive.summarize(text, 2)
    assert len(summary) == 2 and all("olar" in s for s in summary)
    assert text.index(summary[0]) < text.index(summary[1])
    assert "solar panels" in extractive.keywords(text, 5)
    segs = [
        {"start": 60.0 * i, "end": 60.0 * i + 50, "text": t}
        for i, t in enumerate(["solar panels and sunlight"] * 5 + ["cats and gardens"] * 5)
    ]
    chapters = extractive.chapters(segs, target_sec=300)
    assert [c["start_sec"] for c in chapters] == [0.0, 300.0]


def _task(
    new: models.NewTask, status: models.TaskStatus, result: dict | None = None
) -> models.Task:
    now = time.time()
    values = {f.name: None for f in dataclasses.fields(models.Task)}
    values.update(
        id=new.id, type=new.type, status=status, priority=new.priority,
        depends_on=list(new.depends_on), payload=dict(new.payload), result=result,
        cache_policy=new.cache_policy, cloud_preference=new.cloud_preference,
        excluded_nodes=[], retry_count=0, max_retries=new.max_retries, created_by="n",
        owner_id="n", owner_epoch=0, progress=0, is_paused=False, is_pausable=True, attempt=1,
        cancel_requested=False, change_seq=1, created_at=now, updated_at=now, pipeline_id="p",
    )  # fmt: skip
    return models.Task(**values)


def _pipeline(spec: models.NewPipeline, language: str | None = None) -> models.Pipeline:
    values = {f.name: 0 for f in dataclasses.fields(models.Pipeline)}
    values.update(
        id=spec.id, material_id=spec.material_id, template=spec.template,
        status=models.PipelineStatus.RUNNING, params=spec.params, cancel_requested=False,
        detected_language=language, created_by="n", owner_id="n", publisher_id=None,
        completed_at=None,
    )  # fmt: skip
    return models.Pipeline(**values)


def test_long_template_routes_detected_language_into_spawned_chunks(tmp_path: Path) -> None:
    video = tmp_path / "v.mp4"
    video.write_bytes(b"x")
    template = media.MediaTemplate("transcribe_long", "")
    request = PipelineRequest(
        template="transcribe_long", source=str(video), quality_mode="quality",
        params={"model_name": "small", "chunk_duration_sec": 60},
    )  # fmt: skip
    spec = template.build(request, BuildContext(frozenset(), "node-1"))
    by_type = {t.type: t for t in spec.tasks}
    assert "DETECT_LANGUAGE" in by_type  # a multilingual model and language=auto
    assert by_type["EXTRACT_AUDIO"].affinity == models.Affinity.hard("node-1")
    pipeline = _pipeline(spec)
    S = models.TaskStatus
    detect = _task(by_type["DETECT_LANGUAGE"], S.COMPLETED, {"language": "de", "confidence": 0.9})
    split_result = {"chunks": [
        {"index": i, "path": f"/c/{i}.wav", "start_sec": 60.0 * i, "duration_sec": 60.0}
        for i in range(3)]}  # fmt: skip
    split = _task(by_type["SPLIT_AUDIO"], S.COMPLETED, split_result)
    merge_task = _task(by_type["MERGE_TRANSCRIPTION"], S.PENDING)
    plan = template.on_task_completed(SpawnInput(split, pipeline, (detect, split, merge_task)))
    assert plan is not None and len(plan.new_tasks) == 3
    chunks = plan.new_tasks
    for i, chunk in enumerate(chunks):
        expected = [split.id, detect.id] + ([chunks[i - 1].id] if i else [])
        assert list(chunk.depends_on) == expected  # quality mode: chained
        assert chunk.payload["language"] == "de" and chunk.payload["chunk_start_sec"] == 60.0 * i
    assert plan.add_dependencies == {merge_task.id: tuple(c.id for c in chunks)}
    # DETECT finishing after the split patches the waiting chunks and the pipeline row
    waiting = [_task(c, S.PENDING) for c in chunks]
    late = template.on_task_completed(SpawnInput(detect, pipeline, (detect, *waiting)))
    assert late is not None and late.pipeline_updates == {"detected_language": "de"}
    assert set(late.patch_payloads) == {c.id for c in chunks}
    # a finished chunk feeds MERGE and hands its tail to the chunks after it that have not
    # started as initial_prompt (the next one, and the one after it, which may start before
    # the next one finishes)
    done = _task(
        chunks[0],
        S.COMPLETED,
        {
            "chunk_index": 0,
            "start_sec": 0.0,
            "text": "Hallo Welt.",
            "segments": [{"start": 0, "end": 1, "text": "Hallo Welt."}],
        },
    )
    plan = template.on_task_completed(
        SpawnInput(done, pipeline, (done, waiting[1], waiting[2], merge_task))
    )
    assert plan is not None
    hallo = {"initial_prompt": "Hallo Welt.", "prompt_from_chunk": 0}
    assert plan.patch_payloads[waiting[1].id] == plan.patch_payloads[waiting[2].id] == hallo
    assert plan.patch_payloads[merge_task.id]["chunks"][0]["segments"][0]["text"] == "Hallo Welt."
    # the nearer text wins: chunk 1's tail replaces chunk 0's in chunk 2, never the other way
    prompted = dataclasses.replace(waiting[2], payload={**waiting[2].payload, **hallo})
    second = _task(
        chunks[1],
        S.COMPLETED,
        {"chunk_index": 1, "start_sec": 60.0, "text": "Guten Tag.",
         "segments": [{"start": 60, "end": 61, "text": "Guten Tag."}]},
    )  # fmt: skip
    plan = template.on_task_completed(
        SpawnInput(second, pipeline, (done, second, prompted, merge_task))
    )
    assert plan is not None and plan.patch_payloads[prompted.id] == {
        "initial_prompt": "Guten Tag.", "prompt_from_chunk": 1
    }  # fmt: skip
    nearer = dataclasses.replace(
        prompted, payload={**prompted.payload, "initial_prompt": "x", "prompt_from_chunk": 1}
    )
    plan = template.on_task_completed(SpawnInput(done, pipeline, (done, nearer, merge_task)))
    assert plan is not None and nearer.id not in plan.patch_payloads


def test_the_default_compute_type_is_float32_for_small_models_on_the_cpu() -> None:
    from fredica.executors.transcribe import default_compute_type

    for name in ("tiny.en", "tiny", "base", "base.en", "/models/faster-whisper-base"):
        assert default_compute_type(name, "cpu") == "float32", name
    for name in ("small", "medium.en", "large-v3", "/models/whisper-large-v3"):
        assert default_compute_type(name, "cpu") == "int8", name
    assert default_compute_type("base", "cuda") == "float16"
