"""From worker.yaml and command-line options to a ready `NodeSettings`.

Where things live: the data dir is `--data-dir`, else `$FREDICA_DATA_DIR`, else `storage.data_dir`
of an explicit `--config` (relative to that file), else `./.data`. The config file is `--config`,
else `<data dir>/worker.yaml`, created with comments on first run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from fredica.config import schema as config
from fredica.engine.worker import EngineSettings
from fredica.node.service import NodeSettings

DEFAULT_DATA_DIR = Path(".data")
CONFIG_FILENAME = "worker.yaml"


@dataclass(frozen=True)
class Bootstrap:
    settings: NodeSettings
    config: config.WorkerConfig
    config_path: Path


def resolve_paths(config_path: Path | None, data_dir: Path | None) -> tuple[Path, Path]:
    """(config file, data dir) per the module docstring; creates nothing."""
    if data_dir is None and os.environ.get("FREDICA_DATA_DIR"):
        data_dir = Path(os.environ["FREDICA_DATA_DIR"])
    if data_dir is None and config_path is not None and config_path.exists():
        cfg = config.load_config(config_path)
        data_dir = (config_path.parent / cfg.storage.data_dir).resolve()
    data_dir = (data_dir or DEFAULT_DATA_DIR).resolve()
    return (config_path or data_dir / CONFIG_FILENAME).resolve(), data_dir


def bootstrap(
    config_path: Path | None = None,
    data_dir: Path | None = None,
    host: str | None = None,
    port: int | None = None,
) -> Bootstrap:
    """Resolve paths, write a default worker.yaml on first run, fix the node identity, and
    return the node's settings. Raises `errors.ConfigError` on an invalid file."""
    cfg_path, data = resolve_paths(config_path, data_dir)
    data.mkdir(parents=True, exist_ok=True)
    if not cfg_path.exists():
        cfg_path.parent.mkdir(parents=True, exist_ok=True)
        config.write_default_config(cfg_path)
    cfg = config.ensure_node_identity(cfg_path)
    settings = settings_from_config(cfg, data, host, port)
    return Bootstrap(replace(settings, config_path=cfg_path), cfg, cfg_path)


def settings_from_config(
    cfg: config.WorkerConfig, data_dir: Path, host: str | None = None, port: int | None = None
) -> NodeSettings:
    engine = EngineSettings(
        node_id=cfg.node.id,
        data_dir=data_dir,
        max_workers=cfg.node.max_workers,
        poll_interval=cfg.scheduling.poll_interval_sec,
        idle_poll_interval=cfg.scheduling.idle_poll_interval_sec,
        heartbeat_interval=cfg.cluster.heartbeat_interval_sec,
        stale_after=cfg.cluster.stale_after_sec,
        reclaim_after=cfg.cluster.reclaim_after_sec,
        shutdown_grace=cfg.node.shutdown_grace_sec,
        quarantine_after_failures=cfg.scheduling.quarantine_after_failures,
        quarantine_cooldown=cfg.scheduling.quarantine_cooldown_sec,
        claim_ahead=cfg.scheduling.claim_ahead,
        claim_ahead_window=cfg.scheduling.claim_ahead_window_sec,
    )
    return NodeSettings(
        node_id=cfg.node.id,
        data_dir=data_dir,
        hostname=cfg.node.hostname,
        host=host or cfg.api.host,
        port=port or cfg.api.port,
        engine=engine,
        plugins=tuple(cfg.plugins),
        config=cfg,
        store_url=cfg.store.url,
        store_process=cfg.store.process,
        max_body_bytes=cfg.api.max_body_bytes,
    )
