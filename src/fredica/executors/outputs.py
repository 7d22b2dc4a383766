"""Durable output files and CHECK_EXISTING for the media executors (DESIGN §4.10, seed §7.2).

Every output is written under a temporary name and renamed when complete, so a crash never
leaves a half file behind a final name. After the rename the executor writes a small sidecar
(`<output>.meta.json`) holding the task's result and a fingerprint of its inputs; `reusable()`
trusts an output only when the sidecar exists, the file sizes it recorded still match and the
inputs are the same. A crash between the rename and the sidecar write just means one re-run.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fredica.domain import errors, models

META_SUFFIX = ".meta.json"
META_VERSION = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(value: str, max_len: int = 80) -> str:
    """A file-system-safe directory name for an id (material ids may hold ':' or '/')."""
    cleaned = _SAFE.sub("_", value).strip("._") or "x"
    if cleaned == value and len(value) <= max_len:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    return f"{cleaned[: max_len - 11]}-{digest}"


def resolve(data_dir: Path, path: str | os.PathLike[str]) -> Path:
    """Payload paths are absolute or relative to the node's data dir (so templates can name
    deterministic outputs without knowing where a node keeps its data)."""
    p = Path(path)
    return p if p.is_absolute() else data_dir / p


def portable(value: Any, data_dir: Path) -> Any:
    """`value` (a task result) with every absolute path under `data_dir` made relative to it:
    results name files by (the node that ran the task, a path under its data dir), which any
    node can fetch from the holder (`TaskContext.input_path`), never by one node's absolute
    path (DESIGN §6). Paths outside the data dir (a user's own file) stay as they are."""
    if isinstance(value, str):
        prefix = str(data_dir.resolve()) + os.sep
        if value.startswith(prefix):
            return Path(value[len(prefix) :]).as_posix()
        raw = str(data_dir) + os.sep
        if value.startswith(raw):
            return Path(value[len(raw) :]).as_posix()
        return value
    if isinstance(value, dict):
        return {k: portable(v, data_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, data_dir) for v in value]
    return value


def temp_sibling(final: Path) -> Path:
    """A unique temporary name next to `final` (same directory, so the rename is atomic)."""
    return final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}.part")


def fingerprint_file(path: Path) -> dict[str, Any]:
    """What identifies an input file cheaply: its path, size and modification time."""
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def input_hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def classify_os_error(exc: OSError, what: str) -> errors.TaskError:
    """Disk full is a RESOURCE error (another node may have space); the rest are permanent."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return errors.ResourceError(f"{what}: no space left on device", hint="DISK_FULL")
    return errors.PermanentError(f"{what}: {exc.strerror or exc}")


@contextlib.contextmanager
def disk_errors(what: str) -> Iterator[None]:
    """Convert OSErrors raised while writing outputs into classified task errors."""
    try:
        yield
    except OSError as exc:
        raise classify_os_error(exc, what) from exc


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    with disk_errors(f"writing {path.name}"):
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def write_meta(output: Path, task_type: str, inputs: Any, result: dict[str, Any]) -> None:
    """Record the result of a completed output for a later CHECK_EXISTING."""
    files = {str(p): Path(p).stat().st_size for p in _result_files(result)}
    meta = {
        "version": META_VERSION,
        "task_type": task_type,
        "input_hash": input_hash(inputs),
        "files": files,
        "result": result,
    }
    write_text_atomic(output.with_name(output.name + META_SUFFIX), json.dumps(meta, indent=1))


def reusable(output: Path, task_type: str, inputs: Any) -> dict[str, Any] | None:
    """The recorded result if `output` is complete and was made from the same inputs."""
    meta_path = output.with_name(output.name + META_SUFFIX)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(meta, dict)
        or meta.get("version") != META_VERSION
        or meta.get("task_type") != task_type
        or meta.get("input_hash") != input_hash(inputs)
        or not isinstance(meta.get("result"), dict)
    ):
        return None
    files = meta.get("files")
    if not isinstance(files, dict) or not files:
        return None
    for name, size in files.items():
        try:
            actual = Path(name).stat().st_size
        except OSError:
            return None
        if actual <= 0 or actual != size:
            return None
    result: dict[str, Any] = dict(meta["result"])
    result["reused"] = True
    return result


def _result_files(result: dict[str, Any]) -> list[str]:
    """Every file path a result names (top-level *_path keys, `files` and `chunks[].path`)."""
    found: list[str] = []
    for key, value in result.items():
        if key.endswith("_path") and isinstance(value, str):
            found.append(value)
    files = result.get("files")
    if isinstance(files, dict):
        found.extend(v for v in files.values() if isinstance(v, str))
    chunks = result.get("chunks")
    if isinstance(chunks, list):
        found.extend(c["path"] for c in chunks if isinstance(c, dict) and "path" in c)
    return found


def caches(task: models.Task, *policies: models.CachePolicy) -> bool:
    """Whether this task's cache policy allows reusing outputs (the engine asks every
    executor's can_skip; the policy decides)."""
    return task.cache_policy in (policies or (models.CachePolicy.CHECK_EXISTING,))


def payload_str(payload: dict[str, Any], key: str, *, required: bool = True) -> str | None:
    value = payload.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise errors.PayloadError(f"payload.{key} must be a non-empty string, got {value!r}")
    return value


def payload_number(
    payload: dict[str, Any], key: str, default: float, *, low: float, high: float
) -> float:
    value = payload.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise errors.PayloadError(f"payload.{key} must be a number, got {value!r}")
    if not low <= float(value) <= high:
        raise errors.PayloadError(f"payload.{key} must be between {low} and {high}, got {value}")
    return float(value)
