"""An issuer's signing keys, fetched from its JWKS URL and cached.

Keys are kept for ``cache_seconds``. A token naming a ``kid`` the cache lacks (the issuer
rotated its keys) fetches again, at most once every ``refresh_seconds`` per URL, so made-up
kids cannot turn the gateway into a flood of requests to the issuer. A failed fetch keeps the
keys already known; it is logged without the response.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
import orjson
import structlog

if TYPE_CHECKING:
    from a2a_gateway.auth.public_keys import VerificationKey

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _Entry:
    keys: tuple[VerificationKey, ...] = ()
    fetched_at: float | None = None
    """When keys were last fetched (None: never)."""
    tried_at: float = float("-inf")
    """When a fetch was last tried, successful or not."""


class JwksCache:
    def __init__(
        self, http: httpx.AsyncClient, *, cache_seconds: float, refresh_seconds: float,
        timeout_seconds: float, max_bytes: int, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = http
        self._cache_seconds = cache_seconds
        self._refresh_seconds = refresh_seconds
        self._timeout = timeout_seconds
        self._max_bytes = max_bytes
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def keys(self, url: str, kid: str | None) -> tuple[VerificationKey, ...]:
        """The keys published at ``url``, fetched again when stale or when ``kid`` is unknown."""
        entry = self._entries.setdefault(url, _Entry())
        if self._wants_fetch(entry, kid):
            async with self._locks.setdefault(url, asyncio.Lock()):
                if self._wants_fetch(entry, kid):  # another request may just have fetched
                    await self._fetch(url, entry)
        return entry.keys

    def has_keys(self, url: str) -> bool:
        """Whether a fetch of ``url`` has ever succeeded."""
        entry = self._entries.get(url)
        return entry is not None and entry.fetched_at is not None

    def _wants_fetch(self, entry: _Entry, kid: str | None) -> bool:
        now = self._clock()
        if now - entry.tried_at < self._refresh_seconds:
            return False
        stale = entry.fetched_at is None or now - entry.fetched_at >= self._cache_seconds
        unknown = kid is not None and all(k.kid != kid for k in entry.keys)
        return stale or unknown

    async def _fetch(self, url: str, entry: _Entry) -> None:
        entry.tried_at = self._clock()
        try:
            document = await self._download(url)
            keys = _published_keys(document)
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("jwks_fetch_failed", url=url, error=str(exc).splitlines()[0][:200])
            return
        entry.keys, entry.fetched_at = keys, self._clock()

    async def _download(self, url: str) -> object:
        body = bytearray()
        async with self._http.stream(
            "GET", url, timeout=self._timeout, follow_redirects=False
        ) as response:
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > self._max_bytes:
                    raise ValueError(
                        f"the JWKS is larger than {self._max_bytes} bytes (jwks_max_bytes)"
                    )
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ValueError("the JWKS is not JSON") from None


def _published_keys(document: object) -> tuple[VerificationKey, ...]:
    """The usable signing keys of a JWKS; keys this gateway cannot use are skipped."""
    from a2a_gateway.auth.public_keys import jwk_key  # cryptography: loaded by the first JWKS
    items = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise ValueError('the JWKS has no "keys" list')
    keys = []
    for item in items:
        if not isinstance(item, dict) or item.get("use", "sig") != "sig":
            continue
        try:
            keys.append(jwk_key(item))
        except ValueError:
            continue
    return tuple(keys)
