"""Idempotency keys (seed 001 §4.4): SHA-256 of canonical JSON of the per-type parts."""

from __future__ import annotations

import hashlib
import json
from typing import Any

#: Which payload fields make up the key, per task type (seed 001 §4.4 table).
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "DOWNLOAD_VIDEO": ("source_url",),
    "EXTRACT_AUDIO": (),
    "SPLIT_AUDIO": ("chunk_duration_sec",),
    "TRANSCRIBE_CHUNK": ("chunk_index", "model_name"),
    "AI_ANALYZE": ("prompt_hash",),
}
PIPELINE_SCOPED = frozenset({"MERGE_TRANSCRIPTION"})


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compute_key(
    task_type: str, material_id: str | None, payload: dict[str, Any], pipeline_id: str | None
) -> str:
    """The idempotency key of a task.

    Known types use their seed columns; MERGE_TRANSCRIPTION is scoped to the pipeline; any other
    type keys on the whole payload, so two identical requests dedupe while different ones do not.
    """
    if task_type in PIPELINE_SCOPED:
        parts: dict[str, Any] = {"type": task_type, "pipeline_id": pipeline_id}
    elif task_type in KEY_FIELDS:
        parts = {"type": task_type, "material_id": material_id}
        parts.update({k: payload.get(k) for k in KEY_FIELDS[task_type]})
    else:
        parts = {"type": task_type, "material_id": material_id, "payload": payload}
    return hashlib.sha256(canonical_json(parts).encode()).hexdigest()
