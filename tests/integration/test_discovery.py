"""mDNS discovery with real zeroconf on the loopback interface: two nodes announce
`_fredica._tcp.local.` and find each other (multicast on loopback works in this sandbox), and a
network without multicast costs one warning, never the node."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from fredica.cluster import discovery
from fredica.cluster.membership import Membership
from fredica.cluster.remote import RemoteOwner
from fredica.config import schema as config
from fredica.node import compose
from fredica.store.base import NodeRecord

from .test_engine import fast_settings, wait_for


async def _record(record: NodeRecord) -> None:
    """Nobody answers at the announced ports here: membership records nothing."""


def membership(node_id: str, port: int) -> Membership:
    return Membership(node_id, f"http://127.0.0.1:{port}", "s3cret", [], 60.0, _record, 1.0)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[discovery.Discovery, discovery.Discovery]]:
    # node ids unique to this run: other test runs on this machine announce on loopback too
    tag = uuid.uuid4().hex[:8]
    a = discovery.Discovery(f"a-{tag}", "127.0.0.1", 17001, membership(f"a-{tag}", 17001))
    b = discovery.Discovery(f"b-{tag}", "127.0.0.1", 17002, membership(f"b-{tag}", 17002))
    yield a, b
    await asyncio.gather(a.stop(), b.stop())


async def test_two_nodes_on_loopback_find_each_other_and_never_themselves(
    pair: tuple[discovery.Discovery, discovery.Discovery],
) -> None:
    a, b = pair
    # Given two nodes announcing and browsing on loopback
    await a.start()
    await b.start()
    assert a.active and b.active
    # Then each hands the other's URL (from its TXT node_id and SRV port) to membership
    await wait_for(lambda: b.node_id in a.found and a.node_id in b.found, 15)
    assert a.found[b.node_id] == "http://127.0.0.1:17002"
    assert b.found[a.node_id] == "http://127.0.0.1:17001"
    assert "http://127.0.0.1:17002" in {p.address for p in a._membership.peers()}
    assert "http://127.0.0.1:17001" in {p.address for p in b._membership.peers()}
    # and never itself
    assert a.node_id not in a.found and b.node_id not in b.found
    assert "http://127.0.0.1:17001" not in {p.address for p in a._membership.peers()}


async def test_txt_record_carries_node_id_and_version(
    pair: tuple[discovery.Discovery, discovery.Discovery],
) -> None:
    a, b = pair
    await a.start()
    await asyncio.wait_for(a.announced.wait(), 10)
    await b.start()
    assert b._zc is not None
    from zeroconf.asyncio import AsyncServiceInfo

    info = AsyncServiceInfo(discovery.SERVICE_TYPE, discovery.instance_name(a.node_id))
    assert await info.async_request(b._zc.zeroconf, 5000)
    assert info.decoded_properties == {"node_id": a.node_id, "version": a.version}
    assert info.port == 17001 and info.parsed_addresses() == ["127.0.0.1"]
    # after a stops, its goodbye removes it: a fresh lookup finds nothing
    await a.stop()
    gone = AsyncServiceInfo(discovery.SERVICE_TYPE, discovery.instance_name(a.node_id))
    assert not await gone.async_request(b._zc.zeroconf, 1500)


async def test_a_peer_already_online_is_not_added_again(
    pair: tuple[discovery.Discovery, discovery.Discovery],
) -> None:
    a, _ = pair
    a._membership.add("http://10.0.0.9:7631")
    known = a._membership.peers()[0]
    async with httpx.AsyncClient() as client:
        known.node_id = "nas"
        known.owner = RemoteOwner("nas", known.address, "s3cret", client)
    assert known.online
    # the same node announced under another address while it answers at the known one
    assert a.seen("nas", ["10.0.0.10"], 7631) is None
    assert len(a._membership.peers()) == 1
    # it stopped answering there (its address changed): the new address is handed over
    known.failures = 3
    assert a.seen("nas", ["10.0.0.10"], 7631) == "http://10.0.0.10:7631"
    assert a.seen(a.node_id, ["10.0.0.11"], 7631) is None  # itself
    await asyncio.gather(*a._tasks, return_exceptions=True)


async def test_no_multicast_is_one_warning_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    # Given a listen address this machine does not have (TEST-NET-2): no interface to use
    d = discovery.Discovery("x", "198.51.100.7", 7631, membership("x", 7631))
    with caplog.at_level(logging.WARNING, logger="fredica.cluster.discovery"):
        await d.start()
    assert not d.active
    warnings = [r for r in caplog.records if r.name == "fredica.cluster.discovery"]
    assert len(warnings) == 1 and "mDNS discovery unavailable" in warnings[0].getMessage()
    await d.stop()  # stopping what never started is fine


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        ({"cluster_secret": "s", "mode": "auto"}, True),
        ({"cluster_secret": "s"}, True),  # auto is the default
        ({"cluster_secret": "s", "mode": "manual"}, False),  # seeds only
        ({"mode": "auto"}, False),  # no secret: no cluster at all
    ],
)
async def test_discovery_runs_only_in_auto_mode_with_a_secret(
    tmp_path: Path, cluster: dict[str, str], expected: bool
) -> None:
    settings = replace(fast_settings(tmp_path), config=config.parse_config({"cluster": cluster}))
    node = compose.build_node(settings)
    try:
        assert (node.discovery is not None) is expected
    finally:
        await node.close()
