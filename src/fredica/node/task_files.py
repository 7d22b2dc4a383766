"""The files a task leaves on this node: its results and its attempts' logs."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from fredica.executors import tasklog


def results_root(data_dir: Path) -> Path:
    return data_dir / "results"


def remove(data_dir: Path, task_ids: Iterable[str]) -> None:
    """Delete the result directories (`<data_dir>/results/<task_id>/`) and the logs of these
    tasks. Only a task's own directory goes: an id that would name another place, or a
    directory that is a symlink, is left alone."""
    ids = list(task_ids)
    root = results_root(data_dir)
    for task_id in ids:
        if not tasklog.names_a_directory(task_id):
            continue
        directory = root / task_id
        if directory.parent == root and directory.is_dir() and not directory.is_symlink():
            shutil.rmtree(directory, ignore_errors=True)
    tasklog.remove(data_dir, ids)
