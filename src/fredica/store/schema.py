"""SQLite schema and numbered migrations. A migration is applied in one transaction and recorded
in `schema_version`; `tests/integration/test_migrations.py` migrates a database of every earlier
version, with data in it, to the current one. The PostgreSQL schema is `store/pg_schema.py`."""

from __future__ import annotations

ACTIVE_SQL = "('pending','claimed','running','stale','reclaimed')"

#: shared with the PostgreSQL schema (the same statements run on both)
OWNERSHIP_MIGRATION = """
ALTER TABLE replica_task ADD COLUMN owner_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replica_pipeline ADD COLUMN owner_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE pipeline_instance ADD COLUMN owner_history TEXT NOT NULL DEFAULT '[]';
"""

CHART_INDEXES: tuple[tuple[str, str], ...] = (
    ("task_event_time", "CREATE INDEX task_event_time ON task_event (occurred_at, id)"),
    ("task_updated", "CREATE INDEX task_updated ON task (updated_at)"),
)
"""The charts' read (`task_timeline`): the events of a window in time order, and the tasks
touched since shortly before it (`bench/chart_cost.py` measures it with and without)."""

#: the pending tasks that some node may no longer run (`control.fail_stranded`'s read): a
#: partial index, empty while no task was ever excluded from a node
STRANDED_INDEX = (
    "CREATE INDEX task_stranded ON task (id) WHERE status = 'pending' AND excluded_nodes <> '[]'"
)

MIGRATIONS: list[str] = [
    # 1: the initial schema (seed 001 §5.1, seed 000, DESIGN §4)
    f"""
CREATE TABLE app_config (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE change_counter (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);
INSERT INTO change_counter (id, seq) VALUES (1, 0);

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
    change_seq INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    completed_at REAL
);
CREATE INDEX pipeline_active_material ON pipeline_instance (material_id, template)
    WHERE status NOT IN ('completed', 'failed', 'cancelled', 'partial_failed');
CREATE INDEX pipeline_created ON pipeline_instance (created_at);
CREATE INDEX pipeline_change ON pipeline_instance (change_seq);

CREATE TABLE task (
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
    retry_after REAL,
    created_by TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    owner_epoch INTEGER NOT NULL DEFAULT 0,
    claimed_by TEXT,
    original_claimed_by TEXT,
    file_node_id TEXT,
    node_affinity TEXT,
    result_acked_at REAL,
    progress INTEGER NOT NULL DEFAULT 0,
    progress_note TEXT,
    is_paused INTEGER NOT NULL DEFAULT 0,
    is_pausable INTEGER NOT NULL DEFAULT 0,
    attempt INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    backend TEXT,
    change_seq INTEGER NOT NULL DEFAULT 0,
    unmet_deps INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    claimed_at REAL,
    started_at REAL,
    completed_at REAL,
    heartbeat_at REAL,
    stale_at REAL,
    reclaimed_at REAL
);
-- Ready tasks in claim order: the claim cost stays flat however large the blocked backlog is.
CREATE INDEX task_ready ON task (priority DESC, created_at)
    WHERE status = 'pending' AND unmet_deps = 0;
CREATE INDEX task_pipeline ON task (pipeline_id, status);
CREATE INDEX task_status ON task (status);
CREATE INDEX task_claimer ON task (claimed_by, status)
    WHERE status IN ('claimed', 'running', 'stale');
CREATE INDEX task_change ON task (change_seq);
-- Idempotency keys dedupe only among active tasks (DESIGN §4.4).
CREATE UNIQUE INDEX task_idempotency_active ON task (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN {ACTIVE_SQL};

CREATE TABLE task_dep (
    parent_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    PRIMARY KEY (parent_id, task_id)
) WITHOUT ROWID;
CREATE INDEX task_dep_child ON task_dep (task_id);

CREATE TABLE task_event (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    message TEXT,
    occurred_at REAL NOT NULL
);
CREATE INDEX task_event_task ON task_event (task_id, occurred_at);

CREATE TABLE worker_node (
    id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    capabilities TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL DEFAULT 'online',
    max_workers INTEGER NOT NULL DEFAULT 2,
    last_seen_at REAL NOT NULL,
    address TEXT,
    info TEXT NOT NULL DEFAULT '{{}}'
);

CREATE TABLE restart_task_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    restarted_at REAL NOT NULL,
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
    # 2: the owner-store contract: structured affinity, configuration per node
    """
ALTER TABLE task ADD COLUMN affinity_kind TEXT;
ALTER TABLE task ADD COLUMN affinity_node_id TEXT;
UPDATE task SET affinity_kind = substr(node_affinity, 1, 4),
    affinity_node_id = substr(node_affinity, 6)
    WHERE substr(node_affinity, 1, 5) IN ('HARD:', 'SOFT:');
ALTER TABLE task DROP COLUMN node_affinity;
-- rows of the previous release belong to the node that opens the file (store/sqlite.py)
CREATE TABLE app_config_v2 (
    node_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (node_id, key)
);
INSERT INTO app_config_v2 (node_id, key, value, updated_at)
    SELECT '', key, value, updated_at FROM app_config;
DROP TABLE app_config;
ALTER TABLE app_config_v2 RENAME TO app_config;
""",
    # 3: the engine hot path (DESIGN §4.13): integer event keys; events indexed by their task's
    # insertion order (`task.ord`), so the events of a batch land on a few index pages instead
    # of one page per random task id; indexes reviewed against the queries that use them: a
    # status change no longer rewrites the pipeline and claimer indexes, and every list (all,
    # by status, by pipeline, by type) walks an index in its order, so a page costs the same at
    # any depth of a keyset cursor.
    """
ALTER TABLE task ADD COLUMN ord INTEGER;
UPDATE task SET ord = rowid;
CREATE INDEX task_ord ON task (ord);
CREATE TABLE task_event_v3 (
    id INTEGER PRIMARY KEY,
    task_id TEXT NOT NULL,
    task_ord INTEGER NOT NULL DEFAULT 0,
    node_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    message TEXT,
    occurred_at REAL NOT NULL
);
INSERT INTO task_event_v3 (task_id, task_ord, node_id, event_type, message, occurred_at)
    SELECT e.task_id, COALESCE(t.ord, 0), e.node_id, e.event_type, e.message, e.occurred_at
    FROM task_event e LEFT JOIN task t ON t.id = e.task_id
    ORDER BY e.occurred_at, e.rowid;
DROP TABLE task_event;
ALTER TABLE task_event_v3 RENAME TO task_event;
CREATE INDEX task_event_task ON task_event (task_ord, task_id, occurred_at);
DROP INDEX task_claimer;
DROP INDEX task_status;
DROP INDEX task_pipeline;
CREATE INDEX task_status ON task (status, created_at);
CREATE INDEX task_pipeline ON task (pipeline_id, created_at);
CREATE INDEX task_type ON task (type, created_at);
CREATE INDEX task_created ON task (created_at);
DROP INDEX pipeline_created;
CREATE INDEX pipeline_created ON pipeline_instance (created_at, id);
CREATE INDEX pipeline_status ON pipeline_instance (status, created_at, id);
""",
    # 4: the home cluster (DESIGN §6): results waiting for their owner (the durable outbox),
    # and read-only replicas of other owners' rows with how far each owner has been read
    """
CREATE TABLE outbox (
    id INTEGER PRIMARY KEY,
    node_id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at REAL NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    UNIQUE (task_id, attempt)
);
CREATE TABLE replica_task (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL,
    change_seq INTEGER NOT NULL,
    pipeline_id TEXT,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX replica_task_created ON replica_task (created_at, id);
CREATE INDEX replica_task_pipeline ON replica_task (pipeline_id, created_at);
CREATE TABLE replica_pipeline (
    id TEXT PRIMARY KEY,
    owner_id TEXT NOT NULL,
    change_seq INTEGER NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX replica_pipeline_created ON replica_pipeline (created_at, id);
-- what the owner deleted (a finished pipeline and its tasks), for the replicas' change feed
CREATE TABLE deleted_row (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    change_seq INTEGER NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE INDEX deleted_row_change ON deleted_row (change_seq);
CREATE TABLE replica_cursor (
    owner_id TEXT PRIMARY KEY,
    cursor INTEGER NOT NULL,
    pulled_at REAL NOT NULL
);
""",
    # 5: ownership that moves (DESIGN §4.11): a replica row is replaced by a row of a newer
    # owner epoch whatever its change sequence (two owners' sequences do not compare), and a
    # pipeline keeps the history of its owners
    OWNERSHIP_MIGRATION,
    # 6: tombstones a replica keeps: a row its owner deleted is never merged back
    # from a batch read earlier or out of order (a delete must not resurrect)
    """
CREATE TABLE replica_deleted (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    change_seq INTEGER NOT NULL,
    PRIMARY KEY (kind, id)
);
""",
    # 7: ready since: when a task last became ready (created with no unmet dependency, its last
    # dependency met, or back to pending); the score gate's starvation window runs from it
    """
ALTER TABLE task ADD COLUMN ready_since REAL;
UPDATE task SET ready_since = updated_at WHERE status = 'pending' AND unmet_deps = 0;
""",
    # 8: watch folders (`libraries:`): the files a node saw in each library, their identity
    # (size, mtime, content hash) and the pipeline each became
    """
CREATE TABLE library_file (
    id TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    library TEXT NOT NULL,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime REAL NOT NULL,
    sha256 TEXT,
    status TEXT NOT NULL,
    pipeline_id TEXT,
    note TEXT NOT NULL DEFAULT '',
    first_seen_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    history TEXT NOT NULL DEFAULT '[]',
    UNIQUE (node_id, library, path)
);
CREATE INDEX library_file_hash ON library_file (node_id, library, sha256);
""",
    # 9: the charts at a million events: the events of a time window in time order
    "".join(f"{create};\n" for _, create in CHART_INDEXES),
    # 10: the stranded-task check (every poll) reads only the pending tasks some node was
    # excluded from, not every pending task (400 ms a second at 100k pending before)
    f"{STRANDED_INDEX};\n",
]

SCHEMA_VERSION = len(MIGRATIONS)
