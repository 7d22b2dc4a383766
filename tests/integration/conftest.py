from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fredica.domain.models import NewPipeline, NewTask
from fredica.store.sqlite import SQLiteTaskStore

NODE = "node-a"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteTaskStore]:
    s = SQLiteTaskStore(tmp_path / "fredica.db", NODE)
    yield s
    s.close()


def make_pipeline(
    store: SQLiteTaskStore, *tasks: NewTask, material: str = "m1", now: float = 100.0
) -> str:
    pipeline, _ = store.create_pipeline(NewPipeline("custom", material, tuple(tasks)), now)
    return pipeline.id
