"""Executors: the code that does a task's work, one module per family."""
