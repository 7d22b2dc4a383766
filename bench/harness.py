"""`python -m bench`: run the benchmarks and write bench/results/latest.{json,md}.

Benchmarks (`--only NAME`, repeatable): noop (fredica 2 and 8 workers, the PostgreSQL store,
Huey 2 and 8 workers, Celery, procrastinate, pgqueuer), claim (with the query plans of the hot
path), claim_pg, latency, fanout, media, list (task and pipeline lists over HTTP at a million
tasks), charts (the charts' endpoint at a million task events), cluster (I/O-bound
work on one and three `fredica serve` nodes of a home cluster; the claim round trip over
HTTP); asr_speed (long-file speech recognition beside faster-whisper's batched and plain
transcription; only with `--only asr_speed`, it takes minutes); asr_cluster (the same file on
three served nodes of a home cluster against one, with the projection for three machines;
only with `--only asr_cluster`). `--full` samples more and
waits longer. Peers run only inside `noop`, next to fredica, so a ratio never mixes runs:
`noop` runs every system once per round (`--rounds`, default 3), in alternating order, and
reports medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib
import importlib.util
import inspect
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import (
    api_load,
    asr_cluster,
    asr_speed,
    chart_cost,
    claim_cost,
    cluster_runs,
    fredica_runs,
    list_cost,
    peers,
    pg_peers,
    pg_runs,
    pgserver,
    query_plans,
    report,
    rounds,
)
from bench.util import log

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BENCHMARKS = (
    "noop",
    "claim",
    "claim_pg",
    "latency",
    "fanout",
    "media",
    "list",
    "charts",
    "cluster",
    "api_load",
    "asr_speed",
    "asr_cluster",
)
# run only when named with --only (minutes of speech recognition)
ON_DEMAND = ("asr_speed", "asr_cluster")


@dataclass(frozen=True)
class Config:
    """Sizes and limits of one run (the quick defaults)."""

    noop_tasks: int = 10_000
    pipeline_size: int = 1_000
    fredica_workers: tuple[int, ...] = (2, 8)
    #: Huey thread workers, one system per count
    peer_workers: tuple[int, ...] = (2, 8)
    celery_workers: tuple[int, ...] = (2,)
    peers: bool = True
    #: noop: every system once per round, alternating order; medians over rounds
    rounds: int = 3
    #: PostgreSQL store: node processes sharing one database (2 workers each)
    pg_nodes: tuple[int, ...] = (1, 2, 3)
    #: worker processes of the PostgreSQL peers (procrastinate, pgqueuer), 2 workers each
    pg_peer_procs: tuple[int, ...] = (1, 3)
    noop_deadline_s: float = 90.0
    claim_sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    claims_per_size: int = 500
    latency_push_samples: int = 50
    latency_poll_samples: int = 8
    poll_interval: float = 1.0
    idle_poll_interval: float = 5.0
    fanout_chunks: int = 1_000
    fanout_deadline_s: float = 180.0
    list_backlog: int = 1_000_000  # tasks in the data dir the list benchmark serves
    chart_events: int = 1_000_000  # task events in the data dir the charts benchmark reads
    chart_rounds: int = 2  # charts: rounds without and with the chart indexes
    cluster_tasks: int = 240  # I/O-bound tasks (0.2 s each) per home-cluster run
    cluster_rounds: int = 2  # 1 and 3 nodes per round, the order alternating
    cluster_claim_samples: int = 200
    api_load_tasks: int = 400  # I/O-bound tasks (0.02 s each, 8 slots) per api_load run
    api_load_clients: int = 20  # concurrent API clients in the loaded runs
    api_load_rounds: int = 2  # quiet and loaded per round, the order alternating
    asr_minutes: float = 10.0  # asr_speed: length of the generated English talk
    asr_rounds: int = 3  # asr_speed: alternating rounds (fredica, batched, plain)
    asr_chunk_sec: float = 60.0  # asr_speed: fredica's chunk_duration_sec
    asr_cluster_rounds: int = 2  # asr_cluster: alternating rounds (1 node, 3 nodes)


QUICK = Config()
FULL = replace(
    QUICK,
    noop_deadline_s=1_800.0,
    claims_per_size=2_000,
    latency_poll_samples=50,
    fanout_deadline_s=1_800.0,
)


# --- the benchmarks --------------------------------------------------------------------------
def bench_noop(cfg: Config, work: Path) -> dict[str, Any]:
    """fredica with each worker count, the PostgreSQL store, then the peers: each system once
    per round, the order alternating between rounds; each system's medians over the rounds."""
    with contextlib.ExitStack() as stack:
        server = None
        if cfg.pg_nodes and pgserver.bindir() is not None:
            # one server for every PostgreSQL run (a fresh database each): no initdb per run
            server = pgserver.PgServer(durable=True)
            server.start()
            stack.callback(server.stop)
        elif cfg.pg_nodes:
            log(f"noop: PostgreSQL store skipped: {pgserver.SETUP}")
        systems = noop_systems(cfg, server)
        log(f"noop: {len(systems)} systems x {cfg.rounds} rounds, {cfg.noop_tasks} tasks each")
        return rounds.run_rounds(systems, cfg.rounds, work)


def noop_systems(
    cfg: Config, pg: pgserver.PgServer | None
) -> dict[str, Callable[[Path], dict[str, Any]]]:
    """Each system of the noop benchmark by its key: a call that runs it once in a work dir."""
    n, size, deadline = cfg.noop_tasks, cfg.pipeline_size, cfg.noop_deadline_s
    systems: dict[str, Callable[[Path], dict[str, Any]]] = {}
    for workers in cfg.fredica_workers:
        systems[f"fredica_w{workers}"] = functools.partial(
            _fredica_noop, n=n, size=size, workers=workers, deadline=deadline
        )
    if pg is not None:
        for nodes in cfg.pg_nodes:
            systems[f"pg_n{nodes}"] = functools.partial(
                _pg_noop, pg, nodes=nodes, n=n, size=size, deadline=deadline
            )
    if cfg.peers:
        for name, runner, counts in (
            ("huey", peers.run_huey, cfg.peer_workers),
            ("celery", peers.run_celery, cfg.celery_workers),
        ):
            for w in counts:
                systems[f"{name}_w{w}"] = functools.partial(
                    _peer_noop, runner, n=n, workers=w, deadline=deadline
                )
    if cfg.peers and pg is not None:
        for procs in cfg.pg_peer_procs:
            systems[f"procrastinate_p{procs}"] = functools.partial(
                _procrastinate_noop, pg, procs=procs, n=n, deadline=deadline
            )
        for procs in cfg.pg_peer_procs:
            systems[f"pgqueuer_p{procs}"] = functools.partial(
                _pgqueuer_noop, pg, procs=procs, n=n, deadline=deadline
            )
        # pgqueuer as `pgq run` starts it (a batch of 10, no cap on jobs in flight)
        systems["pgqueuer_default_p1"] = functools.partial(
            _pgqueuer_noop, pg, procs=1, n=n, deadline=deadline, concurrency=None
        )
    return systems


def _procrastinate_noop(
    pg: pgserver.PgServer, work: Path, procs: int, n: int, deadline: float
) -> dict[str, Any]:
    return pg_peers.run_procrastinate(pg, work, n, procs, 2, deadline)


def _pgqueuer_noop(
    pg: pgserver.PgServer,
    work: Path,
    procs: int,
    n: int,
    deadline: float,
    concurrency: int | None = 2,
) -> dict[str, Any]:
    return pg_peers.run_pgqueuer(pg, work, n, procs, concurrency, deadline)


def _fredica_noop(work: Path, n: int, size: int, workers: int, deadline: float) -> dict[str, Any]:
    result: dict[str, Any] = _run_async(
        fredica_runs.noop_throughput, work, n, size, workers, deadline
    )
    return result


def _pg_noop(
    pg: pgserver.PgServer, work: Path, nodes: int, n: int, size: int, deadline: float
) -> dict[str, Any]:
    return pg_runs.noop_on(pg, work, nodes, n, size, 2, deadline)


def _peer_noop(
    runner: Callable[[Path, int, int, float], dict[str, Any]],
    work: Path,
    n: int,
    workers: int,
    deadline: float,
) -> dict[str, Any]:
    return runner(work, n, workers, deadline)


def _run_async(fn: Callable[..., Any], *args: Any) -> Any:
    return asyncio.run(fn(*args))


def bench_claim(cfg: Config, work: Path) -> dict[str, Any]:
    log(f"claim: sizes {list(cfg.claim_sizes)}")
    result = claim_cost.run(work / "claim", list(cfg.claim_sizes), cfg.claims_per_size)
    # the plan of every statement the hot path runs (claim-ahead, group commit, lists)
    result["query_plans"] = query_plans.run(work / "plans")
    return result


def bench_claim_pg(cfg: Config, work: Path) -> dict[str, Any] | None:
    if pgserver.bindir() is None:
        log(f"claim_pg: skipped: {pgserver.SETUP}")
        return None
    log(f"claim_pg: sizes {list(cfg.claim_sizes)} on the PostgreSQL store")
    return pg_runs.claim_cost(work / "claim_pg", list(cfg.claim_sizes), cfg.claims_per_size)


def bench_latency(cfg: Config, work: Path) -> dict[str, Any]:
    log(
        f"latency: {cfg.latency_push_samples} push + {cfg.latency_poll_samples} poll-only "
        f"samples (poll {cfg.poll_interval:g} s, idle {cfg.idle_poll_interval:g} s)"
    )
    return asyncio.run(
        fredica_runs.idle_latency(
            work / "latency",
            cfg.latency_push_samples,
            cfg.latency_poll_samples,
            cfg.poll_interval,
            cfg.idle_poll_interval,
        )
    )


def bench_fanout(cfg: Config, work: Path) -> dict[str, Any]:
    log(f"fanout: {cfg.fanout_chunks} chunks")
    return asyncio.run(
        fredica_runs.fanout(work / "fanout", cfg.fanout_chunks, 2, cfg.fanout_deadline_s)
    )


def bench_media(cfg: Config, work: Path) -> dict[str, Any] | None:
    """bench/media_overhead.py belongs to the media issue: its `run() -> dict` (with
    `pipeline_overhead_pct`) is used when it exists; until then the key stays null."""
    if importlib.util.find_spec("bench.media_overhead") is None:
        log("media: bench/media_overhead.py not present; pipeline_overhead_pct stays null")
        return None
    run = getattr(importlib.import_module("bench.media_overhead"), "run", None)
    if not callable(run):
        log("media: bench/media_overhead.py has no run() yet; pipeline_overhead_pct stays null")
        return None
    log("media: bench.media_overhead.run()")
    result = run()
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    if not isinstance(result, dict):
        raise RuntimeError(f"bench.media_overhead.run() returned {type(result).__name__}")
    return result


def bench_list(cfg: Config, work: Path) -> dict[str, Any]:
    log(f"list: {cfg.list_backlog:,} tasks served by `fredica serve`")
    return list_cost.run(work, cfg.list_backlog)


def bench_charts(cfg: Config, work: Path) -> dict[str, Any]:
    log(f"charts: {cfg.chart_events:,} task events, read in-process and over HTTP")
    return chart_cost.run(work, cfg.chart_events, cfg.chart_rounds)


def bench_cluster(cfg: Config, work: Path) -> dict[str, Any]:
    return cluster_runs.run(work, cfg.cluster_tasks, cfg.cluster_rounds, cfg.cluster_claim_samples)


def bench_asr_speed(cfg: Config, work: Path) -> dict[str, Any]:
    log(f"asr_speed: {cfg.asr_minutes:g} min file, {cfg.asr_rounds} alternating rounds")
    doc = asr_speed.run(work, cfg.asr_minutes, cfg.asr_rounds, cfg.asr_chunk_sec)
    asr_speed.write(doc)  # bench/results/asr_speed.{json,md}, quoted in docs/transcription.md
    return doc


def bench_asr_cluster(cfg: Config, work: Path) -> dict[str, Any]:
    log(f"asr_cluster: {cfg.asr_minutes:g} min file on 1 and 3 served nodes")
    doc = asr_cluster.run(work, cfg.asr_minutes, cfg.asr_cluster_rounds, cfg.asr_chunk_sec)
    asr_cluster.write(doc)  # bench/results/asr_cluster.{json,md}, quoted in docs/transcription.md
    return doc


def bench_api_load(cfg: Config, work: Path) -> dict[str, Any]:
    return api_load.run(
        work, tasks=cfg.api_load_tasks, clients=cfg.api_load_clients, rounds=cfg.api_load_rounds
    )


async def _await(value: Any) -> Any:
    return await value


RUNNERS: dict[str, Callable[[Config, Path], dict[str, Any] | None]] = {
    "noop": bench_noop,
    "claim": bench_claim,
    "claim_pg": bench_claim_pg,
    "latency": bench_latency,
    "fanout": bench_fanout,
    "media": bench_media,
    "list": bench_list,
    "charts": bench_charts,
    "cluster": bench_cluster,
    "api_load": bench_api_load,
    "asr_speed": bench_asr_speed,
    "asr_cluster": bench_asr_cluster,
}


def run(
    cfg: Config,
    names: list[str],
    work_dir: Path,
    mode: str = "quick",
    command: str = "bench.harness.run()",
) -> tuple[dict[str, Any], dict[str, str]]:
    """Run `names` in order; returns the results document and the errors by benchmark."""
    raw: dict[str, Any] = {}
    errors: dict[str, str] = {}
    machine = report.machine_info()
    started = time.monotonic()
    took: dict[str, float] = {}
    for name in names:
        began = time.monotonic()
        try:
            raw[name] = RUNNERS[name](cfg, work_dir / name)
        except Exception as exc:
            log(f"{name} failed:\n{traceback.format_exc()}")
            errors[name] = f"{type(exc).__name__}: {exc}"
        peer_errors = {
            f"{name}.{k}": v["error"]
            for k, v in (raw.get(name) or {}).items()
            if isinstance(v, dict) and v.get("error")
        }
        errors.update(peer_errors)
        took[name] = round(time.monotonic() - began, 1)
    meta = {
        "command": command,
        "mode": mode,
        "benchmarks_run": names,
        "elapsed_s": round(time.monotonic() - started, 1),
        "benchmark_elapsed_s": took,
        "machine": machine,
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(cfg).items()},
    }
    return report.assemble(raw, meta, errors), errors


# --- command line --------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--full", action="store_true", help="more samples, longer deadlines")
    parser.add_argument(
        "--only",
        action="append",
        choices=BENCHMARKS,
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--no-peers", action="store_true", help="skip Huey and Celery in noop")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        metavar="N",
        help="noop: run every system N times in alternating order, report medians (default 3)",
    )
    parser.add_argument(
        "--pipeline-size",
        type=int,
        default=None,
        metavar="N",
        help="tasks per pipeline in noop (default 1000)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output prefix (default bench/results/latest; with --only: bench/results/only-NAME)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp work dir")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    cfg = FULL if args.full else QUICK
    if args.no_peers:
        cfg = replace(cfg, peers=False)
    if args.pipeline_size:
        cfg = replace(cfg, pipeline_size=args.pipeline_size)
    if args.rounds is not None:
        if args.rounds < 1:
            parser.error("--rounds must be at least 1")
        cfg = replace(cfg, rounds=args.rounds)
    default = [n for n in BENCHMARKS if n not in ON_DEMAND]
    names = [n for n in BENCHMARKS if n in (args.only or default)]
    # A partial run must not overwrite the full table docs/benchmarks.md points at.
    out = args.out or RESULTS_DIR / ("latest" if not args.only else "only-" + "-".join(names))
    work = Path(tempfile.mkdtemp(prefix="fredica-bench-"))
    try:
        command = " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])])
        doc, errors = run(cfg, names, work, "full" if args.full else "quick", command)
    finally:
        if args.keep:
            log(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    json_path, md_path = report.write(doc, out)
    print(report.markdown(doc))
    log(f"wrote {json_path} and {md_path}")
    return 1 if errors else 0
