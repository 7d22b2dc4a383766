"""The pure parts of mDNS discovery: which announced address to call a peer at, what address a
node advertises, and the cluster secret read from the environment."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from fredica.cluster import discovery
from fredica.config import schema as config

LAN = [ipaddress.IPv4Network("192.168.1.0/24"), ipaddress.IPv4Network("172.17.0.0/16")]
OWN = ["192.168.1.10", "172.17.0.1"]


def test_a_peer_is_called_on_a_shared_network_not_on_an_address_every_machine_has() -> None:
    # docker0 is 172.17.0.1 on both machines: calling it would reach this machine itself
    assert discovery.pick_address(["172.17.0.1", "192.168.1.11"], OWN, LAN) == "192.168.1.11"
    # no shared network (a VPN address, say): any address that is not this machine's
    assert discovery.pick_address(["10.8.0.5", "172.17.0.1"], OWN, LAN) == "10.8.0.5"
    # a second node on this very machine announces this machine's own address
    assert discovery.pick_address(["192.168.1.10"], OWN, LAN) == "192.168.1.10"
    assert discovery.pick_address(["127.0.0.1"], OWN, LAN) == "127.0.0.1"
    assert discovery.pick_address([], OWN, LAN) is None


def test_the_advertised_address_of_a_wildcard_is_one_of_this_machines() -> None:
    assert discovery.advertised_host("192.168.1.10") == "192.168.1.10"
    assert discovery.advertised_host("127.0.0.1") == "127.0.0.1"
    assert discovery.advertised_host("localhost") == "127.0.0.1"
    host = discovery.advertised_host("0.0.0.0")
    assert host != "0.0.0.0"
    assert host in [*discovery.local_ipv4(), "127.0.0.1"]


def test_loopback_and_instance_names() -> None:
    assert discovery.is_loopback("127.0.0.1") and discovery.is_loopback("localhost")
    assert discovery.is_loopback("::1") and discovery.is_loopback("127.0.0.2")
    assert not discovery.is_loopback("0.0.0.0") and not discovery.is_loopback("nas.local")
    # a dot in a node id would split the DNS-SD instance label
    assert discovery.instance_name("lab.nas") == "fredica-lab-nas._fredica._tcp.local."


def test_cluster_secret_from_the_environment_wins_and_is_never_written_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "worker.yaml"
    path.write_text('cluster:\n  cluster_secret: "from-file"\n')
    assert config.load_config(path).cluster.cluster_secret == "from-file"
    monkeypatch.setenv(config.CLUSTER_SECRET_ENV, "from-env")
    assert config.load_config(path).cluster.cluster_secret == "from-env"
    # generating the node identity writes worker.yaml back: the secret there stays the file's
    cfg = config.ensure_node_identity(path)
    assert cfg.cluster.cluster_secret == "from-env" and cfg.node.id
    assert "from-env" not in path.read_text() and "from-file" in path.read_text()
    # an empty variable is no secret: the file's stands
    monkeypatch.setenv(config.CLUSTER_SECRET_ENV, "")
    assert config.load_config(path).cluster.cluster_secret == "from-file"


def test_cluster_secret_from_the_environment_reaches_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fredica.node import bootstrap

    monkeypatch.setenv(config.CLUSTER_SECRET_ENV, "env-secret")
    boot = bootstrap.bootstrap(data_dir=tmp_path / "data")
    assert boot.settings.config is not None
    assert boot.settings.config.cluster.cluster_secret == "env-secret"
    assert "env-secret" not in boot.config_path.read_text()
