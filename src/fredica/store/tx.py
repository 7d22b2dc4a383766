"""One write transaction of a SQL store: change sequence, events, counters, cascades.

`Tx.transition` is the single path for every status change: it checks the state machine,
applies a compare-and-set on the expected status, writes the `task_event`, adjusts the pipeline
counters by delta, decrements children's `unmet_deps` when a parent becomes completed/skipped,
cascades UPSTREAM_FAILED to the pending dependents of a failed/cancelled task (and revives them
when that task is retried or skipped), and re-derives the pipeline status at commit.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

from fredica.domain import errors, states
from fredica.domain.models import ErrorType, NewTask, Pipeline, TaskStatus
from fredica.domain.spawn import SpawnPlan
from fredica.store import schema
from fredica.store.rows import (
    PIPELINE_COLUMNS,
    TASK_COLUMNS,
    Conn,
    Cursor,
    Dialect,
    Row,
    counts_of,
    dumps,
)

logger = logging.getLogger(__name__)

S = TaskStatus

VALUES_PER_STATEMENT = 500  # rows of one multi-row statement
PARAMS_PER_STATEMENT = 30_000  # under SQLite's 32,766 bound parameters (PostgreSQL: 65,535)
_TASK_INSERT_COLUMNS = (
    "id, type, pipeline_id, material_id, status, priority, depends_on, "
    "payload, cache_policy, cloud_preference, publisher_id, idempotency_key, "
    "max_retries, created_by, owner_id, file_node_id, affinity_kind, affinity_node_id, "
    "is_pausable, change_seq, unmet_deps, created_at, updated_at, ready_since"
)
_TASK_INSERT_VALUES = (
    "?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"
)
# an event carries its task's insertion order: the index (task_ord, task_id) keeps the events
# of tasks created together on the same pages
_INSERT_EVENT = (
    "INSERT INTO task_event (task_id, task_ord, node_id, event_type, message, occurred_at) "
    "VALUES (?, COALESCE((SELECT ord FROM task WHERE id = ?), 0), ?, ?, ?, ?)"
)


class Tx:
    """One write transaction: change sequence, events, counters, cascades."""

    def __init__(
        self,
        conn: Conn,
        dialect: Dialect,
        node_id: str,
        now: float,
        allocate_seq: Callable[[Conn], int],
        own: tuple[str, tuple[Any, ...]] = ("1 = 1", ()),
    ) -> None:
        self.conn = conn
        self.dialect = dialect
        self.node_id = node_id
        self.now = now
        #: SQL predicate (and its parameters) for the rows this store is authoritative for
        self.own_sql, self.own_params = own
        self._allocate_seq = allocate_seq
        self._seq: int | None = None
        #: work may have become claimable (a task became pending, or a parent finished)
        self.ready = False
        self._deltas: defaultdict[str, defaultdict[str, int]] = defaultdict(
            lambda: defaultdict(int)
        )
        self._touched_pipelines: set[str] = set()
        self.events_written = 0

    @property
    def seq(self) -> int:
        """This transaction's change sequence (allocated on first use)."""
        if self._seq is None:
            self._seq = self._allocate_seq(self.conn)
        return self._seq

    @property
    def changed(self) -> bool:
        """Did this transaction change a task or pipeline row (they all carry its sequence)?"""
        return self._seq is not None

    def mark_changed(self) -> None:
        """Say that this transaction changed rows although it stamped none (it deleted them):
        subscribers and other processes hear of it like any other change."""
        _ = self.seq

    def q(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return self.conn.execute(sql, params)

    def task_row(self, task_id: str) -> Row:
        """The task's row, locked for this transaction where the database locks rows."""
        row = self.q(
            f"SELECT {TASK_COLUMNS} FROM task WHERE id = ?{self.dialect.lock}", (task_id,)
        ).fetchone()
        if row is None:
            raise errors.NotFound(f"task {task_id} not found")
        return cast(Row, row)

    def tuples(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows as plain tuples (the hot path: no per-column name lookups)."""
        if self.dialect.tuples is None:
            return [tuple(r) for r in self.q(sql, params)]
        return self.dialect.tuples(self.conn, sql, params)

    def rows_of(self, sql: str, params: Sequence[Any], columns: Sequence[str]) -> list[list[Any]]:
        """The rows of a query returning `columns` (text and integers only), read in one step
        where the dialect can."""
        if not self.dialect.one_step_rows:
            return [list(r) for r in self.tuples(sql, params)]
        wrapped = f"SELECT json_group_array(json_array({', '.join(columns)})) FROM ({sql})"
        text = self.tuples(wrapped, params)[0][0]
        return json.loads(text) if text else []

    def qmany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement for many parameter rows (a single driver call)."""
        if rows:
            self.conn.executemany(sql, rows)

    def values(
        self,
        head: str,
        row: str,
        rows: Sequence[Sequence[Any]],
        tail: str = "",
        tail_params: Sequence[Any] = (),
    ) -> None:
        """`head VALUES row, row, … tail` for `rows`, a few hundred rows per statement: one
        database step per statement instead of one per row (with SQLite, every step lets the
        event loop's thread take the interpreter lock away from the store's)."""
        if not rows:
            return
        per = max(1, min(VALUES_PER_STATEMENT, PARAMS_PER_STATEMENT // max(1, len(rows[0]))))
        for start in range(0, len(rows), per):
            chunk = rows[start : start + per]
            sql = f"{head} VALUES {', '.join(row for _ in chunk)}{tail}"
            self.q(sql, [*itertools.chain.from_iterable(chunk), *tail_params])

    def events_of(self, events: Sequence[tuple[str, int, str, str | None, float | None]]) -> None:
        """Write `(task_id, task_ord, event_type, message, at)` events in one statement (the
        caller read each task's `ord` already)."""
        self.values(
            "INSERT INTO task_event (task_id, task_ord, node_id, event_type, message, occurred_at)",
            "(?, ?, ?, ?, ?, ?)",
            [(t, o, self.node_id, kind, msg, at or self.now) for t, o, kind, msg, at in events],
        )
        self.events_written += len(events)

    def parents_satisfied(self, parent_ids: Sequence[str]) -> None:
        """`parent_ids` became completed or skipped: their dependents have one unmet
        dependency fewer for each (a child of two of them, two fewer)."""
        if not parent_ids:
            return
        marks = ",".join("?" for _ in parent_ids)
        met = (
            "(SELECT COUNT(*) FROM task_dep d "
            f"WHERE d.task_id = task.id AND d.parent_id IN ({marks}))"
        )
        # a task whose last dependency is met becomes ready now: the score gate's starvation
        # window runs from this `ready_since` (seed 001 §6.3)
        cur = self.q(
            f"UPDATE task SET unmet_deps = unmet_deps - {met}, "
            f"ready_since = CASE WHEN unmet_deps - {met} <= 0 THEN ? ELSE ready_since END "
            f"WHERE id IN (SELECT task_id FROM task_dep WHERE parent_id IN ({marks}))",
            [*parent_ids, *parent_ids, self.now, *parent_ids],
        )
        if cur.rowcount:
            self.ready = True

    def event(
        self, task_id: str, event_type: str, message: str | None = None, at: float | None = None
    ) -> None:
        self.q(_INSERT_EVENT, (task_id, task_id, self.node_id, event_type, message, at or self.now))
        self.events_written += 1

    def bump(
        self, pipeline_id: str | None, old: TaskStatus | None, new: TaskStatus, n: int = 1
    ) -> None:
        """`n` tasks of `pipeline_id` went from `old` (None: new tasks) to `new`."""
        if pipeline_id is None:
            return
        delta = self._deltas[pipeline_id]
        if old is not None:
            delta[old.value] -= n
        delta[new.value] += n
        self._touched_pipelines.add(pipeline_id)

    def touch_pipeline(self, pipeline_id: str) -> None:
        self._touched_pipelines.add(pipeline_id)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A nested unit: on error both the database changes and this transaction's pending
        counter deltas roll back to where it began."""
        deltas = {k: dict(v) for k, v in self._deltas.items()}
        touched, ready, events = set(self._touched_pipelines), self.ready, self.events_written
        self.q("SAVEPOINT item")
        try:
            yield
        except BaseException:
            self.q("ROLLBACK TO SAVEPOINT item")
            self.q("RELEASE SAVEPOINT item")
            self._deltas = defaultdict(lambda: defaultdict(int))
            for k, v in deltas.items():
                self._deltas[k].update(v)
            self._touched_pipelines, self.ready, self.events_written = touched, ready, events
            raise
        self.q("RELEASE SAVEPOINT item")

    # --- the one transition function --------------------------------------------------------
    def transition(
        self,
        row: Row,
        new: TaskStatus,
        *,
        event_type: str | None = None,
        message: str | None = None,
        **sets: Any,
    ) -> None:
        old = TaskStatus(row["status"])
        task_id = row["id"]
        if not states.can_transition(old, new):
            raise errors.IllegalTransition(
                f"task {task_id} is {old.value}; {old.value} -> {new.value} is not allowed"
            )
        values = {"status": new.value, "updated_at": self.now, "change_seq": self.seq, **sets}
        if new is S.PENDING:
            values["ready_since"] = self.now  # back to pending: ready again from now
        assignments = ", ".join(f"{k} = ?" for k in values)
        cur = self.q(
            f"UPDATE task SET {assignments} WHERE id = ? AND status = ?",
            (*values.values(), task_id, old.value),
        )
        if cur.rowcount != 1:  # rows are locked (or the database is) first; kept as a guard
            raise errors.IllegalTransition(f"task {task_id} changed concurrently")
        self.event(task_id, event_type or new.value, message)
        self.bump(row["pipeline_id"], old, new)
        if new is S.PENDING:
            self.ready = True
        if new.satisfies_dependency and not old.satisfies_dependency:
            self.parents_satisfied([task_id])
        dead = (S.FAILED, S.CANCELLED)
        if new in dead and old not in dead:
            self._cascade_upstream_failed(task_id, new)
        if old in dead and new in (S.PENDING, S.SKIPPED):
            self._revive_dependents(task_id)

    def _children(self, task_id: str, status: TaskStatus) -> list[Row]:
        return list(
            self.q(
                f"SELECT {TASK_COLUMNS} FROM task WHERE status = ? AND id IN "
                "(SELECT task_id FROM task_dep WHERE parent_id = ?) "
                f"ORDER BY id{self.dialect.lock}",
                (status.value, task_id),
            )
        )

    def _cascade_upstream_failed(self, task_id: str, status: TaskStatus) -> None:
        for child in self._children(task_id, S.PENDING):
            self.transition(
                child,
                S.CANCELLED,
                event_type="upstream_failed",
                message=f"upstream task {task_id} {status.value}",
                error=f"upstream task {task_id} {status.value}",
                error_type=ErrorType.UPSTREAM_FAILED.value,
                completed_at=self.now,
            )

    def _revive_dependents(self, task_id: str) -> None:
        for child in self._children(task_id, S.CANCELLED):
            if child["error_type"] != ErrorType.UPSTREAM_FAILED.value:
                continue
            other_dead = self.q(
                "SELECT 1 FROM task_dep d JOIN task p ON p.id = d.parent_id "
                "WHERE d.task_id = ? AND p.id != ? AND p.status IN ('failed', 'cancelled') "
                "LIMIT 1",
                (child["id"], task_id),
            ).fetchone()
            if other_dead is None:
                self.transition(
                    child,
                    S.PENDING,
                    event_type="revived",
                    message=f"upstream task {task_id} is runnable again",
                    error=None,
                    error_type=None,
                    completed_at=None,
                )

    # --- pipelines ----------------------------------------------------------------------------
    def flush_pipelines(self) -> None:
        """Apply counter deltas and re-derive the status of every touched pipeline."""
        for pipeline_id in sorted(self._touched_pipelines):
            delta: dict[str, int] = self._deltas.get(pipeline_id, {})
            changes = {k: v for k, v in delta.items() if v}
            if changes:
                assignments = ", ".join(f"n_{k} = n_{k} + ?" for k in changes)
                self.q(
                    f"UPDATE pipeline_instance SET {assignments} WHERE id = ?",
                    (*changes.values(), pipeline_id),
                )
            self.rederive(pipeline_id)
        self._deltas.clear()
        self._touched_pipelines.clear()

    def rederive(self, pipeline_id: str) -> None:
        row = self.q(
            f"SELECT {PIPELINE_COLUMNS} FROM pipeline_instance WHERE id = ?{self.dialect.lock}",
            (pipeline_id,),
        ).fetchone()
        if row is None:
            return
        counts = counts_of(row)
        status = states.derive_pipeline_status(counts, bool(row["cancel_requested"]))
        completed_at = row["completed_at"]
        if status.is_terminal and completed_at is None:
            completed_at = self.now
        elif not status.is_terminal:
            completed_at = None
        if (
            status.value != row["status"]
            or counts.total != row["total_tasks"]
            or counts.done != row["done_tasks"]
            or completed_at != row["completed_at"]
        ):
            self.q(
                "UPDATE pipeline_instance SET status = ?, total_tasks = ?, done_tasks = ?, "
                "completed_at = ?, updated_at = ?, change_seq = ? WHERE id = ?",
                (
                    status.value,
                    counts.total,
                    counts.done,
                    completed_at,
                    self.now,
                    self.seq,
                    pipeline_id,
                ),
            )
        else:
            self.q(
                "UPDATE pipeline_instance SET updated_at = ?, change_seq = ? WHERE id = ?",
                (self.now, self.seq, pipeline_id),
            )

    def recount(self, pipeline_id: str) -> None:
        """Recompute the counters from the task rows (start-up reconciliation).

        The rows already include this transaction's changes, so its pending deltas for the
        pipeline are dropped instead of being applied on top of the absolute counts."""
        self._deltas.pop(pipeline_id, None)
        # Lock the pipeline first: a completion holding it commits before the count is taken,
        # so its change is counted instead of overwritten (where rows lock; SQLite locks all).
        self.q(f"SELECT id FROM pipeline_instance WHERE id = ?{self.dialect.lock}", (pipeline_id,))
        counts = {s.value: 0 for s in TaskStatus}
        for r in self.q(
            "SELECT status, COUNT(*) AS n FROM task WHERE pipeline_id = ? GROUP BY status",
            (pipeline_id,),
        ):
            counts[r["status"]] = r["n"]
        assignments = ", ".join(f"n_{k} = ?" for k in counts)
        self.q(
            f"UPDATE pipeline_instance SET {assignments} WHERE id = ?",
            (*counts.values(), pipeline_id),
        )
        self.rederive(pipeline_id)

    # --- inserting tasks ------------------------------------------------------------------------
    def insert_tasks(
        self,
        specs: Sequence[NewTask],
        pipeline_id: str | None,
        material_id: str | None,
        owner: str,
        adopt: bool = True,
    ) -> list[tuple[str, bool]]:
        """`insert_task` for each spec, in order; the plain ones (no dependencies, no
        idempotency key) go in one driver call per run of them."""
        out: list[tuple[str, bool]] = []
        plain: list[NewTask] = []
        for spec in specs:
            if spec.depends_on or spec.idempotency_key is not None:
                out += self._insert_plain(plain, pipeline_id, material_id, owner)
                plain = []
                out.append(self.insert_task(spec, pipeline_id, material_id, owner, adopt))
            else:
                plain.append(spec)
        out += self._insert_plain(plain, pipeline_id, material_id, owner)
        return out

    def _insert_plain(
        self, specs: Sequence[NewTask], pipeline_id: str | None, material_id: str | None, owner: str
    ) -> list[tuple[str, bool]]:
        if not specs:
            return []
        ids = [spec.id or str(uuid.uuid4()) for spec in specs]
        ords = self._insert_rows(
            [
                self._task_values(i, s, pipeline_id, material_id, owner, [], 0)
                for i, s in zip(ids, specs, strict=True)
            ]
        )
        self.events_of([(task_id, ords[task_id], "created", None, None) for task_id in ids])
        self.bump(pipeline_id, None, S.PENDING, len(ids))
        self.ready = True
        return [(task_id, True) for task_id in ids]

    def _insert_rows(self, rows: Sequence[tuple[Any, ...]]) -> dict[str, int]:
        """Insert task rows (values of `_TASK_INSERT_COLUMNS`, id first); returns each task's
        insertion order (`ord`), numbered by the database where it numbers them."""
        ids = [r[0] for r in rows]
        if self.dialect.numbers_task_ord:
            self.values(
                f"INSERT INTO task ({_TASK_INSERT_COLUMNS})", f"({_TASK_INSERT_VALUES})", rows
            )
            marks = ",".join("?" for _ in ids)
            return dict(self.tuples(f"SELECT id, ord FROM task WHERE id IN ({marks})", ids))
        base = self.tuples("SELECT COALESCE(MAX(ord), 0) FROM task")[0][0]
        ords = {task_id: base + 1 + n for n, task_id in enumerate(ids)}
        self.values(
            f"INSERT INTO task ({_TASK_INSERT_COLUMNS}, ord)",
            f"({_TASK_INSERT_VALUES}, ?)",
            [(*r, ords[r[0]]) for r in rows],
        )
        return ords

    def _task_values(
        self,
        task_id: str,
        spec: NewTask,
        pipeline_id: str | None,
        material_id: str | None,
        owner: str,
        parents: list[str],
        unmet: int,
    ) -> tuple[Any, ...]:
        return (
            task_id,
            spec.type,
            pipeline_id,
            spec.material_id or material_id,
            spec.priority,
            dumps(parents),
            dumps(spec.payload),
            spec.cache_policy.value,
            spec.cloud_preference.value,
            spec.publisher_id,
            spec.idempotency_key,
            spec.max_retries,
            owner,
            owner,
            spec.file_node_id,
            spec.affinity.kind.value if spec.affinity else None,
            spec.affinity.node_id if spec.affinity else None,
            int(spec.is_pausable),
            self.seq,
            unmet,
            self.now,
            self.now,
            # ready now (no unmet dependency), or when the last one is met (`parents_satisfied`)
            self.now if unmet == 0 else None,
        )

    def insert_task(
        self,
        spec: NewTask,
        pipeline_id: str | None,
        material_id: str | None,
        owner: str,
        adopt: bool = True,
    ) -> tuple[str, bool]:
        """Insert one task; returns (task id, inserted). An active task with the same
        idempotency key is reused instead (returned with inserted=False), unless not `adopt`:
        then this one is inserted without the key (the other holds it while active)."""
        key = spec.idempotency_key
        if key is not None:
            existing = self.q(
                f"SELECT id FROM task WHERE idempotency_key = ? AND status IN {schema.ACTIVE_SQL}",
                (key,),
            ).fetchone()
            if existing is not None and not adopt:
                logger.info(
                    "idempotency key %s active as task %s of another pipeline; this pipeline "
                    "gets its own task",
                    key,
                    existing["id"],
                    extra={"action": "task_own"},
                )
                spec = dataclasses.replace(spec, idempotency_key=None)
            elif existing is not None:
                logger.info(
                    "idempotency key %s already active as task %s; not inserted",
                    key,
                    existing["id"],
                    extra={"action": "task_dedupe"},
                )
                return str(existing["id"]), False
        task_id = spec.id or str(uuid.uuid4())
        parents = list(dict.fromkeys(spec.depends_on))
        unmet = 0
        dead_parent: str | None = None
        for parent in parents:
            prow = self.q("SELECT status FROM task WHERE id = ?", (parent,)).fetchone()
            if prow is None:
                raise errors.InvalidRequest(f"task depends on unknown task {parent}")
            pstatus = TaskStatus(prow["status"])
            if not pstatus.satisfies_dependency:
                unmet += 1
            if pstatus in (S.FAILED, S.CANCELLED):
                dead_parent = parent
        ords = self._insert_rows(
            [self._task_values(task_id, spec, pipeline_id, material_id, owner, parents, unmet)]
        )
        if parents:
            self.q(
                "INSERT INTO task_dep (parent_id, task_id) VALUES "
                + ",".join("(?, ?)" for _ in parents),
                [v for p in parents for v in (p, task_id)],
            )
        self.events_of([(task_id, ords[task_id], "created", None, None)])
        self.bump(pipeline_id, None, S.PENDING)
        if unmet == 0:
            self.ready = True
        if dead_parent is not None:
            self.transition(
                self.task_row(task_id),
                S.CANCELLED,
                event_type="upstream_failed",
                message=f"upstream task {dead_parent} is not runnable",
                error=f"upstream task {dead_parent} is not runnable",
                error_type=ErrorType.UPSTREAM_FAILED.value,
                completed_at=self.now,
            )
        return task_id, True

    def apply_plan(self, plan: SpawnPlan, pipeline: Pipeline, owner: str) -> list[str]:
        new_ids = []
        for spec in plan.new_tasks:
            task_id, _ = self.insert_task(spec, pipeline.id, pipeline.material_id, owner)
            new_ids.append(task_id)
        for task_id, patch in plan.patch_payloads.items():
            row = self.task_row(task_id)
            if TaskStatus(row["status"]) not in (S.PENDING, S.CLAIMED):
                continue
            payload = json.loads(row["payload"])
            payload.update(patch)
            self.q(
                "UPDATE task SET payload = ?, updated_at = ?, change_seq = ? WHERE id = ?",
                (dumps(payload), self.now, self.seq, task_id),
            )
        for task_id, placement in plan.place.items():
            row = self.task_row(task_id)
            if TaskStatus(row["status"]) != S.PENDING:
                continue
            affinity = placement.affinity
            self.q(
                "UPDATE task SET affinity_kind = ?, affinity_node_id = ?, file_node_id = ?, "
                "updated_at = ?, change_seq = ? WHERE id = ?",
                (
                    affinity.kind.value if affinity else None,
                    affinity.node_id if affinity else None,
                    placement.file_node_id,
                    self.now,
                    self.seq,
                    task_id,
                ),
            )
        for task_id, parents in plan.add_dependencies.items():
            self.add_dependencies(task_id, parents)
        for task_id in plan.skip:
            row = self.task_row(task_id)
            if TaskStatus(row["status"]) in (S.PENDING, S.CLAIMED):
                self.transition(
                    row, S.SKIPPED, message=plan.skip_reason, completed_at=self.now, claimed_by=None
                )
        if "detected_language" in plan.pipeline_updates:
            self.q(
                "UPDATE pipeline_instance SET detected_language = ? WHERE id = ?",
                (plan.pipeline_updates["detected_language"], pipeline.id),
            )
            self.touch_pipeline(pipeline.id)
        return new_ids

    def add_dependencies(self, task_id: str, parents: Iterable[str]) -> None:
        row = self.task_row(task_id)
        if TaskStatus(row["status"]) != S.PENDING:
            raise errors.IllegalTransition(
                f"cannot add dependencies to task {task_id}: it is {row['status']}"
            )
        current = json.loads(row["depends_on"])
        added = [p for p in dict.fromkeys(parents) if p not in current and p != task_id]
        unmet = 0
        for parent in added:
            prow = self.q("SELECT status FROM task WHERE id = ?", (parent,)).fetchone()
            if prow is None:
                raise errors.InvalidRequest(f"task depends on unknown task {parent}")
            if not TaskStatus(prow["status"]).satisfies_dependency:
                unmet += 1
            self.q("INSERT INTO task_dep (parent_id, task_id) VALUES (?, ?)", (parent, task_id))
        if added:
            self.q(
                "UPDATE task SET depends_on = ?, unmet_deps = unmet_deps + ?, updated_at = ?, "
                "change_seq = ? WHERE id = ?",
                (dumps(current + added), unmet, self.now, self.seq, task_id),
            )
