"""`fredica pipeline list` / `task list` fit an 80-column terminal (a real node process): the
whole file name up to 30 characters, headers never cut, `--wide` and `--json` for scripts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ServedNode

pytestmark = pytest.mark.slow

NAMES = ["Ask Not Speech.flac", "2026-12-06 team meeting.m4a", "Quarterly_review_final_v2.mp4"]
HEADERS = {"id", "title", "status", "done", "age", "template"}


def _cli(served: ServedNode, columns: int, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "fredica", *args, "--node", served.url],
        capture_output=True,
        text=True,
        env=served.env() | {"COLUMNS": str(columns)},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_pipeline_list_fits_80_columns(served: ServedNode, tmp_path: Path) -> None:
    served.start()
    assert max(len(n) for n in NAMES) <= 30 and len(NAMES[2]) >= 29
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [{"ref": "t", "type": "TEST_SLEEP",
                                            "payload": {"seconds": 30}}]}))  # fmt: skip
    ids = [
        served.cli("pipeline", "create", "custom", "--tasks", str(tasks), "--material-id",
                   f"m{i}", "--param", f"source=/media/shows/{name}").stdout.split()[1]
        for i, name in enumerate(NAMES)
    ]  # fmt: skip

    listing = _cli(served, 80, "pipeline", "list")
    lines = listing.rstrip("\n").splitlines()
    assert all(len(line) <= 80 for line in lines), listing
    header = lines[0].split()
    assert set(header) <= HEADERS and {"id", "title", "status"} <= set(header), header
    assert "…" not in lines[0]
    for pipeline_id, name in zip(ids, NAMES, strict=True):
        row = next(line for line in lines if line.startswith(pipeline_id[:8]))
        assert name in row, f"{name!r} not whole in {row!r}"
    assert len(lines) == 2 + len(NAMES), "one line per pipeline"

    wide = _cli(served, 80, "pipeline", "list", "--wide")
    assert all(p in wide for p in ids) and "owner" in wide.splitlines()[0]
    answer = json.loads(_cli(served, 80, "pipeline", "list", "--json"))
    assert {p["id"]: p["title"] for p in answer["pipelines"]} == dict(zip(ids, NAMES, strict=True))
    assert answer["next_cursor"] is None

    tasks_out = _cli(served, 80, "task", "list")
    lines = tasks_out.rstrip("\n").splitlines()
    assert all(len(line) <= 80 for line in lines) and lines[0].split()[:3] == [
        "id",
        "type",
        "status",
    ]
    assert sum("TEST_SLEEP" in line for line in lines) == 3
    listed = json.loads(_cli(served, 80, "task", "list", "--json"))["tasks"]
    assert sorted(t["pipeline_id"] for t in listed) == sorted(ids)
    nodes = json.loads(_cli(served, 80, "node", "list", "--json"))
    assert nodes["self"] in _cli(served, 80, "node", "list")
