"""The material list: the materials of the newest pipelines, each with its title, duration,
thumbnail and status badge (`domain.materials`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fredica.cluster import files
from fredica.domain import errors
from fredica.domain import materials as rules
from fredica.domain.models import Pipeline, Task, TaskStatus
from fredica.store.base import TaskStore

PIPELINES_READ = 1000  # newest pipelines grouped into materials
TASKS_PER_PIPELINE = 2000


class Materials:
    def __init__(self, store: TaskStore, node_id: str, data_dir: Path) -> None:
        self._store = store
        self._node_id = node_id
        self._data_dir = data_dir

    async def _tasks(self, pipelines: list[Pipeline]) -> list[Task]:
        out: list[Task] = []
        for p in pipelines:
            out += await self._store.list_tasks(p.id, limit=TASKS_PER_PIPELINE)
        return out

    def _thumbnail(self, tasks: list[Task]) -> str | None:
        for task in tasks:
            if task.type != rules.THUMBNAIL_TYPE or task.status is not TaskStatus.COMPLETED:
                continue
            if task.claimed_by == self._node_id and self._cover(task) is not None:
                return task.id
        return None

    def _cover(self, task: Task) -> Path | None:
        cover = (task.result or {}).get("cover_path")
        if not isinstance(cover, str) or not cover:
            return None
        path = Path(cover)
        rel = (
            path.relative_to(self._data_dir)
            if path.is_absolute() and path.is_relative_to(self._data_dir)
            else path
        )
        if rel.is_absolute():
            return None
        found = files.resolve_under(self._data_dir, rel.as_posix())
        return found if isinstance(found, Path) and found.is_file() else None

    async def list(self, limit: int) -> list[dict[str, Any]]:
        """The `limit` most recently used materials, newest first."""
        pipelines = await self._store.list_pipelines(None, PIPELINES_READ, 0)
        grouped: dict[str, list[Pipeline]] = {}
        for p in pipelines:
            if p.material_id in grouped or len(grouped) < limit:
                grouped.setdefault(p.material_id, []).append(p)
        out = []
        for material_id, group in grouped.items():
            tasks = await self._tasks(group)
            source = next(
                (str(p.params.get("source")) for p in group if p.params.get("source")), ""
            )
            out.append(
                {
                    "material_id": material_id,
                    "title": rules.title_of(source or material_id, (t.result or {} for t in tasks)),
                    "source": source,
                    "duration_sec": rules.duration_of(tasks),
                    "thumbnail_task": await asyncio.to_thread(self._thumbnail, tasks),
                    "status": rules.status_of(group),
                    "pipelines": [
                        {
                            "id": p.id,
                            "template": p.template,
                            "status": p.status.value,
                            "created_at": p.created_at,
                        }
                        for p in group
                    ],
                    "updated_at": max(p.updated_at for p in group),
                }
            )
        return out

    async def thumbnail(self, task_id: str) -> Path:
        """The cover image a GENERATE_THUMBNAIL task of this node wrote (NotFound otherwise)."""
        task = await self._store.get_task(task_id)
        if task.type != rules.THUMBNAIL_TYPE or task.claimed_by != self._node_id:
            raise errors.NotFound(f"task {task_id} made no thumbnail on this node")
        cover = await asyncio.to_thread(self._cover, task)
        if cover is None:
            raise errors.NotFound(f"the thumbnail of task {task_id} is gone")
        return cover
