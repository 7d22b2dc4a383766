"""Capabilities: what a node can do, how well, and which backend it should use for a task.

Modules (import them directly). This package knows nothing of worker.yaml: `fredica.config`
validates names against the catalog, and `fredica.engine.declare` turns a parsed worker.yaml and
the probe report into the node's declared capabilities.

- `catalog`: CapabilityFunction, Accelerator variants, Capability and the backend catalog of
  seed 001 §3 (base-score ranges, accelerator kind, language class, voice clone, cloud flag).
- `task_types`: task type -> required capability function (seed 001 §2.1).
- `hardware`: GPU ladder, VRAM formula, cpu score, LLM fallback (seed 001 §2.7.1).
- `scoring`: the pure unified scoring model (seed 001 §2.7, §3.15) and best-backend selection.
- `probes`: bounded auto-detection of GPUs, binaries and Python modules.
"""

from __future__ import annotations
