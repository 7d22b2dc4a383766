"""Finding peers on the local network without configuration (seed 001 §4.1 priority 1, DESIGN
§6): every node announces `_fredica._tcp.local.` over mDNS / DNS-SD (TXT `node_id`, `version`;
the address and port it is reached at) and browses for the others; each node found is handed to
membership (`Membership.add`), which asks it who it is with the cluster secret, so a node found
here joins only if it shares the secret. Seeds and peer exchange work with or without this
(`cluster.mode: manual` turns it off).

Where to announce follows where the node listens: on loopback (`127.0.0.1`, the default) only
the loopback interface (nodes on one machine find each other); on a wildcard (`0.0.0.0`) every
interface, with this machine's IPv4 addresses; on one address that interface. IPv4 only.

Nothing here blocks the event loop (the async zeroconf API); a network without multicast costs
one warning, never the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Sequence
from typing import Any

import ifaddr
from zeroconf import (
    BadTypeInNameException,
    InterfaceChoice,
    IPVersion,
    ServiceStateChange,
    Zeroconf,
)
from zeroconf import Error as ZeroconfError
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from fredica import __version__
from fredica.cluster.membership import Membership

logger = logging.getLogger(__name__)

SERVICE_TYPE = "_fredica._tcp.local."
RESOLVE_TIMEOUT_MS = 3000
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
LOOPBACK_NAMES = frozenset({"localhost", "::1"})
#: a destination to learn the source address of the default route from (nothing is sent:
#: connecting a UDP socket only picks the route)
_ROUTE_PROBE = ("10.254.254.254", 9)


# --- addresses ---------------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return False


def local_ipv4() -> list[str]:
    """This machine's IPv4 addresses, loopback excluded, in interface order."""
    out: list[str] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str) and not ipaddress.ip_address(ip.ip).is_loopback:
                out.append(ip.ip)
    return out


def _local_networks() -> list[ipaddress.IPv4Network]:
    nets = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str) and not ipaddress.ip_address(ip.ip).is_loopback:
                nets.append(ipaddress.IPv4Network(f"{ip.ip}/{ip.network_prefix}", strict=False))
    return nets


def advertised_host(host: str) -> str:
    """The address peers reach a node listening on `host` at: `host` itself, except that a
    wildcard becomes this machine's address on its default route (else its first IPv4
    address, else loopback) and `localhost` becomes `127.0.0.1`."""
    if host == "localhost":
        return "127.0.0.1"
    if host not in WILDCARDS:
        return host
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(_ROUTE_PROBE)
        address = str(s.getsockname()[0])
        if address != "0.0.0.0":
            return address
    addresses = local_ipv4()
    return addresses[0] if addresses else "127.0.0.1"


def pick_address(
    candidates: Sequence[str], own: Sequence[str], networks: Sequence[ipaddress.IPv4Network]
) -> str | None:
    """Which of the addresses a peer announced to call it at: one on a network this machine
    is on and not one of this machine's own (a bridge such as docker0 has the same address on
    every machine), else any that is not this machine's, else the first (a second node on this
    very machine)."""
    if not candidates:
        return None
    foreign = [a for a in candidates if a not in own]
    for address in foreign:
        ip = ipaddress.ip_address(address)
        if any(ip in net for net in networks):
            return address
    return foreign[0] if foreign else candidates[0]


def instance_name(node_id: str) -> str:
    """The DNS-SD instance name of a node (dots would split the label)."""
    return f"fredica-{node_id.replace('.', '-')}.{SERVICE_TYPE}"


# --- the service -------------------------------------------------------------------------------
class Discovery:
    """Announce this node and browse for the others (see the module docstring)."""

    def __init__(
        self,
        node_id: str,
        host: str,
        port: int,
        membership: Membership,
        version: str = __version__,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.version = version
        self._membership = membership
        self._zc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._info: AsyncServiceInfo | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._own: list[str] = []
        self._networks: list[ipaddress.IPv4Network] = []
        #: node id -> the URL last handed to membership for it
        self.found: dict[str, str] = {}
        #: set once the service is announced (or announcing failed)
        self.announced = asyncio.Event()
        self.active = False

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start announcing and browsing in the background; returns at once."""
        try:
            interfaces, addresses = await asyncio.to_thread(self._plan)
            self._own = await asyncio.to_thread(local_ipv4)
            self._networks = await asyncio.to_thread(_local_networks)
            self._zc = AsyncZeroconf(interfaces=interfaces, ip_version=IPVersion.V4Only)
        except (OSError, ZeroconfError, ValueError) as exc:
            self._unavailable(exc)
            return
        self.active = True
        self._info = AsyncServiceInfo(
            SERVICE_TYPE,
            instance_name(self.node_id),
            addresses=[socket.inet_aton(a) for a in addresses],
            port=self.port,
            properties={"node_id": self.node_id, "version": self.version},
            server=f"fredica-{self.node_id.replace('.', '-')}.local.",
        )
        self._spawn(self._announce())
        self._browser = AsyncServiceBrowser(
            self._zc.zeroconf, [SERVICE_TYPE], handlers=[self._on_change]
        )

    def _plan(self) -> tuple[InterfaceChoice | list[str], list[str]]:
        """(interfaces to use, addresses to announce) for the listen address (blocking: it
        may resolve a host name)."""
        if is_loopback(self.host):
            return ["127.0.0.1"], [advertised_host(self.host) if "." in self.host else "127.0.0.1"]
        if self.host in WILDCARDS:
            addresses = local_ipv4()
            if not addresses:
                raise OSError("no IPv4 address on any interface but loopback")
            return InterfaceChoice.All, addresses
        address = socket.gethostbyname(self.host)
        if address not in local_ipv4():
            raise OSError(f"{self.host} is not an address of this machine")
        return [address], [address]

    async def _announce(self) -> None:
        assert self._zc is not None and self._info is not None
        try:
            sent = await self._zc.async_register_service(self._info, allow_name_change=True)
            await sent
            logger.info(
                "announced %s on mDNS as %s",
                self.node_id,
                self._info.name,
                extra={"action": "mdns_announce"},
            )
        except (OSError, ZeroconfError) as exc:
            self._unavailable(exc)
        finally:
            self.announced.set()

    def _unavailable(self, exc: BaseException) -> None:
        self.announced.set()
        logger.warning(
            "mDNS discovery unavailable (%s): peers are found from cluster.seeds and peer "
            "exchange only",
            exc,
            extra={"action": "mdns_unavailable"},
        )

    async def stop(self) -> None:
        """Withdraw the announcement (goodbye packets) and stop browsing."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        zc, self._zc = self._zc, None
        if zc is None:
            return
        self.active = False
        with contextlib.suppress(OSError, ZeroconfError, RuntimeError):
            if self._browser is not None:
                await self._browser.async_cancel()
            await zc.async_unregister_all_services()
        with contextlib.suppress(OSError, ZeroconfError, RuntimeError):
            await zc.async_close()

    # --- browsing ------------------------------------------------------------------------------
    def _on_change(
        self,
        zeroconf: Zeroconf,
        service_type: str,
        name: str,
        state_change: ServiceStateChange,
    ) -> None:
        """Called on the event loop by the browser; resolving is done in a task. A service
        that goes away is left to membership, which marks a peer offline when it stops
        answering."""
        if state_change in (ServiceStateChange.Added, ServiceStateChange.Updated):
            self._spawn(self._resolve(service_type, name))

    async def _resolve(self, service_type: str, name: str) -> None:
        if self._zc is None:
            return
        info = AsyncServiceInfo(service_type, name)
        try:
            if not await info.async_request(self._zc.zeroconf, RESOLVE_TIMEOUT_MS):
                return
        except (OSError, ZeroconfError, BadTypeInNameException) as exc:
            logger.debug("cannot resolve %s: %s", name, exc, extra={"action": "mdns_resolve"})
            return
        props = info.decoded_properties
        self.seen(
            props.get("node_id") or "",
            info.parsed_addresses(IPVersion.V4Only),
            info.port,
        )

    def seen(self, node_id: str, addresses: Sequence[str], port: int | None) -> str | None:
        """A node announced itself: hand its URL to membership unless it is this node or a
        peer already online. Returns the URL handed over (None: nothing to do)."""
        if not node_id or node_id == self.node_id or not port:
            return None
        if any(p.node_id == node_id and p.online for p in self._membership.peers()):
            return None
        address = pick_address(addresses, self._own, self._networks)
        if address is None:
            return None
        url = f"http://{address}:{port}"
        if self.found.get(node_id) != url:
            logger.info("found %s at %s on mDNS", node_id, url, extra={"action": "mdns_found"})
        self.found[node_id] = url
        self._membership.add(url)
        # ask it who it is now rather than at membership's next round
        self._spawn(self._membership.refresh())
        return url

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
