"""`PeerFiles` fetching from a real `fredica serve` over loopback HTTP: whole files, resumed
partial copies, cached copies that are reused or fetched again, and the error classes of a
missing file, a wrong secret and an unreachable or unknown node."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fredica.cli.demo import free_port
from fredica.cluster import files
from fredica.domain import errors

from .conftest import FAST_CONFIG, ServedNode

SECRET = "e2e-cluster-secret"
SIZE = 20 * 1024 * 1024  # more than loopback socket buffers hold, so a rewrite lands mid-transfer
REL = "chunks/m1/big.bin"


@dataclass
class Directory:
    addresses: dict[str, str]

    async def address(self, node_id: str) -> str | None:
        return self.addresses.get(node_id)


@dataclass
class Progress:
    calls: list[tuple[int, int]] = field(default_factory=list)

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))


@dataclass
class Holder:
    node: ServedNode
    content: bytes

    @property
    def file(self) -> Path:
        return self.node.data_dir / REL

    def rewrite(self, content: bytes) -> None:
        """Change the file in place (same inode, as a tool rewriting its output would)."""
        with self.file.open("r+b") as fh:
            fh.write(content)
            fh.truncate()
        self.content = content


@pytest.fixture(scope="module")
def holder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Holder]:
    root = tmp_path_factory.mktemp("holder")
    config = root / "worker.yaml"
    config.write_text(
        FAST_CONFIG.format(grace=2).replace("cluster:\n", f"cluster:\n  cluster_secret: {SECRET}\n")
    )
    node = ServedNode(root / "data", config, free_port(), root / "node.log")
    content = os.urandom(SIZE)
    (node.data_dir / REL).parent.mkdir(parents=True)
    (node.data_dir / REL).write_bytes(content)
    node.start()
    try:
        yield Holder(node, content)
    finally:
        node.terminate()


@pytest.fixture
def holder_file(holder: Holder) -> Iterator[Holder]:
    """The holder's file, restored after a test that rewrote it."""
    original = holder.content
    yield holder
    if holder.content != original:
        holder.rewrite(original)


def fetcher(tmp_path: Path, holder: Holder, secret: str = SECRET) -> files.PeerFiles:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    directory = Directory({"node-a": holder.node.url, "node-down": dead})
    return files.PeerFiles(tmp_path / "mine", secret, directory, timeout=10)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def target(tmp_path: Path) -> Path:
    return tmp_path / "mine" / "cache" / "peers" / "node-a" / REL


async def test_a_whole_file_arrives_verified(tmp_path: Path, holder_file: Holder) -> None:
    progress = Progress()
    copy = await fetcher(tmp_path, holder_file).fetch("node-a", REL, progress)
    assert copy == target(tmp_path)
    assert sha(copy.read_bytes()) == sha(holder_file.content)
    assert progress.calls[-1] == (SIZE, SIZE) and len(progress.calls) > 1
    assert not files.partial_path(copy).exists()


async def test_a_partial_copy_is_resumed(tmp_path: Path, holder_file: Holder) -> None:
    part = files.partial_path(target(tmp_path))
    part.parent.mkdir(parents=True)
    have = 7 * 1024 * 1024 + 123
    part.write_bytes(holder_file.content[:have])  # a download cut off earlier
    progress = Progress()
    copy = await fetcher(tmp_path, holder_file).fetch("node-a", REL, progress)
    assert sha(copy.read_bytes()) == sha(holder_file.content)
    # only the rest came over the wire: the first report is already past what was there
    assert progress.calls[0][0] > have
    assert len(progress.calls) <= (SIZE - have) // files.DOWNLOAD_BLOCK + 2


async def test_a_stale_partial_copy_is_discarded(tmp_path: Path, holder_file: Holder) -> None:
    part = files.partial_path(target(tmp_path))
    part.parent.mkdir(parents=True)
    part.write_bytes(b"an older version of the file" * 1000)
    progress = Progress()
    copy = await fetcher(tmp_path, holder_file).fetch("node-a", REL, progress)
    assert sha(copy.read_bytes()) == sha(holder_file.content)
    assert any(done <= files.DOWNLOAD_BLOCK for done, _ in progress.calls)  # began again at 0


async def test_a_cached_copy_is_reused_and_a_corrupted_one_fetched_again(
    tmp_path: Path, holder_file: Holder
) -> None:
    peer = fetcher(tmp_path, holder_file)
    copy = await peer.fetch("node-a", REL)
    again = Progress()
    assert await peer.fetch("node-a", REL, again) == copy
    assert again.calls == []  # size and sha256 still match: nothing downloaded

    with copy.open("r+b") as fh:  # one byte flipped, size unchanged
        fh.seek(SIZE // 2)
        byte = fh.read(1)
        fh.seek(SIZE // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    # a fresh fetcher (a restarted node) must not trust the corrupted copy either
    progress = Progress()
    copy = await fetcher(tmp_path, holder_file).fetch("node-a", REL, progress)
    assert progress.calls and sha(copy.read_bytes()) == sha(holder_file.content)


async def test_a_file_changed_while_fetched_is_deleted_and_transient(
    tmp_path: Path, holder_file: Holder
) -> None:
    changed = os.urandom(SIZE)

    def rewrite_once(done: int, total: int) -> None:
        if holder_file.content != changed:
            holder_file.rewrite(changed)

    peer = fetcher(tmp_path, holder_file)
    with pytest.raises(errors.TransientError, match=r"does not match.*deleted"):
        await peer.fetch("node-a", REL, rewrite_once)
    assert not target(tmp_path).exists()
    assert not files.partial_path(target(tmp_path)).exists()
    # the retry gets the new version
    copy = await peer.fetch("node-a", REL)
    assert sha(copy.read_bytes()) == sha(changed)


async def test_one_download_per_target_at_a_time(tmp_path: Path, holder_file: Holder) -> None:
    peer = fetcher(tmp_path, holder_file)
    first, second = Progress(), Progress()
    copies = await asyncio.gather(
        peer.fetch("node-a", REL, first), peer.fetch("node-a", REL, second)
    )
    assert copies[0] == copies[1] == target(tmp_path)
    assert sha(copies[0].read_bytes()) == sha(holder_file.content)
    assert bool(first.calls) != bool(second.calls)  # one downloaded, the other reused it


async def test_errors_are_classified(tmp_path: Path, holder_file: Holder) -> None:
    peer = fetcher(tmp_path, holder_file)
    with pytest.raises(errors.ResourceError, match=r"node node-a .* no file 'chunks/m1/nope\.bin'"):
        await peer.fetch("node-a", "chunks/m1/nope.bin")
    with pytest.raises(errors.TransientError, match=r"node node-down .* unreachable"):
        await peer.fetch("node-down", REL)
    with pytest.raises(errors.TransientError, match="node node-q is unknown"):
        await peer.fetch("node-q", REL)
    wrong = fetcher(tmp_path, holder_file, secret="not-the-secret")
    with pytest.raises(errors.ResourceError, match=r"HTTP 401.*cluster_secret"):
        await wrong.fetch("node-a", REL)
    with pytest.raises(errors.PermanentError, match="relative"):
        await peer.fetch("node-a", "/etc/passwd")
    assert not (
        tmp_path / "mine" / "cache" / "peers" / "node-a" / "chunks" / "m1" / "nope.bin"
    ).exists()
