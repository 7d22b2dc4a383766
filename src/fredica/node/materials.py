"""The material list: the materials of the newest pipelines, each with its title, duration,
thumbnail (served by the web UI's `/files/outputs/`) and status badge (`domain.materials`)."""

from __future__ import annotations

import asyncio
import urllib.parse
from pathlib import Path
from typing import Any

from fredica.cluster import files
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
        """The URL of the cover a thumbnail task made on this node (`/files/outputs/`, which
        serves only files a task's result names)."""
        for task in tasks:
            if task.type != rules.THUMBNAIL_TYPE or task.status is not TaskStatus.COMPLETED:
                continue
            cover = (task.result or {}).get("cover_path")
            if task.claimed_by == self._node_id and self._exists(cover):
                return f"/files/outputs/{task.id}?path={urllib.parse.quote(str(cover), safe='')}"
        return None

    def _exists(self, cover: object) -> bool:
        """Whether the cover path a result names is a file under this node's data dir."""
        if not isinstance(cover, str) or not cover:
            return False
        path = Path(cover)
        rel = (
            path.relative_to(self._data_dir)
            if path.is_absolute() and path.is_relative_to(self._data_dir)
            else path
        )
        if rel.is_absolute():
            return False
        found = files.resolve_under(self._data_dir, rel.as_posix())
        return isinstance(found, Path) and found.is_file()

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
                    "thumbnail_url": await asyncio.to_thread(self._thumbnail, tasks),
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
