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

MEDIA_NOTE = "measured by bench/media_overhead.py (media issue)"
# The targets of issue 5; each is None when one side of it was not measured in this run.
TARGET_TEXT = {
    "noop_w2_ge_2x_huey": "no-op throughput, 2 workers: >= 2x Huey (2 workers)",
    "noop_w2_ge_celery": "no-op throughput, 2 workers: >= Celery (2 workers)",
    "claim_100k_within_1_5x_of_1k": "claim cost with 100k pending within 1.5x of 1k",
    "idle_p50_push_lt_50ms": "idle latency p50 < 50 ms with push wake-up",
    "pipeline_overhead_lt_5pct": "orchestration overhead on the media pipeline < 5%",
    "list_pages_le_50ms_at_1m": "task list first page and 10,000 deep <= 50 ms at 1M tasks",
}
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


def _ratio(a: float | None, b: float | None) -> float | None:
    # three significant digits: a ratio of 0.004 must not print as 0.00
    return float(f"{a / b:.3g}") if a is not None and b else None


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


def list_lines(doc: dict[str, Any]) -> list[str]:
    """The list benchmark's query plans, for the markdown."""
    plans = _get(doc["details"].get("list"), "plans") or {}
    if not plans:
        return []
    lines = ["", "List query plans (`EXPLAIN QUERY PLAN` of the SELECT each list runs):", ""]
    for name, plan in plans.items():
        lines += [f"- `{name}`: " + " / ".join(f"`{p}`" for p in plan.splitlines())]
    return lines


def assemble(raw: dict[str, Any], meta: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    """The results document: headline keys first, raw per-benchmark details after."""
    noop = raw.get("noop") or {}
    tput = {
        k: _get(noop, k, "tasks_per_s")
        for k in ("fredica_w2", "fredica_w8", "huey_w2", "celery_w2", "pg_n1", "pg_n2", "pg_n3")
    }
    create = {k: _get(noop, k, "create_tasks_per_s") for k in tput}
    sizes = _get(raw.get("claim"), "sizes") or {}
    # the three sizes of the issue always appear (null when not run), plus any other size run
    labels = list(dict.fromkeys(["1k", "10k", "100k", *sizes]))
    claim_ms = {k: _get(sizes, k, "claim_complete_ms") for k in labels}
    claim_only = {k: _get(sizes, k, "claim_only_ms") for k in labels}
    pg_sizes = _get(raw.get("claim_pg"), "sizes") or {}
    claim_pg = {k: _get(pg_sizes, k, "claim_complete_ms") for k in labels}
    lat = raw.get("latency") or {}
    latency = {k: lat.get(k) for k in ("p50", "p99", "poll_only_p50", "poll_only_p99")}
    fan = raw.get("fanout") or {}
    media = raw.get("media")
    overhead = media.get("pipeline_overhead_pct") if isinstance(media, dict) else None

    ratios = {
        "fredica_w2_vs_huey_w2": _ratio(tput["fredica_w2"], tput["huey_w2"]),
        "fredica_w2_vs_celery_w2": _ratio(tput["fredica_w2"], tput["celery_w2"]),
        "fredica_w8_vs_huey_w2": _ratio(tput["fredica_w8"], tput["huey_w2"]),
        "fredica_w8_vs_celery_w2": _ratio(tput["fredica_w8"], tput["celery_w2"]),
        "create_fredica_w2_vs_huey": _ratio(create["fredica_w2"], create["huey_w2"]),
        "create_fredica_w2_vs_celery": _ratio(create["fredica_w2"], create["celery_w2"]),
        "claim_100k_vs_1k": _ratio(claim_ms["100k"], claim_ms["1k"]),
        "claim_only_100k_vs_1k": _ratio(claim_only["100k"], claim_only["1k"]),
        "pg_n3_vs_pg_n1": _ratio(tput["pg_n3"], tput["pg_n1"]),
        "pg_n1_vs_celery_w2": _ratio(tput["pg_n1"], tput["celery_w2"]),
        "pg_n1_vs_huey_w2": _ratio(tput["pg_n1"], tput["huey_w2"]),
        "claim_pg_100k_vs_1k": _ratio(claim_pg["100k"], claim_pg["1k"]),
    }
    # A run that hit its deadline still gives a rate, but it is not a pass.
    w2_complete = noop.get("fredica_w2", {}).get("timed_out") is False
    claim_flat = None
    if ratios["claim_100k_vs_1k"] is not None and ratios["claim_only_100k_vs_1k"] is not None:
        claim_flat = ratios["claim_100k_vs_1k"] <= 1.5 and ratios["claim_only_100k_vs_1k"] <= 1.5
    targets = {
        "noop_w2_ge_2x_huey": (
            None
            if ratios["fredica_w2_vs_huey_w2"] is None
            else w2_complete and ratios["fredica_w2_vs_huey_w2"] >= 2.0
        ),
        "noop_w2_ge_celery": (
            None
            if ratios["fredica_w2_vs_celery_w2"] is None
            else w2_complete and ratios["fredica_w2_vs_celery_w2"] >= 1.0
        ),
        "claim_100k_within_1_5x_of_1k": claim_flat,
        "idle_p50_push_lt_50ms": None if latency["p50"] is None else latency["p50"] < 50.0,
        "pipeline_overhead_lt_5pct": None if overhead is None else overhead < 5.0,
        "list_pages_le_50ms_at_1m": list_target(list_costs(raw.get("list"))),
    }
    return {
        "meta": meta,
        "noop_tasks_per_s": tput,
        "create_tasks_per_s": create,
        "ratios": ratios,
        "claim_ms": claim_ms,
        "claim_only_ms": claim_only,
        "claim_pg_ms": claim_pg,
        "claim_uses_task_ready_index": _get(raw.get("claim"), "explain", "uses_task_ready_index"),
        "idle_latency_ms": latency,
        "fanout_chunks": fan.get("chunks"),
        "fanout_1000_s": fan.get("wall_s"),
        "fanout_db_bytes": fan.get("db_bytes"),
        "pipeline_overhead_pct": overhead,
        "pipeline_overhead_note": None if overhead is not None else MEDIA_NOTE,
        "list_tasks_ms": list_costs(raw.get("list")),
        "targets": targets,
        "details": raw,
        "errors": errors,
    }


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
        f"benchmarks: {', '.join(m['benchmarks_run'])}.",
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
        f"| no-op tasks/s, 2 workers (first create → last completion) | {_fmt(t['fredica_w2'])} "
        f"| Huey {_fmt(t['huey_w2'])} | {_x(r['fredica_w2_vs_huey_w2'])} | ≥ 2× Huey "
        f"| {_met(tg['noop_w2_ge_2x_huey'])} |",
        f"| | | Celery {_fmt(t['celery_w2'])} | {_x(r['fredica_w2_vs_celery_w2'])} | ≥ Celery "
        f"| {_met(tg['noop_w2_ge_celery'])} |",
        f"| no-op tasks/s, fredica 8 workers | {_fmt(t['fredica_w8'])} | Huey (2) "
        f"{_fmt(t['huey_w2'])} | {_x(r['fredica_w8_vs_huey_w2'])} | | |",
        f"| create tasks/s (fredica: 2-worker run) | {_fmt(c['fredica_w2'])} | Huey "
        f"{_fmt(c['huey_w2'])} / Celery {_fmt(c['celery_w2'])} | "
        f"{_x(r['create_fredica_w2_vs_huey'])} / {_x(r['create_fredica_w2_vs_celery'])} | | |",
        f"| claim + complete, ms (1k / 10k / 100k pending, half blocked) | {_fmt(cm['1k'], '', 3)}"
        f" / {_fmt(cm['10k'], '', 3)} / {_fmt(cm['100k'], '', 3)} | | 100k/1k "
        f"{_x(r['claim_100k_vs_1k'])} | ≤ 1.5× | {_met(tg['claim_100k_within_1_5x_of_1k'])} |",
        f"| claim alone, ms (1k / 10k / 100k) | {_fmt(co['1k'], '', 3)} / "
        f"{_fmt(co['10k'], '', 3)} / {_fmt(co['100k'], '', 3)} | | 100k/1k "
        f"{_x(r['claim_only_100k_vs_1k'])} | ≤ 1.5× | |",
        f"| no-op tasks/s, PostgreSQL store, 1 / 2 / 3 node processes (2 workers each) | "
        f"{_fmt(t['pg_n1'])} / {_fmt(t['pg_n2'])} / {_fmt(t['pg_n3'])} | Huey "
        f"{_fmt(t['huey_w2'])} / Celery {_fmt(t['celery_w2'])} | 1 node: "
        f"{_x(r['pg_n1_vs_huey_w2'])} / {_x(r['pg_n1_vs_celery_w2'])}; 3 nodes vs 1: "
        f"{_x(r['pg_n3_vs_pg_n1'])} | | |",
        f"| claim + complete, PostgreSQL store, ms (1k / 10k / 100k) | "
        f"{_fmt(doc['claim_pg_ms']['1k'], '', 3)} / {_fmt(doc['claim_pg_ms']['10k'], '', 3)} / "
        f"{_fmt(doc['claim_pg_ms']['100k'], '', 3)} | | 100k/1k "
        f"{_x(r['claim_pg_100k_vs_1k'])} | | |",
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
        f"| orchestration overhead, media pipeline | "
        f"{_fmt(doc['pipeline_overhead_pct'], ' %')} | | | < 5 % "
        f"| {_met(tg['pipeline_overhead_lt_5pct'])} |",
        "",
    ]
    if doc.get("pipeline_overhead_note"):
        lines += [f"Orchestration overhead: {doc['pipeline_overhead_note']}.", ""]
    if timed_out:
        lines += [
            f"**Deadline reached** by {', '.join(timed_out)}: the rate shown is what completed "
            "before the deadline (see `details.noop` in latest.json).",
            "",
        ]
    lines += ["## Configuration", ""]
    for name, key in (
        ("fredica, 2 workers", "fredica_w2"),
        ("fredica, 8 workers", "fredica_w8"),
        ("Huey", "huey_w2"),
        ("Celery", "celery_w2"),
    ):
        cfg = _get(noop, key, "config")
        if cfg:
            lines.append(f"- **{name}**: {cfg}.")
    for name, key in (
        ("claim cost", "claim"),
        ("idle latency", "latency"),
        ("fan-out", "fanout"),
        ("task lists", "list"),
    ):
        cfg = _get(doc["details"].get(key), "config")
        if cfg:
            lines.append(f"- **{name}**: {cfg}.")
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
