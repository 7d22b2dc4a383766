from __future__ import annotations

import sys
from pathlib import Path

PLUGINS = Path(__file__).parent / "plugins"
if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))
