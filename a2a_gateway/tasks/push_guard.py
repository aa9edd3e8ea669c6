"""The webhook guard: which addresses a push notification may reach, and how to reach only them.

A webhook URL is checked when a config is created and again before every POST: the
scheme is http(s), the host is on the allowlist (if one is set), and every address the
host resolves to is a public unicast address — not loopback (unless allowed for local
tests), private, link-local, unique-local, multicast, unspecified, reserved, shared
(100.64/10) or a cloud metadata service; an IPv6 address that carries an IPv4 one
(IPv4-mapped, 6to4) is judged by the IPv4 address. The POST then connects to the very
address that was checked (``pin``), so a name that resolves differently a moment later
(DNS rebinding) changes nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import httpx

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``(host, port)`` → the host's addresses as text (the seam tests point at a fake mapping)."""

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.253",  # AWS VPC DNS
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS VPC DNS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
SHARED_NETWORK = ipaddress.ip_network("100.64.0.0/10")
UNIQUE_LOCAL_NETWORK = ipaddress.ip_network("fc00::/7")


class RefusedUrlError(ValueError):
    """A webhook URL the gateway will not call; the message says why (safe to show the caller:
    it names the host and the kind of address, never the URL's credentials)."""


class UnresolvedHostError(RefusedUrlError):
    """The webhook's host does not resolve (now): refused for a new config, retried on delivery."""


@dataclass(frozen=True, slots=True)
class Target:
    """A checked webhook: its URL, its host name and the address to connect to."""

    url: httpx.URL
    host: str
    address: str


def refused_class(address: Address) -> str | None:
    """The kind of non-public address ``address`` is, or None for a public unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            return refused_class(embedded)
    checks: list[tuple[bool, str]] = [
        (address in METADATA_ADDRESSES, "cloud metadata"),
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (address in SHARED_NETWORK, "shared (100.64.0.0/10)"),
        (address in UNIQUE_LOCAL_NETWORK, "unique-local"),
        (isinstance(address, ipaddress.IPv6Address) and address.is_site_local, "site-local"),
        (address.is_reserved, "reserved"),
        (address.is_private, "private"),
        (not address.is_global, "non-public"),
    ]
    return next((name for refused, name in checks if refused), None)


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """An entry ``example.com`` matches that host; ``.example.com`` also its subdomains."""
    return host in allowed or any(
        entry.startswith(".") and (host.endswith(entry) or host == entry[1:]) for entry in allowed
    )


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class WebhookGuard:
    def __init__(
        self,
        *,
        allow_loopback: bool = False,
        allowed_hosts: Iterable[str] = (),
        resolver: Resolver = system_resolver,
    ) -> None:
        self.allow_loopback = allow_loopback
        self.allowed_hosts = frozenset(
            h.strip().lower().rstrip(".") for h in allowed_hosts if h.strip()
        )
        self.resolver = resolver

    async def check(self, url: str) -> Target:
        """The target to POST to; ``RefusedUrlError`` saying why ``url`` may not be called."""
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError):
            raise RefusedUrlError("push notification url is not a valid URL") from None
        if parsed.scheme not in ("http", "https"):
            raise RefusedUrlError("push notification url must be http or https")
        host = parsed.host.lower().rstrip(".")
        if not host:
            raise RefusedUrlError("push notification url has no host")
        if self.allowed_hosts and not _host_allowed(host, self.allowed_hosts):
            raise RefusedUrlError(f"push notification host {host} is not on the allowlist")
        literal = _literal(host)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        addresses = [literal] if literal else await self._resolve(host, port)
        for address in addresses:
            kind = refused_class(address)
            if kind is not None and not (kind == "loopback" and self.allow_loopback):
                what = "is" if literal else "resolves to"
                raise RefusedUrlError(
                    f"push notification url is not allowed: {host} {what} a {kind} address"
                )
        return Target(parsed, host, str(addresses[0]))

    async def _resolve(self, host: str, port: int) -> list[Address]:
        try:
            found = await self.resolver(host, port)
        except OSError:
            found = []
        # a zone index (fe80::1%eth0) is not part of the address
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in found]
        if not addresses:
            raise UnresolvedHostError(f"push notification host {host} does not resolve")
        return addresses


def pin(request: httpx.Request, target: Target) -> httpx.Request:
    """Send ``request`` (built for ``target.url``) to ``target.address``: the Host header
    it was built with keeps the name, and TLS sends and verifies the name (SNI)."""
    request.url = request.url.copy_with(host=target.address)
    if request.url.scheme == "https":
        request.extensions = {**request.extensions, "sni_hostname": target.host}
    return request
