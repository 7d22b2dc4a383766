"""Pure domain model: statuses, tasks, pipelines, transitions (no I/O)."""
