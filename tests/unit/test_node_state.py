"""A node's state (seed 001 §2.2): the rules, for the node itself and as its peers see it."""

from __future__ import annotations

import pytest

from fredica.domain.node_state import NodeStatus, node_status, observed_status

N = NodeStatus


@pytest.mark.parametrize(
    ("reachable", "draining", "quarantined", "running", "max_workers", "expected"),
    [
        (True, False, False, 0, 2, N.ONLINE),
        (True, False, False, 1, 2, N.ONLINE),
        (True, False, False, 2, 2, N.BUSY),  # no free slot
        (True, False, False, 3, 2, N.BUSY),
        (True, False, False, 0, 0, N.ONLINE),  # no slots at all is not "busy"
        (True, True, False, 0, 2, N.DRAINING),
        (True, True, False, 2, 2, N.DRAINING),  # draining wins over busy
        (True, False, True, 2, 2, N.QUARANTINED),
        (True, True, True, 0, 2, N.DRAINING),  # the user's drain wins over a quarantine
        (False, True, True, 2, 2, N.OFFLINE),  # unreachable wins over everything
        (False, False, False, 0, 2, N.OFFLINE),
    ],
)
def test_node_status_rules(
    reachable: bool,
    draining: bool,
    quarantined: bool,
    running: int,
    max_workers: int,
    expected: NodeStatus,
) -> None:
    assert (
        node_status(
            reachable=reachable,
            draining=draining,
            quarantined=quarantined,
            running=running,
            max_workers=max_workers,
        )
        is expected
    )


def test_only_online_and_busy_nodes_take_new_work() -> None:
    assert {s for s in NodeStatus if s.claims} == {N.ONLINE, N.BUSY}


def test_a_peer_is_busy_from_the_load_it_reports() -> None:
    # it said "online" a moment ago, but its last heartbeat has no free slot
    assert observed_status("online", {"running": 2}, 2, True) is N.BUSY
    assert observed_status("online", {"free_slots": 0}, 3, True) is N.BUSY
    # and the other way round: it said busy, its load now has a free slot
    assert observed_status("busy", {"running": 1, "free_slots": 1}, 2, True) is N.ONLINE
    # nothing about its load: what it said stands
    assert observed_status("busy", {}, 2, True) is N.BUSY
    assert observed_status("online", {}, 2, True) is N.ONLINE


def test_a_peer_keeps_the_flags_it_reported_and_is_offline_when_lost() -> None:
    assert observed_status("draining", {"running": 2}, 2, True) is N.DRAINING
    assert observed_status("quarantined", {"running": 0}, 2, True) is N.QUARANTINED
    assert observed_status("draining", {"running": 0}, 2, False) is N.OFFLINE  # stale
    assert observed_status("offline", {"running": 0}, 2, True) is N.OFFLINE  # said goodbye
    # an unknown word from a newer peer is not a state: judged by its load
    assert observed_status("sleepy", {"running": 0}, 2, True) is N.ONLINE
