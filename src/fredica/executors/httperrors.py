"""HTTP failures classified into task errors (seed 001 §7.6), shared by downloads and AI APIs.

| what happened                        | class        |
|--------------------------------------|--------------|
| connection refused, DNS, reset       | TRANSIENT    |
| timeout                              | TRANSIENT    |
| 5xx (and Anthropic's 529 overloaded) | TRANSIENT    |
| 429                                  | RATE_LIMITED (Retry-After honoured) |
| 400 / 401 / 403 / 404 / 410 / 422    | PERMANENT    |
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from fredica.domain import errors
from fredica.executors import usage
from fredica.executors.context import TaskContext

T = TypeVar("T")
DEFAULT_RETRY_AFTER = 30.0  # seconds, when a 429 names no delay
_REASONS = {
    400: "bad request",
    401: "unauthorized (is the API key valid?)",
    403: "forbidden",
    404: "not found",
    410: "gone",
    422: "unprocessable request",
}


def host_of(url: str) -> str:
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.hostname or url}{port}"


def retry_after_seconds(value: str | None) -> float:
    """A Retry-After header (seconds or an HTTP date) in seconds from now."""
    if not value:
        return DEFAULT_RETRY_AFTER
    value = value.strip()
    try:
        return max(1.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return DEFAULT_RETRY_AFTER
    return max(1.0, when.timestamp() - time.time())


#: request headers and query parameters that carry a credential
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")
CREDENTIAL_PARAMS = ("key", "api_key", "apikey", "access_token", "token")
REDACTED = "[redacted]"


def credentials_of(request: httpx.Request) -> list[str]:
    """The secrets `request` carried (header values, and the token after an auth scheme such
    as `Bearer`, `DeepL-Auth-Key`; credential query parameters), longest first."""
    found: set[str] = set()
    for name in CREDENTIAL_HEADERS:
        value = request.headers.get(name, "").strip()
        if value:
            found.add(value)
            found.add(value.rpartition(" ")[2])
    for name, value in request.url.params.multi_items():
        if name.lower() in CREDENTIAL_PARAMS and value:
            found.add(value)
    return sorted((s for s in found if len(s) >= 4), key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def error_text(response: httpx.Response) -> str:
    """The provider's own error message from a JSON or text body (shortened), without the
    credentials the request carried: some providers echo the key they refused, and the message
    is stored, logged, shown and replicated."""
    try:
        secrets = credentials_of(response.request)
    except RuntimeError:  # a response built without a request carries no credential
        secrets = []
    return redact(_provider_message(response), secrets)[:300]


def _provider_message(response: httpx.Response) -> str:
    try:
        body: Any = response.json()
    except httpx.ResponseNotRead:
        return ""
    except ValueError:
        return response.text.strip()[:1000]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:1000]
        if isinstance(err, str):
            return err[:1000]
        if body.get("message"):
            return str(body["message"])[:1000]
    return str(body)[:1000]


def for_status(response: httpx.Response, what: str, provider: str = "") -> errors.TaskError:
    """The task error for a non-success response."""
    status = response.status_code
    detail = error_text(response)
    reason = _REASONS.get(status, response.reason_phrase or "")
    message = f"{what}: HTTP {status} {reason}".rstrip() + (f": {detail}" if detail else "")
    if status == 429:
        usage.rate_limited()  # the node halves this backend's concurrency (seed 001 §7.8)
        return errors.RateLimitedError(
            message,
            provider=provider,
            retry_after_sec=retry_after_seconds(response.headers.get("retry-after")),
        )
    if status >= 500 or status in (408, 425):
        return errors.TransientError(message)
    return errors.PermanentError(message)


def _root_cause(exc: BaseException) -> str:
    """The OS-level reason under httpx's wrapper ("All connection attempts failed" hides it)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, OSError) and seen.strerror:
            return str(seen.strerror).lower()
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


def for_transport(exc: httpx.HTTPError, url: str, what: str) -> errors.TaskError:
    """The task error for a request that got no response."""
    host = host_of(url)
    if isinstance(exc, httpx.TimeoutException):
        return errors.TransientError(f"{what}: timed out talking to {host}")
    if isinstance(exc, httpx.ConnectError):
        return errors.TransientError(f"{what}: cannot connect to {host}: {_root_cause(exc)}")
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return errors.PermanentError(f"{what}: unsupported URL {url}: {exc}")
    return errors.TransientError(f"{what}: {type(exc).__name__} from {host}: {exc}")


async def cancellable(ctx: TaskContext, work: Awaitable[T]) -> T:
    """Await `work`, abandoning it as soon as the task is cancelled (a slow API call must not
    hold a cancelled task)."""
    job = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(ctx.control.wait_cancelled())
    try:
        await asyncio.wait({job, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if not job.done():
        job.cancel()
        raise errors.TaskCancelled(ctx.control.cancel_reason)
    return job.result()


async def post_json(
    ctx: TaskContext,
    url: str,
    *,
    what: str,
    provider: str = "",
    timeout: float = 60.0,
    **request: Any,
) -> Any:
    """POST (httpx keyword arguments: json=, data=, headers=) and return the JSON reply, every
    failure classified: no answer, an error status, or a reply that is not JSON."""
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
        try:
            response = await cancellable(ctx, client.post(url, **request))
        except httpx.HTTPError as exc:
            raise for_transport(exc, url, what) from exc
    if response.status_code >= 400:
        raise for_status(response, what, provider=provider)
    try:
        return response.json()
    except ValueError as exc:
        raise errors.TransientError(f"{what}: the reply was not JSON") from exc
