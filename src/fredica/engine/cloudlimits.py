"""Cloud API limits of one node (seed 001 §7.8, §2.5): how many calls each cloud backend may
have in flight here right now, and whether today's cloud budget is spent.

A backend's ceiling is the smallest of
- its `max_concurrent` from worker.yaml (enforced by the selector as before),
- its adaptive limit: an HTTP 429 halves the backend's current limit (floor 1); every
  `restore_after` seconds without another 429 gives one slot back, up to `max_concurrent`,
- the cluster's room: `cluster.api_rate_limits.<backend>.cluster_max_concurrent` less the
  calls the other nodes reported in their heartbeats (this node's own calls are counted by
  the selector against the ceiling),
- 0 once today's (UTC) cloud spend of the whole cluster reached
  `scheduling.max_cloud_cost_per_day_usd` (and a publisher token's cloud work, once that
  token's spend on all nodes reached its own budget).

Spend comes from what the cloud executors report (`executors.usage.charge`: the provider's
own count of tokens, characters or minutes at the configured `cost_per_unit_usd`). It is
kept per UTC day, in total and per publisher token, in `<data_dir>/cloud_spend.json`, so a
restart does not reset it. Calls in flight when the budget runs out still finish and count.
Each node reports its own spend of today (`spend_report`, in `/cluster/info` and heartbeats);
its peers add up the reports of the same UTC day (`set_peer_spend`), of offline nodes too (what
they spent is spent), so the budget is the cluster's, not each node's. Spend a node has not
reported yet (between two heartbeats) can overshoot the budget by what was spent meanwhile.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fredica.capabilities import catalog
from fredica.config import schema as config
from fredica.executors import usage

logger = logging.getLogger(__name__)

SPEND_FILE = "cloud_spend.json"


@dataclass
class _Backoff:
    limit: int  # slots allowed now
    since: float  # monotonic time of the last change (a 429 or a restored step)


class CloudLimits:
    """Per-backend ceilings and the daily cloud budget of one node (thread-safe)."""

    def __init__(
        self,
        max_concurrent: Mapping[str, int],
        *,
        cluster_max: Mapping[str, int] | None = None,
        daily_budget_usd: float | None = None,
        publisher_budget: Callable[[str], float | None] | None = None,
        publisher_cloud: Callable[[str, str], str | None] | None = None,
        sections: Mapping[str, str] | None = None,
        restore_after: float = 60.0,
        data_dir: Path | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        #: the configured max_concurrent of every cloud backend declared here
        self.max_concurrent = dict(max_concurrent)
        self.cluster_max = dict(cluster_max or {})
        self.daily_budget_usd = daily_budget_usd
        #: a publisher token's daily cloud budget (None: no limit)
        self.publisher_budget = publisher_budget or (lambda _token: None)
        #: why a publisher token may not use the cloud for a capability section (None: it may)
        self.publisher_cloud = publisher_cloud or (lambda _token, _section: None)
        #: the capability section of each cloud backend ('ai_analyze'), for `publisher_cloud`
        self.sections = dict(sections or {})
        self.restore_after = restore_after
        self._path = data_dir / SPEND_FILE if data_dir is not None else None
        self._monotonic = monotonic
        self._wall = wall
        self._lock = threading.Lock()
        self._backoff: dict[str, _Backoff] = {}
        self._peers: dict[str, dict[str, int]] = {}
        #: other nodes' spend today (their reports of this UTC day): node -> (total, by token)
        self._peer_spend: dict[str, tuple[float, dict[str, float]]] = {}
        self._day = ""
        self._spend: dict[str, dict[str, float]] = {"backend": {}, "publisher": {}}
        self._total = 0.0
        self._load()

    @classmethod
    def from_config(
        cls,
        cfg: config.WorkerConfig,
        capabilities: Iterable[catalog.Capability],
        data_dir: Path | None,
        publisher_budget: Callable[[str], float | None] | None = None,
        publisher_cloud: Callable[[str, str], str | None] | None = None,
    ) -> CloudLimits:
        """The limits worker.yaml sets for the cloud backends this node declares
        (`publisher_budget`: a token's budget as the file says now; default: the tokens of
        `cfg`; `publisher_cloud`: why a token may not use the cloud for a section)."""
        tops: dict[str, int] = {}
        sections: dict[str, str] = {}
        for cap in capabilities:
            if cap.is_cloud:
                limit = cap.metadata.get("max_concurrent", "")
                tops[cap.backend] = max(tops.get(cap.backend, 0), int(limit) if limit else 1)
                sections[cap.backend] = cap.function.value.lower()
        if publisher_budget is None:
            budgets = {
                t.id: t.permissions.max_cloud_cost_per_day_usd for t in cfg.auth.access_tokens
            }
            publisher_budget = budgets.get
        return cls(
            tops,
            cluster_max={
                name: r.cluster_max_concurrent for name, r in cfg.cluster.api_rate_limits.items()
            },
            daily_budget_usd=cfg.scheduling.max_cloud_cost_per_day_usd,
            publisher_budget=publisher_budget,
            publisher_cloud=publisher_cloud,
            sections=sections,
            restore_after=cfg.scheduling.rate_limit_restore_sec,
            data_dir=data_dir,
        )

    def active_calls(self, active_by_backend: Mapping[str, int]) -> dict[str, int]:
        """This node's calls in flight per cloud backend (what its heartbeat reports)."""
        return {b: n for b, n in sorted(active_by_backend.items()) if n > 0 and self.is_cloud(b)}

    # --- concurrency ----------------------------------------------------------------------
    def is_cloud(self, backend: str) -> bool:
        return backend in self.max_concurrent

    def rate_limited(self, backend: str) -> int:
        """The provider answered 429: halve the backend's limit (floor 1). Returns it."""
        with self._lock:
            current = self._adaptive(backend)
            if current is None:
                current = self.max_concurrent.get(backend, 1)
            new = max(1, current // 2)
            self._backoff[backend] = _Backoff(new, self._monotonic())
        logger.warning(
            "%s answered 429: at most %d concurrent call(s) here until it stays quiet",
            backend,
            new,
            extra={"action": "rate_limited"},
        )
        return new

    def _adaptive(self, backend: str) -> int | None:
        """The backend's limit after 429s (None when back to max_concurrent); lock held."""
        state = self._backoff.get(backend)
        if state is None:
            return None
        top = self.max_concurrent.get(backend, state.limit)
        steps = int((self._monotonic() - state.since) / self.restore_after)
        if steps > 0:
            state.limit = min(top, state.limit + steps)
            state.since += steps * self.restore_after
        if state.limit >= top:
            del self._backoff[backend]
            return None
        return state.limit

    def set_peer_calls(self, calls: Mapping[str, Mapping[str, int]]) -> bool:
        """What the other live nodes last reported: their active calls per backend. Whether
        that changed anything."""
        clean = {
            node: {str(b): int(n) for b, n in per.items() if isinstance(n, int) and n > 0}
            for node, per in calls.items()
        }
        with self._lock:
            changed = clean != self._peers
            self._peers = clean
        return changed

    def spend_report(self) -> dict[str, object]:
        """This node's spend today, as its peers add it up (`set_peer_spend`)."""
        with self._lock:
            self._roll_day()
            return {
                "day": self._day,
                "total_usd": round(self._total, 6),
                "by_publisher": {k: round(v, 6) for k, v in self._spend["publisher"].items()},
            }

    def set_peer_spend(self, reports: Mapping[str, object]) -> bool:
        """What the other nodes last reported of their spend (`spend_report`); only reports of
        this node's UTC day count, malformed ones are ignored. Whether that changed anything."""
        with self._lock:
            self._roll_day()
            clean = {
                node: parsed
                for node, report in reports.items()
                if (parsed := _spend_of(report, self._day)) is not None
            }
            changed = clean != self._peer_spend
            self._peer_spend = clean
        return changed

    def cluster_spent_today(self, publisher: str | None = None) -> float:
        """Today's cloud spend of every node reported (this one's included), in total or of
        one publisher token."""
        with self._lock:
            self._roll_day()
            return self._cluster_spent(publisher)

    def _cluster_spent(self, publisher: str | None) -> float:
        """`cluster_spent_today`; lock held."""
        if publisher is None:
            return self._total + sum(total for total, _ in self._peer_spend.values())
        own = self._spend["publisher"].get(publisher, 0.0)
        return own + sum(by.get(publisher, 0.0) for _, by in self._peer_spend.values())

    def peer_calls(self, backend: str) -> int:
        with self._lock:
            return sum(per.get(backend, 0) for per in self._peers.values())

    def ceilings(self, publisher: str | None = None) -> dict[str, tuple[int, str]]:
        """Cloud backends whose ceiling is below their max_concurrent now: backend ->
        (calls allowed in flight on this node, why)."""
        out: dict[str, tuple[int, str]] = {}
        if not self.max_concurrent:  # no cloud backend here
            return out
        cap = self.publisher_budget(publisher) if publisher else None  # may read the file
        refused = self._refused(publisher)
        with self._lock:
            self._roll_day()
            spent = self._over_budget(publisher, cap)
            for backend, top in self.max_concurrent.items():
                if backend in refused:
                    out[backend] = (0, refused[backend])
                    continue
                limit, why = top, ""
                adaptive = self._adaptive(backend)
                if adaptive is not None and adaptive < limit:
                    limit, why = adaptive, "halved after HTTP 429"
                cluster = self.cluster_max.get(backend)
                if cluster is not None:
                    others = sum(per.get(backend, 0) for per in self._peers.values())
                    room = max(0, cluster - others)
                    if room < limit:
                        limit = room
                        why = f"cluster_max_concurrent {cluster}, {others} on other nodes"
                if spent:
                    limit, why = 0, spent
                if limit < top:
                    out[backend] = (limit, why)
        return out

    def _refused(self, publisher: str | None) -> dict[str, str]:
        """Cloud backends the publisher's token may not use here, and why."""
        if not publisher:
            return {}
        out = {}
        for backend in self.max_concurrent:
            why = self.publisher_cloud(publisher, self.sections.get(backend, ""))
            if why:
                out[backend] = why
        return out

    def refusal(self, publisher: str | None) -> str:
        """Why the publisher's token may use no cloud backend of this node ('' if it may)."""
        refused = self._refused(publisher)
        return next(iter(refused.values()), "")

    def state(self, active_by_backend: Mapping[str, int]) -> dict[str, object]:
        """What `/api/v1/status` shows: calls in flight, the ceilings below max_concurrent
        and why, today's spend against the budget."""
        return {
            "active_calls": self.active_calls(active_by_backend),
            "max_concurrent": dict(self.max_concurrent),
            "limited": {b: {"limit": n, "why": why} for b, (n, why) in self.ceilings().items()},
            "spent_today_usd": round(self.spent_today(), 6),
            "cluster_spent_today_usd": round(self.cluster_spent_today(), 6),
            "max_cloud_cost_per_day_usd": self.daily_budget_usd,
        }

    # --- spend ----------------------------------------------------------------------------
    def meter(self, backend: str, publisher: str | None) -> usage.CallMeter:
        """What the calls of one attempt on `backend` report to."""
        return _Meter(self, backend, publisher)

    def spend(self, backend: str, publisher: str | None, usd: float) -> None:
        if usd <= 0:
            return
        with self._lock:
            self._roll_day()
            by_backend = self._spend["backend"]
            by_backend[backend] = by_backend.get(backend, 0.0) + usd
            if publisher:
                by_pub = self._spend["publisher"]
                by_pub[publisher] = by_pub.get(publisher, 0.0) + usd
            self._total += usd
            snapshot = self._snapshot()
        self._save(snapshot)

    def spent_today(self, publisher: str | None = None) -> float:
        """Today's (UTC) cloud spend on this node, in total or of one publisher token."""
        with self._lock:
            self._roll_day()
            if publisher is None:
                return self._total
            return self._spend["publisher"].get(publisher, 0.0)

    def budget_reached(self, publisher: str | None = None) -> str:
        """Why cloud backends are off for today ("" when they are not)."""
        cap = self.publisher_budget(publisher) if publisher else None
        with self._lock:
            self._roll_day()
            return self._over_budget(publisher, cap)

    def seconds_to_next_day(self) -> float:
        now = datetime.fromtimestamp(self._wall(), UTC)
        midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        return max(1.0, (midnight - now).total_seconds())

    def _over_budget(self, publisher: str | None, cap: float | None) -> str:
        """Why the cloud is off (`cap`: the publisher's budget); lock held. Both budgets are
        the cluster's: the spend of every node that reported today."""
        where = " on all nodes" if self._peer_spend else ""
        total = self._cluster_spent(None)
        if self.daily_budget_usd is not None and total >= self.daily_budget_usd:
            return (
                f"max_cloud_cost_per_day_usd ${self.daily_budget_usd:g} reached"
                f" (${total:.4f} spent today{where})"
            )
        if cap is not None and publisher is not None:
            spent = self._cluster_spent(publisher)
            if spent >= cap:
                return (
                    f"token {publisher} reached its max_cloud_cost_per_day_usd ${cap:g}"
                    f" (${spent:.4f} spent today{where})"
                )
        return ""

    def _today(self) -> str:
        return datetime.fromtimestamp(self._wall(), UTC).strftime("%Y-%m-%d")

    def _roll_day(self) -> None:
        today = self._today()
        if today != self._day:
            self._day = today
            self._spend = {"backend": {}, "publisher": {}}
            self._total = 0.0
            self._peer_spend = {}  # reports of the day that ended

    def _snapshot(self) -> dict[str, object]:
        return {
            "day": self._day,
            "total_usd": self._total,
            "by_backend": dict(self._spend["backend"]),
            "by_publisher": dict(self._spend["publisher"]),
        }

    def _load(self) -> None:
        self._roll_day()
        if self._path is None or not self._path.is_file():
            return
        try:
            data = json.loads(self._path.read_text(encoding="utf-8"))
            if data.get("day") != self._day:
                return
            self._total = float(data.get("total_usd") or 0.0)
            for key, name in (("backend", "by_backend"), ("publisher", "by_publisher")):
                self._spend[key] = {str(k): float(v) for k, v in dict(data[name]).items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            logger.warning("%s unreadable, today's spend starts at 0: %s", self._path, exc)

    def _save(self, snapshot: dict[str, object]) -> None:
        if self._path is None:
            return
        tmp = self._path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(snapshot), encoding="utf-8")
            os.replace(tmp, self._path)
        except OSError as exc:
            logger.warning("cloud spend not saved: %s", exc, extra={"action": "cloud_spend"})


def _spend_of(report: object, day: str) -> tuple[float, dict[str, float]] | None:
    """A peer's `spend_report` of `day` as (total, by token); None if of another day or
    malformed (a report is what a peer sent: never trusted to be well formed)."""
    if not isinstance(report, dict) or report.get("day") != day:
        return None
    try:
        total = float(report.get("total_usd") or 0.0)
        by = {str(k): float(v) for k, v in dict(report.get("by_publisher") or {}).items()}
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(v) and v >= 0 for v in (total, *by.values())):
        return None
    return total, by


@dataclass
class _Meter:
    limits: CloudLimits
    backend: str
    publisher: str | None

    def rate_limited(self) -> None:
        self.limits.rate_limited(self.backend)

    def spent(self, usd: float) -> None:
        self.limits.spend(self.backend, self.publisher, usd)
