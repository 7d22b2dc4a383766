"""`fredica pipeline list --search/--template/--since/--until` against a real node process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import ServedNode

pytestmark = pytest.mark.slow


def test_pipeline_list_searches_the_history(served: ServedNode, tmp_path: Path) -> None:
    served.start()
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [{"ref": "t", "type": "TEST_SLEEP"}]}))
    created = {
        source: served.cli(
            "pipeline", "create", "custom", "--tasks", str(tasks), "--material-id", name,
            "--param", f"source={source}",
        ).stdout.split()[1]
        for name, source in (("m1", "/media/Lecture_01.mp4"), ("m2", "/media/holiday.mov"))
    }  # fmt: skip
    lecture, holiday = created["/media/Lecture_01.mp4"], created["/media/holiday.mov"]
    found = served.cli("pipeline", "list", "--search", "LECTURE").stdout
    assert lecture in found and holiday not in found
    assert "Lecture_01.mp4" in found, "the pipeline is named by its file"
    both = served.cli("pipeline", "list", "--template", "custom", "--since", "2000-01-01").stdout
    assert lecture in both and holiday in both
    paged = served.cli("pipeline", "list", "--search", "/media/", "--limit", "1").stdout
    assert "next page: fredica pipeline list --search /media/ --cursor" in paged
    old = served.cli("pipeline", "list", "--until", "2000-01-01").stdout
    assert lecture not in old and holiday not in old
    bad = served.cli("pipeline", "list", "--since", "last week", check=False)
    assert bad.returncode == 1
    assert "422" in bad.stderr and "since: 'last week' is not a date" in bad.stderr
