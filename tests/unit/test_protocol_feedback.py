"""The heartbeat answer on the wire between nodes keeps the attempt it is about."""

from __future__ import annotations

import json

from fredica.cluster import protocol
from fredica.domain.models import TaskStatus
from fredica.store.base import HeartbeatFeedback


def test_a_heartbeat_answer_crosses_the_wire_with_its_attempt() -> None:
    fb = HeartbeatFeedback("t1", False, TaskStatus.RUNNING, False, 3)
    wire = json.loads(json.dumps(protocol.feedback_to_json(fb)))
    assert wire["attempt"] == 3
    assert protocol.feedback_from_json(wire) == fb


def test_an_answer_from_an_older_peer_has_no_attempt() -> None:
    old = {"task_id": "t1", "still_owned": True, "status": "running", "cancel_requested": True}
    fb = protocol.feedback_from_json(old)
    assert (fb.still_owned, fb.status, fb.cancel_requested, fb.attempt) == (
        True,
        TaskStatus.RUNNING,
        True,
        None,
    )
