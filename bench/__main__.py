from __future__ import annotations

from bench.harness import main

raise SystemExit(main())
