"""CLI list tables fit the terminal: full IDs when there is room, short ones and fewer columns
when there is not, titles up to 30 characters whole, headers never cut."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from fredica.cli import node_cmd, tables
from fredica.cli.main import PIPELINE_COLUMNS, TASK_COLUMNS

NOW = 1_800_000_000.0


def _pipeline(i: int, title: str, status: str = "running") -> dict[str, object]:
    return {
        "id": f"{i:08x}-1111-4222-8333-444455556666",
        "title": title,
        "status": status,
        "done_tasks": 3,
        "total_tasks": 12,
        "created_at": NOW - 3600 * i,
        "template": "transcribe_media",
        "owner_id": "node-laptop-0001",
        "material_id": f"src-{i:016x}",
        "params": {},
    }


def _render(columns: tuple[tables.Column, ...], rows: list[dict[str, object]], width: int,
            wide: bool = False) -> list[str]:  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, legacy_windows=False)
    tables.show(console, columns, rows, wide=wide)
    return out.getvalue().rstrip("\n").splitlines()


NAMES = ["Ask Not Speech.flac", "x" * 30, "Quarterly review 2026-Q4 (final).mp4"[:30], "a.wav"]


@pytest.mark.parametrize("width", [80, 100])
def test_pipeline_list_at_80_columns_keeps_names_up_to_30_whole(width: int) -> None:
    statuses = ["running", "partial_failed", "completed", "pending"]
    rows = [_pipeline(i, name, s) for i, (name, s) in enumerate(zip(NAMES, statuses, strict=True))]
    lines = _render(PIPELINE_COLUMNS, rows, width)
    assert all(len(line) <= width for line in lines), lines
    header = lines[0].split()
    assert header[:3] == ["id", "title", "status"] and "done" in header and "age" in header
    for row, line in zip(rows, lines[2:], strict=True):
        assert str(row["title"]) in line  # whole, on one line
        assert str(row["id"])[:8] in line
        assert str(row["status"]) in line
    assert len(lines) == 2 + len(rows), "one line per pipeline"


def test_wide_terminal_shows_full_ids_and_wide_shows_every_column() -> None:
    rows = [_pipeline(1, "Ask Not Speech.flac")]
    lines = _render(PIPELINE_COLUMNS, rows, 200)
    assert str(rows[0]["id"]) in lines[2] and "template" in lines[0]
    assert "owner" not in lines[0]  # --wide only
    wide = _render(PIPELINE_COLUMNS, rows, 80, wide=True)
    for header in ("id", "title", "status", "done", "age", "template", "owner", "material",
                   "created"):  # fmt: skip
        assert header in wide[0].split()
    assert str(rows[0]["id"]) in wide[2] and "node-laptop-0001" in wide[2]


def test_narrow_terminal_drops_the_least_important_columns_first() -> None:
    rows = [_pipeline(1, "Ask Not Speech.flac")]
    lines = _render(PIPELINE_COLUMNS, rows, 60)
    header = lines[0].split()
    assert header[:3] == ["id", "title", "status"] and "template" not in header
    assert all(len(line) <= 60 for line in lines)
    assert "Ask Not Speech.flac" in lines[2]


def test_long_titles_end_in_an_ellipsis_on_one_line() -> None:
    rows = [_pipeline(1, "A very long recording name " * 4 + ".mp4")]
    lines = _render(PIPELINE_COLUMNS, rows, 80)
    assert len(lines) == 3 and "…" in lines[2] and len(lines[2]) <= 80


def test_layout_gives_the_flexible_column_what_is_left() -> None:
    cols = [tables.Column("id", lambda r: r["id"]),
            tables.Column("name", lambda r: r["name"], flex=True),
            tables.Column("extra", lambda r: r["extra"], priority=5)]  # fmt: skip
    rows = [{"id": "abc", "name": "n" * 50, "extra": "e" * 10}]
    plan = tables.layout(cols, rows, 60, wide=False)
    assert [c.header for c in plan.columns] == ["id", "name", "extra"]
    assert plan.width == 60 and plan.widths[1] == 60 - 3 - 10 - 2 * tables.GAP
    plan = tables.layout(cols, rows, 40, wide=False)
    assert [c.header for c in plan.columns] == ["id", "name"] and plan.widths[1] == 34


def test_task_and_node_lists_fit_too() -> None:
    task = {"id": "0123abcd-1111-4222-8333-444455556666", "type": "TRANSCRIBE_CHUNK",
            "status": "running", "progress": 40, "created_at": NOW, "pipeline_id": "feedbeef-2",
            "claimed_by": "node-b", "material_id": "m"}  # fmt: skip
    lines = _render(TASK_COLUMNS, [task], 50)
    assert all(len(line) <= 50 for line in lines)
    assert "TRANSCRIBE_CHUNK" in lines[2] and "0123abcd" in lines[2]
    data = {"self": "n1", "now": NOW, "nodes": [
        {"id": "n1", "hostname": "laptop", "address": "http://10.0.0.2:8420", "status": "online",
         "max_workers": 4, "last_seen_at": NOW, "info": {"running": 1}},
        {"id": "n2", "hostname": "desk", "address": "", "status": "offline",
         "max_workers": 2, "last_seen_at": NOW - 400}]}  # fmt: skip
    rows = node_cmd._last_seen(data)["rows"]
    lines = _render(node_cmd.NODE_COLUMNS, rows, 80)
    assert "n1 (this node)" in lines[2] and "6m ago" in lines[3] and "1/4" in lines[2]


def test_json_prints_the_answer_for_scripts() -> None:
    out = io.StringIO()
    answer = {"pipelines": [_pipeline(1, "Ask Not Speech.flac")], "next_cursor": None}
    tables.show(Console(file=out, width=40), PIPELINE_COLUMNS, answer["pipelines"],
                as_json=answer)  # fmt: skip
    assert json.loads(out.getvalue()) == answer


def test_age() -> None:
    assert [tables.age(s) for s in (5, 61, 7200, 3 * 86400)] == ["5s", "1m", "2h", "3d"]
    assert tables.ago(-3) == "0s ago"
