"""Rounds of the no-op benchmark: every system runs once per round, the order alternates between
rounds (forward, reversed, forward, ...) so that slow drift of a shared machine does not favour
the systems that happen to run first, and each system is reported as its median over rounds.
A ratio is computed from the medians and also round by round (both systems of one round ran
minutes apart, not a whole run apart); its minimum over rounds is what "in every round" reads.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.util import log

#: a number from one round's result that is summarised as a median (None where not measured)
MEDIAN_FIELDS = ("tasks_per_s", "create_tasks_per_s", "elapsed_s", "create_s", "wall_s")


def round_order(keys: Sequence[str], index: int) -> list[str]:
    """The order of round `index` (0-based): as given on even rounds, reversed on odd ones."""
    return list(keys) if index % 2 == 0 else list(reversed(keys))


def median(values: Sequence[float | None]) -> float | None:
    """Median of the measured values (None entries are rounds that failed); None if none."""
    measured = [v for v in values if v is not None]
    return float(statistics.median(measured)) if measured else None


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b to three significant digits (a ratio of 0.004 must not print as 0.00)."""
    return float(f"{a / b:.3g}") if a is not None and b else None


def ratio_rounds(a: Sequence[float | None], b: Sequence[float | None]) -> list[float | None]:
    """a / b round by round (None where either side did not give a value that round)."""
    return [ratio(x, y) for x, y in zip(a, b, strict=False)]


def min_measured(values: Sequence[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return min(measured) if measured else None


def max_measured(values: Sequence[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return max(measured) if measured else None


def summarise(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One system's results over rounds: the medians under the keys one run used to have (so the
    report reads a summary as it read a single run), plus every round's own result."""
    ok = [r for r in rounds if not r.get("error")]
    out: dict[str, Any] = {
        field: _rounded(median([r.get(field) for r in rounds]), field) for field in MEDIAN_FIELDS
    }
    if ok:
        out["tasks"] = ok[0].get("tasks")
        out["completed"] = min(int(r.get("completed") or 0) for r in ok)
    # a deadline reached in any round (or a round that failed) is not a clean measurement
    out["timed_out"] = any(r.get("timed_out") for r in ok) if ok else None
    out["rounds_measured"] = len(ok)
    failures = [f"round {r['round']}: {r['error']}" for r in rounds if r.get("error")]
    if failures:
        out["error"] = "; ".join(failures)
    configs = [r["config"] for r in ok if r.get("config")]
    if configs:
        out["config"] = configs[0]
    out["rounds"] = [{k: v for k, v in r.items() if k != "config"} for r in rounds]
    return out


def _rounded(value: float | None, field: str) -> float | None:
    if value is None:
        return None
    return round(value, 1 if field.endswith("per_s") else 3)


def run_rounds(
    systems: Mapping[str, Callable[[Path], dict[str, Any]]],
    rounds: int,
    work: Path,
    label: str = "noop",
) -> dict[str, dict[str, Any]]:
    """Run every system once per round in alternating order; returns each system's summary
    (`summarise`). A system that raises in a round is recorded with its error for that round
    and the others go on: one failing peer must not hide the rest."""
    results: dict[str, list[dict[str, Any]]] = {key: [] for key in systems}
    for index in range(rounds):
        order = round_order(list(systems), index)
        log(f"{label}: round {index + 1}/{rounds}: {', '.join(order)}")
        for position, key in enumerate(order):
            started = time.monotonic()
            try:
                result = dict(systems[key](work / f"round{index + 1}" / key))
            except Exception as exc:
                log(f"  {key} failed: {exc}")
                result = {"error": f"{type(exc).__name__}: {exc}", "tasks_per_s": None}
            else:
                note = " (deadline reached)" if result.get("timed_out") else ""
                log(f"  {key} -> {result.get('tasks_per_s')} tasks/s{note}")
            result.update(
                round=index + 1, position=position, wall_s=round(time.monotonic() - started, 3)
            )
            results[key].append(result)
    return {key: summarise(rs) for key, rs in results.items()}


def orders(summaries: Mapping[str, Any]) -> list[list[str]]:
    """The order of each round, read back from the positions recorded in the summaries."""
    placed: dict[int, list[tuple[int, str]]] = {}
    for key, summary in summaries.items():
        if not isinstance(summary, dict):
            continue
        for r in summary.get("rounds") or []:
            placed.setdefault(int(r["round"]), []).append((int(r["position"]), key))
    return [[key for _, key in sorted(placed[n])] for n in sorted(placed)]


def values(summary: Any, field: str = "tasks_per_s") -> list[float | None]:
    """`field` of every round of one system's summary ([] when it did not run)."""
    if not isinstance(summary, dict):
        return []
    return [r.get(field) for r in summary.get("rounds") or []]
