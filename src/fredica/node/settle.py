"""The settle phase of a takeover (docs/ownership.md): before a node opens a silent owner's
pipeline to claims, the rows of its replica are corrected by what the peers say they run or
ran of it.

A replica lags its owner by a pull. When the owner stops, the last claims it granted and the
last results it accepted may be in no replica yet: read from the replica alone, a task a peer
is running, or has finished, looks runnable, and would run twice. So the successor asks every
online peer (`GET /cluster/claims?owner=`) and, for each task, takes the newest word:

- a claim held (`running`) or a report sent (`complete`, `fail`) at an attempt not older than
  the replica's makes the row `running`, claimed by that peer at that attempt, heard from now;
- the reports among them are applied once the pipeline is adopted, through the store's usual
  fences (the claimer and the attempt must match), as if the peer had sent them to the new
  owner;
- a word about an older attempt than the replica's is a zombie's and is ignored, and so is
  any word about a task the replica already shows ended.

This module is pure: `patch` takes the transfer and the answers and returns what to adopt and
what to apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fredica.domain.models import JSON, Task, TaskStatus
from fredica.store.base import Transfer

#: the kinds of word a peer gives, weakest first (at one attempt, a report beats a claim)
KINDS = ("running", "fail", "complete")


@dataclass(frozen=True, slots=True)
class Word:
    """What one peer says of one task of the silent owner."""

    node_id: str
    task_id: str
    attempt: int
    kind: str  # one of KINDS
    body: JSON | None = None  # the report as sent (complete, fail)

    @property
    def rank(self) -> tuple[int, int]:
        return (self.attempt, KINDS.index(self.kind))


def words_of(answer: JSON) -> list[Word]:
    """The `Word`s of one peer's `/cluster/claims` answer (malformed items are skipped: a
    peer of another version may say more)."""
    node_id = str(answer.get("node_id") or "")
    words: list[Word] = []
    if not node_id:
        return words
    for item in answer.get("running") or []:
        if isinstance(item, dict) and isinstance(item.get("attempt"), int):
            words.append(Word(node_id, str(item.get("task_id")), int(item["attempt"]), "running"))
    for item in answer.get("reports") or []:
        if not isinstance(item, dict) or item.get("kind") not in ("complete", "fail"):
            continue
        body = item.get("body")
        if not isinstance(body, dict) or not isinstance(item.get("attempt"), int):
            continue
        words.append(
            Word(node_id, str(body.get("task_id")), int(item["attempt"]), str(item["kind"]), body)
        )
    return words


def newest(words: Iterable[Word]) -> dict[str, Word]:
    """Per task, the newest word (highest attempt; at one attempt a report over a claim)."""
    best: dict[str, Word] = {}
    for word in words:
        held = best.get(word.task_id)
        if held is None or word.rank > held.rank:
            best[word.task_id] = word
    return best


def patch(transfer: Transfer, words: Sequence[Word], now: float) -> tuple[Transfer, list[Word]]:
    """`transfer` (from the replica) corrected by the peers' `words`; returns it and the
    reports to apply after adopting it, in task order."""
    best = newest(words)
    tasks: list[Task] = []
    reports: list[Word] = []
    for task in transfer.tasks:
        word = best.get(task.id)
        if word is None or task.status.is_terminal or word.attempt < task.attempt:
            tasks.append(task)
            continue
        tasks.append(
            dataclasses.replace(
                task,
                status=TaskStatus.RUNNING,
                claimed_by=word.node_id,
                original_claimed_by=task.original_claimed_by or word.node_id,
                attempt=word.attempt,
                claimed_at=task.claimed_at or now,
                started_at=task.started_at or now,
                heartbeat_at=now,
                stale_at=None,
            )
        )
        if word.kind != "running":
            reports.append(word)
    return dataclasses.replace(transfer, tasks=tuple(tasks)), reports
