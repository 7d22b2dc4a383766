"""What the web player offers from a pipeline's tasks (`web.player.player_view`), decided
against a node stand-in with the real data-dir rules: only completed tasks, files inside the
data dir (not private ones, not through a link leading out), the pipeline's own local source,
and outputs of tasks that ran on another node named by that node instead."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from fredica.cluster import files
from fredica.domain import models
from fredica.web import player

SRT = "1\n00:00:01,000 --> 00:00:02,500\nHello there\n"


def _task(
    task_type: str,
    *,
    result: dict[str, Any] | None = None,
    payload: dict[str, Any] | None = None,
    status: models.TaskStatus = models.TaskStatus.COMPLETED,
    by: str = "me",
) -> models.Task:
    now = time.time()
    values: dict[str, Any] = {f.name: None for f in dataclasses.fields(models.Task)}
    values.update(
        id=f"{task_type.lower()}-{by}-{len(str(result))}", type=task_type, status=status,
        priority=5, depends_on=[], payload=payload or {}, result=result,
        cache_policy=models.CachePolicy.NONE, cloud_preference=models.CloudPreference.AUTO,
        excluded_nodes=[], retry_count=0, max_retries=0, created_by="me", owner_id="me",
        owner_epoch=0, progress=100, is_paused=False, is_pausable=True, attempt=1,
        cancel_requested=False, change_seq=1, created_at=now, updated_at=now, pipeline_id="p1",
        claimed_by=by,
    )  # fmt: skip
    return models.Task(**values)


@dataclasses.dataclass
class FakeNode:
    """The node service as the player uses it, over a real data dir."""

    data_dir: Path
    source: str
    tasks: list[models.Task]
    node_id: str = "me"

    async def pipeline_with_tasks(self, pipeline_id: str) -> tuple[Any, list[models.Task]]:
        pipeline = type("P", (), {"params": {"source": self.source}})()
        return pipeline, self.tasks

    async def local_file(self, path: str) -> Path:
        return await files.LocalFiles(self.data_dir).find(path)


def layout(tmp_path: Path) -> tuple[Path, Path]:
    data, mine = tmp_path / "data", tmp_path / "mine"
    for d in (data / "audio/m", data / "results/merge", data / "results/tr", mine):
        d.mkdir(parents=True, exist_ok=True)
    (data / "audio/m/audio.wav").write_bytes(b"RIFF")
    (data / "results/merge/transcript.srt").write_text(SRT)
    (data / "results/tr/de.srt").write_text(SRT)
    (data / "top.wav").write_bytes(b"RIFF")  # the data dir's own level is private
    (data / "run").mkdir()
    (data / "run/ledger.wav").write_bytes(b"RIFF")
    (mine / "talk.mp4").write_bytes(b"\x00")
    (mine / "other.mp4").write_bytes(b"\x00")
    (data / "results/tr/link.mp4").symlink_to(mine / "other.mp4")
    return data, mine


async def test_what_is_offered_and_what_is_not(tmp_path: Path) -> None:
    data, mine = layout(tmp_path)
    tasks = [
        _task("EXTRACT_AUDIO", payload={"video_path": str(mine / "talk.mp4")},
              result={"audio_path": "audio/m/audio.wav"}),
        _task("MERGE_TRANSCRIPTION", result={"files": {"srt": "results/merge/transcript.srt"}}),
        # ran on another node: its files are there
        _task("BURN_SUBTITLE", result={"video_path": "results/b/burned.mp4"}, by="other"),
        _task("TRANSLATE_TEXT", result={"srt_path": "results/tr/de.srt"}, by="other"),
        # not offered: pending, a private file, a link out of the data dir, a file elsewhere
        _task("GENERATE_TTS", result={"audio_path": "audio/m/audio.wav"},
              status=models.TaskStatus.PENDING),
        _task("ENHANCE_AUDIO", result={"audio_path": "top.wav"}),
        _task("ENHANCE_AUDIO", result={"audio_path": "run/ledger.wav"}),
        _task("TRANSCODE", result={"output_path": "results/tr/link.mp4"}),
        _task("DOWNLOAD_VIDEO", result={"video_path": str(mine / "other.mp4")}),
    ]  # fmt: skip
    node = FakeNode(data, str(mine / "talk.mp4"), tasks)
    view = await player.player_view(node, "p1")  # type: ignore[arg-type]
    assert [(m["role"], m["kind"], m["name"]) for m in view["media"]] == [
        ("source", "video", "talk.mp4"),  # the pipeline's own local source
        ("source_audio", "audio", "audio.wav"),
    ]
    assert view["media"][0]["url"] == f"/files/player/p1/{tasks[0].id}/media/source"
    assert view["elsewhere"] == ["other"]
    (track,) = view["tracks"]
    assert track["role"] == "original" and track["cues"] == [
        {"start": 1.0, "end": 2.5, "text": "Hello there"}
    ]
    # the same input video is not offered when it is not the pipeline's source
    node.source = str(mine / "other.mp4")
    view = await player.player_view(node, "p1")  # type: ignore[arg-type]
    assert [m["role"] for m in view["media"]] == ["source_audio"]


def test_only_files_of_the_right_kind_are_named() -> None:
    translate = next(s for s in player.TRACKS if s.task_type == "TRANSLATE_TEXT")
    burn = next(s for s in player.MEDIA if s.task_type == "BURN_SUBTITLE")
    subs, media = player.SUBTITLE_SUFFIXES, player.PLAYABLE
    assert player.named_file(_task("X", result={"srt_path": "r/de.SRT"}), translate, subs)
    assert player.named_file(_task("X", result={"srt_path": "r/de.txt"}), translate, subs) is None
    assert player.named_file(_task("X", result={"video_path": "r/v.mkv"}), burn, media)
    assert player.named_file(_task("X", result={"video_path": "r/v.srt"}), burn, media) is None
    assert player.named_file(_task("X", result={}), burn, media) is None
    assert player.media_kind("a/b.webm") == "video" and player.media_kind("a/b.opus") == "audio"
