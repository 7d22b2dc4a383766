"""The rounds of the no-op benchmark (bench/rounds.py) and how the report reads them
(bench/report.py), with fixed numbers: alternation, medians, per-round ratios and their minimum,
and targets judged on the medians."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench import report, rounds


def test_the_order_alternates_between_rounds() -> None:
    keys = ["fredica_w2", "fredica_w8", "huey_w2", "celery_w2"]
    assert rounds.round_order(keys, 0) == keys
    assert rounds.round_order(keys, 1) == list(reversed(keys))
    assert rounds.round_order(keys, 2) == keys
    assert rounds.round_order(keys, 3) == list(reversed(keys))


def test_median_ignores_failed_rounds() -> None:
    assert rounds.median([3.0, 1.0, 2.0]) == 2.0
    assert rounds.median([10.0, 30.0]) == 20.0
    assert rounds.median([5.0, None, 1.0]) == 3.0
    assert rounds.median([None, None]) is None
    assert rounds.median([]) is None


def test_ratios_round_by_round_and_their_minimum() -> None:
    fredica = [2000.0, 1500.0, None]
    huey = [1000.0, 1000.0, 800.0]
    per_round = rounds.ratio_rounds(fredica, huey)
    assert per_round == [2.0, 1.5, None]
    assert rounds.min_measured(per_round) == 1.5
    assert rounds.max_measured(per_round) == 2.0
    assert rounds.min_measured([None]) is None
    assert rounds.ratio(1.0, 3.0) == 0.333  # three significant digits
    assert rounds.ratio(1.0, 0.0) is None
    assert rounds.ratio(None, 3.0) is None


def one_round(index: int, tps: float | None, **extra: Any) -> dict[str, Any]:
    base = {
        "tasks": 100,
        "completed": 100,
        "timed_out": False,
        "create_s": 0.1,
        "create_tasks_per_s": 1000.0,
        "elapsed_s": 100 / tps if tps else None,
        "tasks_per_s": tps,
        "config": "cfg",
        "round": index + 1,
        "position": 0,
        "wall_s": 1.0,
    }
    return {**base, **extra}


def test_a_summary_keeps_the_single_run_keys_with_medians() -> None:
    summary = rounds.summarise(
        [one_round(0, 900.0), one_round(1, 1200.0, completed=90), one_round(2, 1000.0)]
    )
    assert summary["tasks_per_s"] == 1000.0
    assert summary["create_tasks_per_s"] == 1000.0
    assert summary["completed"] == 90
    assert summary["timed_out"] is False
    assert summary["rounds_measured"] == 3
    assert summary["config"] == "cfg"
    assert [r["tasks_per_s"] for r in summary["rounds"]] == [900.0, 1200.0, 1000.0]
    assert "config" not in summary["rounds"][0]
    assert "error" not in summary


def test_a_deadline_or_a_failure_in_one_round_shows_in_the_summary() -> None:
    failed = {"error": "RuntimeError: boom", "tasks_per_s": None, "round": 2, "position": 3}
    summary = rounds.summarise([one_round(0, 900.0, timed_out=True), failed, one_round(2, 1100.0)])
    assert summary["tasks_per_s"] == 1000.0  # the median of the rounds that measured
    assert summary["timed_out"] is True
    assert summary["rounds_measured"] == 2
    assert summary["error"] == "round 2: RuntimeError: boom"
    assert rounds.values(summary) == [900.0, None, 1100.0]


def test_run_rounds_alternates_and_records_every_round(tmp_path: Path) -> None:
    calls: list[str] = []

    def system(name: str, rates: list[float | None]) -> Any:
        def run(work: Path) -> dict[str, Any]:
            calls.append(name)
            rate = rates[len([c for c in calls if c == name]) - 1]
            if rate is None:
                raise RuntimeError(f"{name} broke")
            assert work.parent.name.startswith("round")
            return one_round(0, rate)

        return run

    systems = {
        "a": system("a", [100.0, 300.0, 200.0]),
        "b": system("b", [50.0, None, 100.0]),
        "c": system("c", [10.0, 10.0, 10.0]),
    }
    out = rounds.run_rounds(systems, 3, tmp_path)

    assert calls == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert rounds.orders(out) == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert out["a"]["tasks_per_s"] == 200.0
    assert out["b"]["tasks_per_s"] == 75.0
    assert out["b"]["error"] == "round 2: RuntimeError: b broke"
    assert [r["round"] for r in out["a"]["rounds"]] == [1, 2, 3]
    assert all(r["wall_s"] >= 0 for r in out["a"]["rounds"])


def summary_of(rates: list[float | None], **extra: Any) -> dict[str, Any]:
    return rounds.summarise([one_round(i, r, **extra) for i, r in enumerate(rates)])


def fixed_noop() -> dict[str, Any]:
    noop = {
        "fredica_w2": summary_of([2100.0, 1900.0, 2500.0]),
        "fredica_w8": summary_of([3000.0, 3300.0, 3600.0]),
        "huey_w2": summary_of([1000.0, 1000.0, 1000.0]),
        "huey_w8": summary_of([1000.0, 1200.0, 1100.0]),
        "celery_w2": summary_of([400.0, 380.0, 420.0]),
    }
    order = ["fredica_w2", "fredica_w8", "huey_w2", "huey_w8", "celery_w2"]
    for index in range(3):
        for position, key in enumerate(rounds.round_order(order, index)):
            noop[key]["rounds"][index]["position"] = position
    return noop


def meta() -> dict[str, Any]:
    machine = {
        "cpu": "cpu",
        "cores": 2,
        "ram_gib": 1.0,
        "python": "3.11",
        "sqlite": "3",
        "os": "Linux",
        "load_avg_at_start": [0.0, 0.0, 0.0],
        "date": "today",
    }
    return {
        "command": "python -m bench",
        "mode": "quick",
        "benchmarks_run": ["noop"],
        "elapsed_s": 1.0,
        "benchmark_elapsed_s": {"noop": 1.0},
        "machine": machine,
        "load_avg_at_end": [0.0, 0.0, 0.0],
    }


def test_the_report_takes_ratios_from_the_medians_and_shows_their_minimum() -> None:
    doc = report.assemble({"noop": fixed_noop()}, meta(), {})

    # medians keep today's keys and add huey_w8; systems not run stay null
    assert doc["noop_tasks_per_s"]["fredica_w2"] == 2100.0
    assert doc["noop_tasks_per_s"]["huey_w8"] == 1100.0
    assert doc["noop_tasks_per_s"]["pg_n1"] is None
    assert doc["noop_rounds"]["fredica_w2"] == [2100.0, 1900.0, 2500.0]
    assert doc["noop_rounds"]["pg_n1"] == []
    assert doc["noop_spread"]["fredica_w2"] == {"min": 1900.0, "max": 2500.0}
    assert doc["noop_spread"]["pg_n1"] is None
    assert doc["noop_round_order"][1] == [
        "celery_w2",
        "huey_w8",
        "huey_w2",
        "fredica_w8",
        "fredica_w2",
    ]

    r, low, per_round = doc["ratios"], doc["noop_ratio_min"], doc["noop_ratio_rounds"]
    assert r["fredica_w2_vs_huey_w2"] == 2.1
    assert per_round["fredica_w2_vs_huey_w2"] == [2.1, 1.9, 2.5]
    assert low["fredica_w2_vs_huey_w2"] == 1.9
    assert r["fredica_w8_vs_huey_w8"] == 3.0  # 3300 / 1100
    assert per_round["fredica_w8_vs_huey_w8"] == [3.0, 2.75, 3.27]
    assert low["fredica_w8_vs_huey_w8"] == 2.75
    assert r["fredica_w2_vs_celery_w2"] == 5.25
    assert low["fredica_w2_vs_celery_w2"] == 5.0
    assert low["pg_n3_vs_pg_n1"] is None

    # targets are judged on the medians (the minimum is there to be read)
    t = doc["targets"]
    assert t["noop_w2_ge_2x_huey"] is True
    assert t["noop_w8_ge_3x_huey_w8"] is True
    assert t["noop_w2_ge_5x_celery"] is True
    assert t["noop_w2_ge_celery"] is True
    assert t["claim_1m_within_1_5x_of_1k"] is None

    text = report.markdown(doc)
    assert "| fredica w2 / Huey w2 | 2.1× | 1.9× | 2.1× | 1.9× | 2.5× |" in text
    assert "| fredica w8 / Huey w8 | 3× | 2.75× | 3× | 2.75× | 3.27× |" in text
    assert "| fredica w2 / Celery w2 | 5.25× | 5× |" in text
    assert (
        "| fredica, 2 workers | 2,100.0 | 1,900.0 – 2,500.0 | 2,100.0 | 1,900.0 | 2,500.0 |" in text
    )
    assert "2.1× (min 1.9×) | ≥ 2× Huey | yes |" in text
    assert "median of 3 rounds" in text


@pytest.mark.parametrize("spoiled", ["timed_out", "error"])
def test_a_round_that_reached_its_deadline_or_failed_meets_no_target(spoiled: str) -> None:
    noop = fixed_noop()
    if spoiled == "timed_out":
        noop["huey_w2"] = summary_of([1000.0, 1000.0, 1000.0])
        noop["huey_w2"]["timed_out"] = True
    else:
        noop["huey_w2"]["error"] = "round 1: RuntimeError: boom"
    doc = report.assemble({"noop": noop}, meta(), {})
    assert doc["ratios"]["fredica_w2_vs_huey_w2"] == 2.1
    assert doc["targets"]["noop_w2_ge_2x_huey"] is False
    assert doc["targets"]["noop_w8_ge_3x_huey_w8"] is True


def test_claim_ratios_and_the_1m_target() -> None:
    sizes = {
        label: {"claim_complete_ms": ms, "claim_only_ms": ms / 2}
        for label, ms in (("1k", 1.0), ("10k", 1.1), ("100k", 1.2), ("1M", 1.6))
    }
    doc = report.assemble({"claim": {"sizes": sizes}}, meta(), {})
    assert doc["claim_ms"] == {"1k": 1.0, "10k": 1.1, "100k": 1.2, "1M": 1.6}
    assert doc["ratios"]["claim_1m_vs_1k"] == 1.6
    assert doc["ratios"]["claim_100k_vs_1k"] == 1.2
    assert doc["targets"]["claim_100k_within_1_5x_of_1k"] is True
    assert doc["targets"]["claim_1m_within_1_5x_of_1k"] is False


def test_the_postgresql_peers_row_compares_the_store_with_procrastinate_and_pgqueuer() -> None:
    noop = {
        "pg_n1": summary_of([6000.0, 5000.0, 5500.0]),
        "pg_n3": summary_of([7000.0, 6600.0, 6000.0]),
        "procrastinate_p1": summary_of([300.0, 250.0, 310.0]),
        "procrastinate_p3": summary_of([400.0, 420.0, 700.0]),
        "pgqueuer_p1": summary_of([1000.0, 2500.0, 1100.0], config="pgqueuer cfg"),
        "pgqueuer_p3": summary_of([1200.0, 1300.0, 1250.0]),
    }
    doc = report.assemble({"noop": noop}, meta(), {})

    r, low = doc["ratios"], doc["noop_ratio_min"]
    assert doc["noop_tasks_per_s"]["pgqueuer_p1"] == 1100.0
    assert r["pg_n1_vs_procrastinate_p1"] == 18.3  # 5500 / 300
    assert r["pg_n1_vs_pgqueuer_p1"] == 5.0  # 5500 / 1100
    assert doc["noop_ratio_rounds"]["pg_n1_vs_pgqueuer_p1"] == [6.0, 2.0, 5.0]
    assert low["pg_n1_vs_pgqueuer_p1"] == 2.0
    assert r["pg_n3_vs_pgqueuer_p3"] == 5.28  # 6600 / 1250
    t = doc["targets"]
    assert t["pg_n1_ge_2x_procrastinate_p1"] is True
    assert t["pg_n3_ge_2x_procrastinate_p3"] is True
    assert t["pg_n1_ge_pgqueuer_p1"] is True
    assert t["pg_n3_ge_pgqueuer_p3"] is True

    text = report.markdown(doc)
    assert "| 18.3× (min 17.7×) / 15.7× (min 8.57×) | ≥ 2× procrastinate | 1: yes; 3: yes |" in text
    assert (
        "| | | pgqueuer 1,100.0 / 1,250.0 | 5× (min 2×) / 5.28× (min 4.8×) | ≥ 1× pgqueuer "
        "| 1: yes; 3: yes |" in text
    )
    assert "| PostgreSQL 1 node / pgqueuer 1 process | 5× | 2× | 6× | 2× | 5× |" in text
    assert "- **pgqueuer, 1 worker process (max_concurrent_tasks 2)**: pgqueuer cfg." in text


def test_a_peer_slower_than_its_target_or_not_run_is_shown_as_such() -> None:
    noop = {
        "pg_n1": summary_of([1000.0, 1000.0, 1000.0]),
        "pgqueuer_p1": summary_of([1200.0, 1100.0, 900.0]),
    }
    doc = report.assemble({"noop": noop}, meta(), {})
    assert doc["targets"]["pg_n1_ge_pgqueuer_p1"] is False
    assert doc["targets"]["pg_n3_ge_pgqueuer_p3"] is None
    assert doc["targets"]["pg_n1_ge_2x_procrastinate_p1"] is None
    text = report.markdown(doc)
    assert "≥ 1× pgqueuer | 1: **no**; 3: not measured |" in text
    assert "≥ 2× procrastinate | not measured |" in text
