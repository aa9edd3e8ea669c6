"""The address of the TCP peer of the request being served, for trusting a proxy's headers.

The transports hand the authenticator the request's headers only; this middleware keeps the
peer's address beside them for the request's task. It is the socket's peer, never a
forwarded-for header, so only a proxy at a configured address can vouch for a caller.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar

from aiohttp import web

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
PEER: ContextVar[str | None] = ContextVar("peer", default=None)


@web.middleware
async def remember_peer(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    peername = request.transport.get_extra_info("peername") if request.transport else None
    token = PEER.set(peername[0] if isinstance(peername, tuple) and peername else None)
    try:
        return await handler(request)
    finally:
        PEER.reset(token)


def networks(values: Iterable[str]) -> tuple[IpNetwork, ...]:
    """Addresses and CIDRs as networks; ``ValueError`` names one that is neither."""
    return tuple(ipaddress.ip_network(v.strip(), strict=False) for v in values)


def is_trusted(peer: str | None, trusted: tuple[IpNetwork, ...]) -> bool:
    if peer is None or not trusted:
        return False
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in trusted)
