"""`fredica upload FILE`: a resumable upload (`/api/v1/uploads/resumable`). The file goes in
parts; after a dropped connection the command asks the node how far it got and sends the rest,
on its own, until the file is complete (or `RETRIES` tries in a row make no progress). The
node's sha256 of the finished file is checked against the local one."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from fredica.cli import client
from fredica.cli.remote import console, die

RETRIES = 8  # tries in a row without progress before giving up
BACKOFF_SEC = 0.25  # doubled per try without progress, at most MAX_BACKOFF_SEC
MAX_BACKOFF_SEC = 5.0
DROPPED = (httpx.TransportError,)  # connection refused, reset, cut mid-body, timed out


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def upload(
    node: client.Client,
    path: Path,
    name: str,
    part_bytes: int,
    on_retry: Callable[[int, Exception], None] = lambda offset, exc: None,
) -> dict[str, Any]:
    """Upload `path` as `name` in parts of `part_bytes`, resuming after dropped connections;
    the node's answer to the last part (`path`, `name`, `size`, `sha256`)."""
    size = path.stat().st_size
    if size == 0:
        die(f"{path} is empty: nothing to upload")
    started = node.request("POST", "/api/v1/uploads/resumable", params={"name": name, "size": size})
    upload_id = started["upload_id"]
    offset, failures = 0, 0
    with path.open("rb") as fh:
        while True:
            fh.seek(offset)
            part = fh.read(part_bytes)
            end = offset + len(part) - 1
            try:
                response = node.http.put(
                    f"/api/v1/uploads/resumable/{upload_id}",
                    content=part,
                    headers={"Content-Range": f"bytes {offset}-{end}/{size}"},
                )
                if response.status_code >= 400 and response.status_code != 409:
                    die(f"{response.status_code}: {client.detail(response)}")
                if response.status_code in (200, 201):
                    answer: dict[str, Any] = response.json()
                    if answer.get("complete"):
                        return answer
                    offset, failures = int(answer["offset"]), 0
                    continue
                # 409: the node stands elsewhere (a part it kept we did not hear of)
                offset = _offset(node, upload_id)
            except DROPPED as exc:
                # ask, with backoff, until the node answers how far it got: the resume is
                # then said once, at the byte it starts from
                while True:
                    failures += 1
                    if failures > RETRIES:
                        die(f"the upload stopped at byte {offset} of {size}: {exc}", 2)
                    time.sleep(min(MAX_BACKOFF_SEC, BACKOFF_SEC * 2 ** (failures - 1)))
                    try:
                        kept = _offset(node, upload_id)
                    except DROPPED as again:
                        exc = again
                        continue
                    break
                if kept > offset:
                    failures = 0
                offset = kept
                on_retry(offset, exc)


def _offset(node: client.Client, upload_id: str) -> int:
    response = node.http.get(f"/api/v1/uploads/resumable/{upload_id}")
    if response.status_code >= 400:
        die(f"{response.status_code}: {client.detail(response)}")
    return int(response.json()["offset"])


def upload_command(
    file: Annotated[Path, typer.Argument(help="The file to upload.")],
    node: client.NodeOpt = client.DEFAULT_NODE,
    name: Annotated[
        str | None, typer.Option(help="Its name on the node (default: the file's name).")
    ] = None,
    part_mb: Annotated[float, typer.Option(min=0.0625, help="Part size in MiB.")] = 8.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the node's answer.")] = False,
) -> None:
    """Upload a file to the node (resumable: a dropped connection is resumed on its own);
    prints the path to give a pipeline as its `source`."""
    if not file.is_file():
        die(f"{file}: not a file")
    node_client = client.Client(node, timeout=120)

    def retried(offset: int, exc: Exception) -> None:
        client.err_console.print(
            f"connection dropped ({exc}); resuming at byte {offset}", soft_wrap=True
        )

    answer = upload(node_client, file, name or file.name, int(part_mb * (1 << 20)), retried)
    local = sha256_of(file)
    if answer.get("sha256") != local:
        die(f"the node's copy differs: sha256 {answer.get('sha256')} != {local}")
    if as_json:
        console.out(json.dumps(answer, indent=2, ensure_ascii=False), highlight=False)
    else:
        console.print(f"{answer['path']}  sha256 {local}", soft_wrap=True, highlight=False)
