"""The clean-up decisions (seed 001 §7.7), pure: a media pipeline's intermediate files through
its life, shared materials, retention with a manual clock, the outbox, peer copies."""

from __future__ import annotations

from fredica.domain.clock import ManualClock
from fredica.domain.models import CachePolicy, PipelineStatus, TaskStatus
from fredica.node import cleanup
from fredica.node.cleanup import DAY, Entry, Facts, Kind, PipelineFacts, Policy, TaskFacts

S, P = TaskStatus, PipelineStatus
NODE = "node-a"
DATA = "/srv/fredica"


def media(
    status: PipelineStatus,
    download: TaskStatus = S.COMPLETED,
    extract: TaskStatus = S.COMPLETED,
    split: TaskStatus = S.COMPLETED,
    detect: TaskStatus = S.COMPLETED,
    chunks: tuple[TaskStatus, ...] = (S.COMPLETED, S.COMPLETED),
    ended_at: float | None = None,
    pid: str = "p1",
    download_policy: CachePolicy = CachePolicy.CHECK_EXISTING,
) -> PipelineFacts:
    """A transcribe_long pipeline of material `m` as the sweeper sees it."""

    def t(tid: str, ttype: str, status: TaskStatus, payload: dict[str, object]) -> TaskFacts:
        refs = frozenset(cleanup.paths_in(payload, DATA))
        outs = frozenset(
            cleanup.paths_in([payload.get("output_path"), payload.get("output_dir")], DATA)
        )
        policy = download_policy if ttype == "DOWNLOAD_VIDEO" else CachePolicy.NONE
        return TaskFacts(tid, ttype, status, refs, outs, policy, 1, NODE, not status.is_terminal)

    tasks = [
        t(f"{pid}-dl", "DOWNLOAD_VIDEO", download, {"output_dir": "downloads/m"}),
        t(f"{pid}-ex", "EXTRACT_AUDIO", extract,
          {"video_path": f"{DATA}/downloads/m/video.mp4", "output_path": "audio/m/audio.wav"}),
        t(f"{pid}-de", "DETECT_LANGUAGE", detect, {"audio_path": "audio/m/audio.wav"}),
        t(f"{pid}-sp", "SPLIT_AUDIO", split,
          {"audio_path": "audio/m/audio.wav", "output_dir": "chunks/m/5s"}),
    ]  # fmt: skip
    for i, status_i in enumerate(chunks):
        path = f"chunks/m/5s/chunk_{i:03d}.wav"
        tasks.append(t(f"{pid}-c{i}", "TRANSCRIBE_CHUNK", status_i, {"audio_path": path}))
    return PipelineFacts(pid, "m", status, ended_at, tuple(tasks))


INTERMEDIATE = [
    Entry("downloads/m", Kind.INTERMEDIATE, "m", 0.0),
    Entry("audio/m", Kind.INTERMEDIATE, "m", 0.0),
    Entry("chunks/m", Kind.INTERMEDIATE, "m", 0.0),
]


def decide(
    facts: Facts, entries: list[Entry] = INTERMEDIATE, policy: Policy | None = None, now: float = 0
) -> dict[str, cleanup.Decision]:
    return {d.entry.rel: d for d in cleanup.plan(entries, facts, policy or Policy(), now)}


def removed(decisions: dict[str, cleanup.Decision]) -> set[str]:
    return {rel for rel, d in decisions.items() if d.remove}


def test_paths_in_payloads_and_results() -> None:
    value = {
        "a": f"{DATA}/chunks/m/5s/c.wav",  # absolute under the data dir
        "b": ["audio/m/audio.wav", {"c": "results/t1/transcript.json"}],
        "d": "/home/me/video.mp4",  # the user's own file: never ours to delete
        "e": "chunks/../../etc/passwd",
        "f": "some words in a transcript",
        "g": f"file://{DATA}/downloads/m/video.mp4",
        "h": "logs/tasks/t1/1.log",  # not a swept path in payloads
    }
    assert cleanup.paths_in(value, DATA) == {
        "chunks/m/5s/c.wav",
        "audio/m/audio.wav",
        "results/t1/transcript.json",
        "downloads/m/video.mp4",
    }


def test_a_media_pipeline_frees_its_intermediate_files_as_the_seed_says() -> None:
    # Given a running pipeline whose chunks are not all transcribed
    running = media(P.RUNNING, detect=S.RUNNING, chunks=(S.COMPLETED, S.PENDING))
    got = decide(Facts((running,), node_id=NODE))
    # Then nothing goes: the download until the pipeline ends, the audio (DETECT_LANGUAGE
    # reads it) and the chunks (a chunk is still pending)
    assert removed(got) == set()
    assert "has not ended" in got["downloads/m"].reason
    assert "p1-de (DETECT_LANGUAGE, running)" in got["audio/m"].reason
    assert "p1-c1 (TRANSCRIBE_CHUNK, pending)" in got["chunks/m"].reason
    # When every chunk is transcribed and the detection is done, the pipeline still runs
    # (merge, analysis): the chunks and the audio go, the download stays
    later = media(P.RUNNING)
    got = decide(Facts((later,), node_id=NODE))
    assert removed(got) == {"audio/m", "chunks/m"}
    assert "no unfinished task of pipeline p1" in got["chunks/m"].reason
    # and the log of the task that wrote each (on this node) hears of it
    assert got["chunks/m"].log_to == ("p1-sp", 1)
    assert got["audio/m"].log_to == ("p1-ex", 1)
    # When the pipeline completes, the download goes too
    got = decide(Facts((media(P.COMPLETED, ended_at=0),), node_id=NODE))
    assert removed(got) == {"downloads/m", "audio/m", "chunks/m"}
    assert "ended: p1 completed" in got["downloads/m"].reason
    assert got["downloads/m"].log_to == ("p1-dl", 1)


def test_a_cancelled_pipeline_cleans_up_and_a_failed_one_keeps_its_inputs_for_a_retry() -> None:
    clock = ManualClock(start=100 * DAY)
    cancelled = media(P.CANCELLED, chunks=(S.COMPLETED, S.CANCELLED), ended_at=clock.now())
    assert removed(decide(Facts((cancelled,)), now=clock.now())) == {
        "downloads/m",
        "audio/m",
        "chunks/m",
    }
    # a chunk failed for good: the pipeline ended partial_failed; a retry of that chunk needs
    # its chunk file (and the download stays, as for an active pipeline)
    failed = media(P.PARTIAL_FAILED, chunks=(S.COMPLETED, S.FAILED), ended_at=clock.now())
    policy = Policy(retain_sec=7 * DAY)
    got = decide(Facts((failed,)), policy=policy, now=clock.now())
    assert removed(got) == {"audio/m"}
    assert "may be retried within 7 day(s)" in got["downloads/m"].reason
    assert "p1-c1 (TRANSCRIBE_CHUNK, failed)" in got["chunks/m"].reason
    # after the retention nothing holds them
    clock.advance(7 * DAY + 1)
    assert removed(decide(Facts((failed,)), policy=policy, now=clock.now())) == {
        "downloads/m",
        "audio/m",
        "chunks/m",
    }


def test_what_keeps_intermediate_files() -> None:
    done = media(P.COMPLETED, ended_at=0)
    # configured to keep them
    got = decide(Facts((done,)), policy=Policy(keep_intermediate=True))
    assert removed(got) == set()
    assert got["chunks/m"].reason == "storage.intermediate_cleanup is never"
    # a task running here names it (e.g. a pipeline whose replica has not arrived)
    got = decide(Facts((done,), busy=frozenset({"audio/m/audio.wav"})))
    assert removed(got) == {"downloads/m", "chunks/m"}
    assert got["audio/m"].reason == cleanup.BUSY
    # another pipeline of the same material will reuse them (its tasks are pending:
    # CHECK_EXISTING finds the files) while the first one completed
    second = media(
        P.RUNNING, download=S.PENDING, extract=S.PENDING, split=S.PENDING, detect=S.PENDING,
        chunks=(), pid="p2",
    )  # fmt: skip
    got = decide(Facts((done, second)))
    assert removed(got) == set()
    assert "p2-ex (EXTRACT_AUDIO, pending)" in got["audio/m"].reason
    assert "p2-sp (SPLIT_AUDIO, pending)" in got["chunks/m"].reason
    # PREFER_ORIGINAL keeps a completed pipeline's download for the retention
    prefer = media(P.COMPLETED, ended_at=0, download_policy=CachePolicy.PREFER_ORIGINAL)
    got = decide(Facts((prefer,)), now=DAY)
    assert "PREFER_ORIGINAL" in got["downloads/m"].reason and not got["downloads/m"].remove
    assert got["downloads/m"].remove is False
    assert decide(Facts((prefer,)), now=8 * DAY)["downloads/m"].remove is True


def test_files_of_a_material_no_pipeline_here_knows_stay_for_the_retention() -> None:
    entry = Entry("frames/x", Kind.INTERMEDIATE, "x", mtime=10 * DAY)
    got = decide(Facts(), [entry], now=12 * DAY)
    assert not got["frames/x"].remove and "(yet)" in got["frames/x"].reason
    got = decide(Facts(), [entry], now=17.5 * DAY)
    assert got["frames/x"].remove and "untouched 7.5 day(s)" in got["frames/x"].reason


def test_results_stay_for_the_retention_and_while_the_owner_has_not_acknowledged_them() -> None:
    clock = ManualClock(start=50 * DAY)
    old = clock.now() - 8 * DAY
    entries = [
        Entry("results/t-new", Kind.TASK_RESULT, "t-new", clock.now() - DAY),
        Entry("results/t-old", Kind.TASK_RESULT, "t-old", old),
        Entry("logs/tasks/t-old", Kind.TASK_LOG, "t-old", old),
        Entry("results/t-outbox", Kind.TASK_RESULT, "t-outbox", old),
        Entry("results/t-live", Kind.TASK_RESULT, "t-live", old),
        Entry("results/t-gone", Kind.TASK_RESULT, "t-gone", old),
        Entry("transcoded/m", Kind.MATERIAL_RESULT, "m", old),
        Entry("fingerprints/n.json", Kind.MATERIAL_RESULT, "n", old),
    ]
    done = TaskFacts("t-old", "MERGE_TRANSCRIPTION", S.COMPLETED)
    facts = Facts(
        pipelines=(media(P.RUNNING, pid="p9"),),  # material m: its transcodes stay
        tasks={
            "t-old": done,
            "t-outbox": TaskFacts("t-outbox", "TRANSCRIBE_CHUNK", S.COMPLETED),
            "t-live": TaskFacts("t-live", "TRANSCRIBE_CHUNK", S.COMPLETED, pipeline_live=True),
            "t-gone": None,
        },
        outbox=frozenset({"t-outbox"}),
    )
    policy = Policy(retain_sec=7 * DAY)
    got = decide(facts, entries, policy, clock.now())
    assert removed(got) == {
        "results/t-old",
        "logs/tasks/t-old",
        "results/t-gone",
        "fingerprints/n.json",
    }
    assert "beyond results_retain_days (7 day(s))" in got["results/t-old"].reason
    assert got["results/t-outbox"].reason == "its result waits in the outbox for its owner"
    assert "has not ended" in got["results/t-live"].reason
    assert "no task t-gone is known here" in got["results/t-gone"].reason
    assert "within the retention" in got["results/t-new"].reason
    assert "p9 of this material has not ended" in got["transcoded/m"].reason
    # the outbox wins even after the retention, and retain 0 keeps everything
    clock.advance(365 * DAY)
    assert not decide(facts, entries, policy, clock.now())["results/t-outbox"].remove
    assert removed(decide(facts, entries, Policy(retain_sec=0), clock.now())) == set()


def test_peer_copies_go_after_use_and_least_recently_used_beyond_the_limit() -> None:
    def copy(source: str, used: float, size: int = 100) -> Entry:
        return Entry(
            f"cache/peers/node-b/{source}", Kind.PEER_COPY, source, used, used, size, "node-b"
        )

    entries = [
        copy("chunks/m/5s/chunk_000.wav", used=1),  # its chunk task completed
        copy("chunks/m/5s/chunk_001.wav", used=5),  # its chunk task is pending (a retry)
        copy("audio/m/audio.wav", used=2),  # DETECT_LANGUAGE still pending
        copy("results/t7/x.json", used=3),  # a task running here reads it
        copy("chunks/z/5s/chunk_000.wav", used=4),  # nobody known needs it
    ]
    pipeline = media(P.RUNNING, detect=S.PENDING, chunks=(S.COMPLETED, S.PENDING))
    facts = Facts((pipeline,), busy=frozenset({"results/t7"}))
    # just used: everything stays a while (the test of a fetch reads its copy right after)
    policy = Policy(peer_cache_max_bytes=10_000, peer_copy_idle_sec=60)
    assert removed(decide(facts, entries, policy, now=30)) == set()
    # unused for a minute: what no unfinished task reads goes
    got = decide(facts, entries, policy, now=64.5)
    assert removed(got) == {
        "cache/peers/node-b/chunks/m/5s/chunk_000.wav",
        "cache/peers/node-b/chunks/z/5s/chunk_000.wav",
    }
    reason = got["cache/peers/node-b/chunks/z/5s/chunk_000.wav"].reason
    assert "no unfinished task reads it, unused 60 s" in reason
    # over the limit, the least recently used of the wanted copies go; a busy one never
    got = decide(facts, entries, Policy(peer_cache_max_bytes=150, peer_copy_idle_sec=60), now=65)
    assert "cache/peers/node-b/audio/m/audio.wav" in removed(got)
    assert "least recently used" in got["cache/peers/node-b/audio/m/audio.wav"].reason
    assert "cache/peers/node-b/results/t7/x.json" not in removed(got)
    got = decide(facts, entries, Policy(peer_cache_max_bytes=0), now=65)
    assert "cache/peers/node-b/results/t7/x.json" not in removed(got)
    assert "cache/peers/node-b/chunks/m/5s/chunk_001.wav" in removed(got)
