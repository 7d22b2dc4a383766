"""CloudLimits (seed 001 §7.8): adaptive halving and restoring, the cluster's room, the daily
budget per node and per publisher token, kept across restarts and reset each UTC day."""

from __future__ import annotations

import dataclasses
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fredica import auth
from fredica.config import schema
from fredica.domain import errors, models
from fredica.domain.clock import SystemClock
from fredica.domain.models import CloudPreference
from fredica.engine.backends import BackendSelector
from fredica.engine.cloudlimits import CloudLimits
from fredica.executors import usage
from tests.media_support import make_context
from tests.unit.test_cloud_asr import _task

NOON = datetime(2026, 12, 3, 12, 0, tzinfo=UTC).timestamp()


class Clocks:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = NOON


def _limits(clocks: Clocks, tmp_path: Path | None = None, **kw: object) -> CloudLimits:
    return CloudLimits(
        {"deepseek-api": 8, "openai-api": 2},
        restore_after=10.0,
        data_dir=tmp_path,
        monotonic=lambda: clocks.mono,
        wall=lambda: clocks.wall,
        **kw,  # type: ignore[arg-type]
    )


def test_each_429_halves_down_to_one_and_each_quiet_interval_gives_one_back() -> None:
    clocks = Clocks()
    limits = _limits(clocks)
    assert limits.ceilings() == {}
    assert [limits.rate_limited("deepseek-api") for _ in range(5)] == [4, 2, 1, 1, 1]
    assert limits.ceilings() == {"deepseek-api": (1, "halved after HTTP 429")}
    clocks.mono += 9.9  # not yet a full quiet interval
    assert limits.ceilings()["deepseek-api"][0] == 1
    clocks.mono += 0.1
    assert limits.ceilings()["deepseek-api"][0] == 2
    clocks.mono += 25  # two more intervals
    assert limits.ceilings()["deepseek-api"][0] == 4
    limits.rate_limited("deepseek-api")  # a 429 while restoring halves what is allowed now
    assert limits.ceilings()["deepseek-api"][0] == 2
    clocks.mono += 60
    assert limits.ceilings() == {}  # back to max_concurrent, and no further


def test_the_cluster_room_counts_the_live_peers_calls() -> None:
    clocks = Clocks()
    limits = _limits(clocks, cluster_max={"deepseek-api": 5})
    assert limits.ceilings() == {"deepseek-api": (5, "cluster_max_concurrent 5, 0 on other nodes")}
    assert limits.set_peer_calls({"b": {"deepseek-api": 3}, "c": {"deepseek-api": 1}})
    assert limits.ceilings()["deepseek-api"][0] == 1
    assert not limits.set_peer_calls({"b": {"deepseek-api": 3}, "c": {"deepseek-api": 1}})
    limits.set_peer_calls({"b": {"deepseek-api": 9}})
    assert limits.ceilings()["deepseek-api"] == (0, "cluster_max_concurrent 5, 9 on other nodes")
    assert limits.active_calls({"deepseek-api": 2, "local-extractive": 3, "openai-api": 0}) == {
        "deepseek-api": 2
    }


def test_the_daily_budget_closes_every_cloud_backend_until_the_next_utc_day(
    tmp_path: Path,
) -> None:
    clocks = Clocks()
    limits = _limits(clocks, tmp_path, daily_budget_usd=1.0)
    limits.spend("deepseek-api", None, 0.6)
    assert limits.ceilings() == {}
    limits.spend("openai-api", None, 0.4)
    closed = limits.ceilings()
    assert set(closed) == {"deepseek-api", "openai-api"}
    assert {v[0] for v in closed.values()} == {0}
    assert "max_cloud_cost_per_day_usd $1 reached" in closed["openai-api"][1]
    assert limits.seconds_to_next_day() == 12 * 3600
    # a restart the same day remembers the spend
    again = _limits(clocks, tmp_path, daily_budget_usd=1.0)
    assert again.spent_today() == pytest.approx(1.0) and again.budget_reached()
    # the next UTC day starts at 0
    clocks.wall += 12 * 3600
    assert again.ceilings() == {} and again.spent_today() == 0.0
    assert _limits(clocks, tmp_path, daily_budget_usd=1.0).spent_today() == 0.0


def test_a_publishers_budget_makes_its_cloud_only_task_wait_for_the_next_day(
    tmp_path: Path,
) -> None:
    cfg = schema.parse_config(
        {
            "capabilities": {
                "ai_analyze": {
                    "enabled": True,
                    "providers": [
                        {"backend": "deepseek-api", "api_key": "sk-x", "cost_per_unit_usd": 0.01}
                    ],
                }
            },
            "auth": {
                "access_tokens": [
                    {"id": "tok-a", "token_hash": "sha256:" + "0" * 64,
                     "permissions": {"max_cloud_cost_per_day_usd": 0.5}},
                ]
            },
        },
        "test",
    )  # fmt: skip
    selector = BackendSelector.from_config(cfg, {})
    selector.limits = CloudLimits.from_config(cfg, selector.capabilities, tmp_path)

    def analyze(publisher: str, preference: CloudPreference) -> models.Task:
        task = _task("AI_ANALYZE", {"text": "x"}, preference)
        return dataclasses.replace(task, publisher_id=publisher)

    selector.limits.spend("deepseek-api", "tok-a", 0.5)
    # tok-a's AUTO task falls back to the local backend; another publisher's uses the cloud
    assert selector.choose(analyze("tok-a", CloudPreference.AUTO), {}, 0).backend == (
        "local-extractive"
    )
    assert selector.choose(analyze("tok-b", CloudPreference.AUTO), {}, 0).backend == (
        "deepseek-api"
    )
    # tok-a's cloud_only task waits for the next day, named as such
    with pytest.raises(errors.RateLimitedError) as caught:
        selector.choose(analyze("tok-a", CloudPreference.CLOUD_ONLY), {}, 0)
    assert "tok-a reached its max_cloud_cost_per_day_usd $0.5" in caught.value.message
    assert caught.value.retry_after_sec is not None and caught.value.retry_after_sec > 0


async def test_a_charge_is_recorded_only_with_a_price_and_reaches_the_bound_meter(
    tmp_path: Path,
) -> None:
    clocks = Clocks()
    limits = _limits(clocks)
    ctx = await make_context(
        tmp_path, "AI_ANALYZE", {}, backend="deepseek-api",
        backend_config={"cost_per_unit_usd": 0.002},
    )  # fmt: skip
    usage.bind(limits.meter("deepseek-api", "tok-a"))
    try:
        assert usage.charge(ctx, 1.5, "1k_tokens") == pytest.approx(0.003)
        ctx.backend_config = {}
        assert usage.charge(ctx, 1.5, "1k_tokens") is None
        usage.rate_limited()
    finally:
        usage.bind(None)
    assert limits.spent_today() == pytest.approx(0.003)
    assert limits.spent_today("tok-a") == pytest.approx(0.003)
    assert limits.ceilings()["deepseek-api"][0] == 4


def test_a_token_created_while_the_node_runs_has_its_budget_enforced_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "worker.yaml"
    path.write_text("auth:\n  mode: token\n")
    authenticator = auth.Authenticator(schema.load_config(path).auth, SystemClock(), path)
    limits = CloudLimits({"deepseek-api": 2}, publisher_budget=authenticator.cloud_budget)
    limits.spend("deepseek-api", "tok-new", 0.3)
    assert limits.ceilings("tok-new") == {}  # no such token yet: no budget
    entry = {"id": "tok-new", "token_hash": auth.hash_token("x"),
             "permissions": {"max_cloud_cost_per_day_usd": 0.25}}  # fmt: skip
    schema.add_access_token(path, entry)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))  # a new mtime, surely
    limit, why = limits.ceilings("tok-new")["deepseek-api"]
    assert limit == 0 and "tok-new reached its max_cloud_cost_per_day_usd $0.25" in why
    assert limits.ceilings("tok-other") == {} and limits.ceilings() == {}


def test_the_budgets_add_up_the_spend_the_peers_reported_for_this_utc_day() -> None:
    clocks = Clocks()
    limits = _limits(clocks, daily_budget_usd=1.0, publisher_budget={"tok-a": 0.5}.get)
    limits.spend("deepseek-api", "tok-a", 0.3)
    assert limits.spend_report() == {
        "day": "2026-12-03",
        "total_usd": 0.3,
        "by_publisher": {"tok-a": 0.3},
    }
    # a peer's report of today counts, one of another day or malformed does not
    assert limits.set_peer_spend(
        {
            "b": {"day": "2026-12-03", "total_usd": 0.25, "by_publisher": {"tok-a": 0.2}},
            "c": {"day": "2026-12-02", "total_usd": 9.0, "by_publisher": {"tok-a": 9.0}},
            "d": {"day": "2026-12-03", "total_usd": "lots"},
            "e": {"day": "2026-12-03", "total_usd": float("nan")},
            "f": None,
        }
    )
    assert limits.cluster_spent_today() == pytest.approx(0.55)
    assert limits.spent_today() == pytest.approx(0.3)
    # tok-a spent 0.3 here and 0.2 on b: its 0.5 budget is reached, for it only
    assert "tok-a reached its max_cloud_cost_per_day_usd $0.5" in limits.budget_reached("tok-a")
    assert "on all nodes" in limits.budget_reached("tok-a")
    assert limits.budget_reached("tok-b") == "" and limits.budget_reached() == ""
    limits.set_peer_spend({"b": {"day": "2026-12-03", "total_usd": 0.7, "by_publisher": {}}})
    assert "max_cloud_cost_per_day_usd $1 reached ($1.0000 spent today on all nodes)" in (
        limits.budget_reached()
    )
    # the next UTC day, yesterday's reports no longer count
    clocks.wall += 12 * 3600
    assert limits.cluster_spent_today() == 0.0 and limits.budget_reached() == ""
