"""Store selection by URL: ``memory://``, ``sqlite:///path``, ``postgresql://…``, ``dynamodb://…``.

Drivers are imported only in the branch that needs them.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from a2a_gateway.stores.base import Store

EXTRAS = {"postgresql": ("postgres", "asyncpg"), "postgres": ("postgres", "asyncpg"),
          "dynamodb": ("dynamodb", "boto3")}
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
    """``sqlite:///./a.db`` → ``./a.db``; ``sqlite:////abs/a.db`` → ``/abs/a.db``."""
    path = url[len("sqlite://") :]
    if path.startswith("/"):
        path = path[1:]
    return path or "a2a-gateway.db"


async def open_store(url: str, *, page_token_key: bytes | None = None, **options: object) -> Store:
    """Open the store named by ``url``; ``page_token_key`` signs ListTasks page tokens
    (give every replica of a deployment the same key)."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        from a2a_gateway.stores.memory import MemoryStore

        return MemoryStore(page_token_key)
    if scheme == "sqlite":
        from a2a_gateway.stores.sqlite import SQLiteStore

        return await SQLiteStore.open(sqlite_path(url), page_token_key)
    if page_token_key:
        options["page_token_key"] = page_token_key
    if scheme in EXTRAS:
        _require_driver(scheme)
    if scheme in ("postgresql", "postgres"):
        from a2a_gateway.stores.postgres import PostgresStore

        return await PostgresStore.open(url, **options)
    if scheme == "dynamodb":
        from a2a_gateway.stores.dynamodb import DynamoDBStore

        return await DynamoDBStore.open(url, **options)
    raise UnknownStoreError(f"unknown store URL scheme {scheme!r} (memory, sqlite, postgresql, dynamodb)")
