"""A network partition between real processes on one machine: a network namespace this test
creates, joined to the machine's own by a veth pair, with nothing routed beyond the two.

    isolated side (namespace)            the machine's side
    198.18.0.2 on veth `<tag>b`  <---->  198.18.0.1 on veth `<tag>a`;  198.18.1.1 on `lo`

A node started with `prefix` listens on `ISOLATED` inside the namespace; nodes on the machine's
side listen on `HOST` (an address of `lo`, so they still reach each other when the link is
down). `cut()` takes the machine's end of the veth down: both directions fail (the machine's
side gets "unreachable" at once, the isolated side's packets are dropped, so its connections time
out, as behind a dead Wi-Fi); `heal()` brings it back. The addresses are from 198.18.0.0/15 (RFC
2544, set aside for tests), and an `unreachable` route for 198.18.0.0/24 makes sure nothing
meant for the namespace ever leaves the machine while the link is down.

Needs root (CAP_NET_ADMIN) and `ip` (iproute2): the CI machine has both; without them the test
fails with the command's own error rather than skipping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

ISOLATED = "198.18.0.2"
HOST = "198.18.1.1"
_PEER_END = "198.18.0.1"
_GUARD = "198.18.0.0/24"


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


class Partition:
    def __init__(self) -> None:
        tag = f"fq{os.getpid() % 100000}"
        self.ns = tag
        self._outer = f"{tag}a"
        self._inner = f"{tag}b"
        self.prefix = ["ip", "netns", "exec", self.ns]

    def __enter__(self) -> Partition:
        self.close()  # what a killed earlier run of this pid left behind
        _ip("netns", "add", self.ns)
        try:
            _ip("link", "add", self._outer, "type", "veth", "peer", "name", self._inner)
            _ip("link", "set", self._inner, "netns", self.ns)
            _ip("addr", "add", f"{_PEER_END}/30", "dev", self._outer)
            _ip("link", "set", self._outer, "up")
            _ip("addr", "add", f"{HOST}/32", "dev", "lo")
            _ip("route", "add", "unreachable", _GUARD)
            inside = ["netns", "exec", self.ns, "ip"]
            _ip(*inside, "link", "set", "lo", "up")
            _ip(*inside, "addr", "add", f"{ISOLATED}/30", "dev", self._inner)
            _ip(*inside, "link", "set", self._inner, "up")
            _ip(*inside, "route", "add", "default", "via", _PEER_END)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for args in (
            ("netns", "del", self.ns),  # takes the veth pair with it
            ("link", "del", self._outer),
            ("addr", "del", f"{HOST}/32", "dev", "lo"),
            ("route", "del", "unreachable", _GUARD),
        ):
            subprocess.run(["ip", *args], capture_output=True, timeout=20)

    def cut(self) -> None:
        _ip("link", "set", self._outer, "down")

    def heal(self) -> None:
        _ip("link", "set", self._outer, "up")

    def request(self, method: str, url: str, body: Any = None) -> Any:
        """An HTTP request made from inside the namespace (the isolated node is reachable only
        from there while the link is down); the answer's JSON."""
        script = (
            "import httpx, json, sys\n"
            "method, url, body = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])\n"
            "r = httpx.request(method, url, json=body, timeout=10, trust_env=False)\n"
            "r.raise_for_status()\n"
            "sys.stdout.write(r.text)\n"
        )
        result = subprocess.run(
            [*self.prefix, sys.executable, "-c", script, method, url, json.dumps(body)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if result.returncode != 0:
            raise AssertionError(f"{method} {url} from {self.ns}: {result.stderr[-2000:]}")
        return json.loads(result.stdout)
