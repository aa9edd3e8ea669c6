"""Store selection by URL: ``memory://``, ``sqlite:///path``, ``postgresql://…``, ``dynamodb://…``.

One table (``_KINDS``) maps a scheme to how its store is opened and migrated; drivers
are imported only when their scheme is used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from a2a_gateway.stores.base import Store

EXTRAS = {"postgresql": ("postgres", "asyncpg"), "postgres": ("postgres", "asyncpg"),
          "dynamodb": ("dynamodb", "botocore")}
"""Store scheme → the package extra that brings its driver, and the driver module."""


class UnknownStoreError(ValueError):
    """The store URL names a scheme this gateway does not know, or whose driver is missing."""


def display_url(url: str) -> str:
    """The store URL without its password or query (which may carry credentials)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}://{netloc}{parts.path}"


def _require_driver(scheme: str) -> None:
    extra, module = EXTRAS[scheme]
    try:
        __import__(module)
    except ImportError:
        raise UnknownStoreError(
            f"{scheme}:// stores need the {extra} extra: pip install 'a2a-gateway[{extra}]'"
        ) from None


def sqlite_path(url: str) -> str:
    """``sqlite:///./a.db`` → ``./a.db``; ``sqlite:////abs/a.db`` → ``/abs/a.db`` (no query)."""
    path = url[len("sqlite://") :].split("?", 1)[0]
    if path.startswith("/"):
        path = path[1:]
    return path or "a2a-gateway.db"


@dataclass(frozen=True, slots=True)
class _StoreKind:
    open: Callable[[str, dict[str, Any]], Awaitable[Store]]
    migrate: Callable[[str], Awaitable[list[str]]]
    """Applies what the schema lacks; the names of the steps applied."""


async def _open_memory(url: str, options: dict[str, Any]) -> Store:
    from a2a_gateway.stores.memory import MemoryStore

    return MemoryStore(options.get("page_token_key"))


async def _migrate_memory(url: str) -> list[str]:
    return []


async def _open_sqlite(url: str, options: dict[str, Any]) -> Store:
    from a2a_gateway.stores.sqlite import SQLiteStore, url_options

    return await SQLiteStore.open(
        sqlite_path(url), options.get("page_token_key"), **url_options(url)
    )


async def _migrate_sqlite(url: str) -> list[str]:
    store = await _open_sqlite(url, {})  # opening applies what is missing
    await store.aclose()
    return store.applied_migrations  # type: ignore[attr-defined, no-any-return]


async def _open_postgres(url: str, options: dict[str, Any]) -> Store:
    from a2a_gateway.stores.postgres import PostgresStore

    return await PostgresStore.open(url, **options)


async def _migrate_postgres(url: str) -> list[str]:
    from a2a_gateway.stores.postgres import migrate_postgres

    return await migrate_postgres(url)


async def _open_dynamodb(url: str, options: dict[str, Any]) -> Store:
    from a2a_gateway.stores.dynamodb import DynamoDBStore

    return await DynamoDBStore.open(url, **options)


async def _migrate_dynamodb(url: str) -> list[str]:
    from a2a_gateway.stores.dynamodb import create_tables

    return await create_tables(url)


_KINDS = {
    "memory": _StoreKind(_open_memory, _migrate_memory),
    "sqlite": _StoreKind(_open_sqlite, _migrate_sqlite),
    "postgresql": _StoreKind(_open_postgres, _migrate_postgres),
    "postgres": _StoreKind(_open_postgres, _migrate_postgres),
    "dynamodb": _StoreKind(_open_dynamodb, _migrate_dynamodb),
}


def _kind(url: str) -> _StoreKind:
    """The one switch on the store URL's scheme (its driver imported, or a clear error)."""
    scheme = urlsplit(url).scheme
    kind = _KINDS.get(scheme)
    if kind is None:
        raise UnknownStoreError(
            f"unknown store URL scheme {scheme!r} (memory, sqlite, postgresql, dynamodb)"
        )
    if scheme in EXTRAS:
        _require_driver(scheme)
    return kind


async def open_store(url: str, *, page_token_key: bytes | None = None, **options: Any) -> Store:
    """Open the store named by ``url``; ``page_token_key`` signs ListTasks page tokens
    (give every replica of a deployment the same key)."""
    if page_token_key:
        options["page_token_key"] = page_token_key
    return await _kind(url).open(url, options)


async def migrate_store(url: str) -> list[str]:
    """``a2a-gateway migrate``: bring the schema up to date; the names of the steps applied
    (empty: up to date). SQLite migrates itself on open; PostgreSQL applies
    ``migrations/postgres/*.sql`` under an advisory lock; DynamoDB creates its tables and
    indexes if missing."""
    return await _kind(url).migrate(url)
