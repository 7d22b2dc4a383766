"""Files between nodes (seed 001 §2.6, DESIGN §5 and §6).

Serving side: `LocalFiles` answers `GET /files/serve?path=` and `GET /files/serve/stat?path=`
for peers. It serves regular files under the node's data dir only, named by a path relative to
it, with symlinks resolved (one that leads outside is not there), and never the node's private
files: what lies directly in the data dir (its database, `worker.yaml` with the API keys, the
lock), the process ledger `run/`, hidden names (temporary `.part` outputs, cookies in flight)
and the configuration file wherever it is. The sha256 of a whole file is computed in a worker
thread and cached by (path, size, mtime_ns, inode) (`FileHashes`).

Fetching side: `PeerFiles.fetch(node_id, rel_path)` copies a peer's file into
`<data_dir>/cache/peers/<node_id>/<rel_path>`: it asks the peer for the file's size and sha256
(`/files/serve/stat`), reuses a cached copy that still matches both, else downloads into
`.<name>.part` beside it (resuming a partial one with a Range request), verifies size and hash and
renames the copy into place. One download per target runs at a time. Errors are the task error
classes of seed 001 §7.6: an unknown or unreachable peer and a 5xx are TRANSIENT, a peer that
has no such file is RESOURCE (the task should run elsewhere, e.g. on the holder), a copy whose
hash does not match is deleted and TRANSIENT. Local disk errors stay `OSError`s for the caller
to classify (`TaskContext.input_path`: a full disk is RESOURCE).

`resolve_under` is the one guard for "a relative name inside a directory" that the web UI's
result files use too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import stat
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from fredica.domain import errors

logger = logging.getLogger(__name__)

SERVE_PATH = "/files/serve"
STAT_PATH = "/files/serve/stat"
SECRET_HEADER = "X-Cluster-Secret"
SHA256_HEADER = "X-Content-SHA256"
#: where fetched copies live, under the fetching node's data dir
CACHE_DIR = Path("cache") / "peers"
PART_SUFFIX = ".part"
#: subdirectories of the data dir that are never served (the process ledger)
PRIVATE_DIRS = frozenset({"run"})
SAFE_NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
HASH_BLOCK = 1 << 20  # bytes read per step while hashing
DOWNLOAD_BLOCK = 1 << 20  # bytes written per step while downloading
MAX_CACHED_HASHES = 4096
FETCH_TIMEOUT = 30.0  # seconds without progress before a peer counts as unreachable
CONNECT_TIMEOUT = 5.0  # seconds

#: `(bytes on disk, total bytes)` after each block written
Progress = Callable[[int, int], None]


# --- names -------------------------------------------------------------------------------------


def name_problem(name: str) -> str | None:
    """Why `name` is not a relative, '/'-separated path that stays inside its directory
    (None: it is one)."""
    if not name:
        return "the path is empty"
    if "\x00" in name or "\\" in name:
        return "the path must not contain NUL or backslash characters"
    if name.startswith("/"):
        return "the path must be relative, not absolute"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "the path must not contain empty, '.' or '..' segments"
    return None


def resolve_under(base: Path, name: str) -> Path | str | None:
    """The existing file or directory `name` under `base`, symlinks resolved.

    Returns a reason string when `name` is malformed (absolute, `..`: a 400) and None when
    nothing by that name lies inside `base` (a 404), including a symlink that leads outside.
    """
    reason = name_problem(name)
    if reason is not None:
        return reason
    try:
        root = base.resolve()
        target = (root / name).resolve()
        if not target.is_relative_to(root) or not target.exists():
            return None
    except (OSError, RuntimeError):  # a symlink loop, a name too long
        return None
    return target


# --- hashes ------------------------------------------------------------------------------------


def _key(path: Path, st: os.stat_result) -> tuple[str, int, int, int]:
    return (str(path), st.st_size, st.st_mtime_ns, st.st_ino)


def hash_file(path: Path) -> tuple[str, os.stat_result]:
    """sha256 of the file's bytes, and its stat once read (blocking: run it in a thread)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(HASH_BLOCK):
            digest.update(block)
        return digest.hexdigest(), os.fstat(fh.fileno())


class FileHashes:
    """sha256 of whole files, computed in a worker thread and cached by (path, size, mtime_ns,
    inode). Concurrent requests for the same file share one computation; a file that changed
    while it was read is hashed again next time instead of being cached."""

    def __init__(self, max_entries: int = MAX_CACHED_HASHES) -> None:
        self._max = max_entries
        self._known: OrderedDict[tuple[str, int, int, int], str] = OrderedDict()
        self._pending: dict[tuple[str, int, int, int], asyncio.Task[str]] = {}

    async def sha256(self, path: Path, st: os.stat_result) -> str:
        """The hash of `path` as it was when stat'ed as `st`."""
        key = _key(path, st)
        known = self._known.get(key)
        if known is not None:
            self._known.move_to_end(key)
            return known
        job = self._pending.get(key)
        if job is None:
            job = asyncio.create_task(self._compute(key, path), name=f"sha256 {path.name}")
            self._pending[key] = job
        # one caller giving up (a client went away) must not cancel the others' computation
        return await asyncio.shield(job)

    async def _compute(self, key: tuple[str, int, int, int], path: Path) -> str:
        try:
            digest, after = await asyncio.to_thread(hash_file, path)
        finally:
            self._pending.pop(key, None)
        if _key(path, after) == key:
            self.remember(path, after, digest)
        return digest

    def remember(self, path: Path, st: os.stat_result, digest: str) -> None:
        """Record a hash computed elsewhere (a download verified while it was written)."""
        self._known[_key(path, st)] = digest
        self._known.move_to_end(_key(path, st))
        while len(self._known) > self._max:
            self._known.popitem(last=False)


# --- serving -----------------------------------------------------------------------------------


class PathRefused(errors.InvalidRequest):
    """The path must name a file relative to the data dir."""


@dataclass(frozen=True)
class ServedFile:
    """A file this node serves to peers: `path` as asked, `target` resolved."""

    path: str
    target: Path
    stat: os.stat_result
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.stat.st_size,
            "sha256": self.sha256,
            "mtime": self.stat.st_mtime,
        }


class LocalFiles:
    """The files of this node's data dir that peers may read (see the module doc)."""

    def __init__(
        self, data_dir: Path, hashes: FileHashes | None = None, private: Iterable[Path] = ()
    ) -> None:
        self.data_dir = data_dir
        self.hashes = hashes or FileHashes()
        self._private = [p.resolve() for p in private]

    async def stat(self, path: str) -> ServedFile:
        """The file at `path` (relative to the data dir) with its size, mtime and sha256.

        Raises `PathRefused` for a malformed path or one naming a directory or special file,
        `NotFound` when no file of that name is served here."""
        target, st = await asyncio.to_thread(self._find, path)
        try:
            digest = await self.hashes.sha256(target, st)
        except FileNotFoundError as exc:  # deleted meanwhile
            raise errors.NotFound(f"no file {path!r} under the data dir") from exc
        return ServedFile(path, target, st, digest)

    async def find(self, path: str) -> Path:
        """The file at `path` (relative to the data dir), without hashing it: what `stat`
        serves, for this node's own faces (the web player). Raises as `stat` does."""
        target, _ = await asyncio.to_thread(self._find, path)
        return target

    def _find(self, path: str) -> tuple[Path, os.stat_result]:
        found = resolve_under(self.data_dir, path)
        if isinstance(found, str):
            raise PathRefused(
                f"invalid path {path!r}: {found} (paths are relative to the data dir)"
            )
        if found is None:
            raise errors.NotFound(f"no file {path!r} under the data dir")
        try:
            st = found.stat()
        except OSError as exc:
            raise errors.NotFound(f"no file {path!r} under the data dir") from exc
        if stat.S_ISDIR(st.st_mode):
            raise PathRefused(f"{path!r} is a directory; name a file")
        if not stat.S_ISREG(st.st_mode):
            raise PathRefused(f"{path!r} is not a regular file")
        if self._is_private(found):
            raise errors.NotFound(
                f"{path!r} is private to this node (database, configuration, process records, "
                "hidden or temporary files) and not served"
            )
        return found, st

    def _is_private(self, target: Path) -> bool:
        parts = target.relative_to(self.data_dir.resolve()).parts
        return (
            len(parts) <= 1
            or parts[0] in PRIVATE_DIRS
            or any(part.startswith(".") for part in parts)
            or target in self._private
        )


# --- fetching ----------------------------------------------------------------------------------


class PeerDirectory(Protocol):
    """Where peers listen (implemented by the node service from its node registry)."""

    async def address(self, node_id: str) -> str | None:
        """The base URL of `node_id` (`http://host:port`), None when it is unknown."""
        ...


@dataclass(frozen=True)
class _Remote:
    size: int
    sha256: str


@dataclass(frozen=True)
class _Peer:
    node_id: str
    base: str
    client: httpx.AsyncClient

    def where(self) -> str:
        return f"node {self.node_id} ({self.base})"


@dataclass
class _TargetLock:
    lock: asyncio.Lock
    users: int = 0


class PeerFiles:
    """Copies of files other nodes hold, fetched through their `/files/serve` (module doc)."""

    def __init__(
        self,
        data_dir: Path,
        cluster_secret: str,
        directory: PeerDirectory,
        *,
        hashes: FileHashes | None = None,
        timeout: float = FETCH_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.cache_root = data_dir / CACHE_DIR
        self.directory = directory
        self.hashes = hashes or FileHashes()
        self._secret = cluster_secret
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT))
        self._transport = transport  # None: real HTTP (tests pass an app's ASGI transport)
        self._locks: dict[Path, _TargetLock] = {}

    def cache_path(self, node_id: str, rel_path: str) -> Path:
        """Where the copy of `rel_path` from `node_id` is kept."""
        if not SAFE_NODE_ID.match(node_id):
            raise errors.PermanentError(f"cannot fetch from node {node_id!r}: invalid node id")
        reason = name_problem(rel_path)
        if reason is not None:
            raise errors.PermanentError(f"cannot fetch {rel_path!r} from node {node_id}: {reason}")
        return self.cache_root / node_id / rel_path

    async def fetch(self, node_id: str, rel_path: str, on_progress: Progress | None = None) -> Path:
        """A verified local copy of `rel_path` (relative to the data dir of `node_id`)."""
        target = self.cache_path(node_id, rel_path)
        base = await self.directory.address(node_id)
        if not base:
            raise errors.TransientError(
                f"cannot fetch {rel_path!r}: node {node_id} is unknown here "
                "(no address in the node registry); retrying later"
            )
        async with self._target_lock(target), self._client(base) as client:
            peer = _Peer(node_id, base.rstrip("/"), client)
            remote = await self._remote_stat(peer, rel_path)
            if await self._cached(target, remote):
                logger.debug("reusing %s", target, extra={"action": "peer_file_cached"})
                return target
            await self._download(peer, rel_path, target, remote, on_progress)
            return target

    @contextlib.asynccontextmanager
    async def _target_lock(self, target: Path) -> AsyncIterator[None]:
        entry = self._locks.setdefault(target, _TargetLock(asyncio.Lock()))
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[target]

    def _client(self, base: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=base,
            headers={SECRET_HEADER: self._secret},
            timeout=self._timeout,
            trust_env=False,
            transport=self._transport,
        )

    async def _remote_stat(self, peer: _Peer, rel_path: str) -> _Remote:
        try:
            response = await peer.client.get(STAT_PATH, params={"path": rel_path})
        except httpx.TransportError as exc:
            raise _unreachable(peer, rel_path, exc) from exc
        if response.status_code != 200:
            raise _refused(peer, rel_path, response)
        try:
            data = response.json()
            size, digest = data["size"], data["sha256"]
            if not isinstance(size, int) or size < 0 or not isinstance(digest, str):
                raise ValueError(f"size {size!r}, sha256 {digest!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.TransientError(
                f"{peer.where()} gave a malformed answer about {rel_path!r}: {exc}"
            ) from exc
        return _Remote(size, digest.lower())

    async def _cached(self, target: Path, remote: _Remote) -> bool:
        try:
            st = await asyncio.to_thread(target.stat)
            return st.st_size == remote.size and (
                await self.hashes.sha256(target, st) == remote.sha256
            )
        except OSError:
            return False

    async def _download(
        self,
        peer: _Peer,
        rel_path: str,
        target: Path,
        remote: _Remote,
        on_progress: Progress | None,
    ) -> None:
        part = partial_path(target)
        await asyncio.to_thread(target.parent.mkdir, parents=True, exist_ok=True)
        resumed = await self._receive(peer, rel_path, part, remote, on_progress)
        digest, st = await asyncio.to_thread(hash_file, part)
        if st.st_size != remote.size or digest != remote.sha256:
            await asyncio.to_thread(part.unlink, missing_ok=True)
            if resumed:
                # the partial copy was of an older version of the file: start again, once
                logger.info(
                    "discarding a stale partial copy of %s from node %s",
                    rel_path,
                    peer.node_id,
                    extra={"action": "peer_file_restart"},
                )
                await self._download(peer, rel_path, target, remote, on_progress)
                return
            raise errors.TransientError(
                f"the copy of {rel_path!r} from {peer.where()} does not match: "
                f"{st.st_size} bytes with sha256 {digest}, expected {remote.size} bytes with "
                f"sha256 {remote.sha256}; deleted, retrying later"
            )
        await asyncio.to_thread(os.replace, part, target)
        self.hashes.remember(target, st, digest)
        logger.info(
            "fetched %s from node %s (%d bytes)",
            rel_path,
            peer.node_id,
            st.st_size,
            extra={"action": "peer_file_fetched"},
        )

    async def _receive(
        self,
        peer: _Peer,
        rel_path: str,
        part: Path,
        remote: _Remote,
        on_progress: Progress | None,
    ) -> bool:
        """Bring `part` to the remote size; True when it continued an earlier partial copy."""
        offset = await asyncio.to_thread(_size_or_zero, part)
        if offset > remote.size:
            await asyncio.to_thread(part.unlink)
            offset = 0
        if offset == remote.size:
            return offset > 0
        headers = {}
        if offset:
            # If-Range: should the file have changed since the stat, the peer sends it whole
            headers = {"Range": f"bytes={offset}-", "If-Range": f'"{remote.sha256}"'}
        try:
            async with peer.client.stream(
                "GET", SERVE_PATH, params={"path": rel_path}, headers=headers
            ) as response:
                if response.status_code == 200:
                    offset = 0
                elif response.status_code != 206 or not _starts_at(response, offset):
                    await response.aread()
                    raise _refused(peer, rel_path, response)
                await self._write(response, part, offset, remote.size, on_progress)
        except httpx.TransportError as exc:
            raise _unreachable(peer, rel_path, exc) from exc  # `part` stays for a resume
        return offset > 0

    @staticmethod
    async def _write(
        response: httpx.Response,
        part: Path,
        offset: int,
        total: int,
        on_progress: Progress | None,
    ) -> None:
        fh = await asyncio.to_thread(part.open, "ab" if offset else "wb")
        try:
            done = offset
            async for block in response.aiter_bytes(DOWNLOAD_BLOCK):
                await asyncio.to_thread(fh.write, block)
                done += len(block)
                if on_progress is not None:
                    on_progress(done, total)
        finally:
            await asyncio.to_thread(fh.close)


def partial_path(target: Path) -> Path:
    """Where the download of `target` grows: a hidden name, which no peer serves, so it can
    never be the copy of another file."""
    return target.with_name(f".{target.name}{PART_SUFFIX}")


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _starts_at(response: httpx.Response, offset: int) -> bool:
    content_range: str = response.headers.get("content-range", "")
    return content_range.startswith(f"bytes {offset}-")


def _unreachable(peer: _Peer, rel_path: str, exc: httpx.TransportError) -> errors.TaskError:
    return errors.TransientError(
        f"cannot fetch {rel_path!r}: {peer.where()} is unreachable "
        f"({type(exc).__name__}: {exc}); retrying later"
    )


def _refused(peer: _Peer, rel_path: str, response: httpx.Response) -> errors.TaskError:
    status = response.status_code
    try:
        detail = str(response.json().get("error") or response.text)
    except (ValueError, AttributeError):
        detail = response.text
    detail = " ".join(detail.split())[:300]
    if status == 404:
        return errors.ResourceError(
            f"{peer.where()} has no file {rel_path!r} to serve: {detail}", hint="FILE_MISSING"
        )
    if status >= 500:
        return errors.TransientError(
            f"{peer.where()} answered HTTP {status} for {rel_path!r}: {detail}; retrying later"
        )
    if status == 416:  # the file shrank between the stat and the download
        return errors.TransientError(f"{rel_path!r} changed on {peer.where()} while fetching")
    if status == 401:
        detail += " (is cluster.cluster_secret the same on both nodes?)"
    return errors.ResourceError(
        f"{peer.where()} refused {rel_path!r}: HTTP {status}: {detail}", hint="FILE_REMOTE"
    )
