"""Material titles, durations and status badges (`domain.materials`)."""

from __future__ import annotations

import dataclasses

import pytest

from fredica.domain import materials
from fredica.domain.models import Pipeline, PipelineStatus, Task, TaskStatus

P = PipelineStatus


@pytest.mark.parametrize(
    ("source", "title"),
    [
        ("/srv/media/My Talk.mp4", "My Talk.mp4"),
        ("C:\\Videos\\lecture 1.mkv", "lecture 1.mkv"),
        ("https://example.org/files/clip%20one.mp4?x=1", "clip one.mp4"),
        ("https://www.youtube.com/watch?v=abc123", "www.youtube.com · abc123"),
        ("https://www.bilibili.com/video/BV1xx411c7mD/", "www.bilibili.com · BV1xx411c7mD"),
        ("file:///home/me/a.wav", "a.wav"),
        ("src-c333ed50d871559b", "src-c333ed50d871559b"),
    ],
)
def test_titles_from_the_source(source: str, title: str) -> None:
    assert materials.title_of(source) == title


def test_a_downloader_title_wins() -> None:
    assert materials.title_of("https://x.org/v", [{}, {"title": " A talk "}]) == "A talk"


def _pipeline(status: P, created: float) -> Pipeline:
    fields = {f.name: None for f in dataclasses.fields(Pipeline)}
    return Pipeline(**{**fields, "id": f"p{created}", "status": status, "created_at": created})


@pytest.mark.parametrize(
    ("statuses", "badge"),
    [
        ([], "none"),
        ([P.COMPLETED, P.FAILED], "completed"),  # the newest decides once all ended
        ([P.FAILED, P.COMPLETED], "failed"),
        ([P.PARTIAL_FAILED], "partial_failed"),
        ([P.COMPLETED, P.PENDING], "pending"),  # an older one still waits
        ([P.PENDING, P.CANCELLING], "running"),
        ([P.CANCELLED, P.RUNNING, P.PENDING], "running"),
    ],
)
def test_one_badge_from_all_pipelines(statuses: list[P], badge: str) -> None:
    pipelines = [_pipeline(s, 100.0 - i) for i, s in enumerate(statuses)]
    assert materials.status_of(pipelines) == badge


def _task(kind: str, status: TaskStatus, result: dict[str, object]) -> Task:
    fields = {f.name: None for f in dataclasses.fields(Task)}
    return Task(**{**fields, "id": kind, "type": kind, "status": status, "result": result})


def test_duration_comes_from_a_whole_file_measurement_not_a_chunk() -> None:
    tasks = [
        _task("TRANSCRIBE_CHUNK", TaskStatus.COMPLETED, {"duration_sec": 6.0}),
        _task("EXTRACT_AUDIO", TaskStatus.FAILED, {"duration_sec": 99.0}),
        _task("TRANSCODE", TaskStatus.COMPLETED, {"duration_sec": 151.2}),
        _task("EXTRACT_AUDIO", TaskStatus.COMPLETED, {"duration_sec": 150.5}),
    ]
    assert materials.duration_of(tasks) == 150.5
    assert materials.duration_of(tasks[:2]) is None
