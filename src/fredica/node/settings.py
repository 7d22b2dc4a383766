"""The settings page's use cases: show and change the common worker.yaml keys.

The node keeps the configuration it started with (`running`); the file may change under it
(this page, `fredica token create`, an editor). `current()` re-reads the file when it changed,
so the keys a running node reads live (`auth.mode`, `media_folders`, `storage.max_upload_mb`)
take effect at once, and every other change is reported as waiting for a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fredica.config import schema
from fredica.config import settings as editable
from fredica.domain import errors

logger = logging.getLogger(__name__)


class SettingsDesk:
    def __init__(self, path: Path | None, running: schema.WorkerConfig) -> None:
        self.path = path
        self.running = running
        self._current = running
        self._mtime: int | None = None
        self._lock = asyncio.Lock()

    def current(self) -> schema.WorkerConfig:
        """The configuration in the file now (the last valid one if it became invalid)."""
        if self.path is None:
            return self._current
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return self._current
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self._current = schema.load_config(self.path)
            except errors.ConfigError as exc:
                logger.error("settings not reloaded: %s", exc, extra={"action": "settings_reload"})
        return self._current

    def _writable(self) -> Path:
        if self.path is None or not self.path.exists():
            raise errors.Conflict("this node runs without a worker.yaml: there is nothing to edit")
        return self.path

    async def view(self) -> dict[str, Any]:
        """Every editable key with its value (secrets masked) and whether it waits for a
        restart; `path` is the file they live in."""
        cfg = await asyncio.to_thread(self.current)
        return {
            "path": str(self.path) if self.path is not None else None,
            "writable": self.path is not None and self.path.exists(),
            "settings": editable.view(cfg, self.running),
        }

    async def update(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Write `changes` into worker.yaml (validated, comments kept). Returns which keys
        changed and which of them take effect only after a restart. InvalidRequest (nothing
        written) when a key is not editable or a value is refused."""
        async with self._lock:
            path = self._writable()
            cfg = await asyncio.to_thread(self.current)
            effective = editable.effective_changes(cfg, changes)
            if effective:
                new = await asyncio.to_thread(editable.apply, path, effective)
                logger.info(
                    "settings changed: %s",
                    ", ".join(sorted(effective)),
                    extra={"action": "settings_update"},
                )
            else:
                new = cfg
            view = await self.view()
        return {
            "changed": sorted(effective),
            "restart_required": editable.restart_needed(sorted(effective), new, self.running),
            **view,
        }
