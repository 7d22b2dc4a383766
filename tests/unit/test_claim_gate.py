"""The score gate of claims (seed 001 §6.3): leave a type to a better free peer, claim anyway
after the defer window (starvation guard), prefer the node a SOFT task is pinned to."""

from __future__ import annotations

from fredica.cluster.gate import NO_GATE, ClaimGate, PeerView
from fredica.domain.clock import ManualClock


def gate_with(*peers: PeerView, window: float = 3.0) -> tuple[ClaimGate, ManualClock]:
    clock = ManualClock(0.0)
    gate = ClaimGate("me", window, clock.now)
    gate.update(peers)
    return gate, clock


def test_a_type_a_free_better_peer_scores_higher_on_is_deferred() -> None:
    gate, _ = gate_with(PeerView("a", True, 2, {"TRANSCRIBE": 95.0, "OCR": 40.0}))
    out = gate.apply({"TRANSCRIBE", "OCR"}, {"TRANSCRIBE": 72.0, "OCR": 60.0})
    assert out.deferred_types == {"TRANSCRIBE"}
    assert out.soft_elsewhere == {"a"}


def test_a_busy_offline_or_worse_peer_defers_nothing() -> None:
    for peer in (
        PeerView("a", True, 0, {"T": 95.0}),  # full: the gate opens (seed: "A 满载时")
        PeerView("a", False, 2, {"T": 95.0}),  # offline
    ):
        gate, _ = gate_with(peer)
        assert gate.apply({"T"}, {"T": 38.0}) == NO_GATE
    gate, _ = gate_with(PeerView("a", True, 2, {"T": 30.0}))
    assert gate.apply({"T"}, {"T": 38.0}).deferred_types == frozenset()


def test_a_type_deferred_for_the_window_is_claimed_anyway_then_deferred_again() -> None:
    gate, clock = gate_with(PeerView("a", True, 2, {"T": 95.0}), window=3.0)
    assert gate.apply({"T"}, {"T": 10.0}).deferred_types == {"T"}
    clock.advance(2.9)
    assert gate.apply({"T"}, {"T": 10.0}).deferred_types == {"T"}
    clock.advance(0.2)  # deferred for longer than the window: the starvation guard
    assert gate.apply({"T"}, {"T": 10.0}).deferred_types == frozenset()
    assert gate.apply({"T"}, {"T": 10.0}).deferred_types == {"T"}  # a new window


def test_the_gate_ignores_this_node_in_the_registry() -> None:
    gate, _ = gate_with(PeerView("me", True, 2, {"T": 99.0}))
    assert not gate.needs_scores()
    assert gate.apply({"T"}, {"T": 1.0}) == NO_GATE
