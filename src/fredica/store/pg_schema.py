"""PostgreSQL schema and numbered migrations (the counterpart of `store/schema.py`).

The tables and columns are those of the SQLite schema, so both stores run the same SQL: JSON in
TEXT, flags in INTEGER, times as DOUBLE PRECISION Unix seconds. Differences: the change sequence
is the writing transaction's id (`pg_current_xact_id()`, see `store/postgres.py`), so there is
no counter row every writer would queue on, and `ord` columns keep insertion order.
"""

from __future__ import annotations

from fredica.store.schema import ACTIVE_SQL, CHART_INDEXES, OWNERSHIP_MIGRATION, STRANDED_INDEX

MIGRATIONS: list[str] = [
    # 1: the schema of SQLite migrations 1 and 2
    f"""
CREATE TABLE app_config (
    node_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (node_id, key)
);

CREATE TABLE pipeline_instance (
    id TEXT PRIMARY KEY,
    material_id TEXT NOT NULL,
    template TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    params TEXT NOT NULL DEFAULT '{{}}',
    total_tasks INTEGER NOT NULL DEFAULT 0,
    done_tasks INTEGER NOT NULL DEFAULT 0,
    n_pending INTEGER NOT NULL DEFAULT 0,
    n_claimed INTEGER NOT NULL DEFAULT 0,
    n_running INTEGER NOT NULL DEFAULT 0,
    n_stale INTEGER NOT NULL DEFAULT 0,
    n_reclaimed INTEGER NOT NULL DEFAULT 0,
    n_completed INTEGER NOT NULL DEFAULT 0,
    n_failed INTEGER NOT NULL DEFAULT 0,
    n_cancelled INTEGER NOT NULL DEFAULT 0,
    n_skipped INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    detected_language TEXT,
    created_by TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    owner_epoch INTEGER NOT NULL DEFAULT 0,
    publisher_id TEXT,
    change_seq BIGINT NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    completed_at DOUBLE PRECISION
);
CREATE INDEX pipeline_active_material ON pipeline_instance (material_id, template)
    WHERE status NOT IN ('completed', 'failed', 'cancelled', 'partial_failed');
CREATE INDEX pipeline_created ON pipeline_instance (created_at);
CREATE INDEX pipeline_change ON pipeline_instance (change_seq);

CREATE TABLE task (
    ord BIGINT GENERATED ALWAYS AS IDENTITY,
    id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    pipeline_id TEXT,
    material_id TEXT,
    status TEXT NOT NULL DEFAULT 'pending',
    priority INTEGER NOT NULL DEFAULT 5,
    depends_on TEXT NOT NULL DEFAULT '[]',
    payload TEXT NOT NULL DEFAULT '{{}}',
    result TEXT,
    error TEXT,
    cache_policy TEXT NOT NULL DEFAULT 'NONE',
    cloud_preference TEXT NOT NULL DEFAULT 'auto',
    publisher_id TEXT,
    idempotency_key TEXT,
    error_type TEXT,
    excluded_nodes TEXT NOT NULL DEFAULT '[]',
    retry_count INTEGER NOT NULL DEFAULT 0,
    max_retries INTEGER NOT NULL DEFAULT 3,
    retry_after DOUBLE PRECISION,
    created_by TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    owner_epoch INTEGER NOT NULL DEFAULT 0,
    claimed_by TEXT,
    original_claimed_by TEXT,
    file_node_id TEXT,
    affinity_kind TEXT,
    affinity_node_id TEXT,
    result_acked_at DOUBLE PRECISION,
    progress INTEGER NOT NULL DEFAULT 0,
    progress_note TEXT,
    is_paused INTEGER NOT NULL DEFAULT 0,
    is_pausable INTEGER NOT NULL DEFAULT 0,
    attempt INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    backend TEXT,
    change_seq BIGINT NOT NULL DEFAULT 0,
    unmet_deps INTEGER NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    claimed_at DOUBLE PRECISION,
    started_at DOUBLE PRECISION,
    completed_at DOUBLE PRECISION,
    heartbeat_at DOUBLE PRECISION,
    stale_at DOUBLE PRECISION,
    reclaimed_at DOUBLE PRECISION
);
-- Ready tasks in claim order (claims lock them with FOR UPDATE SKIP LOCKED).
CREATE INDEX task_ready ON task (priority DESC, created_at)
    WHERE status = 'pending' AND unmet_deps = 0;
CREATE INDEX task_pipeline ON task (pipeline_id, status);
CREATE INDEX task_status ON task (status);
CREATE INDEX task_claimer ON task (claimed_by, status)
    WHERE status IN ('claimed', 'running', 'stale');
CREATE INDEX task_change ON task (change_seq);
CREATE INDEX task_created ON task (created_at, ord);
CREATE UNIQUE INDEX task_idempotency_active ON task (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN {ACTIVE_SQL};

CREATE TABLE task_dep (
    parent_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    PRIMARY KEY (parent_id, task_id)
);
CREATE INDEX task_dep_child ON task_dep (task_id);

CREATE TABLE task_event (
    ord BIGINT GENERATED ALWAYS AS IDENTITY,
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    message TEXT,
    occurred_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX task_event_task ON task_event (task_id, occurred_at);

CREATE TABLE worker_node (
    id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    capabilities TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL DEFAULT 'online',
    max_workers INTEGER NOT NULL DEFAULT 2,
    last_seen_at DOUBLE PRECISION NOT NULL,
    address TEXT,
    info TEXT NOT NULL DEFAULT '{{}}'
);

CREATE TABLE restart_task_log (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    restarted_at DOUBLE PRECISION NOT NULL,
    node_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    pipeline_id TEXT,
    task_type TEXT NOT NULL,
    previous_status TEXT NOT NULL,
    new_status TEXT NOT NULL,
    action TEXT NOT NULL,
    message TEXT
);
CREATE INDEX restart_task_log_time ON restart_task_log (restarted_at);
""",
    # 2: SQLite migration 3 (integer event keys, indexes for the hot path and keyset lists)
    """
ALTER TABLE task_event DROP CONSTRAINT task_event_pkey;
ALTER TABLE task_event DROP COLUMN id;
ALTER TABLE task_event RENAME COLUMN ord TO id;
ALTER TABLE task_event ADD PRIMARY KEY (id);
ALTER TABLE task_event ADD COLUMN task_ord BIGINT NOT NULL DEFAULT 0;
UPDATE task_event e SET task_ord = t.ord FROM task t WHERE t.id = e.task_id;
DROP INDEX task_event_task;
CREATE INDEX task_event_task ON task_event (task_ord, task_id, occurred_at, id);
DROP INDEX task_claimer;
DROP INDEX task_status;
DROP INDEX task_pipeline;
CREATE INDEX task_status ON task (status, created_at, ord);
CREATE INDEX task_pipeline ON task (pipeline_id, created_at, ord);
CREATE INDEX task_type ON task (type, created_at, ord);
DROP INDEX pipeline_created;
CREATE INDEX pipeline_created ON pipeline_instance (created_at, id);
CREATE INDEX pipeline_status ON pipeline_instance (status, created_at, id);
""",
    # 3: SQLite migration 4 (outbox, replicas); unused while PostgreSQL owns every row, but the
    # contract suite runs every operation on both stores
    """
CREATE TABLE outbox (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    node_id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    UNIQUE (task_id, attempt)
);
CREATE TABLE replica_task (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL,
    change_seq BIGINT NOT NULL,
    pipeline_id TEXT,
    status TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX replica_task_created ON replica_task (created_at, id);
CREATE INDEX replica_task_pipeline ON replica_task (pipeline_id, created_at);
CREATE TABLE replica_pipeline (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL,
    change_seq BIGINT NOT NULL,
    status TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX replica_pipeline_created ON replica_pipeline (created_at, id);
-- what the owner deleted (a finished pipeline and its tasks), for the replicas' change feed
CREATE TABLE deleted_row (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    change_seq BIGINT NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE INDEX deleted_row_change ON deleted_row (change_seq);
CREATE TABLE replica_cursor (
    owner_id TEXT PRIMARY KEY,
    cursor BIGINT NOT NULL,
    pulled_at DOUBLE PRECISION NOT NULL
);
""",
    # 4: SQLite migration 5 (ownership that moves)
    OWNERSHIP_MIGRATION,
    # 5: SQLite migration 6 (the tombstones a replica keeps); unused while PostgreSQL owns
    # every row, but the contract suite runs the replica operations on it too
    """
CREATE TABLE replica_deleted (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    change_seq BIGINT NOT NULL,
    PRIMARY KEY (kind, id)
);
""",
    # 6: SQLite migration 7 (ready since): when a task last became ready (created with no
    # unmet dependency, its last dependency met, or back to pending)
    """
ALTER TABLE task ADD COLUMN ready_since DOUBLE PRECISION;
UPDATE task SET ready_since = updated_at WHERE status = 'pending' AND unmet_deps = 0;
""",
    # 7: SQLite migration 8 (watch folders): the files a node saw in each library, their
    # identity (size, mtime, content hash) and the pipeline each became
    """
CREATE TABLE library_file (
    id TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    library TEXT NOT NULL,
    path TEXT NOT NULL,
    size BIGINT NOT NULL,
    mtime DOUBLE PRECISION NOT NULL,
    sha256 TEXT,
    status TEXT NOT NULL,
    pipeline_id TEXT,
    note TEXT NOT NULL DEFAULT '',
    first_seen_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    history TEXT NOT NULL DEFAULT '[]',
    UNIQUE (node_id, library, path)
);
CREATE INDEX library_file_hash ON library_file (node_id, library, sha256);
""",
    # 8: SQLite migration 9 (the charts' indexes)
    "".join(f"{create};\n" for _, create in CHART_INDEXES),
    # 9: SQLite migration 10 (the stranded-task check's partial index)
    f"{STRANDED_INDEX};\n",
]

SCHEMA_VERSION = len(MIGRATIONS)
