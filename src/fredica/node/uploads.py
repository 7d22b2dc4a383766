"""Source files from the browser: uploads streamed into the data dir, and read-only media
folders (worker.yaml `media_folders`) to pick from.

An upload is written to a hidden `.part` file in `uploads/` and renamed to its sanitized name
only when complete; a body over `storage.max_upload_mb`, a client that goes away or any other
failure removes the partial file. An upload that does not fit on the data dir's disk is a 507
(`StoreFull`), announced or found while writing. A name that exists already gets ` (1)`,
` (2)`... before its suffix, never overwriting. Listing a media folder never leaves its root:
a malformed path (absolute, `..`, NUL) is refused, and a symbolic link leading outside is
neither listed nor followed (`cluster.files.resolve_under`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import unicodedata
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, BinaryIO

from fredica.cluster import files
from fredica.domain import errors

logger = logging.getLogger(__name__)

UPLOADS_DIR = "uploads"
MB = 1 << 20
WRITE_BATCH = 1 << 20  # bytes gathered before one write (one thread hop per MiB)
MAX_NAME_BYTES = 180  # keeps `name (99).ext.part`-style names under common 255-byte limits
MAX_LISTING = 5000  # entries of one folder listing
_UNSAFE = re.compile(r"[^\w.()\[\] +,-]+")
_SPACES = re.compile(r"[\s_]{2,}")


class UploadTooLarge(errors.InvalidRequest):
    """The upload is larger than storage.max_upload_mb."""


def safe_name(name: str) -> str:
    """A file name safe to create in `uploads/`: the last path component only, letters of any
    script, digits and `._-()[] +,` (others become `_`), no leading dot, at most
    MAX_NAME_BYTES. InvalidRequest when nothing usable remains."""
    base = unicodedata.normalize("NFC", name.replace("\\", "/")).rsplit("/", 1)[-1]
    base = "".join(ch for ch in base if unicodedata.category(ch)[0] != "C")
    base = _SPACES.sub("_", _UNSAFE.sub("_", base)).strip(" ._")
    if not base:
        raise errors.InvalidRequest(f"name: not a usable file name: {name!r}")
    stem, dot, suffix = base.rpartition(".")
    if not dot or not stem:
        stem, suffix = base, ""
    suffix = suffix[:16]
    while len((stem + "." + suffix).encode()) > MAX_NAME_BYTES and len(stem) > 1:
        stem = stem[:-1]
    return f"{stem}.{suffix}" if suffix else stem


def _claim_final(directory: Path, name: str, part: Path) -> Path:
    # The name is reserved with O_EXCL first (an upload never replaces another file), then
    # the complete file replaces the empty placeholder.
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        stem, suffix = name, ""
    for n in range(1000):
        candidate = name if n == 0 else f"{stem} ({n})" + (f".{suffix}" if suffix else "")
        target = directory / candidate
        try:
            os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        os.replace(part, target)
        return target
    raise errors.Conflict(f"uploads/: too many files named {name!r}")


class Uploads:
    """Receives uploads into `<data_dir>/uploads/`; `limit_bytes()` is read per upload (the
    settings page changes it without a restart)."""

    def __init__(self, data_dir: Path, limit_bytes: Callable[[], int]) -> None:
        self.directory = data_dir / UPLOADS_DIR
        self.limit_bytes = limit_bytes

    def _too_large(self, limit: int) -> UploadTooLarge:
        return UploadTooLarge(
            f"upload larger than {limit // MB} MiB (storage.max_upload_mb); nothing was kept"
        )

    async def receive(
        self, name: str, chunks: AsyncIterator[bytes], declared: int | None
    ) -> dict[str, Any]:
        """Stream `chunks` into a new file named after `name`; returns its absolute `path`
        (a pipeline's `source`), final `name` and `size`. UploadTooLarge (413) past the limit,
        announced or not; the partial file is removed on any failure."""
        final_name = safe_name(name)
        limit = self.limit_bytes()
        if declared is not None and declared > limit:
            raise self._too_large(limit)
        await asyncio.to_thread(self.directory.mkdir, parents=True, exist_ok=True)
        if declared is not None:
            free = (await asyncio.to_thread(shutil.disk_usage, self.directory)).free
            if declared > free:
                raise errors.StoreFull(
                    f"upload of {declared} bytes does not fit: {free} bytes free in the data dir"
                )
        part = self.directory / f".{uuid.uuid4().hex}.part"
        size = 0
        fh: BinaryIO = await asyncio.to_thread(part.open, "xb")
        try:
            buffer = bytearray()
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise self._too_large(limit)
                buffer += chunk
                if len(buffer) >= WRITE_BATCH:
                    await asyncio.to_thread(fh.write, bytes(buffer))
                    buffer.clear()
            await asyncio.to_thread(_finish, fh, bytes(buffer))
            target = await asyncio.to_thread(_claim_final, self.directory, final_name, part)
        except BaseException as exc:
            # a refused size, a client that went away (ClientDisconnect), a cancelled request,
            # a full disk
            fh.close()
            with contextlib.suppress(OSError):
                part.unlink()
            logger.info(
                "upload of %r abandoned after %d bytes",
                final_name,
                size,
                extra={"action": "upload_abandoned"},
            )
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                raise errors.StoreFull("the data dir's disk filled up during the upload") from None
            raise
        logger.info(
            "uploaded %s (%d bytes)", target.name, size, extra={"action": "upload_complete"}
        )
        return {"path": str(target.resolve()), "name": target.name, "size": size}


def _finish(fh: BinaryIO, rest: bytes) -> None:
    fh.write(rest)
    fh.flush()
    os.fsync(fh.fileno())
    fh.close()


class MediaFolders:
    """The read-only roots of worker.yaml `media_folders` (`roots()` is read per request)."""

    def __init__(self, roots: Callable[[], list[str]]) -> None:
        self.roots = roots

    def list_roots(self) -> list[dict[str, Any]]:
        """Every configured root: its index (the id in listing URLs), path and whether it is
        an existing directory."""
        out = []
        for i, root in enumerate(self.roots()):
            path = Path(root).expanduser()
            out.append(
                {
                    "id": i,
                    "path": str(path),
                    "name": path.name or str(path),
                    "exists": path.is_dir(),
                }
            )
        return out

    def _root(self, root_id: int) -> Path:
        roots = self.roots()
        if not 0 <= root_id < len(roots):
            raise errors.NotFound(f"media folder {root_id} is not configured (media_folders)")
        root = Path(roots[root_id]).expanduser()
        try:
            resolved = root.resolve(strict=True)
        except (OSError, RuntimeError):
            raise errors.NotFound(f"media folder {root} does not exist") from None
        if not resolved.is_dir():
            raise errors.NotFound(f"media folder {root} is not a directory")
        return resolved

    async def listing(self, root_id: int, sub: str) -> dict[str, Any]:
        """See `listing_sync` (run on a thread: it reads the disk)."""
        return await asyncio.to_thread(self.listing_sync, root_id, sub)

    def listing_sync(self, root_id: int, sub: str) -> dict[str, Any]:
        """The entries of directory `sub` (relative, '' = the root) of root `root_id`:
        directories first, then files, each with its relative `path`; files also with the
        absolute `source` to give a pipeline. InvalidRequest for a malformed path, NotFound
        for one that does not exist inside the root."""
        root = self._root(root_id)
        sub = sub.strip("/")
        if sub:
            found = files.resolve_under(root, sub)
            if isinstance(found, str):
                raise errors.InvalidRequest(f"path: {found}")
            if found is None:
                raise errors.NotFound(f"{sub}: no such folder in media folder {root_id}")
            target = found
        else:
            target = root
        if not target.is_dir():
            raise errors.InvalidRequest(f"path: {sub} is a file, not a folder")
        dirs: list[dict[str, Any]] = []
        found_files: list[dict[str, Any]] = []
        for entry in sorted(target.iterdir(), key=lambda p: p.name.lower()):
            if entry.name.startswith(".") or len(dirs) + len(found_files) >= MAX_LISTING:
                continue
            info = _entry(root, entry)
            if info is not None:
                (dirs if info["kind"] == "dir" else found_files).append(info)
        rel = target.relative_to(root).as_posix()
        return {
            "root": root_id,
            "root_path": str(root),
            "path": "" if rel == "." else rel,
            "entries": dirs + found_files,
        }


def _entry(root: Path, entry: Path) -> dict[str, Any] | None:
    try:
        real = entry.resolve(strict=True)
        if not real.is_relative_to(root):
            return None  # a link leading out of the root is not shown
        st = real.stat()
    except (OSError, RuntimeError):
        return None
    rel = entry.relative_to(root).as_posix()
    if real.is_dir():
        return {"name": entry.name, "kind": "dir", "path": rel}
    if not real.is_file():
        return None
    return {
        "name": entry.name,
        "kind": "file",
        "path": rel,
        "size": st.st_size,
        "mtime": st.st_mtime,
        "source": str(real),
    }


# --- resumable uploads ---------------------------------------------------------------------
RESUMABLE_DIR = ".resumable"
_UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")


class RangeMismatch(errors.Conflict):
    """A chunk that does not start where the upload stands (the client asks the offset)."""


class ResumableUploads:
    """Uploads sent in parts (`Content-Range`), resumed from where the server stands after a
    dropped connection: `start` announces the name and size, `offset` answers how many bytes
    are kept, `append` writes the next part (a part cut off keeps what arrived); the last byte
    moves the file into `uploads/` like a one-part upload (`Uploads`), with its sha256."""

    def __init__(self, base: Uploads) -> None:
        self.base = base
        self.directory = base.directory / RESUMABLE_DIR
        self._receiving: set[str] = set()  # uploads a part is being written to

    def _paths(self, upload_id: str) -> tuple[Path, Path]:
        if not _UPLOAD_ID.match(upload_id):
            raise errors.NotFound(f"no upload {upload_id!r}")
        return self.directory / f"{upload_id}.json", self.directory / f"{upload_id}.part"

    def _meta(self, upload_id: str) -> dict[str, Any]:
        meta_path, part = self._paths(upload_id)
        try:
            meta: dict[str, Any] = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            raise errors.NotFound(f"no upload {upload_id!r} (finished, or never started)") from None
        meta["offset"] = part.stat().st_size if part.exists() else 0
        return meta

    def start(self, name: str, size: int) -> dict[str, Any]:
        """A new resumable upload of `size` bytes named `name`: its id and offset 0."""
        final_name = safe_name(name)
        limit = self.base.limit_bytes()
        if size > limit:
            raise self.base._too_large(limit)
        self.directory.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.directory).free
        if size > free:
            raise errors.StoreFull(f"upload of {size} bytes does not fit: {free} bytes free")
        upload_id = uuid.uuid4().hex
        meta_path, part = self._paths(upload_id)
        part.touch()
        meta_path.write_text(json.dumps({"upload_id": upload_id, "name": final_name, "size": size}))
        return {"upload_id": upload_id, "name": final_name, "size": size, "offset": 0}

    def offset(self, upload_id: str) -> dict[str, Any]:
        return self._meta(upload_id)

    @staticmethod
    def parse_range(header: str | None, size: int) -> tuple[int, int]:
        """`Content-Range: bytes START-END/SIZE` -> (start, end exclusive); InvalidRequest
        naming what is wrong."""
        if not header:
            raise errors.InvalidRequest("Content-Range: required (bytes START-END/SIZE)")
        m = _CONTENT_RANGE.match(header.strip())
        if m is None:
            raise errors.InvalidRequest(
                f"Content-Range: expected 'bytes START-END/SIZE', got {header!r}"
            )
        start, last, total = (int(g) for g in m.groups())
        if total != size:
            raise errors.InvalidRequest(f"Content-Range: total {total} is not the upload's {size}")
        if last < start or last >= size:
            raise errors.InvalidRequest(
                f"Content-Range: bytes {start}-{last} is not a range inside 0-{size - 1}"
            )
        return start, last + 1

    async def append(
        self, upload_id: str, content_range: str | None, chunks: AsyncIterator[bytes]
    ) -> dict[str, Any]:
        """Write the part `content_range` names; it must start at the current offset
        (RangeMismatch naming it otherwise). A part cut off keeps what arrived. The last part
        finishes the upload: `{path, name, size, sha256, complete: true}`."""
        meta = self._meta(upload_id)
        size, offset = int(meta["size"]), int(meta["offset"])
        start, end = self.parse_range(content_range, size)
        if start != offset:
            raise RangeMismatch(
                f"Content-Range: starts at {start}, the upload stands at {offset}; "
                f"send from byte {offset}"
            )
        if upload_id in self._receiving:
            raise errors.Conflict(f"upload {upload_id}: another part is being received")
        self._receiving.add(upload_id)
        try:
            return await self._append(upload_id, meta, start, end, chunks)
        finally:
            self._receiving.discard(upload_id)

    async def _append(
        self,
        upload_id: str,
        meta: dict[str, Any],
        start: int,
        end: int,
        chunks: AsyncIterator[bytes],
    ) -> dict[str, Any]:
        size, offset = int(meta["size"]), int(meta["offset"])
        _, part = self._paths(upload_id)
        fh: BinaryIO = await asyncio.to_thread(part.open, "ab")
        written = 0
        try:
            async for chunk in chunks:
                if written + len(chunk) > end - start:
                    raise errors.InvalidRequest(
                        f"body longer than Content-Range: bytes {start}-{end - 1}"
                    )
                await asyncio.to_thread(fh.write, chunk)
                written += len(chunk)
        finally:
            await asyncio.to_thread(_close_synced, fh)
        if written != end - start:
            raise errors.InvalidRequest(
                f"body of {written} bytes, Content-Range announced {end - start}; "
                f"the upload stands at {offset + written}"
            )
        if end < size:
            return {**meta, "offset": end, "complete": False}
        return await asyncio.to_thread(self._finish, upload_id, meta)

    def _finish(self, upload_id: str, meta: dict[str, Any]) -> dict[str, Any]:
        meta_path, part = self._paths(upload_id)
        digest = hashlib.sha256()
        with part.open("rb") as fh:
            while block := fh.read(WRITE_BATCH):
                digest.update(block)
        target = _claim_final(self.base.directory, str(meta["name"]), part)
        meta_path.unlink(missing_ok=True)
        logger.info("uploaded %s (resumable)", target.name, extra={"action": "upload_complete"})
        return {
            "path": str(target.resolve()),
            "name": target.name,
            "size": int(meta["size"]),
            "sha256": digest.hexdigest(),
            "complete": True,
        }


def _close_synced(fh: BinaryIO) -> None:
    fh.flush()
    os.fsync(fh.fileno())
    fh.close()
