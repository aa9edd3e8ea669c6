"""The agent catalog's listing: which endpoints a caller may see, cheaply.

An endpoint is listed when it is enabled, can be served (no problem in its row or handler) and
its row does not set ``catalog: false``. A public endpoint (one that takes anonymous calls:
``public: true`` or the gateway's ``allow_unauthenticated_endpoints``) is shown to everyone;
any other only to a caller whose credential opens it, as the authenticator would decide for a
call (an API key of that endpoint, a JWT of its issuer and audience, the identity header of a
trusted proxy).

The listing comes from one store read (every row) and the registry's runtimes, and is kept for
``endpoint_cache_seconds`` or until an operator changes a row (``EndpointRegistry.forget``).
What a credential opens is kept for as long (at most ``api_key_cache_seconds``), by a digest of
the headers that carry credentials, so a repeated request checks nothing again.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from a2a_gateway.auth.callers import Authenticator, InvalidCredentialError, bearer_token
from a2a_gateway.auth.peer import PEER
from a2a_gateway.endpoints.card import in_catalog
from a2a_gateway.endpoints.registry import EndpointRegistry, EndpointRuntime, is_endpoint_id
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import Store

CREDENTIALS_CACHED = 1024
"""Credentials whose view is remembered at most (a flood of made-up ones cannot grow memory)."""


@dataclass(frozen=True, slots=True)
class Listing:
    """The endpoints that can be served (enabled, no problem), by name, as of one store read."""

    generation: int
    """Counts the listings built: a view of an older one is stale."""
    runtimes: tuple[EndpointRuntime, ...]
    credential_headers: frozenset[str]
    """Lower-case names of the headers any of them takes a credential in."""
    api_key_headers: frozenset[str]
    """Lower-case names of the headers any of them takes an API key in."""

    def listed(self, opened: frozenset[str]) -> tuple[EndpointRuntime, ...]:
        """The listed endpoints that are public or whose id is in ``opened``."""
        return tuple(
            r for r in self.runtimes
            if in_catalog(r.endpoint) and (r.auth.anonymous or r.endpoint.id in opened)
        )


@dataclass(frozen=True, slots=True)
class CatalogView:
    """What one caller sees: the listed endpoints, and the listing they come from."""

    generation: int
    runtimes: tuple[EndpointRuntime, ...]
    credential_headers: frozenset[str]
    """The listing's headers that carry credentials (what the answer varies by)."""

    @property
    def key(self) -> tuple[int, tuple[str, ...]]:
        """Equal for callers who see the same endpoints of the same listing."""
        return self.generation, tuple(r.endpoint.id for r in self.runtimes)


class EndpointCatalog:
    """The listing, and the view of it each caller's credential gives."""

    def __init__(
        self, store: Store, registry: EndpointRegistry, authenticator: Authenticator,
        settings: GatewaySettings, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._registry = registry
        self._auth = authenticator
        self._max_age = settings.endpoint_cache_seconds
        self._credential_max_age = min(settings.endpoint_cache_seconds,
                                       settings.api_key_cache_seconds)
        self._clock = clock
        self._listing: Listing | None = None
        self._listed_at = -float("inf")
        self._listed_changes = -1
        self._lock = asyncio.Lock()
        self._opened: OrderedDict[bytes, tuple[float, int, frozenset[str]]] = OrderedDict()

    async def view(self, headers: Mapping[str, str]) -> CatalogView:
        """What the caller of ``headers`` may see; ``InvalidCredentialError`` when it presents a
        credential that opens no endpoint that can be served."""
        listing = await self.listing()
        digest = self._credential_digest(headers, listing)
        opened = frozenset() if digest is None else await self._opened_by(
            headers, digest, listing)
        return CatalogView(listing.generation, listing.listed(opened),
                           listing.credential_headers)

    async def listing(self) -> Listing:
        if not self._stale():
            assert self._listing is not None
            return self._listing
        async with self._lock:  # one store read however many callers wait for it
            if self._stale():
                changes = self._registry.changes
                listing = await self._read(self._listing.generation + 1 if self._listing else 1)
                self._listing, self._listed_at, self._listed_changes = (
                    listing, self._clock(), changes)
            assert self._listing is not None
            return self._listing

    def _stale(self) -> bool:
        return (
            self._listing is None
            or self._clock() - self._listed_at >= self._max_age
            or self._registry.changes != self._listed_changes
        )

    async def _read(self, generation: int) -> Listing:
        rows = [row for row in await self._store.list_endpoints()
                if row.enabled and is_endpoint_id(row.id)]  # others have no card route
        built = await asyncio.gather(*(self._registry.runtime_of(row) for row in rows))
        runtimes = sorted((r for r in built if r.handler is not None),
                          key=lambda r: (r.endpoint.name, r.endpoint.id))
        key_headers = frozenset(
            r.auth.api_key_header.lower() for r in runtimes if r.auth.api_key_header)
        proxy_headers = frozenset(
            r.auth.trusted_header.lower() for r in runtimes if r.auth.trusted_header)
        return Listing(generation, tuple(runtimes),
                       key_headers | proxy_headers | {"authorization"}, key_headers)

    def _credential_digest(self, headers: Mapping[str, str], listing: Listing) -> bytes | None:
        """A digest of the credential headers present (with the peer, which decides whether a
        proxy's identity header counts); None when there is none."""
        present = sorted(
            (name.lower(), value) for name, value in headers.items()
            if name.lower() in listing.credential_headers and value.strip()
        )
        if not present:
            return None
        digest = hashlib.sha256(repr((PEER.get(), present)).encode())
        return digest.digest()

    async def _opened_by(
        self, headers: Mapping[str, str], digest: bytes, listing: Listing
    ) -> frozenset[str]:
        cached = self._opened.get(digest)
        now = self._clock()
        if (cached is not None and cached[1] == listing.generation
                and now - cached[0] < self._credential_max_age):
            opened = cached[2]
        else:
            opened = frozenset([
                r.endpoint.id for r in listing.runtimes
                if await self._auth.opens(headers, r.auth_view)
            ])
            self._opened[digest] = (now, listing.generation, opened)
            self._opened.move_to_end(digest)
            while len(self._opened) > CREDENTIALS_CACHED:
                self._opened.popitem(last=False)
        if not opened and _presents_key_or_token(headers, listing):
            raise InvalidCredentialError("the credential opens no endpoint")
        return opened


def _presents_key_or_token(headers: Mapping[str, str], listing: Listing) -> bool:
    """An API key or bearer token is presented (a proxy's identity header is no credential the
    caller chose, so alone it never makes the catalog refuse)."""
    return bearer_token(headers) is not None or any(
        name.lower() in listing.api_key_headers and value.strip()
        for name, value in headers.items()
    )
