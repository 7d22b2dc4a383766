"""Resumable uploads against a real `fredica serve`: a connection dropped at 50 % keeps the
half that arrived, the rest completes it with the same sha256; `fredica upload` resumes on its
own after its connection is cut."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.faultproxy import FaultProxy

from .conftest import ServedNode, wait_until

pytestmark = pytest.mark.slow
BASE = "/api/v1/uploads/resumable"


def test_a_connection_dropped_at_half_resumes(served: ServedNode) -> None:
    served.start()
    data = os.urandom(4 << 20)
    half = len(data) // 2
    with served.client() as client:
        started = client.post(BASE, params={"name": "talk.mp4", "size": len(data)}).json()
        upload_id = started["upload_id"]
        # the whole file announced, half sent, then the connection is gone
        with socket.create_connection(("127.0.0.1", served.port)) as sock:
            sock.sendall(
                (f"PUT {BASE}/{upload_id} HTTP/1.1\r\nHost: x\r\n"
                 f"Content-Length: {len(data)}\r\n"
                 f"Content-Range: bytes 0-{len(data) - 1}/{len(data)}\r\n\r\n").encode()
            )  # fmt: skip
            sock.sendall(data[:half])

        def resumed() -> httpx.Response | None:
            # what arrived before the drop is kept (the server may not have read the last
            # bytes in flight): ask the offset, send the rest; 409 while the cut part is
            # still being closed
            offset = client.get(f"{BASE}/{upload_id}").json()["offset"]
            if offset == 0:
                return None
            assert offset <= half
            r = client.put(
                f"{BASE}/{upload_id}",
                content=data[offset:],
                headers={"Content-Range": f"bytes {offset}-{len(data) - 1}/{len(data)}"},
            )
            return r if r.status_code != 409 else None

        rest = wait_until(resumed, 30, "the upload to resume")
        assert rest.status_code == 201, rest.text
        answer = rest.json()
    assert answer["sha256"] == hashlib.sha256(data).hexdigest()
    assert (
        hashlib.sha256(Path(answer["path"]).read_bytes()).digest() == hashlib.sha256(data).digest()
    )


def test_the_cli_upload_resumes_on_its_own(served: ServedNode, tmp_path: Path) -> None:
    served.start()
    source = tmp_path / "Garden tour.mp4"
    source.write_bytes(os.urandom(3 << 20))
    proxy = FaultProxy(served.port).start()
    try:
        proxy.delay(0.005)  # slow enough to be cut part way
        cli = subprocess.Popen(
            [sys.executable, "-m", "fredica", "upload", str(source), "--part-mb", "0.0625",
             "--json", "--node", f"http://{proxy.address}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=served.env(),
        )  # fmt: skip
        pending = served.data_dir / "uploads" / ".resumable"

        def kept() -> int:
            return sum(p.stat().st_size for p in pending.glob("*.part")) if pending.is_dir() else 0

        wait_until(lambda: kept() >= 1 << 20, 60, "a MiB uploaded")
        before = proxy.connections
        proxy.cut()
        # the CLI tried again while cut
        wait_until(lambda: proxy.connections > before, 30, "the CLI to try again")
        proxy.heal()
        proxy.delay(0)
        out, err = cli.communicate(timeout=120)
    finally:
        proxy.stop()
    assert cli.returncode == 0, err
    assert "resuming at byte" in err
    answer = json.loads(out)
    assert answer["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert Path(answer["path"]).read_bytes() == source.read_bytes()
    assert Path(answer["path"]).name == "Garden tour.mp4"
