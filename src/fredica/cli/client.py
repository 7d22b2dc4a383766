"""The HTTP side of the CLI: a small client of a node's `/api/v1`, one-line errors, node URLs
without a scheme, and ID prefixes resolved against the node's lists."""

from __future__ import annotations

import errno
import os
import re
import socket
from collections.abc import Iterator
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console

err_console = Console(stderr=True)

DEFAULT_NODE = "http://127.0.0.1:7631"
#: the `--node` option of every command that talks to a node
NodeOpt = Annotated[
    str,
    typer.Option(
        "--node", envvar="FREDICA_NODE", help="Node to talk to: host:port or http(s)://host:port."
    ),
]
# the most rows searched for an ID prefix, read page by page (`limit` per page, capped by the
# node's list endpoints at 100,000 tasks and 1,000 pipelines)
TASK_LIST_LIMIT = 100_000
PIPELINE_LIST_LIMIT = 100_000
PREFIX_PAGE = 1000
CLUSTER_PAGE = 1000  # the deepest scope=cluster page a node answers
FULL_ID_LENGTH = 36  # a UUID with dashes


UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def name_task_ids(text: str, pipeline: dict[str, Any]) -> str:
    """Task UUIDs in `text` replaced by what people know them by: their ref in the pipeline,
    else their type and short id (e.g. in "upstream task <uuid> failed")."""
    refs = {v: k for k, v in (pipeline.get("params") or {}).get("refs", {}).items()}
    types = {t["id"]: t["type"] for t in pipeline.get("tasks") or []}

    def name(match: re.Match[str]) -> str:
        task_id = match.group(0)
        if task_id in refs:
            return str(refs[task_id])
        if task_id in types:
            return f"{types[task_id]} {task_id[:8]}"
        return task_id

    return UUID.sub(name, text)


def die(message: str, code: int = 1) -> NoReturn:
    """Print `error: message` on stderr (one line, no traceback) and exit with `code`."""
    err_console.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def normalize_node_url(value: str) -> str:
    """`host:port`, `host` or a full URL -> an http(s) base URL; dies on anything else."""
    raw = value.strip()
    if not raw:
        die("--node is empty; give host:port or an http(s) URL (e.g. 127.0.0.1:7631)")
    if "://" not in raw:
        raw = f"http://{raw}"
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, ValueError) as exc:
        die(f"--node {value!r} is not a valid address ({exc}); use host:port or http://host:port")
    if url.scheme not in ("http", "https") or not url.host:
        die(f"--node {value!r} is not a valid address; use host:port or http://host:port")
    return str(url).rstrip("/")


class Client:
    """A small synchronous client of a node's `/api/v1`; every failure is a one-line error."""

    def __init__(self, base: str, timeout: float = 30.0, token: str | None = None) -> None:
        self.base = normalize_node_url(base)
        token = token or os.environ.get("FREDICA_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(
            base_url=self.base, timeout=timeout, trust_env=False, headers=headers
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.send(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            die(f"{self.base}{path} did not answer with JSON; is it a fredica node?", 2)

    def send(
        self, method: str, path: str, *, allow: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response:
        """The node's answer; an error answer (unless its status is in `allow`) or no answer
        at all ends the command with one line."""
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.ConnectError:
            die(f"cannot reach a node at {self.base}; is `fredica serve` running?", 2)
        except httpx.TimeoutException:
            die(f"the node at {self.base} did not answer in time", 2)
        except httpx.HTTPError as exc:
            die(f"talking to the node at {self.base} failed: {exc}", 2)
        if response.status_code in allow:
            return response
        if response.status_code == 401:
            die(f"401: {detail(response)} (set FREDICA_TOKEN to a publisher token)")
        if response.status_code >= 400:
            die(f"{response.status_code}: {detail(response)}")
        return response


def detail(response: httpx.Response) -> str:
    try:
        body = response.json()
        return str(body.get("error") or body.get("detail"))
    except (ValueError, AttributeError):
        return response.text[:200]


def pages(
    client: Client, path: str, key: str, params: dict[str, Any], cursor: str | None = None
) -> Iterator[tuple[list[dict[str, Any]], str | None]]:
    """The pages of a list endpoint from `cursor` on, following `next_cursor`: each page's rows
    and the cursor after it (None after the last page)."""
    while True:
        query = params | ({"cursor": cursor} if cursor else {})
        body = client.request("GET", path, params=query)
        cursor = body.get("next_cursor")
        yield body[key], cursor
        if not cursor:
            return


def _rows(client: Client, path: str, key: str, most: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for page, _ in pages(client, path, key, {"limit": PREFIX_PAGE}):
        rows += page
        if len(rows) >= most:
            break
    return rows[:most]


def _elsewhere(client: Client, path: str, key: str, prefix: str) -> list[dict[str, Any]]:
    """Rows of other owners whose id may start with `prefix`: the node's replicas, searched
    (`scope=cluster`, `q` matches ids by prefix)."""
    params = {"scope": "cluster", "q": prefix, "limit": CLUSTER_PAGE}
    rows: list[dict[str, Any]] = client.request("GET", path, params=params)[key]
    return rows


def _resolve(kind: str, prefix: str, ids: list[str], describe: dict[str, str]) -> str:
    matches = [i for i in ids if i.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        die(f"no {kind} with an ID starting with {prefix!r}")
    shown = "\n".join(f"  {m}  {describe.get(m, '')}".rstrip() for m in matches[:20])
    more = f"\n  ... and {len(matches) - 20} more" if len(matches) > 20 else ""
    die(
        f"{prefix!r} matches {len(matches)} {kind}s; give more characters:\n{shown}{more}",
    )


def resolve_task_id(client: Client, prefix: str) -> str:
    """The full ID of the one task whose ID starts with `prefix` (dies if none or several):
    this node's own, else one of another owner's that the node has a replica of."""
    prefix = prefix.strip().lower()
    if len(prefix) >= FULL_ID_LENGTH:
        return prefix
    tasks = _rows(client, "/api/v1/tasks", "tasks", TASK_LIST_LIMIT)
    if not any(t["id"].startswith(prefix) for t in tasks):
        tasks = _elsewhere(client, "/api/v1/tasks", "tasks", prefix)
    describe = {t["id"]: f"{t['type']} {t['status']}" for t in tasks}
    return _resolve("task", prefix, [t["id"] for t in tasks], describe)


def resolve_pipeline_id(client: Client, prefix: str) -> str:
    """The full ID of the one pipeline whose ID starts with `prefix`."""
    prefix = prefix.strip().lower()
    if len(prefix) >= FULL_ID_LENGTH:
        return prefix
    pipelines = _rows(client, "/api/v1/pipelines", "pipelines", PIPELINE_LIST_LIMIT)
    if not any(p["id"].startswith(prefix) for p in pipelines):
        pipelines = _elsewhere(client, "/api/v1/pipelines", "pipelines", prefix)
    describe = {p["id"]: f"{p['template']} {p['status']}" for p in pipelines}
    return _resolve("pipeline", prefix, [p["id"] for p in pipelines], describe)


def bind_problem(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on (None when it can): busy, not allowed, bad address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (
                    f"port {port} on {host} is already in use (another fredica node?); "
                    "stop that process or pass --port N"
                )
            if exc.errno == errno.EACCES:
                return f"port {port} needs administrator rights; use a port above 1023 (--port N)"
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None
