"""The score gate of claims (seed 001 §6.3): leave a type to a better free peer, prefer the node
a SOFT task is pinned to. The starvation guard runs per ready task, inside the claim
(`tests/contract/test_claim_gates.py`)."""

from __future__ import annotations

from fredica.cluster.gate import NO_GATE, ClaimGate, PeerView


def gate_with(*peers: PeerView, window: float = 3.0) -> tuple[ClaimGate, None]:
    gate = ClaimGate("me", window)
    gate.update(peers)
    return gate, None


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


def test_a_type_stays_deferred_however_long_this_node_has_deferred_it() -> None:
    # the old guard let one poll through each time a per-type window ended, whatever task
    # was ready then: a task made just before that poll went to the worse node
    gate, _ = gate_with(PeerView("a", True, 2, {"T": 95.0}), window=3.0)
    for _ in range(5):
        assert gate.apply({"T"}, {"T": 10.0}).deferred_types == {"T"}
    assert gate.defer_window == 3.0


def test_the_gate_ignores_this_node_in_the_registry() -> None:
    gate, _ = gate_with(PeerView("me", True, 2, {"T": 99.0}))
    assert not gate.needs_scores()
    assert gate.apply({"T"}, {"T": 1.0}) == NO_GATE
