"""The owner's lease (node/ownership.py): a node acts as the owner of its pipelines while the
nodes it is in contact with, itself included, are at least half of the nodes it knows."""

from __future__ import annotations

from fredica.node.ownership import Lease


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0
        self.lease: Lease | None = None

    def __call__(self) -> float:
        return self.t

    def run(self, seconds: float) -> None:
        """Time passes with the node awake: its lease's clock ticks every 0.5 s."""
        end = self.t + seconds
        while self.t < end:
            self.t = min(end, self.t + 0.5)
            if self.lease is not None:
                self.lease.tick()


def lease_with(peers: list[str], clock: Clock, wait: float = 10.0) -> Lease:
    lease = Lease(wait, now=clock)
    lease.peers_known = True
    lease.known = set(peers)
    clock.lease = lease
    for peer in peers:
        lease.heard(peer)
    return lease


def test_two_nodes_the_one_left_keeps_acting_while_its_peer_sleeps() -> None:
    # Given a NAS that knows one peer, a desktop that answered last 30 s ago (wait 10 s)
    clock = Clock()
    lease = lease_with(["desktop"], clock)
    clock.run(30)

    # Then it still acts: one of two nodes is half the cluster
    assert lease.in_contact() == 0
    assert lease.valid()


def test_three_nodes_an_isolated_node_fences_itself_after_half_the_wait() -> None:
    clock = Clock()
    lease = lease_with(["b", "c"], clock)
    clock.run(4.9)
    assert lease.valid()  # both answered 4.9 s ago: in contact

    # When only b answers for longer than half the wait, it still acts (2 of 3)
    lease.heard("b")
    clock.run(0.2)
    assert lease.in_contact() == 1 and lease.valid()

    # When neither answers for half the wait (5 s), it stops acting
    clock.run(5)
    assert lease.in_contact() == 0
    assert not lease.valid()

    # And a peer's answer alone brings it back once the moves were asked (heard)
    lease.heard("c")
    assert lease.valid()


def test_five_nodes_one_peer_is_not_enough() -> None:
    clock = Clock()
    lease = lease_with(["b", "c", "d", "e"], clock)
    clock.run(6)
    lease.heard("b")
    assert not lease.valid()  # 2 of 5
    lease.heard("c")
    assert lease.valid()  # 3 of 5


def test_a_start_after_a_long_absence_waits_for_an_answer_even_with_two_nodes() -> None:
    clock = Clock()
    lease = lease_with(["desktop"], clock)
    lease.unconfirm()  # as Ownership.start does after a long absence
    assert not lease.valid()
    lease.heard("desktop")
    assert lease.valid()


def test_the_node_that_slept_stops_until_a_peer_answers_even_with_two_nodes() -> None:
    # Given a desktop that knows its NAS; it sleeps for 30 s (its clock does not tick)
    clock = Clock()
    lease = lease_with(["nas"], clock)
    clock.run(1)
    clock.t += 30

    # Then on waking it acts on nothing (the NAS may have taken its pipelines over)
    assert not lease.valid()
    lease.tick()
    assert not lease.valid()

    # until the NAS answers (and it was asked what moved)
    lease.heard("nas")
    assert lease.valid()


def test_without_known_peers_nothing_can_take_over_so_it_always_acts() -> None:
    clock = Clock()
    lease = Lease(10.0, now=clock)
    clock.run(100)
    assert lease.valid()
