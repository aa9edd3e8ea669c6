"""API keys: their format, their keyed hash, and checking a presented key against the store.

A key is ``a2agw_<id>_<secret>``: the 16-hex-digit id finds the row in O(1), the 256-bit
secret is what proves possession. The store keeps only HMAC-SHA-256(server secret, key), so a
copy of the store does not let anyone call; hashes are compared in constant time. Rows are
cached for ``cache_seconds`` (revocation takes effect within that time).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from a2a_gateway.stores.base import ApiKey, Store

KEY_PREFIX = "a2agw_"
_KEY = re.compile(r"a2agw_([0-9a-f]{16})_[A-Za-z0-9_-]{43}")
CACHE_SIZE = 10_000
"""Rows (and unknown ids) remembered at most: a flood of made-up keys cannot grow memory."""


def new_key() -> tuple[str, str]:
    """A fresh ``(key id, key)``."""
    key_id = secrets.token_hex(8)
    return key_id, f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def key_id_of(presented: str) -> str | None:
    """The id of a well-formed key, else None."""
    match = _KEY.fullmatch(presented)
    return match[1] if match else None


def hash_key(hash_secret: bytes, key: str) -> str:
    return hmac.new(hash_secret, key.encode(), hashlib.sha256).hexdigest()


def make_key(
    hash_secret: bytes, *, endpoint_id: str, tenant: str, principal: str | None = None,
    name: str = "", expires_days: float | None = None,
) -> tuple[ApiKey, str]:
    """A new key row and the key itself (shown once, never stored)."""
    key_id, key = new_key()
    now = datetime.now(UTC)
    row = ApiKey(
        id=key_id, endpoint_id=endpoint_id, tenant=tenant, principal=principal or key_id, name=name,
        key_hash=hash_key(hash_secret, key), created_at=now,
        expires_at=now + timedelta(days=expires_days) if expires_days is not None else None,
    )
    return row, key


class ApiKeyVerifier:
    """Checks presented keys against the store's rows, with a small time-bounded cache."""

    def __init__(
        self, store: Store, hash_secret: bytes, cache_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._hash_secret = hash_secret
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._rows: OrderedDict[str, tuple[float, ApiKey | None]] = OrderedDict()

    async def verify(self, endpoint_id: str, presented: str) -> ApiKey | None:
        """The row of a valid, unexpired, unrevoked key of this endpoint, else None."""
        key_id = key_id_of(presented)
        if key_id is None:
            return None
        row = await self._row(key_id)
        if row is None or not hmac.compare_digest(
            row.key_hash, hash_key(self._hash_secret, presented)
        ):
            return None
        if row.endpoint_id != endpoint_id or row.revoked_at is not None:
            return None
        if row.expires_at is not None and row.expires_at <= datetime.now(UTC):
            return None
        return row

    async def _row(self, key_id: str) -> ApiKey | None:
        cached = self._rows.get(key_id)
        now = self._clock()
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        row = await self._store.get_api_key(key_id)
        self._rows[key_id] = (now, row)
        self._rows.move_to_end(key_id)
        while len(self._rows) > CACHE_SIZE:
            self._rows.popitem(last=False)
        return row
