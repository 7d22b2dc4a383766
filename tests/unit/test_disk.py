"""The disk gate (seed 001 §7.7): which types need room, the estimate rules, and the decisions
of the gate with a fake disk and a manual monotonic clock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fredica.capabilities import catalog
from fredica.domain import models
from fredica.node import disk
from fredica.node.disk import GIB, MIB, DiskGate, estimate_output_bytes


def test_download_and_ffmpeg_types_need_disk_and_the_others_do_not() -> None:
    types = {"DOWNLOAD_VIDEO", "DOWNLOAD_SUBTITLE", "EXTRACT_AUDIO", "SPLIT_AUDIO", "TRANSCODE"}
    others = {"TRANSCRIBE_CHUNK", "MERGE_TRANSCRIPTION", "AI_ANALYZE", "TEST_SLEEP", "MY_CUT"}
    plugins = {"MY_CUT": None, "MY_FFMPEG": catalog.CapabilityFunction.FFMPEG}
    found = disk.disk_task_types(types | others | {"MY_FFMPEG"}, plugins)
    assert found == types | {"MY_FFMPEG"}


@pytest.mark.parametrize(
    ("task_type", "payload", "input_bytes", "expected", "rule"),
    [
        # the seed's field wins over everything
        ("DOWNLOAD_VIDEO", {"estimatedOutputBytes": 12345, "duration_sec": 60}, 9, 12345,
         "payload"),
        ("TRANSCODE", {"estimated_output_bytes": 0}, None, 0, "payload"),
        # an hour of 16 kHz mono PCM: exactly what EXTRACT_AUDIO writes
        ("EXTRACT_AUDIO", {"duration_sec": 3600}, 10**12, 115_200_000, "Hz PCM"),
        ("EXTRACT_AUDIO", {"duration_sec": 10, "sample_rate": 48000, "channels": 2}, None,
         1_920_000, "48000 Hz"),
        # chunks are the audio again with their overlaps
        ("SPLIT_AUDIO", {"duration_sec": 100}, None, 3_520_000, "Hz PCM"),
        # duration x bitrate (seed: "video duration x bitrate")
        ("DOWNLOAD_VIDEO", {"duration_sec": 600, "bitrate_kbps": 4000}, None, 300_000_000,
         "4000 kbit/s"),
        ("TRANSCODE", {"duration_sec": 8, "bitrate": 1_000_000}, None, 1_000_000, "1000 kbit/s"),
        ("DOWNLOAD_VIDEO", {"duration_sec": 100}, None, 100_000_000, "8000 kbit/s"),
        # the local input's size times the type's ratio
        ("TRANSCODE", {}, 5_000, 5_000, "input of 5000 bytes"),
        ("EXTRACT_FRAMES", {}, 5_000, 10_000, "× 2"),
        # else the type's default
        ("DOWNLOAD_VIDEO", {}, None, 2 * GIB, "default"),
        ("GENERATE_THUMBNAIL", {}, 5_000, 64 * MIB, "default"),
        ("MY_PLUGIN_TYPE", {}, None, GIB, "default"),
        # unusable hints are ignored, never trusted
        ("DOWNLOAD_VIDEO", {"estimatedOutputBytes": -5, "duration_sec": "long"}, None, 2 * GIB,
         "default"),
        ("DOWNLOAD_VIDEO", {"estimatedOutputBytes": True, "duration_sec": 0}, None, 2 * GIB,
         "default"),
    ],
)  # fmt: skip
def test_estimate_rules(
    task_type: str, payload: dict[str, object], input_bytes: int | None, expected: int, rule: str
) -> None:
    estimate = estimate_output_bytes(task_type, payload, input_bytes)
    assert estimate.bytes == expected
    assert rule in estimate.rule


class FakeDisk:
    def __init__(self, free: int, total: int = 1000 * GIB) -> None:
        self.free = free
        self.total = total
        self.calls = 0

    def __call__(self, path: Path) -> tuple[int, int]:
        self.calls += 1
        return self.free, self.total


class Monotonic:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make_gate(
    tmp_path: Path, free: int, min_free_gb: float = 20
) -> tuple[DiskGate, FakeDisk, Monotonic]:
    fake, clock = FakeDisk(free), Monotonic()
    types = frozenset({"DOWNLOAD_VIDEO", "EXTRACT_AUDIO"})
    gate = DiskGate(
        tmp_path, "node-a", int(min_free_gb * GIB), types, usage=fake, monotonic=clock, hold_sec=60
    )
    return gate, fake, clock


def task(task_type: str, payload: dict[str, object]) -> models.Task:
    fields = {name: None for name in models.Task.__slots__}
    base = models.Task(**fields)  # type: ignore[arg-type]
    return replace(base, id="t1", type=task_type, payload=payload, file_node_id=None)


def test_types_are_held_while_their_default_estimate_does_not_fit(tmp_path: Path) -> None:
    # 21 GiB free, 20 kept free: a download (2 GiB by default) does not fit, audio (256 MiB) does
    gate, fake, clock = make_gate(tmp_path, 21 * GIB)
    everything = frozenset({"DOWNLOAD_VIDEO", "EXTRACT_AUDIO", "TRANSCRIBE_CHUNK"})
    held = gate.held(everything)
    assert set(held) == {"DOWNLOAD_VIDEO"}
    assert (
        "disk_min_free_gb" in held["DOWNLOAD_VIDEO"] and "21.0 GiB free" in held["DOWNLOAD_VIDEO"]
    )
    # room again (measured anew once the reuse window passed)
    fake.free = 30 * GIB
    assert gate.held(everything) == {"DOWNLOAD_VIDEO": held["DOWNLOAD_VIDEO"]}  # still cached
    clock.t += disk.USAGE_TTL
    assert gate.held_types(everything) == frozenset()
    # below the minimum itself, every disk type waits; the others never do
    fake.free = 19 * GIB
    clock.t += disk.USAGE_TTL
    assert gate.held_types(everything) == {"DOWNLOAD_VIDEO", "EXTRACT_AUDIO"}


def test_a_claimed_task_that_does_not_fit_holds_its_type_until_space_or_time(
    tmp_path: Path,
) -> None:
    gate, fake, clock = make_gate(tmp_path, 100 * GIB)
    assert gate.shortfall(task("DOWNLOAD_VIDEO", {"estimatedOutputBytes": 50 * GIB})) is None
    assert gate.shortfall(task("TRANSCRIBE_CHUNK", {"estimatedOutputBytes": 10**15})) is None
    reason = gate.shortfall(task("DOWNLOAD_VIDEO", {"estimatedOutputBytes": 90 * GIB}))
    assert reason is not None and "90.0 GiB (payload.estimatedOutputBytes)" in reason
    assert gate.released == 1
    # the type is held now although its default estimate would fit; the others are not
    assert gate.held(frozenset({"DOWNLOAD_VIDEO", "EXTRACT_AUDIO"})) == {"DOWNLOAD_VIDEO": reason}
    # freeing some space is not enough; freeing what the task needs is
    fake.free = 105 * GIB
    clock.t += 1
    assert gate.held_types(frozenset({"DOWNLOAD_VIDEO"})) == {"DOWNLOAD_VIDEO"}
    fake.free = 111 * GIB
    clock.t += 1
    assert gate.held_types(frozenset({"DOWNLOAD_VIDEO"})) == frozenset()
    # or the hold runs out, so smaller tasks of the type may fit
    fake.free = 100 * GIB
    assert gate.shortfall(task("DOWNLOAD_VIDEO", {"estimatedOutputBytes": 90 * GIB})) is not None
    clock.t += 59
    assert gate.held_types(frozenset({"DOWNLOAD_VIDEO"})) == {"DOWNLOAD_VIDEO"}
    clock.t += 2
    assert gate.held_types(frozenset({"DOWNLOAD_VIDEO"})) == frozenset()


def test_the_per_task_check_measures_again_and_reads_the_local_input(tmp_path: Path) -> None:
    gate, fake, clock = make_gate(tmp_path, 20 * GIB + 10_000, min_free_gb=20)
    video = tmp_path / "audio" / "m" / "v.mp4"
    video.parent.mkdir(parents=True)
    video.write_bytes(b"x" * 6000)
    # relative to the data dir, as payloads name it: 6000 bytes of PCM fit in 10000
    assert gate.shortfall(task("EXTRACT_AUDIO", {"video_path": "audio/m/v.mp4"})) is None
    calls = fake.calls
    video.write_bytes(b"x" * 20_000)
    reason = gate.shortfall(task("EXTRACT_AUDIO", {"video_path": str(video)}))
    assert fake.calls == calls + 1  # not the cached measure
    assert reason is not None and "input of 20000 bytes" in reason


def test_state_says_what_is_held_and_why(tmp_path: Path) -> None:
    gate, _, _ = make_gate(tmp_path, 5 * GIB)
    state = gate.state()
    assert state["low"] is True
    assert state["free_bytes"] == 5 * GIB and state["min_free_bytes"] == 20 * GIB
    assert set(state["held_types"]) == {"DOWNLOAD_VIDEO", "EXTRACT_AUDIO"}
    assert state["disk_types"] == ["DOWNLOAD_VIDEO", "EXTRACT_AUDIO"]


def test_state_never_counts_a_hand_back_without_showing_its_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand-back runs on a worker thread while `GET /api/v1/status` reads the state: the
    count it shows is never ahead of the holds it shows."""
    gate, _, _ = make_gate(tmp_path, 100 * GIB)
    held = gate.held

    def held_then_a_hand_back(types: list[str]) -> dict[str, str]:
        out = held(types)
        # a hand-back lands on another thread just after the holds were read
        assert gate.shortfall(task("DOWNLOAD_VIDEO", {"estimatedOutputBytes": 90 * GIB}))
        return out

    monkeypatch.setattr(gate, "held", held_then_a_hand_back)
    state = gate.state()
    assert state["handed_back"] == 0 and state["held_types"] == {}
    # the next read shows both
    monkeypatch.setattr(gate, "held", held)
    state = gate.state()
    assert state["handed_back"] == 1 and set(state["held_types"]) == {"DOWNLOAD_VIDEO"}
