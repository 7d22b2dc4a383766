from __future__ import annotations

import sys

if sys.argv[1:2] == ["quality"]:
    from bench.quality import main as quality_main

    raise SystemExit(quality_main(sys.argv[2:]))

from bench.harness import main

raise SystemExit(main())
