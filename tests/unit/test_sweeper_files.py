"""What the sweeper scans and how it deletes, on a temporary data dir: never outside it, never
through a symbolic link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fredica.node import sweeper
from fredica.node.cleanup import Kind


def write(path: Path, size: int = 10) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def test_scan_finds_what_the_layout_names(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data / "chunks" / "m" / "5s" / "chunk_000.wav")
    write(data / "audio" / "m" / "audio.wav")
    write(data / "downloads" / ".m.part" / "x")  # an output in progress: not an entry
    write(data / "results" / "task-1" / "transcript.json")
    write(data / "results" / "bad name" / "x")  # not a task id
    write(data / "logs" / "tasks" / "task-1" / "1.log")
    write(data / "fingerprints" / "m.json")
    write(data / "cache" / "peers" / "node-b" / "audio" / "m" / "audio.wav", 300)
    write(data / "cache" / "peers" / "node-b" / "chunks" / "m" / ".c.wav.part", 7)
    write(data / "fredica.db")
    write(data / "run" / "ledger")
    light = {(e.rel, e.kind, e.key) for e in sweeper.scan(data, full=False)}
    assert light == {
        ("chunks/m", Kind.INTERMEDIATE, "m"),
        ("audio/m", Kind.INTERMEDIATE, "m"),
        ("cache/peers/node-b/audio/m/audio.wav", Kind.PEER_COPY, "audio/m/audio.wav"),
        ("cache/peers/node-b/chunks/m/.c.wav.part", Kind.PEER_COPY, "chunks/m/c.wav"),
    }
    full = {(e.rel, e.kind, e.key) for e in sweeper.scan(data, full=True)}
    assert full - light == {
        ("results/task-1", Kind.TASK_RESULT, "task-1"),
        ("logs/tasks/task-1", Kind.TASK_LOG, "task-1"),
        ("fingerprints/m.json", Kind.MATERIAL_RESULT, "m"),
    }
    sizes = {e.rel: e.size for e in sweeper.scan(data, full=False) if e.kind is Kind.PEER_COPY}
    assert sizes["cache/peers/node-b/audio/m/audio.wav"] == 300


def test_links_are_never_followed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    outside = tmp_path / "mine"
    precious = write(outside / "precious.mp4")
    # a category that is a link to the user's files is not swept at all
    (data).mkdir()
    os.symlink(outside, data / "downloads")
    # an entry that is a link is not one
    write(data / "audio" / "real" / "audio.wav")
    os.symlink(outside, data / "audio" / "linked")
    entries = {e.rel for e in sweeper.scan(data, full=True)}
    assert entries == {"audio/real"}
    with pytest.raises(sweeper.Refused):
        sweeper.remove(data, "downloads/precious.mp4")
    with pytest.raises(sweeper.Refused):
        sweeper.remove(data, "audio/linked")
    with pytest.raises(sweeper.Refused):
        sweeper.remove(data, "audio/../../mine")
    with pytest.raises(sweeper.Refused):
        sweeper.remove(data, str(outside))
    # a link inside a tree that goes is removed as a link; what it points to stays
    os.symlink(outside, data / "audio" / "real" / "escape")
    freed = sweeper.remove(data, "audio/real")
    assert freed == 10
    assert not (data / "audio" / "real").exists()
    assert precious.read_bytes() == b"x" * 10
    assert sweeper.remove(data, "audio/real") == 0  # already gone
