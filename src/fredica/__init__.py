"""fredica: the machines you already own, working together as one media processing cluster."""

from __future__ import annotations

__version__ = "0.1.0"
