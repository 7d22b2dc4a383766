"""worker.yaml: schema (seed 001 §2.4), loading with precise errors, first-start identity.

Every section is a strict pydantic model: an unknown key, a wrong type or an out-of-range value
refuses the file with `<file>: <key path>: <what is expected>`, e.g.
`worker.yaml: capabilities.transcribe.models[1].score: must be 0-100, got 140`. The node id and
hostname are generated on first start and written back with ruamel.yaml's round-trip mode so the
user's comments survive. The capability sections live in `fredica.config_sections`.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import tempfile
import typing
from collections.abc import Mapping
from datetime import UTC, date, datetime
from io import StringIO
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BeforeValidator, Field, model_validator
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from fredica.capabilities import catalog, task_types
from fredica.config import sections
from fredica.config import template as config_template
from fredica.domain import errors

DEFAULT_CONFIG_PATH = Path(".data") / "worker.yaml"
#: the environment variable that overrides `cluster.cluster_secret` (`apply_env`)
CLUSTER_SECRET_ENV = "FREDICA_CLUSTER_SECRET"

QualityModeName = Literal["quality", "balanced", "speed"]

# seed 001 §2.4 scheduling.quality_defaults; user keys are merged over these.
DEFAULT_QUALITY_DEFAULTS: Mapping[str, QualityModeName] = {
    "TRANSCRIBE_CHUNK": "quality",
    "UPSCALE_VIDEO": "quality",
    "SUPER_RESOLUTION": "quality",
    "DIARIZE_AUDIO": "quality",
    "AI_ANALYZE": "balanced",
    "OCR_FRAME_BATCH": "balanced",
    "TRANSLATE_TEXT": "balanced",
    "ENHANCE_AUDIO": "balanced",
    "DETECT_EMOTION": "balanced",
    "BLUR_SUBTITLE_REGION": "balanced",
    "SYNC_SUBTITLE": "balanced",
    "BURN_SUBTITLE": "balanced",
    "DETECT_FRAME_BATCH": "speed",
    "GENERATE_THUMBNAIL": "speed",
    "DETECT_SCENES": "speed",
    "FORMAT_SUBTITLE": "speed",
    "DETECT_HARDCODED_SUBTITLE": "speed",
    "FINGERPRINT_AUDIO": "speed",
    "FINGERPRINT_VIDEO": "speed",
}

_NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SEED = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_TOKEN_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


# --- node, cluster -----------------------------------------------------------------------------


class NodeConfig(sections.Section):
    """node: identity, parallelism, network and storage attributes."""

    id: str = ""
    hostname: str = ""
    max_workers: sections.PositiveInt = 2
    shutdown_grace_sec: sections.NonNegFloat = 30.0
    network_region: Literal["CN", "GLOBAL", "UNKNOWN"] = "UNKNOWN"
    bandwidth_mbps: sections.NonNegInt = 100
    is_storage_node: bool = False
    #: this machine stays on (a NAS, a server): peers hand their pipelines to it first
    always_on: bool = False
    #: our addition, for tests of clock drift: this node's clock runs this many seconds off
    clock_offset_sec: Annotated[float, Field(ge=-86400, le=86400)] = 0.0

    @model_validator(mode="after")
    def _check_id(self) -> NodeConfig:
        if self.id and not _NODE_ID.match(self.id):
            raise sections.PathError(
                ("id",), f"must be letters, digits, '.', '_' or '-', got {self.id!r}"
            )
        return self


class RateLimit(sections.Section):
    """Cluster-wide concurrency limit of one API provider."""

    cluster_max_concurrent: sections.PositiveInt


def _default_rate_limits() -> dict[str, RateLimit]:
    return {
        "deepseek-api": RateLimit(cluster_max_concurrent=5),
        "openai-api": RateLimit(cluster_max_concurrent=3),
    }


_ALL_CLOUD_BACKENDS = tuple(dict.fromkeys(s.name for s in catalog.BACKENDS if s.cloud))


class ClusterConfig(sections.Section):
    """cluster: discovery, shared secret, timing thresholds (seconds), API rate limits."""

    mode: Literal["auto", "manual"] = "auto"
    seeds: Annotated[list[str], BeforeValidator(sections.none_to_list)] = Field(
        default_factory=list
    )
    cluster_secret: str = ""
    heartbeat_interval_sec: sections.PositiveFloat = 30.0
    stale_after_sec: sections.PositiveFloat = 180.0
    reclaim_after_sec: sections.PositiveFloat = 900.0
    originator_wait_sec: sections.PositiveFloat = 1800.0
    #: a peer takes the active pipelines of an owner silent for originator_wait_sec over
    #: (set it alike on every node; docs/ownership.md says what it does not cover)
    takeover: bool = True
    #: a clean stop (SIGTERM, Ctrl-C) or a drain first hands this node's active pipelines to
    #: a peer
    handoff_on_stop: bool = False
    prefer_window_sec: sections.NonNegFloat = 1800.0
    api_rate_limits: dict[str, RateLimit] = Field(default_factory=_default_rate_limits)

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        for i, seed in enumerate(self.seeds):
            m = _SEED.match(seed)
            if m is None or not 1 <= int(m.group(2)) <= 65535:
                raise sections.PathError(("seeds", i), f"must be host:port, got {seed!r}")
        if self.stale_after_sec <= self.heartbeat_interval_sec:
            raise sections.PathError(
                ("stale_after_sec",),
                f"must be greater than heartbeat_interval_sec ({self.heartbeat_interval_sec:g}),"
                f" got {self.stale_after_sec:g}",
            )
        if self.reclaim_after_sec < self.stale_after_sec:
            raise sections.PathError(
                ("reclaim_after_sec",),
                f"must be at least stale_after_sec ({self.stale_after_sec:g}),"
                f" got {self.reclaim_after_sec:g}",
            )
        for name in self.api_rate_limits:
            if name not in _ALL_CLOUD_BACKENDS:
                raise sections.PathError(
                    ("api_rate_limits", name),
                    "unknown cloud backend" + sections.did_you_mean(name, _ALL_CLOUD_BACKENDS),
                )
        return self


# --- auth, hardware, scheduling, storage, api, runtime -----------------------------------------


class TokenPermissions(sections.Section):
    """What a publisher token may do. `allow_cloud` is the default for every function; the
    seed's per-function flags override it when set."""

    allow_cloud: bool = False
    allow_cloud_transcribe: bool | None = None
    allow_cloud_ai_analyze: bool | None = None
    max_cloud_cost_per_day_usd: sections.NonNegFloat | None = None
    max_tasks_per_day: sections.PositiveInt | None = None
    allowed_pipeline_templates: Annotated[list[str], BeforeValidator(sections.none_to_list)] = (
        Field(default_factory=list)
    )
    #: may read and change the node's settings (`/api/v1/settings`) in token mode
    admin: bool = False

    def allows_cloud(self, section: str) -> bool:
        """Whether cloud backends may be used for a capability section (e.g. 'transcribe')."""
        specific = getattr(self, f"allow_cloud_{section}", None)
        return self.allow_cloud if specific is None else bool(specific)


def _to_datetime(value: object) -> object:
    # YAML gives a date for `2026-06-01`, a datetime for a timestamp, a str when quoted.
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            return value
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


class AccessToken(sections.Section):
    """One publisher token; only its SHA-256 is stored."""

    id: str
    name: str = ""
    token_hash: str
    expires_at: Annotated[datetime | None, BeforeValidator(_to_datetime)] = None
    permissions: TokenPermissions = Field(default_factory=TokenPermissions)

    @model_validator(mode="after")
    def _check(self) -> AccessToken:
        if not self.id.strip():
            raise sections.PathError(("id",), "must not be empty")
        if not _TOKEN_HASH.match(self.token_hash):
            raise sections.PathError(
                ("token_hash",), "must be 'sha256:' followed by 64 lowercase hex digits"
            )
        return self


class AuthConfig(sections.Section):
    """auth: `open` (no check, LAN) or `token` (Bearer tokens on /api/v1)."""

    mode: Literal["open", "token"] = "open"
    access_tokens: Annotated[list[AccessToken], BeforeValidator(sections.none_to_list)] = Field(
        default_factory=list
    )

    @model_validator(mode="after")
    def _unique(self) -> AuthConfig:
        seen_ids: set[str] = set()
        seen_hashes: set[str] = set()
        for i, tok in enumerate(self.access_tokens):
            if tok.id in seen_ids:
                raise sections.PathError(
                    ("access_tokens", i, "id"), f"duplicate token id {tok.id!r}"
                )
            if tok.token_hash in seen_hashes:
                raise sections.PathError(("access_tokens", i, "token_hash"), "duplicate token hash")
            seen_ids.add(tok.id)
            seen_hashes.add(tok.token_hash)
        return self


class HwScoreLlm(sections.Section):
    """hardware.hw_score_llm: ask an LLM for the score of a GPU missing from the ladder."""

    enabled: bool = True
    provider: str = "auto"

    @model_validator(mode="after")
    def _check(self) -> HwScoreLlm:
        names = catalog.backend_names(catalog.CapabilityFunction.AI_ANALYZE)
        if self.provider != "auto" and self.provider not in names:
            raise sections.PathError(
                ("provider",),
                "must be 'auto' or an ai_analyze backend"
                + sections.did_you_mean(self.provider, names),
            )
        return self


class HardwareConfig(sections.Section):
    """hardware: manual score overrides and the LLM fallback (seed 001 §2.7.1)."""

    gpu_score_override: sections.Score | None = None
    cpu_score_override: sections.Score | None = None
    hw_score_llm: HwScoreLlm = Field(default_factory=HwScoreLlm)


class LoadPenalty(sections.Section):
    """scheduling.load_penalty (seed 001 §2.7.2)."""

    enabled: bool = True
    max_penalty: Annotated[float, sections.between(0, 100)] = 20.0


def _merge_quality_defaults(value: object) -> object:
    if value is None:
        return dict(DEFAULT_QUALITY_DEFAULTS)
    if isinstance(value, Mapping):
        return {**DEFAULT_QUALITY_DEFAULTS, **value}
    return value


_QUALITY_KEYS = tuple(task_types.TASK_TYPES) + tuple(f.value for f in catalog.CapabilityFunction)


class SchedulingConfig(sections.Section):
    """scheduling: poll cadence (seconds), load penalty and per-task-type quality defaults."""

    poll_interval_sec: sections.PositiveFloat = 1.0
    idle_poll_interval_sec: sections.PositiveFloat = 5.0
    defer_window_polls: sections.PositiveInt = 3
    #: a node whose last N claimed tasks all failed for lack of resources stops claiming for
    #: a cool-down that doubles on each repeat (0: never)
    quarantine_after_failures: sections.NonNegInt = 3
    quarantine_cooldown_sec: sections.PositiveFloat = 60.0
    #: how many ready tasks a node may claim beyond its free slots (short tasks: one
    #: transaction carries many); 0 claims only for free slots
    claim_ahead: Annotated[int, sections.between(0, 4096)] = 512
    #: a task claimed ahead that has not started within this many seconds goes back to the
    #: queue for any node; the node claims ahead only what it expects to start sooner
    claim_ahead_window_sec: sections.PositiveFloat = 1.0
    #: our addition (seed 001 §7.8): after a 429 halved a cloud backend's concurrency, one
    #: slot comes back per this many seconds without another 429
    rate_limit_restore_sec: sections.PositiveFloat = 60.0
    #: the node's cloud budget per UTC day (from the costs its cloud backends report);
    #: reached: cloud backends are not chosen until the next day. null = no limit
    max_cloud_cost_per_day_usd: sections.NonNegFloat | None = None
    load_penalty: LoadPenalty = Field(default_factory=LoadPenalty)
    quality_defaults: Annotated[
        dict[str, QualityModeName], BeforeValidator(_merge_quality_defaults)
    ] = Field(default_factory=lambda: dict(DEFAULT_QUALITY_DEFAULTS))

    @model_validator(mode="after")
    def _check(self) -> SchedulingConfig:
        for key in self.quality_defaults:
            if key not in _QUALITY_KEYS:
                raise sections.PathError(
                    ("quality_defaults", key),
                    "unknown task type or capability function"
                    + sections.did_you_mean(key, _QUALITY_KEYS),
                )
        return self


class StorageConfig(sections.Section):
    """storage: data directory, result retention and clean-up (seed 001 §7.7)."""

    data_dir: Annotated[str, sections.non_empty] = ".data"
    #: results (and task logs) are removed this long after they were last written, unless
    #: their pipeline is still active or their result waits in the outbox; 0 keeps them
    results_retain_days: sections.NonNegFloat = 7.0
    #: `never` keeps downloads, extracted audio, chunks and frames after their pipeline ends
    intermediate_cleanup: Literal["on_pipeline_complete", "never"] = "on_pipeline_complete"
    #: copies of peers' files (`cache/peers/`) beyond this are removed, least recently used
    peer_cache_max_gb: sections.NonNegFloat = 10.0
    #: seconds between two full clean-up sweeps (changes start lighter sweeps sooner)
    cleanup_interval_sec: sections.PositiveFloat = 600.0
    #: the largest file the web UI may upload (`POST /api/v1/uploads`; 413 beyond)
    max_upload_mb: sections.PositiveInt = 4096


class StoreConfig(sections.Section):
    """store: where tasks live. Empty url: the embedded SQLite file in the data dir."""

    url: str = ""
    #: the embedded SQLite store runs in a process of its own (see `store/hosted.py`); false
    #: keeps it on a thread of the node's process
    process: bool = True
    #: a direct connection to the database for `LISTEN` when `url` is a transaction-mode
    #: pooler (PgBouncer), which cannot deliver notifications; empty: `url`
    listen_url: str = ""
    #: false turns psycopg's prepared statements off: needed behind a transaction-mode
    #: PgBouncer older than 1.21, or one without `max_prepared_statements`
    prepared_statements: bool = True

    @model_validator(mode="after")
    def _check(self) -> StoreConfig:
        for key in ("url", "listen_url"):
            url = getattr(self, key)
            if url and not url.startswith(("postgresql://", "postgres://")):
                shown = url.split("://")[0] + "://…" if "://" in url else repr(url)
                raise sections.PathError(
                    (key,),
                    "must be empty (embedded SQLite) or a postgresql://user@host/db URL, "
                    f"got {shown}",
                )
        if self.listen_url and not self.url:
            raise sections.PathError(
                ("listen_url",), "is for a PostgreSQL store: set store.url as well"
            )
        return self


class ApiConfig(sections.Section):
    """api: where the node's HTTP server listens (our addition)."""

    host: Annotated[str, sections.non_empty] = "127.0.0.1"
    port: Annotated[int, sections.between(1, 65535)] = 7631
    #: largest request body the API accepts (413 beyond)
    max_body_bytes: sections.PositiveInt = 1_048_576


NotifyOn = Literal["completed", "failed", "cancelled"]


def _notify_default() -> list[NotifyOn]:
    return ["completed", "failed"]


class NotificationsConfig(sections.Section):
    """notifications: a webhook told when a pipeline this node owns ends (our addition)."""

    #: POSTed a JSON body per ended pipeline; empty: no webhook
    webhook_url: str = ""
    #: which ends are sent: completed, failed (also partial_failed), cancelled
    on: Annotated[list[NotifyOn], BeforeValidator(sections.none_to_list)] = Field(
        default_factory=_notify_default
    )
    #: signs each body: header X-Fredica-Signature: sha256=<HMAC-SHA256 of the body>
    webhook_secret: str = ""
    #: the web UI's address in the link sent (behind a proxy); empty: this node's address
    public_url: str = ""
    timeout_sec: sections.PositiveFloat = 10.0
    #: further attempts after a failed one (5xx, 408, 429 or no answer), waiting
    #: backoff_sec, then twice that, ...
    retries: Annotated[int, sections.between(0, 10)] = 3
    backoff_sec: sections.PositiveFloat = 2.0

    @model_validator(mode="after")
    def _check(self) -> NotificationsConfig:
        for key in ("webhook_url", "public_url"):
            url = getattr(self, key)
            if url and not re.match(r"^https?://[^/\s]+", url):
                raise sections.PathError((key,), "must be an http:// or https:// URL")
        return self


class RuntimeState(sections.Section):
    """_runtime: maintained by the program; do not edit by hand."""

    last_shutdown_type: Literal["", "CLEAN", "CRASH"] = ""
    gpu_score_cached: sections.Score | None = None
    cpu_score_cached: sections.Score | None = None
    # Identifies the GPU + driver the cached score belongs to; a driver update invalidates it.
    gpu_score_cache_key: str = ""


_LIBRARY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class LibraryConfig(sections.Section):
    """One watched folder (`libraries:`): every new or changed file that matches becomes a
    pipeline of `template` with `params`, once, after it stayed unchanged for `settle_sec`."""

    name: str
    folder: str
    template: str = Field(min_length=1, max_length=100)
    params: dict[str, Any] = Field(default_factory=dict)
    include: Annotated[list[str], BeforeValidator(sections.none_to_list)] = Field(
        default_factory=lambda: ["*"]
    )
    exclude: Annotated[list[str], BeforeValidator(sections.none_to_list)] = Field(
        default_factory=list
    )
    scan_interval_sec: sections.PositiveFloat = 60.0
    settle_sec: Annotated[float, sections.between(0, 86400)] = 10.0
    inotify: bool = True
    enabled: bool = True

    @model_validator(mode="after")
    def _check(self) -> LibraryConfig:
        if not _LIBRARY_NAME.match(self.name):
            raise sections.PathError(
                ("name",),
                "must be 1-64 letters, digits, '_', '.' or '-' (starting with a letter or "
                f"digit), got {self.name!r}",
            )
        if not self.folder.strip() or not Path(self.folder).expanduser().is_absolute():
            raise sections.PathError(
                ("folder",), f"must be an absolute directory path, got {self.folder!r}"
            )
        for key in ("include", "exclude"):
            for i, pattern in enumerate(getattr(self, key)):
                if not pattern.strip():
                    raise sections.PathError((key, i), "must be a non-empty glob pattern")
        return self


class WorkerConfig(sections.Section):
    """The whole worker.yaml."""

    node: NodeConfig = Field(default_factory=NodeConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    plugins: Annotated[list[str], BeforeValidator(sections.none_to_list)] = Field(
        default_factory=list
    )
    capabilities: sections.CapabilitiesConfig = Field(default_factory=sections.CapabilitiesConfig)
    cloud_policy: sections.CloudPolicyConfig = Field(default_factory=sections.CloudPolicyConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    hardware: HardwareConfig = Field(default_factory=HardwareConfig)
    scheduling: SchedulingConfig = Field(default_factory=SchedulingConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    notifications: NotificationsConfig = Field(default_factory=NotificationsConfig)
    runtime: RuntimeState = Field(default_factory=RuntimeState, alias="_runtime")
    #: read-only roots the web UI may pick source files from (`/api/v1/media-folders`)
    media_folders: Annotated[list[str], BeforeValidator(sections.none_to_list)] = Field(
        default_factory=list
    )
    #: watched folders: new and changed files become pipelines (docs/libraries.md)
    libraries: Annotated[list[LibraryConfig], BeforeValidator(sections.none_to_list)] = Field(
        default_factory=list
    )

    @model_validator(mode="after")
    def _check_plugins(self) -> WorkerConfig:
        for i, name in enumerate(self.plugins):
            if not _MODULE.match(name):
                raise sections.PathError(
                    ("plugins", i), f"must be an importable module name, got {name!r}"
                )
        for i, folder in enumerate(self.media_folders):
            if not folder.strip() or not Path(folder).expanduser().is_absolute():
                raise sections.PathError(
                    ("media_folders", i), f"must be an absolute directory path, got {folder!r}"
                )
        seen: set[str] = set()
        for i, library in enumerate(self.libraries):
            if library.name in seen:
                raise sections.PathError(
                    ("libraries", i, "name"), f"duplicate library name {library.name!r}"
                )
            seen.add(library.name)
        return self

    @property
    def has_proxy(self) -> bool:
        """A configured egress proxy (seed: setting youtube.proxy sets has_proxy)."""
        return bool(self.capabilities.download.youtube.proxy)


# --- loading and writing -------------------------------------------------------------------------


def parse_config(data: object, source: str = "worker.yaml") -> WorkerConfig:
    """Validate already-parsed YAML data; raises errors.ConfigError naming `source`."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        shown = sections.show_value(data)
        raise errors.ConfigError(
            f"{source}: (top level): expected a mapping of sections, got {shown}"
        )
    try:
        return WorkerConfig.model_validate(dict(data))
    except pydantic.ValidationError as exc:
        raise errors.ConfigError(
            sections.format_validation_error(source, exc, WorkerConfig)
        ) from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise errors.ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise errors.ConfigError(f"{path}: cannot read: {exc}") from None


def _yaml_error(path: Path, exc: YAMLError) -> errors.ConfigError:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return errors.ConfigError(f"{path}: invalid YAML: {where}{problem}")


def load_config(path: Path) -> WorkerConfig:
    """Load and validate a worker.yaml. A missing file is an error; an empty file is all
    defaults. Raises errors.ConfigError naming the file and the key path. Settings given in
    the environment win over the file (`apply_env`)."""
    text = _read_text(path)
    try:
        data = YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        raise _yaml_error(path, exc) from None
    return apply_env(parse_config(data, source=str(path)))


def apply_env(cfg: WorkerConfig) -> WorkerConfig:
    """`$FREDICA_CLUSTER_SECRET`, when set and not empty, is `cluster.cluster_secret` (a
    container or systemd unit reads it from an env file, so the secret stays out of
    worker.yaml; it is never written back there)."""
    secret = os.environ.get(CLUSTER_SECRET_ENV, "")
    if not secret:
        return cfg
    return cfg.model_copy(
        update={"cluster": cfg.cluster.model_copy(update={"cluster_secret": secret})}
    )


def default_config_path() -> Path:
    """`$FREDICA_CONFIG` when set, else `.data/worker.yaml` (the seed's node data dir)."""
    env = os.environ.get("FREDICA_CONFIG", "")
    return Path(env) if env else DEFAULT_CONFIG_PATH


def _atomic_write(path: Path, text: str) -> None:
    # A crash mid-write must never leave a half file that refuses to load.
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_default_config(path: Path, *, overwrite: bool = False) -> None:
    """Write the commented default worker.yaml (created 0600: it will hold secrets).

    An existing file is never replaced unless `overwrite` is true (errors.ConfigError)."""
    if path.exists() and not overwrite:
        raise errors.ConfigError(f"{path}: already exists; not overwriting it")
    _atomic_write(path, config_template.DEFAULT_WORKER_YAML)


def _round_trip_yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    return yaml


def _load_doc(path: Path, yaml: YAML) -> CommentedMap:
    try:
        doc = yaml.load(_read_text(path))
    except YAMLError as exc:
        raise _yaml_error(path, exc) from None
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise errors.ConfigError(f"{path}: (top level): expected a mapping of sections")
    return doc


def _edit(path: Path, edit: typing.Callable[[CommentedMap], None]) -> None:
    yaml = _round_trip_yaml()
    doc = _load_doc(path, yaml)
    edit(doc)
    buf = StringIO()
    yaml.dump(doc, buf)
    _atomic_write(path, buf.getvalue())


def _section(doc: CommentedMap, key: str, position: int | None = None) -> CommentedMap:
    current = doc.get(key)
    if isinstance(current, CommentedMap):
        return current
    section = CommentedMap()
    if key in doc or position is None:
        doc[key] = section
    else:
        doc.insert(position, key, section)
    return section


def new_node_id() -> str:
    """A fresh node id: `node-` and 12 hex digits."""
    return f"node-{secrets.token_hex(6)}"


def ensure_node_identity(path: Path) -> WorkerConfig:
    """Load worker.yaml, generating node.id / node.hostname on first start.

    A missing file is created from the default template first. Generated values are written
    back with ruamel.yaml round-trip so comments and layout survive; an id once written is
    never changed. Returns the loaded config.
    """
    if not path.exists():
        write_default_config(path)
    cfg = load_config(path)  # refuse to rewrite a file that does not validate
    if cfg.node.id and cfg.node.hostname:
        return cfg
    node_id = cfg.node.id or new_node_id()
    hostname = cfg.node.hostname or socket.gethostname() or "localhost"

    def edit(doc: CommentedMap) -> None:
        node = _section(doc, "node", position=0)
        for pos, (key, value) in enumerate((("id", node_id), ("hostname", hostname))):
            if key in node:
                node[key] = value
            else:
                node.insert(pos, key, value)

    _edit(path, edit)
    return load_config(path)


def write_runtime(path: Path, updates: Mapping[str, object]) -> None:
    """Update keys of the `_runtime` section in place (comments survive)."""
    allowed = set(RuntimeState.model_fields)
    unknown = set(updates) - allowed
    if unknown:
        raise errors.ConfigError(f"unknown _runtime keys: {', '.join(sorted(unknown))}")

    def edit(doc: CommentedMap) -> None:
        runtime = _section(doc, "_runtime")
        for key, value in updates.items():
            runtime[key] = value

    _edit(path, edit)


def add_access_token(path: Path, entry: Mapping[str, object]) -> None:
    """Append a publisher token (already hashed) to `auth.access_tokens`, keeping comments.

    The file is validated with the new entry before it is written, so a bad entry changes
    nothing."""

    def edit(doc: CommentedMap) -> None:
        auth = _section(doc, "auth")
        tokens = auth.get("access_tokens")
        if tokens is None:
            tokens = []
            auth["access_tokens"] = tokens
        tokens.append(dict(entry))

    update_config(path, edit)


def update_config(path: Path, edit: typing.Callable[[CommentedMap], None]) -> WorkerConfig:
    """Apply `edit` to worker.yaml's round-trip document, validate the result as a load
    would, and write it back (comments and layout kept) only when it is valid: an edit that
    makes the file invalid raises errors.ConfigError naming the key and changes nothing.
    Returns the new configuration (the environment applied, as `load_config`)."""
    yaml = _round_trip_yaml()
    doc = _load_doc(path, yaml)
    edit(doc)
    buf = StringIO()
    yaml.dump(doc, buf)
    cfg = parse_config(YAML(typ="safe", pure=True).load(buf.getvalue()), str(path))
    _atomic_write(path, buf.getvalue())
    return apply_env(cfg)


def section_of(doc: CommentedMap, key: str) -> CommentedMap:
    """The mapping `doc[key]`, created (at the end) when missing or empty."""
    return _section(doc, key)


# --- showing -----------------------------------------------------------------------------------

SECRET_KEYS = frozenset(
    {"api_key", "secret_key", "cluster_secret", "sessdata", "hf_token", "token_hash"}
)
# a webhook's URL is often its credential (chat services put the key in the path)
SECRET_KEYS |= {"webhook_url", "webhook_secret"}
MASK = "********"
_URL_PASSWORD = re.compile(r"^([a-z0-9+.-]+://[^:/@]*:)([^@]*)(@)", re.IGNORECASE)


def _mask(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _mask(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, key) for v in value]
    if key in SECRET_KEYS and isinstance(value, str) and value:
        return MASK
    if isinstance(value, str) and "://" in value:
        # proxies, endpoints and service addresses may carry user:password@
        return _URL_PASSWORD.sub(rf"\g<1>{MASK}\g<3>", value)
    return value


def mask_value(value: Any, key: str = "") -> Any:
    """`value` as `config show` prints it under `key` (secret keys and URL passwords masked)."""
    return _mask(value, key)


def mask_secrets(cfg: WorkerConfig) -> dict[str, Any]:
    """The effective config as plain data, with API keys, secrets, cookies, HF tokens, token
    hashes and passwords inside URLs (proxy, endpoints) masked (for `fredica config show`)."""
    data = cfg.model_dump(mode="json", by_alias=True)
    masked = _mask(data)
    assert isinstance(masked, dict)
    return masked
