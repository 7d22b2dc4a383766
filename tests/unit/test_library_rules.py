"""Watch folders: when a file is taken (settle) and what it is (identity), with a ManualClock."""

from __future__ import annotations

from fredica.domain import library as rules
from fredica.domain.clock import ManualClock
from fredica.domain.library import Action, FileStatus, LibraryFile, Verdict

SHA_A = "a" * 64
SHA_B = "b" * 64


def record(
    path: str = "x.wav",
    size: int = 10,
    mtime: float = 1.0,
    sha: str | None = SHA_A,
    status: FileStatus = FileStatus.QUEUED,
    pipeline_id: str | None = "p1",
) -> LibraryFile:
    return LibraryFile("f1", "lib", path, size, mtime, sha, status, pipeline_id, "", 0.0, 0.0)


def test_a_file_growing_is_never_stable_and_is_taken_settle_after_its_last_change() -> None:
    # Given a 2 s settle time and a file written over 5 s, observed every 0.5 s
    clock = ManualClock(1000.0)
    tracker = rules.SettleTracker(settle_sec=2.0)
    size = 0
    for _ in range(10):
        size += 100
        assert not tracker.observe("x.wav", size, clock.now(), clock.now())
        clock.advance(0.5)
    done_at = clock.now() - 0.5  # the last write
    # When the writes stop, it is not stable before the settle time has passed
    while clock.now() - done_at < 2.0:
        assert not tracker.observe("x.wav", size, done_at, clock.now())
        clock.advance(0.5)
    # Then it is stable, and still is on the next look
    assert tracker.observe("x.wav", size, done_at, clock.now())
    assert tracker.observe("x.wav", size, done_at, clock.now() + 1)


def test_a_changed_mtime_alone_restarts_the_settle_time() -> None:
    clock = ManualClock(0.0)
    tracker = rules.SettleTracker(settle_sec=1.0)
    assert not tracker.observe("x", 5, 1.0, clock.now())
    clock.advance(0.9)
    assert not tracker.observe("x", 5, 2.0, clock.now())  # touched: same size, new mtime
    clock.advance(0.9)
    assert not tracker.observe("x", 5, 2.0, clock.now())
    clock.advance(0.2)
    assert tracker.observe("x", 5, 2.0, clock.now())


def test_settle_zero_takes_a_file_at_first_sight_and_next_due_counts_down() -> None:
    assert rules.SettleTracker(settle_sec=0).observe("x", 1, 1.0, 0.0)
    tracker = rules.SettleTracker(settle_sec=3.0)
    assert tracker.next_due(0.0) is None
    tracker.observe("x", 1, 1.0, 10.0)
    assert tracker.next_due(11.0) == 2.0
    tracker.keep_only(set())
    assert tracker.settling() == {}


def test_a_known_file_with_the_same_size_and_mtime_is_left_alone() -> None:
    known = record()
    assert rules.action_for(known, 10, 1.0) is Action.NOTHING
    assert rules.action_for(known, 11, 1.0) is Action.SETTLE
    assert rules.action_for(known, 10, 2.0) is Action.SETTLE
    assert rules.action_for(None, 10, 1.0) is Action.SETTLE
    assert rules.action_for(record(status=FileStatus.GONE), 10, 1.0) is Action.SETTLE
    # an error waits for a change (or "process again"), it is not retried every scan
    assert rules.action_for(record(status=FileStatus.ERROR), 10, 1.0) is Action.NOTHING


def test_identity_is_the_content() -> None:
    # only the mtime changed, same bytes: the same pipeline
    assert rules.verdict(record(), SHA_A, None) is Verdict.SAME
    # new bytes at a known path: a new pipeline
    assert rules.verdict(record(), SHA_B, None) is Verdict.CHANGED
    # a file that left another path, seen here: moved, no new pipeline
    gone = record(path="old.wav", status=FileStatus.GONE)
    assert rules.verdict(None, SHA_A, gone) is Verdict.MOVED
    assert rules.verdict(None, SHA_A, None) is Verdict.NEW
    # the material id is derived from the hash alone (the same on every node)
    assert rules.material_id(SHA_A) == "lib-" + "a" * 32
    assert rules.material_id(SHA_A) != rules.material_id(SHA_B)


def test_include_and_exclude_match_the_path_or_the_name() -> None:
    assert rules.matches("a/b/film.mkv", ["*.mkv"], [])
    assert not rules.matches("a/b/film.mkv.part", ["*.mkv"], [])
    assert not rules.matches("a/.film.mkv", ["*.mkv"], [".*"])
    assert rules.matches("tv/show.mp4", ["tv/*"], [])
    assert not rules.matches("films/show.mp4", ["tv/*"], [])
    assert not rules.matches("x.mkv", ["*"], ["*.mkv"])


def test_history_keeps_the_newest_entries() -> None:
    history: tuple[dict[str, object], ...] = ()
    for i in range(rules.HISTORY_LIMIT + 5):
        history = rules.with_event(history, float(i), "touched", pipeline_id=None)
    assert len(history) == rules.HISTORY_LIMIT
    assert history[-1] == {"at": float(rules.HISTORY_LIMIT + 4), "event": "touched"}


def test_the_lowest_reached_node_that_has_the_library_watches_it() -> None:
    peer = rules.PeerLibraries
    # alone: this node
    assert rules.elect_watcher("node-m", "films", []) == "node-m"
    # a reached peer with a lower id and the same library watches it; one without it does not
    assert rules.elect_watcher("node-m", "films", [peer("node-a", True, False, ("films",))]) == (
        "node-a"
    )
    assert rules.elect_watcher("node-m", "films", [peer("node-a", True, False, ("tv",))]) == (
        "node-m"
    )
    # a peer not reached yet (a seed that has not answered): undecided, nothing is taken
    assert rules.elect_watcher("node-m", "films", [peer(None, False, False)]) is None
    assert (
        rules.elect_watcher("node-m", "films", [peer("node-a", False, False, ("films",))]) is None
    )
    # a peer given up as offline does not count: this node takes over
    assert (
        rules.elect_watcher("node-m", "films", [peer("node-a", False, True, ("films",))])
        == "node-m"
    )
    # every node computes the same answer from its own view
    views = {
        "node-b": [peer("node-c", True, False, ("films",)), peer("node-a", True, False, ())],
        "node-c": [peer("node-b", True, False, ("films",)), peer("node-a", True, False, ())],
    }
    assert {me: rules.elect_watcher(me, "films", v) for me, v in views.items()} == {
        "node-b": "node-b",
        "node-c": "node-b",
    }
