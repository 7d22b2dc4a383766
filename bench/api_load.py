"""The engine under API load: does a busy API starve the work?

One real `fredica serve` (SQLite, `workers` slots) runs a measured pipeline of `tasks`
I/O-bound tasks (`BENCH_SLEEP`, `seconds` each, priority 9): once with the API quiet, once
while `clients` concurrent HTTP clients use it as hard as they can. Each client loops over
what a busy UI and a script would do: create a one-task pipeline (priority 0, so it never takes
a slot from the measured work while any of it waits) and cancel it at once (two writes), list
tasks, read the node's status and read the measured pipeline.

The engine's rate is the measured pipeline's tasks over its own span on the node's clock
(first `started_at` to last `completed_at`). Rounds alternate (quiet then loaded, then loaded
then quiet); the figure is the ratio of the medians, with every round's numbers beside it, and
the API requests the clients completed per second while the work ran.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench import noop_plugin
from bench.util import log, rnd, served

CONFIG = """\
node:
  max_workers: {workers}
  shutdown_grace_sec: 2
scheduling:
  poll_interval_sec: 0.2
  idle_poll_interval_sec: 0.5
plugins:
  - bench.noop_plugin
"""


async def _client(
    client: httpx.AsyncClient, pipeline: str, stop: asyncio.Event, took: dict[str, list[float]]
) -> int:
    """One API client as busy as it can be; the requests it completed (`took`: seconds each
    request took, by kind)."""
    done = 0

    async def timed(kind: str, call: Any) -> httpx.Response:
        t0 = time.monotonic()
        answer: httpx.Response = await call
        took.setdefault(kind, []).append(time.monotonic() - t0)
        return answer

    body = {
        "template": "custom",
        "priority": 0,
        "tasks": [{"ref": "x", "type": noop_plugin.SLEEP, "payload": {"seconds": 0.01}}],
    }
    while not stop.is_set():
        created = await timed("create", client.post("/api/v1/pipelines", json=body))
        created.raise_for_status()
        pid = created.json()["pipeline_id"]
        cancelled = await timed("cancel", client.post(f"/api/v1/pipelines/{pid}/cancel"))
        if cancelled.status_code != 409:  # 409: its task already ran (the slots were free)
            cancelled.raise_for_status()
        for kind, path in (
            ("list_tasks", "/api/v1/tasks?limit=50"),
            ("status", "/api/v1/status"),
            ("get_pipeline", f"/api/v1/pipelines/{pipeline}"),
        ):
            (await timed(kind, client.get(path))).raise_for_status()
        done += 5
    return done


async def _measure(url: str, tasks: int, seconds: float, clients: int) -> dict[str, Any]:
    body = {
        "template": "custom",
        "priority": 9,
        "tasks": [
            {"ref": f"t{i}", "type": noop_plugin.SLEEP, "payload": {"seconds": seconds}}
            for i in range(tasks)
        ],
    }
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(
        base_url=url, timeout=60, trust_env=False, limits=limits
    ) as client:
        created = await client.post("/api/v1/pipelines", json=body)
        created.raise_for_status()
        pid = created.json()["pipeline_id"]
        stop = asyncio.Event()
        began = time.monotonic()
        took: dict[str, list[float]] = {}
        load = [asyncio.create_task(_client(client, pid, stop, took)) for _ in range(clients)]
        try:
            deadline = began + max(120.0, tasks * seconds * 4)
            while True:
                data = (await client.get(f"/api/v1/pipelines/{pid}")).json()
                if data["status"] in ("completed", "failed", "partial_failed", "cancelled"):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the measured pipeline did not finish: {data['status']}")
                await asyncio.sleep(0.2)  # polling the pipeline, bounded by the deadline
        finally:
            stop.set()
            requests = sum(await asyncio.gather(*load))
        elapsed = time.monotonic() - began
    if data["status"] != "completed":
        raise RuntimeError(f"the measured pipeline ended {data['status']}")
    starts = [t["started_at"] for t in data["tasks"] if t.get("started_at") is not None]
    ends = [t["completed_at"] for t in data["tasks"] if t.get("completed_at") is not None]
    span = max(ends) - min(starts)
    return {
        "clients": clients,
        "tasks_per_s": rnd(tasks / span, 1),
        "span_s": rnd(span),
        "api_requests_per_s": rnd(requests / elapsed, 1) if clients else 0.0,
        "api_median_ms": {k: rnd(1000 * statistics.median(v), 1) for k, v in took.items()},
    }


def run(
    work: Path,
    tasks: int = 400,
    seconds: float = 0.02,
    workers: int = 8,
    clients: int = 20,
    rounds: int = 2,
) -> dict[str, Any]:
    ideal = tasks * seconds / workers
    log(
        f"api_load: {tasks} tasks of {seconds:g} s on {workers} slots (ideal {ideal:.1f} s), "
        f"quiet vs {clients} API clients, {rounds} rounds"
    )
    results: dict[str, list[dict[str, Any]]] = {"quiet": [], "loaded": []}
    for r in range(rounds):
        order = ("quiet", "loaded") if r % 2 == 0 else ("loaded", "quiet")
        for kind in order:
            with served(work / f"round{r}-{kind}", CONFIG.format(workers=workers)) as url:
                n = clients if kind == "loaded" else 0
                result = asyncio.run(_measure(url, tasks, seconds, n))
            log(
                f"  api_load: round {r + 1}, {kind}: {result['tasks_per_s']} tasks/s, "
                f"{result['api_requests_per_s']} API requests/s"
            )
            results[kind].append(result)
    quiet = statistics.median(x["tasks_per_s"] for x in results["quiet"])
    loaded = statistics.median(x["tasks_per_s"] for x in results["loaded"])
    return {
        "tasks": tasks,
        "task_seconds": seconds,
        "workers": workers,
        "clients": clients,
        "quiet_tasks_per_s": rnd(quiet, 1),
        "loaded_tasks_per_s": rnd(loaded, 1),
        "loaded_vs_quiet": rnd(loaded / quiet),
        "api_requests_per_s": rnd(
            statistics.median(x["api_requests_per_s"] for x in results["loaded"]), 1
        ),
        "rounds": results,
    }


if __name__ == "__main__":
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(Path(tmp)), indent=2))
