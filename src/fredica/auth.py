"""Publisher tokens for `/api/v1` (seed 001 §12.2, DESIGN §7).

In `auth.mode: token` every `/api/v1` request carries `Authorization: Bearer <token>` (the
server-sent events endpoint may use `?token=`, since EventSource cannot set headers). Only the
SHA-256 of a token is stored in worker.yaml; comparison is constant-time. The token list is
re-read when worker.yaml changes, so `fredica token create` takes effect without a restart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fredica.config import schema as config
from fredica.domain import errors, models
from fredica.domain.clock import Clock

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "fredica_tok_"
#: the header that carries `cluster.cluster_secret` between nodes (never a publisher token)
CLUSTER_SECRET_HEADER = "X-Cluster-Secret"


Unauthorized = errors.Unauthorized
Forbidden = errors.Forbidden


@dataclass(frozen=True)
class Publisher:
    token_id: str
    name: str
    permissions: config.TokenPermissions


def hash_token(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """(token id, secret token) for `fredica token create`."""
    return f"tok-{secrets.token_hex(3)}", TOKEN_PREFIX + secrets.token_urlsafe(32)


class Authenticator:
    def __init__(self, auth: config.AuthConfig, clock: Clock, path: Path | None = None) -> None:
        self._auth = auth
        self._clock = clock
        self._path = path
        self._mtime = _mtime(path)

    @property
    def enabled(self) -> bool:
        self._reload_if_changed()
        return self._auth.mode == "token"

    def _reload_if_changed(self) -> None:
        mtime = _mtime(self._path)
        if self._path is None or mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            self._auth = config.load_config(self._path).auth
        except errors.ConfigError as exc:  # keep the last good tokens; say why
            logger.error("auth not reloaded: %s", exc, extra={"action": "auth_reload"})

    def cloud_budget(self, token_id: str) -> float | None:
        """The token's `max_cloud_cost_per_day_usd` (None: no limit, or no such token), as
        the file says now (tokens created while the node runs count at once)."""
        self._reload_if_changed()
        for entry in self._auth.access_tokens:
            if entry.id == token_id:
                return entry.permissions.max_cloud_cost_per_day_usd
        return None

    def cloud_refusal(self, token_id: str, section: str) -> str | None:
        """Why the token may not use cloud backends for a capability section (e.g.
        'ai_analyze'), as the file says now; None when it may (or no such token)."""
        self._reload_if_changed()
        for entry in self._auth.access_tokens:
            if entry.id == token_id:
                return cloud_refusal(Publisher(entry.id, entry.name, entry.permissions), section)
        return None

    def authenticate(self, header: str | None, query_token: str | None = None) -> Publisher:
        """The publisher behind a request, or Unauthorized naming what is wrong."""
        token = None
        if header:
            scheme, _, value = header.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise Unauthorized("Authorization header must be 'Bearer <token>'")
            token = value.strip()
        elif query_token:
            token = query_token
        if not token:
            raise Unauthorized()
        digest = hash_token(token)
        for entry in self._auth.access_tokens:
            if hmac.compare_digest(entry.token_hash, digest):
                if entry.expires_at is not None:
                    expires = entry.expires_at
                    if expires.tzinfo is None:
                        expires = expires.replace(tzinfo=UTC)
                    if expires.timestamp() <= self._clock.now():
                        raise Unauthorized(f"token {entry.id} expired at {expires.isoformat()}")
                return Publisher(entry.id, entry.name, entry.permissions)
        raise Unauthorized("unknown token")


def check_cluster_secret(configured: str, given: str | None) -> None:
    """Peers prove they belong to the cluster with the shared secret (seed 001 §12.1),
    compared in constant time. No secret configured: the node takes no peer requests at all."""
    if not configured:
        raise Unauthorized(
            "this node has no cluster.cluster_secret: it does not accept cluster requests"
        )
    if not given:
        raise Unauthorized(f"cluster requests need the {CLUSTER_SECRET_HEADER} header")
    if not hmac.compare_digest(configured.encode(), given.encode()):
        raise Unauthorized(f"wrong {CLUSTER_SECRET_HEADER}")


def cloud_refusal(publisher: Publisher, section: str) -> str | None:
    """Why `publisher` may not use cloud backends for `section`; None when it may."""
    if publisher.permissions.allows_cloud(section):
        return None
    flag = (
        f"allow_cloud_{section}"
        if getattr(publisher.permissions, f"allow_cloud_{section}", None) is not None
        else "allow_cloud"
    )
    return f"token {publisher.token_id} may not use cloud backends ({flag}: false)"


def keep_local(
    publisher: Publisher | None,
    tasks: Sequence[models.NewTask],
    section_of: Callable[[models.NewTask], str | None],
) -> tuple[models.NewTask, ...]:
    """The tasks of a token's pipeline with the token's cloud permission written into them:
    a task whose function the token may not run in the cloud becomes `local_only`, so every
    node that chooses its backend honours it (the token is known only here, on the owner). A
    task that asks for `cloud_only` there is refused (Forbidden naming the limit)."""
    if publisher is None:
        return tuple(tasks)
    out = []
    for task in tasks:
        section = section_of(task)
        refusal = cloud_refusal(publisher, section) if section else None
        if refusal is None or task.cloud_preference is models.CloudPreference.LOCAL_ONLY:
            out.append(task)
            continue
        if task.cloud_preference is models.CloudPreference.CLOUD_ONLY:
            raise Forbidden(f"{refusal}: task {task.type} asks for cloud_only")
        out.append(dataclasses.replace(task, cloud_preference=models.CloudPreference.LOCAL_ONLY))
    return tuple(out)


def check_create(
    publisher: Publisher | None,
    template: str,
    cloud_preference: str,
    new_tasks: int,
    tasks_last_day: int,
) -> None:
    """Permissions checked before a pipeline is created (403 with the reason)."""
    if publisher is None:
        return
    perms = publisher.permissions
    if perms.allowed_pipeline_templates and template not in perms.allowed_pipeline_templates:
        raise Forbidden(f"token {publisher.token_id} may not use template {template!r}")
    if cloud_preference in ("cloud_only", "prefer_cloud") and not (
        perms.allows_cloud("transcribe") or perms.allows_cloud("ai_analyze")
    ):
        raise Forbidden(
            f"token {publisher.token_id} may not use cloud backends "
            f"(cloud_preference {cloud_preference})"
        )
    if perms.max_tasks_per_day is not None and tasks_last_day + new_tasks > perms.max_tasks_per_day:
        raise Forbidden(
            f"token {publisher.token_id} reached max_tasks_per_day {perms.max_tasks_per_day} "
            f"({tasks_last_day} in the last 24 h, {new_tasks} more requested)"
        )


def expiry_from_now(spec: str | None, now: datetime) -> datetime | None:
    """`90d`, `12h`, `30m` or an ISO date -> an absolute expiry (None: never). A moment that is
    not in the future is refused: a token that is expired when it is made is a mistake."""
    if not spec:
        return None
    units = {"d": 86400, "h": 3600, "m": 60}
    if spec[-1] in units and spec[:-1].isdigit():
        value = datetime.fromtimestamp(now.timestamp() + int(spec[:-1]) * units[spec[-1]], UTC)
    else:
        try:
            value = datetime.fromisoformat(spec)
        except ValueError:
            raise errors.InvalidRequest(
                f"--expires: use 90d, 12h, 30m or an ISO date, got {spec!r}"
            ) from None
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
    if value <= now:
        raise errors.InvalidRequest(
            f"--expires: {spec!r} is not in the future (now {now.isoformat(timespec='seconds')})"
        )
    return value


def _mtime(path: Path | None) -> int | None:
    try:
        return path.stat().st_mtime_ns if path is not None else None
    except OSError:
        return None
