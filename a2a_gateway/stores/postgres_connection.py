"""Reaching PostgreSQL: the gateway's URL options and asyncpg errors as store errors.

Pool and timeout options come from keyword arguments or from the URL's query string
(keyword arguments win); they are removed from the URL before it reaches the driver:
``pool_size`` (10), ``pool_min_size`` (0), ``connect_timeout`` (5 s),
``command_timeout`` (30 s), ``acquire_timeout`` (10 s), ``statement_cache_size``
(asyncpg's default; 0 behind a transaction-pooling proxy).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from a2a_gateway.stores.base import StoreUnavailableError

_OPTIONS = {
    "pool_size": int,
    "pool_min_size": int,
    "connect_timeout": float,
    "command_timeout": float,
    "acquire_timeout": float,
    "statement_cache_size": int,
}
_DEFAULTS: dict[str, Any] = {
    "pool_size": 10,
    # 0: while the database is down, asyncpg would otherwise retry the floor in the
    # background and log a traceback each time; connections open on demand instead
    "pool_min_size": 0,
    "connect_timeout": 5.0,
    "command_timeout": 30.0,
    "acquire_timeout": 10.0,
}

# Errors meaning "the database cannot be reached right now": connection refused or
# lost (OSError, class 08), server shutting down or starting (class 57), too many
# connections (class 53), or a timeout waiting for a connection or an answer.
# InternalClientError is what asyncpg raises when the server ends an idle session
# (a restart, pg_terminate_backend) and the next query finds the protocol mid-state;
# the pool replaces that connection, so a retry works.
UNAVAILABLE_ERRORS = (
    OSError,
    asyncpg.InternalClientError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.InsufficientResourcesError,
)


def split_url(url: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Remove the gateway's own options from the URL's query; merge them under
    ``options`` (keyword arguments win) and fill in the defaults."""
    parts = urlsplit(url)
    kept, merged = [], dict(_DEFAULTS)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in _OPTIONS:
            merged[key] = _OPTIONS[key](value)
        else:
            kept.append((key, value))
    for key, value in options.items():
        if key not in _OPTIONS:
            raise TypeError(f"unknown postgres store option {key!r}")
        if value is not None:
            merged[key] = _OPTIONS[key](value)
    if parts.scheme == "postgres":
        parts = parts._replace(scheme="postgresql")
    return urlunsplit(parts._replace(query=urlencode(kept))), merged


def redacted(url: str) -> str:
    """The URL without password or query string, fit for messages and logs."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    netloc = f"{parts.username}@{host}" if parts.username else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def unavailable(url: str, exc: BaseException) -> StoreUnavailableError:
    """The store error for one of ``UNAVAILABLE_ERRORS`` raised talking to ``url``."""
    detail = str(exc) or type(exc).__name__
    return StoreUnavailableError(f"postgres store at {redacted(url)} is unavailable: {detail}")


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[asyncpg.Connection]:
    """One connection outside any pool (the migration runner's), closed on exit;
    ``StoreUnavailableError`` if the server cannot be reached or is lost."""
    dsn, opts = split_url(url, {})
    try:
        conn = await asyncpg.connect(dsn, timeout=opts["connect_timeout"])
    except UNAVAILABLE_ERRORS as exc:
        raise unavailable(dsn, exc) from exc
    try:
        yield conn
    except UNAVAILABLE_ERRORS as exc:
        raise unavailable(dsn, exc) from exc
    finally:
        # closing the session also releases its advisory locks
        try:
            await conn.close(timeout=2)
        except (*UNAVAILABLE_ERRORS, asyncpg.InterfaceError):
            conn.terminate()
