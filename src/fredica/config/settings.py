"""The worker.yaml keys the settings page shows and edits, and how an edit is applied.

A change goes through the same path as every other write-back (`schema.update_config`): the
round-trip document is edited in place (comments and layout survive), the whole file is
validated exactly as a load would, and only a valid file is written (atomically). A key that
is not in `KEYS` or a value the schema refuses is an `InvalidRequest` naming the key, and the
file is left as it was.

Secrets (API keys, cookies, tokens, the cluster secret, passwords inside URLs) are shown
masked; sending the masked text back means "unchanged", so a form can post every field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from ruamel.yaml.comments import CommentedMap

from fredica.capabilities import catalog
from fredica.config import schema, sections
from fredica.domain import errors

Kind = Literal["int", "float", "bool", "choice", "text", "secret", "list"]


@dataclass(frozen=True, slots=True)
class Key:
    """One editable key: its dotted path, how the form edits it, and whether the running node
    picks a change up only after a restart."""

    path: str
    kind: Kind
    group: str
    restart: bool = True
    choices: tuple[str, ...] = ()
    nullable: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.path,
            "kind": self.kind,
            "group": self.group,
            "restart": self.restart,
            "nullable": self.nullable,
        }
        if self.choices:
            out["choices"] = list(self.choices)
        return out


def _keys() -> tuple[Key, ...]:
    keys = [
        Key("node.max_workers", "int", "node"),
        Key("node.network_region", "choice", "node", choices=("CN", "GLOBAL", "UNKNOWN")),
        Key("node.bandwidth_mbps", "int", "node"),
        Key("node.is_storage_node", "bool", "node"),
        Key("cluster.seeds", "list", "cluster"),
        Key("cluster.cluster_secret", "secret", "cluster"),
        Key("capabilities.download.max_concurrent", "int", "platforms"),
        Key("capabilities.download.disk_min_free_gb", "float", "platforms"),
    ]
    for platform in ("bilibili", "youtube", "http", "hls"):
        keys.append(Key(f"capabilities.download.{platform}.enabled", "bool", "platforms"))
    keys.append(Key("capabilities.download.youtube.proxy", "text", "platforms"))
    keys.append(Key("capabilities.download.bilibili.sessdata", "secret", "tokens"))
    keys.append(Key("capabilities.ffmpeg.enabled", "bool", "slots"))
    for name in ("transcribe", *sections.CapabilitiesConfig().provider_sections()):
        keys.append(Key(f"capabilities.{name}.enabled", "bool", "slots"))
        keys.append(Key(f"capabilities.{name}.max_concurrent", "int", "slots"))
    keys.append(Key("capabilities.transcribe.api_key", "secret", "tokens"))
    keys.append(Key("capabilities.speaker_diarize.hf_token", "secret", "tokens"))
    for name, function in sections.POLICY_FUNCTIONS.items():
        if not catalog.cloud_backend_names(function):
            continue  # cloud_allowed is fixed to false there
        keys.append(Key(f"cloud_policy.{name}.cloud_allowed", "bool", "cloud"))
        keys.append(
            Key(f"cloud_policy.{name}.max_cost_per_task_usd", "float", "cloud", nullable=True)
        )
    keys += [
        Key("auth.mode", "choice", "access", restart=False, choices=("open", "token")),
        Key("media_folders", "list", "storage", restart=False),
        Key("storage.max_upload_mb", "int", "storage", restart=False),
        Key("storage.results_retain_days", "float", "storage"),
    ]
    return tuple(dict.fromkeys(keys))


KEYS: tuple[Key, ...] = _keys()
BY_PATH: Mapping[str, Key] = {k.path: k for k in KEYS}


def value_of(cfg: schema.WorkerConfig, path: str) -> Any:
    """The effective value of a dotted key (defaults filled in)."""
    node: Any = cfg
    for part in path.split("."):
        node = getattr(node, part)
    if isinstance(node, BaseModel):
        return node.model_dump(mode="json")
    return list(node) if isinstance(node, list) else node


def shown(key: Key, value: Any) -> Any:
    """A value as the page shows it: secrets masked, passwords in URLs masked."""
    if key.kind == "secret":
        return schema.MASK if value else ""
    leaf = key.path.rsplit(".", 1)[-1]
    return schema.mask_value(value, leaf)


def view(cfg: schema.WorkerConfig, running: schema.WorkerConfig) -> list[dict[str, Any]]:
    """Every editable key with its shown value and whether the running node still uses an
    older value (`pending_restart`: changed in the file, takes effect after a restart)."""
    out = []
    for key in KEYS:
        value = value_of(cfg, key.path)
        pending = key.restart and value != value_of(running, key.path)
        out.append({**key.to_json(), "value": shown(key, value), "pending_restart": pending})
    return out


def _check_keys(changes: Mapping[str, Any]) -> None:
    for path in changes:
        if path not in BY_PATH:
            hint = sections.did_you_mean(path, BY_PATH)
            raise errors.InvalidRequest(f"{path}: not an editable setting{hint}")


def effective_changes(cfg: schema.WorkerConfig, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The changes that change something: a masked value sent back means "keep it", and a
    value equal to the current one is dropped (so an unchanged form writes nothing)."""
    _check_keys(changes)
    out: dict[str, Any] = {}
    for path, value in changes.items():
        key = BY_PATH[path]
        if isinstance(value, float) and not math.isfinite(value):
            raise errors.InvalidRequest(f"{path}: must be a finite number, got {value}")
        current = value_of(cfg, path)
        if value == current:
            continue
        masked = shown(key, current)
        if masked != current and value == masked:
            continue
        out[path] = value
    return out


def _set(doc: CommentedMap, path: str, value: Any) -> None:
    *sections_path, leaf = path.split(".")
    node = doc
    for part in sections_path:
        node = schema.section_of(node, part)
    node[leaf] = list(value) if isinstance(value, list) else value


def apply(path: Path, changes: Mapping[str, Any]) -> schema.WorkerConfig:
    """Write `changes` (dotted key -> new value) into the worker.yaml at `path`, keeping its
    comments; the whole file is validated first. Raises InvalidRequest naming the key when a
    key is not editable or a value is refused (nothing is written then)."""
    _check_keys(changes)

    def edit(doc: CommentedMap) -> None:
        for key, value in changes.items():
            _set(doc, key, value)

    try:
        return schema.update_config(path, edit)
    except errors.ConfigError as exc:
        raise errors.InvalidRequest(exc.message) from None


def restart_needed(
    changed: list[str], new: schema.WorkerConfig, running: schema.WorkerConfig
) -> list[str]:
    """The changed keys the running node uses only after a restart (their new value differs
    from the one it started with)."""
    return [
        path
        for path in changed
        if BY_PATH[path].restart and value_of(new, path) != value_of(running, path)
    ]
