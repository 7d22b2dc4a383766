"""The `fredica` command line: an HTTP client of a node, plus `serve`, `demo` and `process`."""

from __future__ import annotations

from fredica.cli.main import main

__all__ = ["main"]
