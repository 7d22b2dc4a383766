"""The home cluster under load: real `fredica serve` processes on loopback, each with its own
SQLite store, no server.

- `scaling`: the same I/O-bound work (`BENCH_SLEEP` tasks, every node with the same slots) on
  one node and on three; the pipeline is created on node a, whose peers claim from it over
  HTTP. Wall time is the pipeline's own (`completed_at - created_at`, a's clock). Rounds
  alternate the order (1 then 3 nodes, then 3 then 1), the ratio is of the medians.
- `takeover`: the same I/O-bound pipeline on three nodes with `cluster.takeover` on, once with
  its owner awake throughout and once with the owner suspended (SIGSTOP, as a laptop's sleep)
  once a tenth of the tasks completed: the other two take it over after
  `cluster.originator_wait_sec` and finish it. Wall time is the pipeline's own, read from the
  node that owns it at the end; rounds alternate the order.
- `claim_http`: the cost of one claim and one completion of a task of another owner over HTTP
  (`RemoteOwner`, the peers' client) against the same on the local store, in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench import noop_plugin
from bench.util import log, rnd
from fredica.cli.demo import free_port, wait_healthy
from fredica.cluster.remote import RemoteOwner
from fredica.domain.clock import SystemClock
from fredica.domain.models import Affinity, NewPipeline, NewTask
from fredica.store.base import ClaimFilter, CompletionItem
from fredica.store.sqlite import SQLiteTaskStore

SECRET = "bench-cluster-secret"
START_TIMEOUT = 60.0
CONFIG = """\
node:
  max_workers: {workers}
  shutdown_grace_sec: 2
cluster:
  mode: manual
  cluster_secret: "{secret}"
  seeds: [{seeds}]
  heartbeat_interval_sec: 1
  stale_after_sec: 10
  reclaim_after_sec: 30
scheduling:
  poll_interval_sec: 0.2
  idle_poll_interval_sec: 0.5
plugins:
  - bench.noop_plugin
"""


TAKEOVER_WAIT = 6.0  # cluster.originator_wait_sec of the takeover runs


@contextlib.contextmanager
def nodes(
    work: Path,
    count: int,
    workers: int,
    cluster_extra: str = "",
    procs: list[subprocess.Popen[bytes]] | None = None,
) -> Iterator[list[str]]:
    """`count` nodes (the first is the seed of the others); yields their base URLs once
    every node sees all the others online (a cluster that has formed: a node that knows only
    the seed would, with the seed asleep, see no successor but itself). `cluster_extra` is
    added to the `cluster:` section of every node's worker.yaml; `procs`, if given, receives
    the node processes."""
    ports = [free_port() for _ in range(count)]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    procs = procs if procs is not None else []
    try:
        for i, port in enumerate(ports):
            data = work / f"node{i}"
            data.mkdir(parents=True)
            seeds = "" if i == 0 else f'"127.0.0.1:{ports[0]}"'
            config = data / "worker.yaml"
            text = CONFIG.format(workers=workers, secret=SECRET, seeds=seeds)
            config.write_text(text.replace("cluster:\n", "cluster:\n" + cluster_extra, 1))
            argv = [sys.executable, "-m", "fredica", "serve", "--config", str(config)]
            argv += ["--data-dir", str(data), "--port", str(port)]
            with (data / "node.log").open("ab") as out:
                procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env))
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        for url, proc in zip(urls, procs, strict=True):
            wait_healthy(url, proc, timeout=START_TIMEOUT)
        for url in urls:
            _wait_for_peers(url, count - 1)
        yield urls
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGCONT)  # a suspended node cannot stop
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for_peers(url: str, peers: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(base_url=url, timeout=10, trust_env=False) as client:
        while time.monotonic() < deadline:
            answer = client.get("/api/v1/nodes").json()
            others = [n for n in answer["nodes"] if n["id"] != answer["self"]]
            if sum(1 for n in others if n["status"] != "offline") >= peers:
                return
            time.sleep(0.1)  # polling the node registry until the peers joined, bounded
    raise RuntimeError(f"{url} did not see {peers} peer(s) within {START_TIMEOUT:g} s")


def _create_pipeline(client: httpx.Client, tasks: int, seconds: float) -> str:
    body = {
        "template": "custom",
        "tasks": [
            {"ref": f"t{i}", "type": noop_plugin.SLEEP, "payload": {"seconds": seconds}}
            for i in range(tasks)
        ],
    }
    created = client.post("/api/v1/pipelines", json=body)
    created.raise_for_status()
    return str(created.json()["pipeline_id"])


def _finished(client: httpx.Client, pid: str) -> dict[str, Any] | None:
    data: dict[str, Any] = client.get(f"/api/v1/pipelines/{pid}").json()
    if data["status"] not in ("completed", "failed", "partial_failed"):
        return None
    ran_on: dict[str, int] = {}
    for task in data["tasks"]:
        ran_on[task["claimed_by"]] = ran_on.get(task["claimed_by"], 0) + 1
    return {
        "status": data["status"],
        "wall_s": rnd(data["completed_at"] - data["created_at"]),
        "ran_on": ran_on,
        "owner_epoch": data.get("owner_epoch", 0),
    }


def _run_pipeline(url: str, tasks: int, seconds: float, deadline: float) -> dict[str, Any]:
    with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
        pid = _create_pipeline(client, tasks, seconds)
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            done = _finished(client, pid)
            if done is not None:
                return done
            time.sleep(0.1)  # polling the pipeline's status, bounded by the deadline
    raise RuntimeError(f"the pipeline did not finish within {deadline:g} s")


def _completed_tasks(client: httpx.Client, pid: str) -> int:
    data = client.get(f"/api/v1/pipelines/{pid}").json()
    return sum(1 for task in data["tasks"] if task["status"] == "completed")


def _run_with_sleeping_owner(
    urls: list[str], owner: subprocess.Popen[bytes], tasks: int, seconds: float, deadline: float
) -> dict[str, Any]:
    """The pipeline created on urls[0]; its process suspended once a tenth completed; the
    result read from whichever peer owns the pipeline when it finishes."""
    clients = [httpx.Client(base_url=url, timeout=30, trust_env=False) for url in urls]
    try:
        pid = _create_pipeline(clients[0], tasks, seconds)
        end = time.monotonic() + deadline
        while _completed_tasks(clients[0], pid) < tasks // 10:
            if time.monotonic() > end:
                raise RuntimeError("a tenth of the pipeline did not complete in time")
            time.sleep(0.05)  # polling the owner until a tenth is done, bounded
        owner.send_signal(signal.SIGSTOP)
        slept_at = time.monotonic()
        try:
            while time.monotonic() < end:
                for client in clients[1:]:
                    done = _finished(client, pid)
                    if done is not None and done["owner_epoch"] > 0:
                        done["owner_slept_after_s"] = rnd(slept_at - (end - deadline))
                        return done
                time.sleep(0.1)  # polling the peers for the finished pipeline, bounded
        finally:
            owner.send_signal(signal.SIGCONT)
    finally:
        for client in clients:
            client.close()
    raise RuntimeError(f"the pipeline did not finish within {deadline:g} s")


def takeover(
    work: Path, tasks: int = 240, seconds: float = 0.2, workers: int = 4, rounds: int = 2
) -> dict[str, Any]:
    extra = f"  takeover: true\n  originator_wait_sec: {TAKEOVER_WAIT}\n"
    results: dict[str, list[dict[str, Any]]] = {"awake": [], "asleep": []}
    ideal = tasks * seconds / workers
    for r in range(rounds):
        for case in ("awake", "asleep") if r % 2 == 0 else ("asleep", "awake"):
            procs: list[subprocess.Popen[bytes]] = []
            with nodes(work / f"takeover{r}-{case}", 3, workers, extra, procs) as urls:
                deadline = ideal * 10 + 60 + TAKEOVER_WAIT
                if case == "awake":
                    run = _run_pipeline(urls[0], tasks, seconds, deadline)
                else:
                    run = _run_with_sleeping_owner(urls, procs[0], tasks, seconds, deadline)
            log(f"  takeover: round {r + 1}, owner {case}: {run['wall_s']} s {run['ran_on']}")
            results[case].append(run)
    awake = statistics.median(r["wall_s"] for r in results["awake"])
    asleep = statistics.median(r["wall_s"] for r in results["asleep"])
    return {
        "tasks": tasks,
        "task_seconds": seconds,
        "workers_per_node": workers,
        "originator_wait_sec": TAKEOVER_WAIT,
        "awake_s": rnd(awake),
        "asleep_s": rnd(asleep),
        "asleep_vs_awake": rnd(asleep / awake),
        "rounds": results,
    }


def scaling(
    work: Path, tasks: int = 240, seconds: float = 0.2, workers: int = 4, rounds: int = 2
) -> dict[str, Any]:
    results: dict[int, list[dict[str, Any]]] = {1: [], 3: []}
    ideal = tasks * seconds / workers
    for r in range(rounds):
        for count in (1, 3) if r % 2 == 0 else (3, 1):
            with nodes(work / f"round{r}-n{count}", count, workers) as urls:
                run = _run_pipeline(urls[0], tasks, seconds, deadline=ideal * 10 + 60)
            log(f"  cluster: round {r + 1}, {count} node(s): {run['wall_s']} s {run['ran_on']}")
            results[count].append(run)
    one = statistics.median(r["wall_s"] for r in results[1])
    three = statistics.median(r["wall_s"] for r in results[3])
    return {
        "tasks": tasks,
        "task_seconds": seconds,
        "workers_per_node": workers,
        "one_node_s": rnd(one),
        "three_nodes_s": rnd(three),
        "speedup": rnd(one / three),
        "ideal_one_node_s": rnd(ideal),
        "rounds": results,
    }


async def _claim_http(url: str, samples: int) -> dict[str, float]:
    """Claim and complete one task of the owner at `url` at a time, as a peer would."""
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        info = (await client.get(f"{url}/api/v1/status")).json()
        owner = RemoteOwner(info["node_id"], url, SECRET, client)
        body = {
            "template": "custom",
            "tasks": [
                {
                    "ref": f"t{i}",
                    "type": noop_plugin.NOOP,
                    # pinned to the benchmark's claimer: the owner's own engine leaves them
                    "affinity": {"kind": "HARD", "node_id": "bench-claimer"},
                }
                for i in range(samples)
            ],
        }
        (await client.post(f"{url}/api/v1/pipelines", json=body)).raise_for_status()
        flt = ClaimFilter(limit=1, types=frozenset({noop_plugin.NOOP}), start=True)
        return await _timed_cycles(
            samples,
            lambda: owner.claim(flt, "bench-claimer"),
            lambda task: owner.complete(
                [CompletionItem(task.id, task.attempt, {})], [], "bench-claimer"
            ),
        )


async def _claim_local(path: Path, samples: int) -> dict[str, float]:
    """The same cycle on a local SQLite store (no HTTP): the single-node figure."""
    store = SQLiteTaskStore(path, "bench-owner", clock=SystemClock())
    try:
        pin = Affinity.hard("bench-claimer")
        await store.create_pipeline(
            NewPipeline(
                "custom",
                "bench-local",
                tuple(NewTask(noop_plugin.NOOP, affinity=pin) for _ in range(samples)),
            )
        )
        flt = ClaimFilter(limit=1, types=frozenset({noop_plugin.NOOP}), start=True)
        return await _timed_cycles(
            samples,
            lambda: store.claim(flt, "bench-claimer"),
            lambda task: store.complete_and_claim(
                [CompletionItem(task.id, task.attempt, {})], None, "bench-claimer"
            ),
        )
    finally:
        await store.close()


async def _timed_cycles(samples: int, claim: Any, complete: Any) -> dict[str, float]:
    claims: list[float] = []
    completes: list[float] = []
    for _ in range(samples):
        t0 = time.perf_counter()
        got = await claim()
        t1 = time.perf_counter()
        if not got:
            raise RuntimeError("nothing to claim")
        await complete(got[0])
        t2 = time.perf_counter()
        claims.append((t1 - t0) * 1000)
        completes.append((t2 - t1) * 1000)
    return {
        "claim_ms": round(statistics.median(claims), 3),
        "complete_ms": round(statistics.median(completes), 3),
        "samples": samples,
    }


def claim_http(work: Path, samples: int = 200) -> dict[str, Any]:
    with nodes(work / "claim-http", 1, 2) as urls:
        remote = asyncio.run(_claim_http(urls[0], samples))
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        local = asyncio.run(_claim_local(Path(tmp) / "fredica.db", samples))
    return {
        "http": remote,
        "local": local,
        "http_vs_local": rnd(
            (remote["claim_ms"] + remote["complete_ms"])
            / (local["claim_ms"] + local["complete_ms"])
        ),
    }


def run(work: Path, tasks: int = 240, rounds: int = 2, samples: int = 200) -> dict[str, Any]:
    log(f"cluster: {tasks} I/O-bound tasks on 1 and 3 nodes, {rounds} rounds")
    out = scaling(work, tasks=tasks, rounds=rounds)
    log(f"cluster: {tasks} tasks on 3 nodes, the owner awake / asleep after a tenth")
    out["takeover"] = takeover(work, tasks=tasks, rounds=rounds)
    log(f"cluster: claim round trip over HTTP, {samples} samples")
    out["claim_round_trip"] = claim_http(work, samples)
    return out


if __name__ == "__main__":
    import json

    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(Path(tmp), tasks=int(sys.argv[1]) if sys.argv[1:] else 240), indent=2))
