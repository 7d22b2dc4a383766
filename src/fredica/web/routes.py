"""The web UI's routes: static pages, server-sent events, crash recovery, result files.

`mount(app, node)` adds them to the node's FastAPI app. The pages are one HTML shell with ES
modules (routing happens in the browser), so every page path serves the same `index.html`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response
from starlette.types import Scope

from fredica import __version__
from fredica.capabilities import catalog, scoring
from fredica.config import schema as config
from fredica.domain import errors, models
from fredica.domain.models import ShutdownType, TaskStatus
from fredica.executors import network_test
from fredica.node.service import Node
from fredica.pipelines.request import PipelineRequest
from fredica.pipelines.templates import BuildContext

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
PAGES = ("/", "/processing", "/tools")

KEEPALIVE_SEC = 15.0  # seconds between keep-alive comments on an idle event stream
MIN_EVENT_INTERVAL_SEC = 0.25  # seconds; coalesces bursts (progress flushes) into one event
CLUSTER_REFRESH_SEC = 5.0  # seconds; load and disk in change events at most this often
CHANGES_BATCH = 500  # rows per change query; a larger burst is sent over several events
ERROR_PREVIEW_CHARS = 2000  # long tracebacks are cut in events; the task page shows them whole

RECOVERY_ACK_KEY = "web_recovery_acknowledged"
RUNNING_STATUSES = frozenset({TaskStatus.CLAIMED, TaskStatus.RUNNING, TaskStatus.STALE})
WAITING_STATUSES = frozenset({TaskStatus.PENDING, TaskStatus.RECLAIMED})
ACTIVE_PIPELINE_STATUSES = ("pending", "running")

# Task types created at run time by a completion hook (DESIGN §4.3), so absent from the DAG a
# template builds: they still count for the quality trade-off question of seed 001 §2.7.2.
SPAWNED_BY: dict[str, tuple[str, ...]] = {
    "SPLIT_AUDIO": ("TRANSCRIBE_CHUNK",),
    "DIARIZE_AUDIO": ("TRANSCRIBE_CHUNK",),
    "EXTRACT_FRAMES": ("OCR_FRAME_BATCH", "DETECT_FRAME_BATCH"),
}

SAFE_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
MAX_LISTED_FILES = 1000


class RecoveryAnswer(BaseModel):
    """Body of `POST /api/v1/recovery` (seed 001 §7.5 dialog buttons)."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["continue", "cancel_pending", "cancel_all"]


def _error(status: int, message: str) -> JSONResponse:
    # Same shape as the API's errors, so the UI reads `error` everywhere.
    return JSONResponse(status_code=status, content={"error": message, "detail": message})


class _NoCacheStatic(StaticFiles):
    """Static files that the browser revalidates (ETag) on every load.

    ES modules are cached aggressively otherwise, and a node upgraded in place would keep
    serving a mix of old and new modules to an open browser.
    """

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Cache-Control"] = "no-cache"
        return response


def _slim_task(task: models.Task) -> dict[str, Any]:
    """A task row for lists and events: without payload and result (they can be large)."""
    data = task.to_json()
    payload = data.pop("payload") or {}
    result = data.pop("result")
    data["has_result"] = result is not None
    source = payload.get("source") or payload.get("url")
    data["source"] = source if isinstance(source, str) else None
    error = data.get("error")
    if isinstance(error, str) and len(error) > ERROR_PREVIEW_CHARS:
        data["error"] = error[:ERROR_PREVIEW_CHARS] + "…"
    return data


def _slim_pipeline(pipeline: models.Pipeline) -> dict[str, Any]:
    data = pipeline.to_json()
    # params carry every ref -> id of the DAG; the detail page reads the full pipeline instead.
    data.pop("params", None)
    return data


def _sse(event: str, data: dict[str, Any], event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _local_stats(data_dir: Path) -> dict[str, Any]:
    """Load, cores, memory and free disk of this machine (blocking: call in a thread)."""
    stats: dict[str, Any] = {"cpu_count": os.cpu_count()}
    with contextlib.suppress(OSError):
        stats["load"] = [round(x, 2) for x in os.getloadavg()]
    with contextlib.suppress(OSError):
        usage = shutil.disk_usage(data_dir)
        stats["disk_free"] = usage.free
        stats["disk_total"] = usage.total
    with contextlib.suppress(OSError, ValueError):
        meminfo = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            meminfo[key] = int(rest.split()[0]) * 1024
        stats["mem_total"] = meminfo["MemTotal"]
        stats["mem_available"] = meminfo["MemAvailable"]
    return stats


@dataclass(frozen=True)
class _ResultFile:
    base: Path
    target: Path


def _resolve_result_file(data_dir: Path, task_id: str, name: str) -> _ResultFile | str | None:
    """The file `name` under `<data_dir>/results/<task_id>/`, symlinks resolved.

    Returns a reason string for a malformed request (400) and None when there is no such file
    inside the task's result dir (404), including a symlink that points outside it.
    """
    if not SAFE_TASK_ID.match(task_id) or ".." in task_id:
        return "invalid task id"
    parts = name.split("/")
    if not name or "\x00" in name or "\\" in name or name.startswith("/"):
        return "invalid file name"
    if any(part in ("", ".", "..") for part in parts):
        return "file name must not contain empty, '.' or '..' segments"
    root = (data_dir / "results").resolve()
    base = (root / task_id).resolve()
    if base.parent != root:  # the task dir itself is a symlink leading elsewhere
        return None
    target = (base / name).resolve()
    if not target.is_relative_to(base) or not target.is_file():
        return None
    return _ResultFile(base, target)


def _functions(capabilities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Capability rows grouped by function: [{function, backends, accelerators}]."""
    by_function: dict[str, dict[str, Any]] = {}
    for cap in capabilities:
        function = cap.get("function")
        if not function:
            continue
        entry = by_function.setdefault(
            str(function), {"function": str(function), "backends": [], "accelerators": []}
        )
        if cap.get("backend") and cap["backend"] not in entry["backends"]:
            entry["backends"].append(cap["backend"])
        if cap.get("accelerator") and cap["accelerator"] not in entry["accelerators"]:
            entry["accelerators"].append(cap["accelerator"])
    return sorted(by_function.values(), key=lambda e: e["function"])


def _list_result_files(data_dir: Path, task_id: str) -> list[dict[str, Any]]:
    root = (data_dir / "results").resolve()
    base = (root / task_id).resolve()
    if base.parent != root or not base.is_dir():
        return []
    files: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath, filename)
            resolved = path.resolve()
            if not resolved.is_relative_to(base) or not resolved.is_file():
                continue
            rel = path.relative_to(base).as_posix()
            files.append({"name": rel, "size": resolved.stat().st_size})
            if len(files) >= MAX_LISTED_FILES:
                return sorted(files, key=lambda f: str(f["name"]))
    return sorted(files, key=lambda f: str(f["name"]))


def mount(app: FastAPI, node: Node) -> None:
    """Add the web UI and its endpoints to `app`."""
    recovery_lock = asyncio.Lock()
    index_html = STATIC_DIR / "index.html"

    # --- pages ---------------------------------------------------------------------------------
    async def page() -> FileResponse:
        return FileResponse(index_html, headers={"Cache-Control": "no-cache"})

    for path in PAGES:
        app.add_api_route(path, page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/pipelines/{pipeline_id}", page, methods=["GET"], include_in_schema=False)
    app.mount("/static", _NoCacheStatic(directory=STATIC_DIR), name="static")

    # --- what the UI needs to know -------------------------------------------------------------
    def quality_defaults() -> dict[str, str]:
        # The node's own scheduling.quality_defaults (worker.yaml), else the seed's defaults.
        cfg = node.settings.config
        if cfg is not None:
            return {k: str(v) for k, v in cfg.scheduling.quality_defaults.items()}
        return dict(config.DEFAULT_QUALITY_DEFAULTS)

    def declared_task_types(name: str) -> list[str]:
        # A template may declare every task type it can create (spawned ones included).
        declared = getattr(node.registry.template(name), "task_types", ())
        return sorted(str(t) for t in declared)

    def request_task_types(body: PipelineRequest) -> list[str]:
        """Task types the request would create: its tasks, or what the template builds."""
        if body.tasks:
            types = [t.type for t in body.tasks]
        else:
            types = declared_task_types(body.template)
            if not types:
                # Building is pure (nothing is written); a request it refuses will be refused
                # again, with the reason, when the dialog creates the pipeline.
                template = node.registry.template(body.template)
                ctx = BuildContext(node.known_task_types(), node.node_id)
                with contextlib.suppress(Exception):
                    types = [t.type for t in template.build(body, ctx).tasks]
        for task_type in list(types):
            types.extend(SPAWNED_BY.get(task_type, ()))
        return types

    @app.get("/api/v1/web/config", tags=["web"])
    async def web_config() -> dict[str, Any]:
        """Defaults the UI shows: network-test targets, quality defaults, template task types."""
        return {
            "node_id": node.node_id,
            "version": __version__,
            "network_test": {
                "default_urls": list(network_test.DEFAULT_URLS),
                "default_timeout_ms": network_test.DEFAULT_TIMEOUT_MS,
            },
            "quality_defaults": quality_defaults(),
            "templates": {
                name: {
                    "description": node.registry.template(name).description,
                    "task_types": declared_task_types(name),
                }
                for name in node.registry.template_names
            },
            "task_types": sorted(node.known_task_types()),
        }

    @app.post("/api/v1/web/quality-check", tags=["web"])
    async def quality_check(body: PipelineRequest) -> dict[str, Any]:
        """Task types whose `quality` default this request would lower (seed 001 §2.7.2)."""
        types = await asyncio.to_thread(request_task_types, body)
        overrides: dict[str, scoring.QualityMode] = {}
        for task_type, override in body.overrides.items():
            mode = override.get("quality_mode")
            if mode is not None:
                try:
                    overrides[task_type] = scoring.QualityMode(mode)
                except ValueError:
                    raise errors.InvalidRequest(
                        f"overrides.{task_type}.quality_mode: must be quality, balanced or speed"
                    ) from None
            types.append(task_type)
        defaults = {k: scoring.QualityMode(v) for k, v in quality_defaults().items()}
        pipeline_mode = scoring.QualityMode(body.quality_mode) if body.quality_mode else None
        lowered = scoring.tradeoff_confirmation_needed(types, pipeline_mode, overrides, defaults)
        return {
            "needs_confirmation": [
                {"task_type": t, "default": defaults[t].value} for t in lowered if t in defaults
            ]
        }

    def self_hardware() -> dict[str, Any]:
        # What this node detected (the backend selector's capabilities): its GPUs.
        selector = node.engine.selector
        gpus = {
            f"{c.accelerator.name} ({c.accelerator.vram_mb // 1024} GB)"
            for c in (selector.capabilities if selector is not None else ())
            if isinstance(c.accelerator, catalog.LocalGPU)
        }
        return {"gpu": ", ".join(sorted(gpus))} if gpus else {}

    async def cluster_view() -> dict[str, Any]:
        rows = await node.known_nodes()
        local = await asyncio.to_thread(_local_stats, node.settings.data_dir)
        nodes = []
        for row in rows:
            info = dict(row.info)
            item = {
                "id": row.id,
                "hostname": row.hostname,
                "status": row.status,
                "address": row.address,
                "max_workers": row.max_workers,
                "last_seen_at": row.last_seen_at,
                "functions": _functions(row.capabilities),
                "task_types": sorted(
                    {str(c["task_type"]) for c in row.capabilities if "task_type" in c}
                ),
                "is_self": row.id == node.node_id,
                "running": info.get("running", 0),
                "info": info,
            }
            if item["is_self"]:
                # Live values for this node; peers report theirs through their heartbeats.
                item["status"] = "online"
                item["running"] = node.engine.running_count
                item["max_workers"] = node.settings.engine_settings().max_workers
                item["task_types"] = sorted(node.engine.claimable_types())
                item["info"] = {**info, **local, **self_hardware()}
            nodes.append(item)
        return {"nodes": nodes, "online": sum(1 for n in nodes if n["status"] == "online")}

    @app.get("/api/v1/web/cluster", tags=["web"])
    async def web_cluster() -> dict[str, Any]:
        """Every known node with slots used, load, memory and free disk (for the UI panel)."""
        return await cluster_view()

    # --- server-sent events --------------------------------------------------------------------
    async def current_seq() -> int:
        return await node.latest_change_cursor()

    async def changed_rows(seq: int) -> tuple[list[models.Task], list[models.Pipeline], int]:
        # The batch never splits a transaction: resuming from its cursor skips nothing.
        batch = await node.changes_since(seq, CHANGES_BATCH)
        return batch.tasks, batch.pipelines, batch.cursor

    async def snapshot(seq: int, version: int) -> dict[str, Any]:
        return {
            "node_id": node.node_id,
            "version": version,
            "seq": seq,
            "counts": await node.count_by_status(),
            "running": node.engine.running_count,
            "cluster": await cluster_view(),
        }

    async def event_stream() -> AsyncIterator[str]:
        stop = node.changes.closed
        stop_wait = asyncio.ensure_future(stop.wait())
        change_wait: asyncio.Future[int] | None = None
        try:
            version = node.changes.version  # read before the seq: a change in between re-sends
            seq = await current_seq()
            yield "retry: 2000\n\n"
            snap = await snapshot(seq, version)
            last_counts = snap["counts"]
            last_running = snap["running"]
            last_cluster = time.monotonic()
            yield _sse("snapshot", snap, seq)
            while not stop.is_set():
                change_wait = asyncio.ensure_future(node.changes.wait(version, KEEPALIVE_SEC))
                await asyncio.wait({change_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if stop.is_set():
                    break
                new_version = change_wait.result()
                change_wait = None
                if new_version == version:  # idle: keep proxies and the browser connected
                    yield ": keep-alive\n\n"
                    yield _sse("cluster", await cluster_view())
                    last_cluster = time.monotonic()
                    continue
                version = new_version
                tasks, pipelines, seq = await changed_rows(seq)
                counts = await node.count_by_status()
                if tasks or pipelines or counts != last_counts:
                    data: dict[str, Any] = {
                        "version": version,
                        "seq": seq,
                        "counts": counts,
                        "running": node.engine.running_count,
                        "tasks": [_slim_task(t) for t in tasks],
                        "pipelines": [_slim_pipeline(p) for p in pipelines],
                    }
                    slots_moved = data["running"] != last_running
                    if slots_moved or time.monotonic() - last_cluster >= CLUSTER_REFRESH_SEC:
                        data["cluster"] = await cluster_view()
                        last_cluster = time.monotonic()
                    last_counts = counts
                    last_running = data["running"]
                    yield _sse("change", data, seq)
                if len(tasks) >= CHANGES_BATCH or len(pipelines) >= CHANGES_BATCH:
                    version -= 1  # more rows are waiting: do not wait for the next change
                # Coalesce a burst of changes into one event per interval.
                await asyncio.wait({stop_wait}, timeout=MIN_EVENT_INTERVAL_SEC)
        except errors.StoreError:
            # The node is stopping under us (forced shutdown): end the stream quietly.
            logger.debug("event stream ended: store closed", extra={"action": "sse_end"})
        finally:
            stop_wait.cancel()
            if change_wait is not None:
                change_wait.cancel()

    @app.get("/api/v1/events", tags=["web"], response_model=None)
    async def events(token: str | None = None) -> StreamingResponse:
        """Server-sent events: `snapshot` on connect, then `change` events (counts and the task
        and pipeline rows that changed), `cluster` updates and a keep-alive comment every 15 s.

        `token` is accepted as a query parameter because EventSource cannot send an
        Authorization header; the API's token check reads it from there.
        """
        del token  # checked by the auth layer, not here
        return StreamingResponse(
            event_stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # --- crash recovery (seed 001 §7.5) --------------------------------------------------------
    async def recovery_ack() -> dict[str, Any] | None:
        raw = await node.get_setting(RECOVERY_ACK_KEY)
        if not raw:
            return None
        with contextlib.suppress(ValueError):
            ack = json.loads(raw)
            # An answer belongs to the run it was given in: a later crash asks again.
            if isinstance(ack, dict) and ack.get("run") == node.started_at:
                return ack
        return None

    async def own_active_tasks() -> list[models.Task]:
        statuses = [s.value for s in models.ACTIVE_STATUSES]
        rows = await node.list_tasks(None, statuses, None, 1_000_000)
        return [t for t in rows if t.owner_id == node.node_id]

    async def recovery_state() -> dict[str, Any]:
        crashed = node.previous_shutdown is ShutdownType.CRASH
        ack = await recovery_ack()
        groups: dict[str, dict[str, int]] = {"running_here": {}, "running_elsewhere": {}}
        groups["pending"] = {}
        for task in await own_active_tasks():
            if task.status in RUNNING_STATUSES:
                key = "running_here" if task.claimed_by == node.node_id else "running_elsewhere"
            elif task.status in WAITING_STATUSES:
                key = "pending"
            else:
                continue
            groups[key][task.type] = groups[key].get(task.type, 0) + 1
        return {
            "previous_shutdown_type": node.previous_shutdown.value,
            "needed": crashed and ack is None,
            "acknowledged": ack,
            "startup_recovery": node.recovery.summary() if node.recovery else None,
            **{key: sum(by_type.values()) for key, by_type in groups.items()},
            "by_type": groups,
        }

    @app.get("/api/v1/recovery", tags=["web"])
    async def get_recovery() -> dict[str, Any]:
        """Whether the crash-recovery question is open, with the counts the dialog shows."""
        return await recovery_state()

    @app.post("/api/v1/recovery", tags=["web"])
    async def answer_recovery(body: RecoveryAnswer) -> dict[str, Any]:
        """Answer the crash-recovery question once per run: continue, cancel the pending tasks,
        or cancel every active pipeline."""
        async with recovery_lock:  # two tabs answering at once: one wins, the other gets 409
            if node.previous_shutdown is not ShutdownType.CRASH:
                raise errors.IllegalTransition(
                    f"the previous shutdown was {node.previous_shutdown.value}; "
                    "there is nothing to recover"
                )
            ack = await recovery_ack()
            if ack is not None:
                raise errors.IllegalTransition(
                    f"the recovery was already answered ({ack.get('action')})"
                )
            cancelled_tasks = 0
            cancelled_pipelines = 0
            if body.action == "cancel_pending":
                waiting = [t.id for t in await own_active_tasks() if t.status in WAITING_STATUSES]
                for task_id in waiting:
                    # One cancel may cascade to waiting dependents: those are simply done.
                    await _try_cancel_task(node, task_id)
                still_active = {t.id for t in await own_active_tasks()}
                cancelled_tasks = sum(1 for t in waiting if t not in still_active)
            elif body.action == "cancel_all":
                for pipeline_id in await _own_active_pipelines(node):
                    with contextlib.suppress(errors.IllegalTransition, errors.NotFound):
                        await node.cancel_pipeline(pipeline_id)
                        cancelled_pipelines += 1
                for task in await own_active_tasks():
                    # Tasks outside any pipeline are not reached by the pipeline cancel.
                    if task.pipeline_id is None and await _try_cancel_task(node, task.id):
                        cancelled_tasks += 1
            now = node.clock.now()
            answer = {"run": node.started_at, "action": body.action, "at": now}
            await node.put_setting(RECOVERY_ACK_KEY, json.dumps(answer))
        logger.info(
            "crash recovery answered: %s (%d tasks, %d pipelines cancelled)",
            body.action,
            cancelled_tasks,
            cancelled_pipelines,
            extra={"action": "recovery_answer"},
        )
        node.changes.notify("")
        return {
            "action": body.action,
            "cancelled_tasks": cancelled_tasks,
            "cancelled_pipelines": cancelled_pipelines,
            "acknowledged_at": now,
        }

    # --- result files --------------------------------------------------------------------------
    @app.get("/api/v1/tasks/{task_id}/files", tags=["web"])
    async def task_files(task_id: str) -> dict[str, Any]:
        """Files under the task's result dir, with their download URLs."""
        await node.get_task(task_id)  # 404 for an unknown task
        if not SAFE_TASK_ID.match(task_id):
            return {"files": []}
        files = await asyncio.to_thread(_list_result_files, node.settings.data_dir, task_id)
        for item in files:
            item["url"] = f"/files/results/{task_id}/{item['name']}"
        return {"files": files}

    @app.get("/files/results/{task_id}/{name:path}", tags=["web"], response_model=None)
    async def result_file(task_id: str, name: str) -> Response:
        """A file of a task's outputs: only under `<data_dir>/results/<task_id>/`, symlinks
        resolved; `..` and absolute names are refused with 400, anything outside with 404."""
        found = await asyncio.to_thread(_resolve_result_file, node.settings.data_dir, task_id, name)
        if isinstance(found, str):
            return _error(400, found)
        if found is None:
            return _error(404, f"no file {name!r} in the results of task {task_id}")
        return FileResponse(
            found.target, filename=found.target.name, content_disposition_type="inline"
        )


async def _try_cancel_task(node: Node, task_id: str) -> bool:
    """Cancel one task; False when it moved on meanwhile (claimed, finished, cascaded)."""
    try:
        await node.task_action(task_id, "cancel")
    except (errors.IllegalTransition, errors.NotFound):
        return False
    return True


async def _own_active_pipelines(node: Node) -> list[str]:
    ids: list[str] = []
    for status in ACTIVE_PIPELINE_STATUSES:
        offset = 0
        while True:
            rows = await node.list_pipelines(status, 1000, offset)
            ids.extend(p.id for p in rows if p.owner_id == node.node_id)
            if len(rows) < 1000:
                break
            offset += len(rows)
    return ids
