"""Turn the raw benchmark results into `latest.json` (headline numbers, ratios, targets, the
raw details) and `latest.md` (the machine and one table)."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import rounds

MEDIA_NOTE = "measured by bench/media_overhead.py (media issue)"
# The targets of issues 5 and 10 (no-op ratios: of the medians over rounds); each is None when
# one side of it was not measured in this run.
TARGET_TEXT = {
    "noop_w2_ge_2x_huey": "no-op throughput, 2 workers: >= 2x Huey (2 workers)",
    "noop_w2_ge_celery": "no-op throughput, 2 workers: >= Celery (2 workers)",
    "noop_w8_ge_3x_huey_w8": "no-op throughput, 8 workers: >= 3x Huey (8 workers)",
    "noop_w2_ge_5x_celery": "no-op throughput, 2 workers: >= 5x Celery (2 workers)",
    "claim_100k_within_1_5x_of_1k": "claim cost with 100k pending within 1.5x of 1k",
    "claim_1m_within_1_5x_of_1k": "claim cost with 1M pending within 1.5x of 1k",
    "idle_p50_push_lt_50ms": "idle latency p50 < 50 ms with push wake-up",
    "pipeline_overhead_lt_5pct": "orchestration overhead on the media pipeline < 5%",
    "list_pages_le_50ms_at_1m": "task list first page and 10,000 deep <= 50 ms at 1M tasks",
    "charts_le_200ms_at_1m": "charts (1h, 24h, 7d) over HTTP <= 200 ms at 1M task events",
    "cluster_3_nodes_ge_2_8x": "home cluster: 3 nodes >= 2.8x one node on I/O-bound work",
    "engine_under_api_load_ge_half": "engine rate with 20 busy API clients >= 50% of quiet",
    "pg_n1_ge_2x_procrastinate_p1": "PostgreSQL store, 2 workers: >= 2x procrastinate",
    "pg_n3_ge_2x_procrastinate_p3": "PostgreSQL store, 3 x 2 workers: >= 2x procrastinate",
    "pg_n1_ge_pgqueuer_p1": "PostgreSQL store, 2 workers: >= 1x pgqueuer",
    "pg_n3_ge_pgqueuer_p3": "PostgreSQL store, 3 x 2 workers: >= 1x pgqueuer",
}
#: the no-op systems that always appear in the results (null when not run), in table order
NOOP_KEYS = (
    "fredica_w2",
    "fredica_w8",
    "huey_w2",
    "huey_w8",
    "celery_w2",
    "pg_n1",
    "pg_n2",
    "pg_n3",
    "procrastinate_p1",
    "procrastinate_p3",
    "pgqueuer_p1",
    "pgqueuer_p3",
    "pgqueuer_default_p1",
)
#: no-op ratios (numerator, denominator): of the medians, and round by round
NOOP_RATIOS = {
    "fredica_w2_vs_huey_w2": ("fredica_w2", "huey_w2"),
    "fredica_w2_vs_celery_w2": ("fredica_w2", "celery_w2"),
    "fredica_w8_vs_huey_w2": ("fredica_w8", "huey_w2"),
    "fredica_w8_vs_huey_w8": ("fredica_w8", "huey_w8"),
    "fredica_w8_vs_celery_w2": ("fredica_w8", "celery_w2"),
    "pg_n3_vs_pg_n1": ("pg_n3", "pg_n1"),
    "pg_n1_vs_celery_w2": ("pg_n1", "celery_w2"),
    "pg_n1_vs_huey_w2": ("pg_n1", "huey_w2"),
    "pg_n1_vs_procrastinate_p1": ("pg_n1", "procrastinate_p1"),
    "pg_n3_vs_procrastinate_p3": ("pg_n3", "procrastinate_p3"),
    "pg_n1_vs_pgqueuer_p1": ("pg_n1", "pgqueuer_p1"),
    "pg_n3_vs_pgqueuer_p3": ("pg_n3", "pgqueuer_p3"),
    "pg_n1_vs_pgqueuer_default_p1": ("pg_n1", "pgqueuer_default_p1"),
}
#: the claim sizes of the issues: always keys (null when not run)
CLAIM_LABELS = ("1k", "10k", "100k", "1M")
LIST_KEYS = ("first_page", "deep_page", "unfiltered_first_page", "pipelines_first_page")
LIST_TARGET_BACKLOG = 1_000_000


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": ram_gib,
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "os": f"{platform.system()} {platform.release()}",
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


_ratio = rounds.ratio


def _get(d: dict[str, Any] | None, *keys: str) -> Any:
    for key in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def list_costs(raw: dict[str, Any] | None) -> dict[str, Any]:
    """`list_tasks_ms`: the list benchmark's backlog and page times (null when not run)."""
    return {"backlog": _get(raw, "backlog"), **{k: _get(raw, k) for k in LIST_KEYS}}


def list_target(costs: dict[str, Any]) -> bool | None:
    """First and deep page <= 50 ms, judged only at a backlog of at least a million tasks."""
    if costs["backlog"] is None or costs["backlog"] < LIST_TARGET_BACKLOG:
        return None
    return bool(max(costs["first_page"], costs["deep_page"]) <= 50.0)


CHART_WINDOWS = ("1h", "24h", "7d")
CHART_TARGET_EVENTS = 1_000_000


def chart_costs(raw: dict[str, Any] | None) -> dict[str, Any]:
    """`charts_ms`: the charts benchmark's events and, per window, the time over HTTP and of
    the store's read with the chart indexes (null when not run)."""
    summary = _get(raw, "summary") or {}
    return {
        "events": _get(raw, "backlog", "events"),
        "http": {w: _get(summary, w, "http_ms") for w in CHART_WINDOWS},
        "query_with": {w: _get(summary, w, "query_ms_with") for w in CHART_WINDOWS},
        "query_without": {w: _get(summary, w, "query_ms_without") for w in CHART_WINDOWS},
        "events_in_window": {w: _get(summary, w, "events_in_window") for w in CHART_WINDOWS},
    }


def chart_target(costs: dict[str, Any]) -> bool | None:
    """Every window <= 200 ms over HTTP, judged only at a million events or more."""
    if costs["events"] is None or costs["events"] < CHART_TARGET_EVENTS:
        return None
    return all(v is not None and v <= 200.0 for v in costs["http"].values())


def list_lines(doc: dict[str, Any]) -> list[str]:
    """The list benchmark's query plans, for the markdown."""
    plans = _get(doc["details"].get("list"), "plans") or {}
    if not plans:
        return []
    lines = ["", "List query plans (`EXPLAIN QUERY PLAN` of the SELECT each list runs):", ""]
    for name, plan in plans.items():
        lines += [f"- `{name}`: " + " / ".join(f"`{p}`" for p in plan.splitlines())]
    return lines


def _at_least(value: float | None, target: float) -> bool | None:
    return None if value is None else value >= target


def cluster_summary(raw: dict[str, Any] | None) -> dict[str, Any]:
    """The home cluster benchmark's headline numbers (null when it did not run)."""
    trip = _get(raw, "claim_round_trip") or {}
    return {
        "tasks": _get(raw, "tasks"),
        "one_node_s": _get(raw, "one_node_s"),
        "three_nodes_s": _get(raw, "three_nodes_s"),
        "claim_http_ms": _get(trip, "http", "claim_ms"),
        "complete_http_ms": _get(trip, "http", "complete_ms"),
        "claim_local_ms": _get(trip, "local", "claim_ms"),
        "complete_local_ms": _get(trip, "local", "complete_ms"),
        "takeover_awake_s": _get(raw, "takeover", "awake_s"),
        "takeover_asleep_s": _get(raw, "takeover", "asleep_s"),
        "takeover_asleep_vs_awake": _get(raw, "takeover", "asleep_vs_awake"),
        "takeover_wait_s": _get(raw, "takeover", "originator_wait_sec"),
    }


def api_load_summary(raw: dict[str, Any] | None) -> dict[str, Any]:
    """The API-load benchmark's headline numbers (null when it did not run)."""
    return {
        k: _get(raw, k)
        for k in (
            "clients",
            "quiet_tasks_per_s",
            "loaded_tasks_per_s",
            "loaded_vs_quiet",
            "api_requests_per_s",
        )
    }


def assemble(raw: dict[str, Any], meta: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    """The results document: headline keys first, raw per-benchmark details after."""
    noop = raw.get("noop") or {}
    keys = list(dict.fromkeys([*NOOP_KEYS, *noop]))
    # medians over rounds (each system's summary keeps a single run's keys)
    tput = {k: _get(noop, k, "tasks_per_s") for k in keys}
    create = {k: _get(noop, k, "create_tasks_per_s") for k in keys}
    per_round = {k: rounds.values(noop.get(k)) for k in keys}
    sizes = _get(raw.get("claim"), "sizes") or {}
    # the sizes of the issues always appear (null when not run), plus any other size run
    labels = list(dict.fromkeys([*CLAIM_LABELS, *sizes]))
    claim_ms = {k: _get(sizes, k, "claim_complete_ms") for k in labels}
    claim_only = {k: _get(sizes, k, "claim_only_ms") for k in labels}
    pg_sizes = _get(raw.get("claim_pg"), "sizes") or {}
    claim_pg = {k: _get(pg_sizes, k, "claim_complete_ms") for k in labels}
    peer_sizes = _get(raw.get("claim_pg"), "peers", "sizes") or {}
    claim_pg_peers = {
        peer: {k: _get(peer_sizes, peer, k, "claim_complete_ms") for k in labels}
        for peer in PG_PEERS
    }
    lat = raw.get("latency") or {}
    latency = {k: lat.get(k) for k in ("p50", "p99", "poll_only_p50", "poll_only_p99")}
    fan = raw.get("fanout") or {}
    media = raw.get("media")
    overhead = media.get("pipeline_overhead_pct") if isinstance(media, dict) else None

    ratio_rounds = {
        name: rounds.ratio_rounds(per_round[a], per_round[b])
        for name, (a, b) in NOOP_RATIOS.items()
    }
    ratios = {
        **{name: _ratio(tput[a], tput[b]) for name, (a, b) in NOOP_RATIOS.items()},
        "create_fredica_w2_vs_huey": _ratio(create["fredica_w2"], create["huey_w2"]),
        "create_fredica_w2_vs_celery": _ratio(create["fredica_w2"], create["celery_w2"]),
        "claim_100k_vs_1k": _ratio(claim_ms["100k"], claim_ms["1k"]),
        "claim_only_100k_vs_1k": _ratio(claim_only["100k"], claim_only["1k"]),
        "claim_1m_vs_1k": _ratio(claim_ms["1M"], claim_ms["1k"]),
        "claim_only_1m_vs_1k": _ratio(claim_only["1M"], claim_only["1k"]),
        "claim_pg_100k_vs_1k": _ratio(claim_pg["100k"], claim_pg["1k"]),
        "claim_pg_1m_vs_1k": _ratio(claim_pg["1M"], claim_pg["1k"]),
        "cluster_3_nodes_vs_1": _get(raw.get("cluster"), "speedup"),
        "claim_http_vs_local": _get(raw.get("cluster"), "claim_round_trip", "http_vs_local"),
    }
    targets = {
        "noop_w2_ge_2x_huey": _noop_target(noop, ratios, "fredica_w2_vs_huey_w2", 2.0),
        "noop_w2_ge_celery": _noop_target(noop, ratios, "fredica_w2_vs_celery_w2", 1.0),
        "noop_w8_ge_3x_huey_w8": _noop_target(noop, ratios, "fredica_w8_vs_huey_w8", 3.0),
        "noop_w2_ge_5x_celery": _noop_target(noop, ratios, "fredica_w2_vs_celery_w2", 5.0),
        "claim_100k_within_1_5x_of_1k": _flat(ratios, "claim_100k_vs_1k", "claim_only_100k_vs_1k"),
        "claim_1m_within_1_5x_of_1k": _flat(ratios, "claim_1m_vs_1k", "claim_only_1m_vs_1k"),
        "idle_p50_push_lt_50ms": None if latency["p50"] is None else latency["p50"] < 50.0,
        "pipeline_overhead_lt_5pct": None if overhead is None else overhead < 5.0,
        "list_pages_le_50ms_at_1m": list_target(list_costs(raw.get("list"))),
        "charts_le_200ms_at_1m": chart_target(chart_costs(raw.get("charts"))),
        "cluster_3_nodes_ge_2_8x": (
            None
            if ratios["cluster_3_nodes_vs_1"] is None
            else ratios["cluster_3_nodes_vs_1"] >= 2.8
        ),
        "engine_under_api_load_ge_half": _at_least(
            _get(raw.get("api_load"), "loaded_vs_quiet"), 0.5
        ),
        "pg_n1_ge_2x_procrastinate_p1": _noop_target(
            noop, ratios, "pg_n1_vs_procrastinate_p1", 2.0
        ),
        "pg_n3_ge_2x_procrastinate_p3": _noop_target(
            noop, ratios, "pg_n3_vs_procrastinate_p3", 2.0
        ),
        "pg_n1_ge_pgqueuer_p1": _noop_target(noop, ratios, "pg_n1_vs_pgqueuer_p1", 1.0),
        "pg_n3_ge_pgqueuer_p3": _noop_target(noop, ratios, "pg_n3_vs_pgqueuer_p3", 1.0),
    }
    return {
        "meta": meta,
        "noop_tasks_per_s": tput,
        "noop_rounds": per_round,
        "noop_spread": {
            k: (
                {"min": rounds.min_measured(v), "max": rounds.max_measured(v)}
                if rounds.min_measured(v) is not None
                else None
            )
            for k, v in per_round.items()
        },
        "noop_round_order": rounds.orders(noop),
        "create_tasks_per_s": create,
        "ratios": ratios,
        "noop_ratio_rounds": ratio_rounds,
        "noop_ratio_min": {name: rounds.min_measured(v) for name, v in ratio_rounds.items()},
        "claim_ms": claim_ms,
        "claim_only_ms": claim_only,
        "claim_pg_ms": claim_pg,
        "claim_pg_peers_ms": claim_pg_peers,
        "claim_uses_task_ready_index": _get(raw.get("claim"), "explain", "uses_task_ready_index"),
        "hot_path_full_scans": _get(raw.get("claim"), "query_plans", "full_scans"),
        "idle_latency_ms": latency,
        "fanout_chunks": fan.get("chunks"),
        "fanout_1000_s": fan.get("wall_s"),
        "fanout_db_bytes": fan.get("db_bytes"),
        "pipeline_overhead_pct": overhead,
        "pipeline_overhead_note": None if overhead is not None else MEDIA_NOTE,
        "list_tasks_ms": list_costs(raw.get("list")),
        "charts_ms": chart_costs(raw.get("charts")),
        "cluster": cluster_summary(raw.get("cluster")),
        "api_load": api_load_summary(raw.get("api_load")),
        "targets": targets,
        "details": raw,
        "errors": errors,
    }


def _noop_target(
    noop: dict[str, Any], ratios: dict[str, float | None], name: str, at_least: float
) -> bool | None:
    """Did the ratio of the medians reach `at_least`? A run that hit its deadline in some round
    still gives a rate, but it is not a pass; nor is a system that failed a round."""
    value = ratios[name]
    if value is None:
        return None
    a, b = NOOP_RATIOS[name]
    clean = all(_get(noop, k, "timed_out") is False and not _get(noop, k, "error") for k in (a, b))
    return clean and value >= at_least


def _flat(ratios: dict[str, float | None], total: str, claim_only: str) -> bool | None:
    """Claim cost flat: claim + complete and the claim alone both within 1.5x of 1k."""
    both, alone = ratios[total], ratios[claim_only]
    if both is None or alone is None:
        return None
    return both <= 1.5 and alone <= 1.5


# --- markdown --------------------------------------------------------------------------------
def _fmt(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        text = f"{value:,.{digits}f}"
    elif isinstance(value, int):
        text = f"{value:,}"
    else:
        text = str(value)
    return f"{text}{unit}"


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}×"


def _met(value: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "not measured"}[value]


SYSTEM_NAMES = {
    "fredica_w2": "fredica, 2 workers",
    "fredica_w8": "fredica, 8 workers",
    "huey_w2": "Huey, 2 workers",
    "huey_w8": "Huey, 8 workers",
    "celery_w2": "Celery, 2 workers",
    "celery_w8": "Celery, 8 workers",
    "pg_n1": "fredica, PostgreSQL store, 1 node",
    "pg_n2": "fredica, PostgreSQL store, 2 nodes",
    "pg_n3": "fredica, PostgreSQL store, 3 nodes",
    "procrastinate_p1": "procrastinate, 1 worker process (concurrency 2)",
    "procrastinate_p3": "procrastinate, 3 worker processes (concurrency 2 each)",
    "pgqueuer_p1": "pgqueuer, 1 worker process (max_concurrent_tasks 2)",
    "pgqueuer_p3": "pgqueuer, 3 worker processes (max_concurrent_tasks 2 each)",
    "pgqueuer_default_p1": "pgqueuer, 1 worker process at its defaults (batch 10, no cap)",
}
#: the ratios of the rounds table, as it names them
RATIO_NAMES = {
    "fredica_w2_vs_huey_w2": "fredica w2 / Huey w2",
    "fredica_w8_vs_huey_w8": "fredica w8 / Huey w8",
    "fredica_w2_vs_celery_w2": "fredica w2 / Celery w2",
    "fredica_w8_vs_huey_w2": "fredica w8 / Huey w2",
    "fredica_w8_vs_celery_w2": "fredica w8 / Celery w2",
    "pg_n1_vs_huey_w2": "PostgreSQL 1 node / Huey w2",
    "pg_n1_vs_celery_w2": "PostgreSQL 1 node / Celery w2",
    "pg_n3_vs_pg_n1": "PostgreSQL 3 nodes / 1 node",
    "pg_n1_vs_procrastinate_p1": "PostgreSQL 1 node / procrastinate 1 process",
    "pg_n3_vs_procrastinate_p3": "PostgreSQL 3 nodes / procrastinate 3 processes",
    "pg_n1_vs_pgqueuer_p1": "PostgreSQL 1 node / pgqueuer 1 process",
    "pg_n3_vs_pgqueuer_p3": "PostgreSQL 3 nodes / pgqueuer 3 processes",
    "pg_n1_vs_pgqueuer_default_p1": "PostgreSQL 1 node / pgqueuer at its defaults",
}


def _met_procs(one: bool | None, three: bool | None) -> str:
    """A PostgreSQL peer target at 1 and at 3 processes."""
    if one is None and three is None:
        return _met(None)
    return f"1: {_met(one)}; 3: {_met(three)}"


def _met_sizes(at_1m: bool | None, at_100k: bool | None) -> str:
    if at_1m is None and at_100k is None:
        return _met(None)
    return f"1M: {_met(at_1m)}; 100k: {_met(at_100k)}"


def _took(meta: dict[str, Any]) -> str:
    took = meta.get("benchmark_elapsed_s") or {}
    return ", ".join(
        f"{name} ({took[name]:.0f} s)" if name in took else name for name in meta["benchmarks_run"]
    )


def _rounds_count(doc: dict[str, Any]) -> int:
    return len(doc.get("noop_round_order") or [])


def _median_of(doc: dict[str, Any]) -> str:
    n = _rounds_count(doc)
    return {0: "not run", 1: "one round"}.get(n, f"median of {n} rounds")


def _xr(doc: dict[str, Any], name: str) -> str:
    """A ratio of the medians, with its lowest value over rounds when there were several."""
    text = _x(doc["ratios"][name])
    low = doc["noop_ratio_min"].get(name)
    if _rounds_count(doc) > 1 and low is not None:
        text += f" (min {_x(low)})"
    return text


PG_PEERS = ("procrastinate", "pgqueuer")


def _pg_peer_claim_rows(doc: dict[str, Any]) -> list[str]:
    """The peers' claim + complete at each backlog (one row each), and fredica's store over
    theirs size by size (> 1: fredica slower)."""
    ours = doc.get("claim_pg_ms") or {}
    rows = []
    for peer, per_size in (doc.get("claim_pg_peers_ms") or {}).items():
        over = " / ".join(_x(_ratio(ours.get(k), v)) for k, v in per_size.items())
        rows.append(f"| | | {peer} {_per_size(per_size)} | fredica / {peer}: {over} | | |")
    return rows


def _pg_peer_claim_config(doc: dict[str, Any]) -> list[str]:
    """The configuration lines of the peers' claim cost (or why one was not measured)."""
    peer_claims = _get(doc["details"].get("claim_pg"), "peers") or {}
    lines = [
        f"- **claim cost, {peer}** (same server, fresh database per backlog, half the backlog "
        f"due an hour later): {cfg}."
        for peer, cfg in (peer_claims.get("config") or {}).items()
    ]
    for peer, why in (peer_claims.get("unavailable") or {}).items():
        lines.append(f"- **claim cost, {peer}**: not measured: {why}.")
    return lines


def _sizes(per_size: dict[str, Any]) -> str:
    return " / ".join(per_size)


def _per_size(per_size: dict[str, Any]) -> str:
    return " / ".join(_fmt(v, "", 3) for v in per_size.values())


def _rounds_section(doc: dict[str, Any]) -> list[str]:
    """Each no-op system round by round, and the ratios of the issues round by round."""
    order = doc.get("noop_round_order") or []
    if not order:
        return []
    n = len(order)
    heads = " | ".join(f"round {i + 1}" for i in range(n))
    lines = [
        "## No-op throughput by round",
        "",
        f"Every system ran once per round, {n} round(s); the order alternates between rounds "
        "(round 1 in the order below, round 2 reversed, round 3 as round 1, ...) so slow drift "
        "of the machine favours no system. The results table shows each system's median; a "
        "ratio's min is its lowest value over rounds, each round's ratio taken between the "
        "two systems of that round.",
        "",
        f"Round 1 order: {', '.join(order[0])}.",
        "",
        f"| system | median tasks/s | min – max | {heads} |",
        "|---|---|---|" + "---|" * n,
    ]
    for key, values in doc["noop_rounds"].items():
        if not values:
            continue
        spread = doc["noop_spread"].get(key) or {}
        cells = " | ".join(_fmt(v) for v in values)
        lines.append(
            f"| {SYSTEM_NAMES.get(key, key)} | {_fmt(doc['noop_tasks_per_s'][key])} "
            f"| {_fmt(spread.get('min'))} – {_fmt(spread.get('max'))} | {cells} |"
        )
    lines += [
        "",
        f"| ratio | of the medians | min over rounds | {heads} |",
        "|---|---|---|" + "---|" * n,
    ]
    for name, label in RATIO_NAMES.items():
        per_round = doc["noop_ratio_rounds"].get(name) or []
        if not any(v is not None for v in per_round):
            continue
        cells = " | ".join(_x(v) for v in per_round)
        lines.append(
            f"| {label} | {_x(doc['ratios'][name])} | {_x(doc['noop_ratio_min'][name])} | {cells} |"
        )
    return [*lines, ""]


def _cell(sql: str, width: int = 160) -> str:
    text = sql if len(sql) <= width else sql[: width - 1] + "…"
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def pg_hot_path_lines(doc: dict[str, Any]) -> list[str]:
    """The "PostgreSQL hot path" section: pg_stat_statements of a batch of claims and
    completions on the largest backlog, and EXPLAIN (ANALYZE, BUFFERS) of their statements."""
    hot = _get(doc["details"].get("claim_pg"), "hot_path")
    if not hot:
        return []
    batch = hot.get("batch") or {}
    seq = hot.get("seq_scans") or []
    lines = [
        "",
        f"## PostgreSQL hot path ({hot.get('backlog')} pending)",
        "",
        f"`pg_stat_statements` reset, then {batch.get('claims')} claims (limit 1, start) + "
        f"completions (claim + complete {_fmt(batch.get('claim_complete_ms'), ' ms', 3)} mean, "
        f"claim only {_fmt(batch.get('claim_only_ms'), ' ms', 3)}) on the largest backlog; the "
        "top statements by total execution time (server-side time only: no network, no "
        "client):",
        "",
        "| mean ms | calls | total ms | rows | shared hit | shared read | statement |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for st in hot.get("statements") or []:
        lines.append(
            f"| {st['mean_ms']} | {st['calls']} | {st['total_ms']} | {st['rows']} | "
            f"{st['shared_blks_hit']} | {st['shared_blks_read']} | {_cell(st['query'])} |"
        )
    listed = hot.get("statements") or []
    claims = batch.get("claims") or 0
    if listed and claims:
        server_ms = sum(st["total_ms"] for st in listed) / claims
        calls = sum(st["calls"] for st in listed) / claims
        lines += [
            "",
            f"Per claim + completion the statements listed ran {calls:.1f} times for "
            f"{server_ms:.3f} ms of server execution, of "
            f"{_fmt(batch.get('claim_complete_ms'), ' ms', 3)} the client measured: the rest "
            "is outside the listed statements' execution (round trips, the connection pool, "
            "BEGIN/COMMIT and the commit's WAL flush).",
        ]
    plans: dict[str, Any] = hot.get("plans") or {}
    lines += [
        "",
        "`EXPLAIN (ANALYZE, BUFFERS)` of each table statement one more claim + completion ran "
        "(the store's own SQL and parameters, run first inside a savepoint rolled back); "
        + (
            "**sequential scans of `task`: " + "; ".join(seq) + "**"
            if seq
            else "none scans `task` sequentially."
        ),
    ]
    claim_sql, completion_sql = hot.get("claim_sql"), hot.get("completion_sql")
    order = [q for q in (claim_sql, completion_sql) if q in plans]
    order += [q for q in plans if q not in order]
    for sql in order:
        title = "claim" if sql == claim_sql else "completion" if sql == completion_sql else None
        lines += [
            "",
            (f"**{title}**: " if title else "") + _cell(sql, 300),
            "",
            "```",
            *plans[sql]["plan"],
            "```",
        ]
    return lines


def markdown(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    mach = m["machine"]
    t, c, r, tg = doc["noop_tasks_per_s"], doc["create_tasks_per_s"], doc["ratios"], doc["targets"]
    cm, co, lat = doc["claim_ms"], doc["claim_only_ms"], doc["idle_latency_ms"]
    noop = doc["details"].get("noop") or {}
    timed_out = [k for k, v in noop.items() if isinstance(v, dict) and v.get("timed_out")]
    lines = [
        "# fredica benchmarks",
        "",
        f"`{m['command']}` ({m['mode']}) — {mach['date']}, {m['elapsed_s']:.0f} s, "
        f"benchmarks: {_took(m)}.",
        "Every ratio compares systems measured on the same machine in the same run.",
        "",
        "| machine | |",
        "|---|---|",
        f"| CPU | {mach['cpu']} |",
        f"| cores | {mach['cores']} |",
        f"| RAM | {mach['ram_gib']} GiB |",
        f"| OS | {mach['os']} |",
        f"| Python | {mach['python']} |",
        f"| SQLite | {mach['sqlite']} |",
        f"| load average at start / end | {', '.join(str(x) for x in mach['load_avg_at_start'])}"
        f" / {', '.join(str(x) for x in m['load_avg_at_end'])} |",
        "",
        "## Results",
        "",
        "| benchmark | fredica | peer | ratio | target | met |",
        "|---|---|---|---|---|---|",
        f"| no-op tasks/s, 2 workers ({_median_of(doc)}; first create → last completion) "
        f"| {_fmt(t['fredica_w2'])} | Huey (2) {_fmt(t['huey_w2'])} "
        f"| {_xr(doc, 'fredica_w2_vs_huey_w2')} | ≥ 2× Huey | {_met(tg['noop_w2_ge_2x_huey'])} |",
        f"| | | Celery (2) {_fmt(t['celery_w2'])} | {_xr(doc, 'fredica_w2_vs_celery_w2')} "
        f"| ≥ 5× Celery | {_met(tg['noop_w2_ge_5x_celery'])} |",
        f"| no-op tasks/s, 8 workers | {_fmt(t['fredica_w8'])} | Huey (8) {_fmt(t['huey_w8'])} "
        f"| {_xr(doc, 'fredica_w8_vs_huey_w8')} | ≥ 3× Huey (8) "
        f"| {_met(tg['noop_w8_ge_3x_huey_w8'])} |",
        f"| | | Huey (2) {_fmt(t['huey_w2'])} | {_xr(doc, 'fredica_w8_vs_huey_w2')} | | |",
        f"| create tasks/s (fredica: 2-worker run) | {_fmt(c['fredica_w2'])} | Huey "
        f"{_fmt(c['huey_w2'])} / Celery {_fmt(c['celery_w2'])} | "
        f"{_x(r['create_fredica_w2_vs_huey'])} / {_x(r['create_fredica_w2_vs_celery'])} | | |",
        f"| claim + complete, ms ({_sizes(cm)} pending, half blocked) | {_per_size(cm)} | "
        f"| 1M/1k {_x(r['claim_1m_vs_1k'])}; 100k/1k {_x(r['claim_100k_vs_1k'])} | ≤ 1.5× "
        f"| {_met_sizes(tg['claim_1m_within_1_5x_of_1k'], tg['claim_100k_within_1_5x_of_1k'])} |",
        f"| claim alone, ms ({_sizes(co)}) | {_per_size(co)} | | 1M/1k "
        f"{_x(r['claim_only_1m_vs_1k'])}; 100k/1k {_x(r['claim_only_100k_vs_1k'])} | ≤ 1.5× | |",
        f"| no-op tasks/s, PostgreSQL store, 1 / 2 / 3 node processes (2 workers each) | "
        f"{_fmt(t['pg_n1'])} / {_fmt(t['pg_n2'])} / {_fmt(t['pg_n3'])} | Huey (2) "
        f"{_fmt(t['huey_w2'])} / Celery (2) {_fmt(t['celery_w2'])} | 1 node: "
        f"{_x(r['pg_n1_vs_huey_w2'])} / {_x(r['pg_n1_vs_celery_w2'])}; 3 nodes vs 1: "
        f"{_x(r['pg_n3_vs_pg_n1'])} | | |",
        "| no-op tasks/s, PostgreSQL store vs procrastinate and pgqueuer, 1 / 3 processes (2 "
        f"workers each) | {_fmt(t['pg_n1'])} / {_fmt(t['pg_n3'])} | procrastinate "
        f"{_fmt(t['procrastinate_p1'])} / {_fmt(t['procrastinate_p3'])} | "
        f"{_xr(doc, 'pg_n1_vs_procrastinate_p1')} / {_xr(doc, 'pg_n3_vs_procrastinate_p3')} | "
        "≥ 2× procrastinate | "
        f"{_met_procs(tg['pg_n1_ge_2x_procrastinate_p1'], tg['pg_n3_ge_2x_procrastinate_p3'])} |",
        f"| | | pgqueuer {_fmt(t['pgqueuer_p1'])} / {_fmt(t['pgqueuer_p3'])} | "
        f"{_xr(doc, 'pg_n1_vs_pgqueuer_p1')} / {_xr(doc, 'pg_n3_vs_pgqueuer_p3')} | "
        f"≥ 1× pgqueuer | {_met_procs(tg['pg_n1_ge_pgqueuer_p1'], tg['pg_n3_ge_pgqueuer_p3'])} |",
        f"| | | pgqueuer at its defaults (1 process, batch 10, no cap on jobs in flight) "
        f"{_fmt(t['pgqueuer_default_p1'])} | {_xr(doc, 'pg_n1_vs_pgqueuer_default_p1')} (1 node) "
        "| | |",
        f"| claim + complete, PostgreSQL store, ms ({_sizes(doc['claim_pg_ms'])}) | "
        f"{_per_size(doc['claim_pg_ms'])} | | 1M/1k {_x(r['claim_pg_1m_vs_1k'])}; 100k/1k "
        f"{_x(r['claim_pg_100k_vs_1k'])} | | |",
        *_pg_peer_claim_rows(doc),
        f"| idle latency create → start, push wake-up, ms (p50 / p99) | {_fmt(lat['p50'])} / "
        f"{_fmt(lat['p99'])} | | | p50 < 50 ms | {_met(tg['idle_p50_push_lt_50ms'])} |",
        f"| idle latency, poll only, ms (p50 / p99) | {_fmt(lat['poll_only_p50'], '', 0)} / "
        f"{_fmt(lat['poll_only_p99'], '', 0)} | | | | |",
        f"| DAG fan-out, {_fmt(doc['fanout_chunks'])} chunks: wall s / DB bytes | "
        f"{_fmt(doc['fanout_1000_s'], '', 2)} s / {_fmt(doc['fanout_db_bytes'])} | | | | |",
        f"| task lists over HTTP at {_fmt(doc['list_tasks_ms']['backlog'])} tasks, ms: pending "
        f"first page / 10,000 deep (cursor) / unfiltered / pipelines | "
        f"{' / '.join(_fmt(doc['list_tasks_ms'][k]) for k in LIST_KEYS)} | | | first and deep "
        f"≤ 50 ms at 1M | {_met(tg['list_pages_le_50ms_at_1m'])} |",
        f"| charts (`/api/v1/stats/timeseries`) over HTTP at "
        f"{_fmt(doc['charts_ms']['events'])} task events, ms: 1h / 24h / 7d "
        f"(store read without → with the chart indexes, 7d: "
        f"{_fmt(doc['charts_ms']['query_without']['7d'], '', 1)} → "
        f"{_fmt(doc['charts_ms']['query_with']['7d'], '', 1)}) | "
        f"{' / '.join(_fmt(doc['charts_ms']['http'][w], '', 1) for w in CHART_WINDOWS)} | | | "
        f"≤ 200 ms at 1M | {_met(tg['charts_le_200ms_at_1m'])} |",
        f"| home cluster, {_fmt(doc['cluster']['tasks'])} I/O-bound tasks (0.2 s, 4 slots a "
        f"node): wall s on 1 / 3 nodes | {_fmt(doc['cluster']['one_node_s'], '', 2)} / "
        f"{_fmt(doc['cluster']['three_nodes_s'], '', 2)} | | 3 nodes vs 1: "
        f"{_x(r['cluster_3_nodes_vs_1'])} | ≥ 2.8× | {_met(tg['cluster_3_nodes_ge_2_8x'])} |",
        f"| owner asleep after a tenth: the same {_fmt(doc['cluster']['tasks'])} tasks on 3 "
        f"nodes, wall s with the owner awake / suspended (takeover after "
        f"{_fmt(doc['cluster']['takeover_wait_s'], '', 0)} s) | "
        f"{_fmt(doc['cluster']['takeover_awake_s'], '', 2)} / "
        f"{_fmt(doc['cluster']['takeover_asleep_s'], '', 2)} | | asleep vs awake: "
        f"{_x(doc['cluster']['takeover_asleep_vs_awake'])} | | |",
        f"| claim + complete of another owner's task, ms: over HTTP / local store | "
        f"{_fmt(doc['cluster']['claim_http_ms'], '', 2)} + "
        f"{_fmt(doc['cluster']['complete_http_ms'], '', 2)} / "
        f"{_fmt(doc['cluster']['claim_local_ms'], '', 2)} + "
        f"{_fmt(doc['cluster']['complete_local_ms'], '', 2)} | | HTTP vs local: "
        f"{_x(r['claim_http_vs_local'])} | | |",
        f"| engine under API load: I/O-bound tasks/s quiet / with "
        f"{_fmt(doc['api_load']['clients'])} busy API clients "
        f"({_fmt(doc['api_load']['api_requests_per_s'], '', 1)} requests/s) | "
        f"{_fmt(doc['api_load']['quiet_tasks_per_s'], '', 1)} / "
        f"{_fmt(doc['api_load']['loaded_tasks_per_s'], '', 1)} | | loaded vs quiet: "
        f"{_x(doc['api_load']['loaded_vs_quiet'])} | ≥ 0.5× | "
        f"{_met(tg['engine_under_api_load_ge_half'])} |",
        f"| orchestration overhead, media pipeline | "
        f"{_fmt(doc['pipeline_overhead_pct'], ' %')} | | | < 5 % "
        f"| {_met(tg['pipeline_overhead_lt_5pct'])} |",
        "",
    ]
    if doc.get("pipeline_overhead_note"):
        lines += [f"Orchestration overhead: {doc['pipeline_overhead_note']}.", ""]
    if timed_out:
        lines += [
            f"**Deadline reached** by {', '.join(timed_out)} (in at least one round): the rate "
            "of such a round is what completed before the deadline (see `details.noop` in "
            "latest.json), and its ratios meet no target.",
            "",
        ]
    lines += _rounds_section(doc)
    lines += ["## Configuration", ""]
    for key, summary in noop.items():
        cfg = _get(summary, "config")
        if cfg:
            lines.append(f"- **{SYSTEM_NAMES.get(key, key)}**: {cfg}.")
    for name, key in (
        ("claim cost", "claim"),
        ("idle latency", "latency"),
        ("fan-out", "fanout"),
        ("task lists", "list"),
        ("charts", "charts"),
    ):
        cfg = _get(doc["details"].get(key), "config")
        if cfg:
            lines.append(f"- **{name}**: {cfg}.")
    lines += _pg_peer_claim_config(doc)
    explain = _get(doc["details"].get("claim"), "explain")
    if explain:
        lines += [
            "",
            "Claim query plan (`EXPLAIN QUERY PLAN` of the SELECT `store.claim` runs):",
            "",
            "```",
            *explain["plan"],
            "```",
        ]
    plans = _get(doc["details"].get("claim"), "query_plans")
    if plans:
        scans = plans["full_scans"]
        lines += [
            "",
            f"## Query plans of the hot path ({plans['statements']} statements)",
            "",
            "`EXPLAIN QUERY PLAN` of each statement a claim-ahead claim, a group commit and the "
            "list pages really ran (SQLite trace); "
            + (
                "**whole-table scans or sorts: " + "; ".join(scans) + "**"
                if scans
                else "none scans a whole table or sorts in a temporary B-tree."
            ),
            "",
        ]
        for sql, plan in plans["plans"].items():
            lines += [f"- `{sql[:160]}`", *(f"  - {line}" for line in plan)]
    lines += pg_hot_path_lines(doc)
    lines += list_lines(doc)
    if doc["errors"]:
        lines += ["", "## Errors", ""]
        lines += [f"- `{k}`: {v}" for k, v in doc["errors"].items()]
    return "\n".join(lines) + "\n"


def write(doc: dict[str, Any], prefix: Path) -> tuple[Path, Path]:
    """Write `<prefix>.json` and `<prefix>.md` (through temp names: a crash never leaves a
    half-written result that looks complete)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for suffix, text in ((".json", json.dumps(doc, indent=2) + "\n"), (".md", markdown(doc))):
        path = prefix.with_name(prefix.name + suffix)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        out.append(path)
    return out[0], out[1]
