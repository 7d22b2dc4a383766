"""The benchmark harness (`python -m bench`) at tiny sizes: the fredica benchmarks run for real
and write results of the documented shape; the no-op benchmark runs two rounds in alternating
order and reports medians and per-round ratios. No timing thresholds (speed is judged by the
full run on a quiet machine) and no peers (Huey, Celery and Redis are not in the test extra;
the rounds' arithmetic with peers is tests/unit/test_bench_rounds.py)."""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import harness, report

REPO_ROOT = Path(__file__).resolve().parents[2]

TINY = harness.Config(
    noop_tasks=100,
    pipeline_size=50,
    fredica_workers=(2, 8),
    peers=False,
    rounds=2,
    noop_deadline_s=60.0,
    claim_sizes=(500, 1_000),
    claims_per_size=100,
    latency_push_samples=5,
    latency_poll_samples=3,
    poll_interval=0.05,
    idle_poll_interval=0.2,
    fanout_chunks=50,
    fanout_deadline_s=60.0,
    pg_nodes=(1, 3),
)
PEER_KEYS = set(report.NOOP_KEYS)
RUN_KEYS = ["fredica_w2", "fredica_w8", "pg_n1", "pg_n3"]


def positive(value: Any) -> bool:
    return isinstance(value, int | float) and value > 0


def test_fredica_benchmarks_write_results_of_the_documented_shape(tmp_path: Path) -> None:
    # Given tiny sizes and no peers
    # When the fredica benchmarks run and the results are written
    doc, errors = harness.run(
        TINY, ["noop", "claim", "claim_pg", "latency", "fanout"], tmp_path / "work"
    )
    json_path, md_path = report.write(doc, tmp_path / "results" / "latest")

    # Then every benchmark ran, and the JSON on disk is the document
    assert errors == {}
    assert json.loads(json_path.read_text()) == json.loads(json.dumps(doc))
    machine = doc["meta"]["machine"]
    assert {"cpu", "cores", "ram_gib", "python", "sqlite", "date"} <= machine.keys()

    # no-op throughput: fredica measured in both rounds, every task completed, peers absent
    assert set(doc["noop_tasks_per_s"]) == PEER_KEYS
    assert set(doc["create_tasks_per_s"]) == PEER_KEYS
    for key in RUN_KEYS:
        detail = doc["details"]["noop"][key]
        assert (detail["completed"], detail["timed_out"], detail["rounds_measured"]) == (
            100,
            False,
            2,
        )
        per_round = doc["noop_rounds"][key]
        assert len(per_round) == 2 and all(positive(v) for v in per_round)
        assert [r["completed"] for r in detail["rounds"]] == [100, 100]
        # the reported value is the median over rounds, with its spread
        assert doc["noop_tasks_per_s"][key] == round(statistics.median(per_round), 1)
        assert doc["noop_spread"][key] == {"min": min(per_round), "max": max(per_round)}
        creates = [r["create_tasks_per_s"] for r in detail["rounds"]]
        assert doc["create_tasks_per_s"][key] == round(statistics.median(creates), 1)
    for key in ("pg_n2", "huey_w2", "huey_w8", "celery_w2"):
        assert doc["noop_tasks_per_s"][key] is None and doc["noop_rounds"][key] == []
    # the second round ran the systems in the reverse order of the first
    assert doc["noop_round_order"] == [RUN_KEYS, RUN_KEYS[::-1]]
    # a ratio of two systems measured in this run: of the medians, and round by round
    n1, n3 = doc["noop_rounds"]["pg_n1"], doc["noop_rounds"]["pg_n3"]
    ratio_rounds = doc["noop_ratio_rounds"]["pg_n3_vs_pg_n1"]
    assert ratio_rounds == [float(f"{b / a:.3g}") for a, b in zip(n1, n3, strict=True)]
    assert doc["noop_ratio_min"]["pg_n3_vs_pg_n1"] == min(ratio_rounds)
    medians = doc["noop_tasks_per_s"]
    assert doc["ratios"]["pg_n3_vs_pg_n1"] == float(f"{medians['pg_n3'] / medians['pg_n1']:.3g}")
    assert doc["noop_ratio_min"]["fredica_w2_vs_huey_w2"] is None

    # claim cost: the issues' sizes are always keys; the sizes run here have values,
    # and the claim query walks the ready index
    assert {"1k", "10k", "100k", "1M", "500"} <= doc["claim_ms"].keys()
    assert positive(doc["claim_ms"]["500"]) and positive(doc["claim_ms"]["1k"])
    assert doc["claim_ms"]["100k"] is None and doc["claim_ms"]["1M"] is None
    assert doc["ratios"]["claim_1m_vs_1k"] is None
    assert doc["claim_uses_task_ready_index"] is True
    assert doc["details"]["claim"]["sizes"]["1k"]["pending"] == 1_000
    assert positive(doc["claim_pg_ms"]["500"]) and positive(doc["claim_pg_ms"]["1k"])
    assert doc["details"]["claim_pg"]["sizes"]["1k"]["pending"] == 1_000
    # the PostgreSQL queues' own claim + complete at the same backlogs, or why not (the
    # peers come with `.[bench]`)
    peers = doc["details"]["claim_pg"]["peers"]
    assert set(peers["sizes"]) | set(peers["unavailable"]) == {"procrastinate", "pgqueuer"}
    for peer, per_size in peers["sizes"].items():
        assert all(positive(per_size[k]["claim_complete_ms"]) for k in ("500", "1k")), peer
        assert positive(doc["claim_pg_peers_ms"][peer]["1k"])
    # the PostgreSQL hot path: pg_stat_statements of a batch on the largest backlog, and
    # EXPLAIN (ANALYZE, BUFFERS) of the claim and the completion the store really ran
    hot = doc["details"]["claim_pg"]["hot_path"]
    assert hot["backlog"] == "1k" and hot["batch"]["claims"] >= 1
    statements = hot["statements"]
    assert statements and all(st["calls"] >= 1 and st["mean_ms"] >= 0 for st in statements)
    assert any("SKIP LOCKED" in st["query"] for st in statements)
    assert "SKIP LOCKED" in hot["claim_sql"]
    assert "status = 'completed'" in hot["completion_sql"]
    claim_plan = "\n".join(hot["plans"][hot["claim_sql"]]["plan"])
    assert "LockRows" in claim_plan and "Buffers: shared" in claim_plan
    assert "actual time" in "\n".join(hot["plans"][hot["completion_sql"]]["plan"])
    assert hot["seq_scans"] == []

    # idle latency: both modes sampled
    latency = doc["idle_latency_ms"]
    assert set(latency) == {"p50", "p99", "poll_only_p50", "poll_only_p99"}
    assert positive(latency["p50"]) and latency["p50"] <= latency["p99"]
    assert positive(latency["poll_only_p50"])
    assert latency["poll_only_p50"] <= latency["poll_only_p99"]

    # fan-out: the split spawned every chunk and the merge ran after them
    fanout = doc["details"]["fanout"]
    assert (fanout["status"], fanout["tasks"], fanout["completed"]) == ("completed", 52, 52)
    assert positive(doc["fanout_1000_s"]) and positive(doc["fanout_db_bytes"])

    # media overhead is a placeholder until bench/media_overhead.py measures it
    assert doc["pipeline_overhead_pct"] is None
    assert doc["pipeline_overhead_note"] == report.MEDIA_NOTE

    # targets: a boolean where both sides were measured, null otherwise
    targets = doc["targets"]
    assert set(targets) == set(report.TARGET_TEXT)
    assert targets["noop_w2_ge_2x_huey"] is None and targets["noop_w2_ge_celery"] is None
    assert targets["noop_w8_ge_3x_huey_w8"] is None and targets["noop_w2_ge_5x_celery"] is None
    assert targets["claim_100k_within_1_5x_of_1k"] is None
    assert targets["claim_1m_within_1_5x_of_1k"] is None
    assert isinstance(targets["idle_p50_push_lt_50ms"], bool)
    assert targets["cluster_3_nodes_ge_2_8x"] is None  # not run here
    assert targets["pipeline_overhead_lt_5pct"] is None

    markdown = md_path.read_text()
    assert "| CPU |" in markdown and "## Results" in markdown and "task_ready" in markdown
    assert "## No-op throughput by round" in markdown
    assert "## PostgreSQL hot path (1k pending)" in markdown and "LockRows" in markdown
    assert "| PostgreSQL 3 nodes / 1 node |" in markdown
    assert f"Round 1 order: {', '.join(RUN_KEYS)}." in markdown
    assert set(doc["meta"]["benchmark_elapsed_s"]) == {
        "noop",
        "claim",
        "claim_pg",
        "latency",
        "fanout",
    }


def test_python_m_bench_is_the_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--only" in proc.stdout and "--full" in proc.stdout and "--rounds" in proc.stdout


def test_rounds_must_be_at_least_one() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--rounds", "0", "--only", "noop"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--rounds must be at least 1" in proc.stderr


def test_list_benchmark_serves_a_backlog_and_reports_page_times(tmp_path: Path) -> None:
    # Given a small backlog (the real run serves a million tasks)
    cfg = dataclasses.replace(TINY, list_backlog=20_000)
    # When the list benchmark runs through the harness
    doc, errors = harness.run(cfg, ["list"], tmp_path / "work")
    # Then the page times are measured and the lists walk their indexes (no sort)
    assert errors == {}
    costs = doc["list_tasks_ms"]
    assert costs["backlog"] == 20_000
    for key in ("first_page", "deep_page", "unfiltered_first_page", "pipelines_first_page"):
        assert positive(costs[key]), key
    detail = doc["details"]["list"]
    assert detail["built"]["tasks"] == 20_000 and detail["deep_rows"] > 0
    plans = detail["plans"]
    assert "task_status" in plans["first_page"] and "task_status" in plans["deep_page"]
    assert "task_created" in plans["unfiltered_first_page"]
    assert not any("TEMP B-TREE" in plan for plan in plans.values())
    # not a million tasks: the target is not judged
    assert doc["targets"]["list_pages_le_50ms_at_1m"] is None
    assert "task lists over HTTP at 20,000 tasks" in report.markdown(doc)


def test_charts_benchmark_times_the_read_and_the_endpoint_over_http(tmp_path: Path) -> None:
    # Given a small store of task events (the real run reads a million)
    cfg = dataclasses.replace(TINY, chart_events=30_000, chart_rounds=1)
    # When the charts benchmark runs through the harness
    doc, errors = harness.run(cfg, ["charts"], tmp_path / "work")
    # Then each window is timed over HTTP from a real node and in-process, with and without
    # the chart indexes, and the week's read walks the event-time index
    assert errors == {}
    costs = doc["charts_ms"]
    assert costs["events"] == 30_000
    for window in report.CHART_WINDOWS:
        assert positive(costs["http"][window]), window
        assert positive(costs["query_with"][window]) and positive(costs["query_without"][window])
    assert costs["events_in_window"]["7d"] > costs["events_in_window"]["1h"] > 0
    assert any("task_event_time" in p for p in doc["details"]["charts"]["plans"]["with"]["7d"])
    # not a million events: the target is not judged
    assert doc["targets"]["charts_le_200ms_at_1m"] is None
    assert "charts (`/api/v1/stats/timeseries`) over HTTP at 30,000 task events" in (
        report.markdown(doc)
    )


def test_the_home_cluster_benchmark_runs_real_nodes_and_reports_its_ratio(tmp_path: Path) -> None:
    # Given a tiny home-cluster run: 24 I/O-bound tasks on 1 and 3 `fredica serve` nodes
    cfg = dataclasses.replace(TINY, cluster_tasks=24, cluster_rounds=1, cluster_claim_samples=10)

    # When it runs
    doc, errors = harness.run(cfg, ["cluster"], tmp_path / "work")

    # Then both shapes completed, the 3-node run used every node, and the ratio is of them
    assert errors == {}
    detail = doc["details"]["cluster"]
    one, three = detail["rounds"][1][0], detail["rounds"][3][0]
    assert one["status"] == three["status"] == "completed"
    assert sum(one["ran_on"].values()) == sum(three["ran_on"].values()) == 24
    assert len(one["ran_on"]) == 1 and len(three["ran_on"]) == 3
    assert doc["ratios"]["cluster_3_nodes_vs_1"] == detail["speedup"]
    assert detail["speedup"] == round(one["wall_s"] / three["wall_s"], 3)
    assert doc["targets"]["cluster_3_nodes_ge_2_8x"] is (detail["speedup"] >= 2.8)
    # the claim round trip over HTTP, beside the local store's
    summary = doc["cluster"]
    assert all(
        positive(summary[k])
        for k in ("claim_http_ms", "complete_http_ms", "claim_local_ms", "complete_local_ms")
    )
    assert "home cluster" in report.markdown(doc)


def test_the_api_load_benchmark_measures_the_engine_quiet_and_under_busy_clients(
    tmp_path: Path,
) -> None:
    # Given a tiny run: 60 I/O-bound tasks on a real `fredica serve`, quiet and with 4 clients
    cfg = dataclasses.replace(TINY, api_load_tasks=60, api_load_clients=4, api_load_rounds=1)

    # When it runs
    doc, errors = harness.run(cfg, ["api_load"], tmp_path / "work")

    # Then both runs completed the measured work; the loaded one really sent API requests of
    # every kind, and the ratio and target are of the two rates
    assert errors == {}
    detail = doc["details"]["api_load"]
    quiet, loaded = detail["rounds"]["quiet"][0], detail["rounds"]["loaded"][0]
    assert positive(quiet["tasks_per_s"]) and positive(loaded["tasks_per_s"])
    assert quiet["api_requests_per_s"] == 0.0 and positive(loaded["api_requests_per_s"])
    assert set(loaded["api_median_ms"]) == {
        "create",
        "cancel",
        "list_tasks",
        "status",
        "get_pipeline",
    }
    summary = doc["api_load"]
    assert summary["loaded_vs_quiet"] == round(loaded["tasks_per_s"] / quiet["tasks_per_s"], 3)
    assert doc["targets"]["engine_under_api_load_ge_half"] is (summary["loaded_vs_quiet"] >= 0.5)
    assert "engine under API load" in report.markdown(doc)


def test_gil_steps_prints_both_claims_quiet_and_busy() -> None:
    """`python -m bench.gil_steps` (docs/benchmarks.md's measurement of per-row GIL waits) runs and
    prints a quiet and a busy time for each way of claiming (no timing thresholds)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.gil_steps"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = {
        line.rsplit(None, 2)[0]: [float(x) for x in line.rsplit(None, 2)[1:]]
        for line in done.stdout.splitlines()
        if line.startswith(("returning", "one step"))
    }
    assert set(rows) == {"returning", "one step"}, done.stdout
    assert all(len(times) == 2 and min(times) > 0 for times in rows.values()), done.stdout
