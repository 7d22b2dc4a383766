"""Worker engine: claiming, dispatch, signals, liveness, recovery."""
