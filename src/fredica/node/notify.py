"""Webhook notifications (worker.yaml `notifications`): when a pipeline this node owns ends,
a JSON body is POSTed to `webhook_url`.

The notifier follows the node's change feed like the web page's event stream does (it reads
the changed rows from the node's change cursor, starting at the newest change when the node
starts, so a restart never repeats old notices), picks out the pipelines it owns that just
reached an end the config asks for, and queues one notice per end. A separate sender posts
them one at a time, retrying a failed attempt (no answer, 5xx, 408, 429) `retries` times with
doubling waits; other 4xx are final. Nothing here runs inside the engine: a slow or dead
webhook only delays later notices, and a full queue drops the newest notice with a warning.
A stopping node reads the ends its last work caused and gives the webhook a few seconds for
what is queued (`Node._stop_notifier`).
The webhook URL is never logged whole (chat services put their key in it); with
`webhook_secret` each body carries an HMAC-SHA256 signature instead of the secret itself.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from fredica import __version__
from fredica.config.schema import NotificationsConfig
from fredica.domain import models
from fredica.store.base import ChangeBatch

logger = logging.getLogger(__name__)

QUEUE_MAX = 1000  # notices waiting to be sent; beyond this new ones are dropped
REMEMBERED = 10_000  # pipeline ends remembered so that a row changing again is not re-sent
CHANGES_BATCH = 500  # rows per change read
IDLE_WAIT_SEC = 30.0  # seconds between change-feed checks when nothing happens
RETRY_STATUSES = frozenset({408, 429})
SIGNATURE_HEADER = "X-Fredica-Signature"
FAILED = frozenset({models.PipelineStatus.FAILED, models.PipelineStatus.PARTIAL_FAILED})


class Feed(Protocol):
    """The node's change feed (`service.ChangeFeed`)."""

    @property
    def is_closed(self) -> bool: ...

    async def wait(self, after: int, timeout: float) -> int: ...


ReadChanges = Callable[[int, int], Awaitable[ChangeBatch]]
ReadTasks = Callable[[str], Awaitable[list[models.Task]]]


class _Redactor(logging.Filter):
    """Shows the webhooks in the HTTP client's own log records as `describe_url` does (httpx
    logs every request's full URL)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.urls:
            message = record.getMessage()
            for url in self.urls:
                if url in message:
                    message = message.replace(url, describe_url(url))
                    record.msg, record.args = message, ()
        return True


_REDACTOR = _Redactor()
logging.getLogger("httpx").addFilter(_REDACTOR)


def describe_url(url: str) -> str:
    """The webhook as logs may show it: scheme and host only."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}{f':{parts.port}' if parts.port else ''}/…"


def wanted(status: models.PipelineStatus, on: list[str]) -> bool:
    """Whether an end in `status` is one the config asks to be told about."""
    if status is models.PipelineStatus.COMPLETED:
        return "completed" in on
    if status in FAILED:
        return "failed" in on
    return status is models.PipelineStatus.CANCELLED and "cancelled" in on


def notice(
    pipeline: models.Pipeline, tasks: list[models.Task], node_id: str, link_base: str
) -> dict[str, Any]:
    """The JSON body for an ended pipeline: who, what, how it ended, how long it took (from
    creation to its end, and the time its tasks ran, per type) and a link to its page."""
    ended = pipeline.completed_at or pipeline.updated_at
    by_type: dict[str, float] = {}
    for task in tasks:
        if task.started_at is not None and task.completed_at is not None:
            ran = max(0.0, task.completed_at - task.started_at)
            by_type[task.type] = round(by_type.get(task.type, 0.0) + ran, 3)
    return {
        "event": f"pipeline.{pipeline.status.value}",
        "pipeline_id": pipeline.id,
        "title": pipeline.title,
        "template": pipeline.template,
        "status": pipeline.status.value,
        "material_id": pipeline.material_id,
        "node_id": node_id,
        "created_at": pipeline.created_at,
        "ended_at": ended,
        "durations": {
            "total_sec": round(max(0.0, ended - pipeline.created_at), 3),
            "run_sec": round(sum(by_type.values()), 3),
            "by_task_type": by_type,
        },
        "tasks": {
            "total": pipeline.total_tasks,
            "done": pipeline.done_tasks,
            "failed": pipeline.failed_tasks,
            "cancelled": pipeline.cancelled_tasks,
        },
        "link": f"{link_base.rstrip('/')}/pipelines/{pipeline.id}",
    }


@dataclass(frozen=True, slots=True)
class Delivery:
    """How a notice's sending ended."""

    delivered: bool
    attempts: int
    detail: str


class Notifier:
    """Follows the change feed and posts a notice per ended pipeline (see the module doc)."""

    def __init__(
        self,
        config: NotificationsConfig,
        node_id: str,
        link_base: str,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config
        if config.webhook_url:
            _REDACTOR.urls.add(config.webhook_url)
        self.node_id = node_id
        self.link_base = config.public_url or link_base
        self._transport = transport
        self._sleep = sleep
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_MAX)
        self._seen: collections.OrderedDict[tuple[str, float], None] = collections.OrderedDict()
        #: the change cursor up to which ends were looked at
        self.cursor = 0
        #: how each notice's sending ended, newest last (for tests and diagnosis)
        self.deliveries: collections.deque[Delivery] = collections.deque(maxlen=100)

    @property
    def enabled(self) -> bool:
        return bool(self.config.webhook_url)

    async def follow(self, feed: Feed, read_changes: ReadChanges, read_tasks: ReadTasks) -> None:
        """Queue a notice for every wanted end that the change feed shows after `cursor`,
        until the feed closes (or this is cancelled; `catch_up` then reads what is left). A
        failed read is logged and tried again at the next change: notices never stop the node."""
        version = 0
        while not feed.is_closed:
            version = await feed.wait(version, IDLE_WAIT_SEC)
            try:
                await self.catch_up(read_changes, read_tasks)
            except Exception:
                if feed.is_closed:
                    return
                logger.exception(
                    "reading changes for notifications failed", extra={"action": "notify_read"}
                )

    async def catch_up(self, read_changes: ReadChanges, read_tasks: ReadTasks) -> None:
        """Queue the notices of every change after `cursor` (and move `cursor` past them)."""
        while True:
            batch = await read_changes(self.cursor, CHANGES_BATCH)
            for pipeline in batch.pipelines:
                await self.consider(pipeline, read_tasks)
            self.cursor = batch.cursor
            if len(batch.tasks) < CHANGES_BATCH and len(batch.pipelines) < CHANGES_BATCH:
                return

    async def flush(self, timeout: float) -> bool:
        """Wait (at most `timeout` seconds) until every queued notice was sent or given up;
        whether that happened."""
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except TimeoutError:
            logger.warning(
                "stopping with %d notification(s) unsent",
                self._queue.qsize(),
                extra={"action": "notify_drop"},
            )
            return False
        return True

    async def consider(self, pipeline: models.Pipeline, read_tasks: ReadTasks) -> None:
        """Queue a notice if `pipeline` (a changed row) is an end of one of this node's
        pipelines that the config asks for and that was not queued before."""
        if pipeline.owner_id != self.node_id or not pipeline.status.is_terminal:
            return
        if not wanted(pipeline.status, list(self.config.on)):
            return
        key = (pipeline.id, pipeline.completed_at or pipeline.updated_at)
        if key in self._seen:
            return
        self._seen[key] = None
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
        body = notice(pipeline, await read_tasks(pipeline.id), self.node_id, self.link_base)
        try:
            self._queue.put_nowait(body)
        except asyncio.QueueFull:
            logger.warning(
                "notification for pipeline %s dropped: %d notices are waiting already",
                pipeline.id,
                QUEUE_MAX,
                extra={"action": "notify_drop"},
            )

    async def send_forever(self) -> None:
        """Post queued notices one at a time, until cancelled."""
        async with httpx.AsyncClient(
            timeout=self.config.timeout_sec, transport=self._transport, trust_env=False
        ) as client:
            while True:
                body = await self._queue.get()
                try:
                    self.deliveries.append(await self.send(client, body))
                except Exception:  # a bug here must not end the sender
                    logger.exception("notification not sent", extra={"action": "notify_failed"})
                finally:
                    self._queue.task_done()

    async def send(self, client: httpx.AsyncClient, body: dict[str, Any]) -> Delivery:
        """POST one notice, retrying as the config says; never raises."""
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "User-Agent": f"fredica/{__version__}"}
        if self.config.webhook_secret:
            mac = hmac.new(self.config.webhook_secret.encode(), data, hashlib.sha256)
            headers[SIGNATURE_HEADER] = f"sha256={mac.hexdigest()}"
        where = describe_url(self.config.webhook_url)
        attempts = 1 + self.config.retries
        detail = ""
        for attempt in range(1, attempts + 1):
            try:
                response = await client.post(self.config.webhook_url, content=data, headers=headers)
            except httpx.HTTPError as exc:
                # the exception's text may hold the whole URL: name its class only
                detail = f"no answer ({type(exc).__name__})"
            else:
                if response.is_success:
                    logger.info(
                        "pipeline %s %s: webhook %s notified",
                        body["pipeline_id"],
                        body["status"],
                        where,
                        extra={"action": "notify_sent"},
                    )
                    return Delivery(True, attempt, f"HTTP {response.status_code}")
                detail = f"HTTP {response.status_code}"
                if response.status_code < 500 and response.status_code not in RETRY_STATUSES:
                    attempts = attempt  # the webhook refused it: trying again will not help
                    break
            if attempt < attempts:
                await self._sleep(self.config.backoff_sec * 2 ** (attempt - 1))
        logger.warning(
            "pipeline %s %s: webhook %s not notified after %d attempt(s): %s",
            body["pipeline_id"],
            body["status"],
            where,
            attempts,
            detail,
            extra={"action": "notify_failed"},
        )
        return Delivery(False, attempts, detail)
