"""What a cloud call tells the node beyond its result: that the provider rate-limited it (HTTP
429) and what it cost (seed 001 §7.8; `engine.cloudlimits` acts on both).

The engine binds a `CallMeter` to the asyncio task that runs an attempt on a cloud backend (as
`tasklog` binds the attempt's log); the shared HTTP helpers (`httperrors.for_status`) and the
cloud executors report through it. Outside such an attempt (executor unit tests, local
backends) nothing is bound and reporting does nothing.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Protocol

from fredica.executors.context import TaskContext

logger = logging.getLogger(__name__)


class CallMeter(Protocol):
    """Receives what the calls of one attempt on one cloud backend report."""

    def rate_limited(self) -> None:
        """The provider answered 429: it wants fewer concurrent calls."""
        ...

    def spent(self, usd: float) -> None:
        """A call cost `usd` (the provider's own count of units at the configured price)."""
        ...


_current: contextvars.ContextVar[CallMeter | None] = contextvars.ContextVar(
    "fredica_call_meter", default=None
)


def bind(meter: CallMeter | None) -> None:
    """Make `meter` the one this asyncio task (and what it starts) reports to."""
    _current.set(meter)


def rate_limited() -> None:
    """Tell the bound meter that the provider answered 429 (nothing when none is bound)."""
    meter = _current.get()
    if meter is not None:
        meter.rate_limited()


def charge(ctx: TaskContext, units: float, unit: str) -> float | None:
    """Record that the call used `units` of the backend's cost `unit` (e.g. 1k_tokens): its
    price in USD from the backend's `cost_per_unit_usd`, as a `cloud_cost` event of the task
    and towards the node's daily spend. None (nothing recorded) when no price is configured."""
    price = ctx.backend_config.get("cost_per_unit_usd")
    if price is None or units < 0:
        return None
    try:
        usd = float(units) * float(price)
    except (TypeError, ValueError):
        return None
    ctx.event("cloud_cost", f"{ctx.backend}: {units:.4g} {unit} at ${float(price):g} = ${usd:.6f}")
    meter = _current.get()
    if meter is not None:
        meter.spent(usd)
    return usd
