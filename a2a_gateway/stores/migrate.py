"""``a2a-gateway migrate``: bring a store's schema up to date, for any store URL.

SQLite migrates itself on open; PostgreSQL applies ``migrations/postgres/*.sql``
under an advisory lock; DynamoDB creates its tables and indexes if missing.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from a2a_gateway.stores import UnknownStoreError, sqlite_path


async def migrate(url: str) -> list[str]:
    """Apply what is missing; return the names of the steps applied (empty: up to date)."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return []
    if scheme == "sqlite":
        from a2a_gateway.stores.sqlite import SQLiteStore

        store = await SQLiteStore.open(sqlite_path(url))  # opening applies what is missing
        await store.aclose()
        return store.applied_migrations
    if scheme in ("postgresql", "postgres"):
        from a2a_gateway.stores.postgres import migrate_postgres

        return await migrate_postgres(url)
    if scheme == "dynamodb":
        from a2a_gateway.stores.dynamodb import create_tables

        return await create_tables(url)
    raise UnknownStoreError(f"unknown store URL scheme {scheme!r}")
