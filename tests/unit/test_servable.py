"""Which tasks of a new pipeline no known node can ever run (pure: node rows in, verdict out)."""

from __future__ import annotations

from fredica.capabilities import catalog
from fredica.domain.models import CloudPreference, NewTask
from fredica.node import servable
from fredica.store.base import NodeRecord

F = catalog.CapabilityFunction
YOUTUBE = {"url": "https://www.youtube.com/watch?v=abc"}


def record(node_id: str, *functions: F, task_types: list[str] | None = None) -> NodeRecord:
    info: dict[str, object] = {"running": 0}
    if task_types is not None:
        info["task_types"] = task_types
    return NodeRecord(
        node_id,
        "host",
        [{"function": f.value, "backend": "b", "score": 50} for f in functions]
        + [{"function": "SOMETHING_NEWER", "backend": "x"}],  # a later version's function
        "offline",
        2,
        0.0,
        None,
        info,
    )


def check(tasks: list[NewTask], *records: NodeRecord) -> list[servable.Unservable]:
    views = [servable.NodeView.of(r) for r in records]
    return servable.unservable(tasks, views, {"MY_PLUGIN_TYPE": F.OCR, "PLUGIN_ANYWHERE": None})


def test_a_task_is_servable_when_one_node_declares_all_it_needs() -> None:
    ffmpeg_only = record("nas", F.FFMPEG)
    downloader = record("desk", F.DOWNLOAD_YOUTUBE, F.FFMPEG)
    tasks = [NewTask("DOWNLOAD_VIDEO", payload=YOUTUBE), NewTask("EXTRACT_AUDIO")]
    assert check(tasks, ffmpeg_only, downloader) == []
    # the download needs the platform's function and FFMPEG on the same node (seed §2.6)
    split = check(tasks, ffmpeg_only, record("vm", F.DOWNLOAD_YOUTUBE))
    assert split == [servable.Unservable("DOWNLOAD_VIDEO", (F.DOWNLOAD_YOUTUBE, F.FFMPEG), ())]
    # the platform comes from the payload: an HTTP download needs DOWNLOAD_HTTP instead
    http = [NewTask("DOWNLOAD_VIDEO", payload={"url": "https://example.org/a.mp4"})]
    assert [u.missing for u in check(http, downloader)] == [(F.DOWNLOAD_HTTP,)]


def test_what_nobody_declares_is_named_once_per_type() -> None:
    tasks = [NewTask("AI_ANALYZE"), NewTask("AI_ANALYZE"), NewTask("MERGE_TRANSCRIPTION")]
    found = check(tasks, record("nas", F.FFMPEG))
    assert found == [servable.Unservable("AI_ANALYZE", (F.AI_ANALYZE,), (F.AI_ANALYZE,))]
    message = servable.describe(found, lambda f: "capabilities.ai_analyze.enabled is false")
    assert message.startswith("no known node can run this pipeline: AI_ANALYZE needs AI_ANALYZE")
    assert "(on this node AI_ANALYZE: capabilities.ai_analyze.enabled is false)" in message
    # no node at all: nothing can run, not even a merge
    assert [u.task_type for u in check(tasks)] == ["AI_ANALYZE", "MERGE_TRANSCRIPTION"]


def test_reported_task_types_decide_and_plugin_types_are_not_refused_blindly() -> None:
    plugin = [NewTask("MY_PLUGIN_TYPE")]
    # a node that reports its task types without the plugin's: it cannot run it
    found = check(plugin, record("a", F.OCR, task_types=["EXTRACT_AUDIO"]))
    assert found == [servable.Unservable("MY_PLUGIN_TYPE", (F.OCR,), ())]
    assert "no known node has all" in servable.describe(found, lambda f: "")
    # one that reports it does
    assert check(plugin, record("a", F.OCR, task_types=["MY_PLUGIN_TYPE"])) == []
    # a node that does not report its types may have the plugin: not refused
    assert check(plugin, record("b", F.OCR)) == []
    # a type that needs no capability, but that no node reports an executor for
    found = check([NewTask("PLUGIN_ANYWHERE")], record("a", task_types=["EXTRACT_AUDIO"]))
    assert servable.describe(found, lambda f: "").startswith(
        "no known node can run this pipeline: no known node has an executor for PLUGIN_ANYWHERE"
    )
    # a type the table does not know is the template's to refuse, not this check's
    assert check([NewTask("NOBODY_HAS_THIS")], record("a", task_types=[])) == []


def test_a_local_only_or_cloud_only_task_needs_a_node_with_that_kind_of_backend() -> None:
    def node(node_id: str, accelerator: str) -> NodeRecord:
        row = {"function": F.AI_ANALYZE.value, "backend": "b", "accelerator": accelerator}
        return NodeRecord(node_id, "host", [row], "online", 2, 0.0, None, {})

    cloud, local = node("vm", "CloudAPI"), node("nas", "CPU")
    kept_local = [NewTask("AI_ANALYZE", cloud_preference=CloudPreference.LOCAL_ONLY)]
    only_cloud = [NewTask("AI_ANALYZE", cloud_preference=CloudPreference.CLOUD_ONLY)]
    # the function is declared, but only with a cloud backend: a local_only task cannot run
    found = check(kept_local, cloud)
    assert found == [
        servable.Unservable(
            "AI_ANALYZE", (F.AI_ANALYZE,), (), CloudPreference.LOCAL_ONLY, F.AI_ANALYZE
        )
    ]
    message = servable.describe(found, lambda f: "")
    assert "AI_ANALYZE is local_only, and no known node has a local backend for AI_ANALYZE" in (
        message
    )
    assert check(kept_local, cloud, local) == []
    # and the other way round
    assert [u.only for u in check(only_cloud, local)] == [CloudPreference.CLOUD_ONLY]
    assert check(only_cloud, local, cloud) == []
    # auto runs anywhere the function is
    assert check([NewTask("AI_ANALYZE")], cloud) == []
