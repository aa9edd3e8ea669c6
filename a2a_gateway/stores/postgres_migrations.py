"""The PostgreSQL migration runner (``a2a-gateway migrate``) and the schema check ``serve``
relies on.

``migrations/postgres/NNNN_*.sql`` are applied in order under an advisory lock and
recorded, with their checksums, in ``schema_migrations``.
"""

from __future__ import annotations

import hashlib

import asyncpg

from a2a_gateway.stores.base import StoreError
from a2a_gateway.stores.migrations import migration_files
from a2a_gateway.stores.postgres_connection import connect

__all__ = [
    "Migration",
    "MigrationError",
    "SchemaMismatchError",
    "check_applied",
    "check_schema",
    "checksum",
    "migrate_postgres",
]


class MigrationError(StoreError):
    """A migration cannot be applied: an applied file was edited, the database is newer
    than this code, or the migration files themselves are inconsistent."""


class SchemaMismatchError(StoreError):
    """The database schema is not the one this code expects (unmigrated, behind or newer)."""


Migration = tuple[int, str, str]
"""``(number, file name, sql)``, as ``migration_files`` returns them."""

# pg_advisory_lock key held by the migration runner ("a2a_migr" in ASCII).
_MIGRATION_LOCK = 0x6132615F6D696772
_NO_TRANSACTION = "-- no-transaction"


def checksum(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


def _no_transaction(sql: str) -> bool:
    """True if the file's leading comment block has a ``-- no-transaction`` line."""
    for line in sql.splitlines():
        line = line.strip()
        if not line:
            continue
        if not line.startswith("--"):
            return False
        if line == _NO_TRANSACTION:
            return True
    return False


def _ordered(files: list[Migration]) -> list[Migration]:
    ordered = sorted(files, key=lambda f: f[0])
    numbers = [f[0] for f in ordered]
    if len(set(numbers)) != len(numbers):
        raise MigrationError(f"two migration files share a number: {[f[1] for f in ordered]}")
    return ordered


async def _applied(conn: asyncpg.Connection) -> dict[int, tuple[str, str]] | None:
    """``{version: (name, checksum)}``, or None when the database was never migrated."""
    if not await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL"):
        return None
    rows = await conn.fetch("SELECT version, name, checksum FROM schema_migrations")
    return {r["version"]: (r["name"], r["checksum"]) for r in rows}


def _newer_than_code(applied: dict[int, tuple[str, str]], files: list[Migration]) -> str | None:
    unknown = sorted(set(applied) - {f[0] for f in files})
    if not unknown:
        return None
    names = ", ".join(applied[v][0] for v in unknown)
    return (
        f"the database schema is newer than this gateway: it has migrations this version does"
        f" not know ({names}); upgrade the gateway"
    )


async def migrate_postgres(url: str, *, files: list[Migration] | None = None) -> list[str]:
    """Apply the migrations not yet applied, in order, under an advisory lock; return
    their names (empty: up to date).

    Each file runs in its own transaction unless its header has ``-- no-transaction``
    (for ``CREATE INDEX CONCURRENTLY``). A concurrent runner waits for the lock and then
    finds nothing to do. ``MigrationError`` if an applied file changed since it was
    applied or the database has migrations this code does not know.
    """
    ordered = _ordered(files if files is not None else migration_files("postgres"))
    async with connect(url) as conn:
        # held until the connection closes, whatever happens below
        await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
        return await _apply(conn, ordered)


async def _apply(conn: asyncpg.Connection, ordered: list[Migration]) -> list[str]:
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    applied = await _applied(conn) or {}
    problem = _newer_than_code(applied, ordered)
    if problem:
        raise MigrationError(problem)
    for number, name, sql in ordered:
        if number in applied and applied[number][1] != checksum(sql):
            raise MigrationError(
                f"migration {name} was changed after it was applied (as {applied[number][0]});"
                " applied migrations are never edited: add a new numbered file instead"
            )
    done = []
    for number, name, sql in ordered:
        if number in applied:
            continue
        record = (
            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            number,
            name,
            checksum(sql),
        )
        try:
            if _no_transaction(sql):
                await conn.execute(sql)
                await conn.execute(*record)
            else:
                async with conn.transaction():
                    # no arguments: the simple-query protocol runs every statement in the file
                    await conn.execute(sql)
                    await conn.execute(*record)
        except asyncpg.PostgresError as exc:
            raise MigrationError(f"migration {name} failed: {exc}") from exc
        done.append(name)
    return done


async def check_applied(conn: asyncpg.Connection, files: list[Migration]) -> None:
    """``SchemaMismatchError`` unless exactly ``files`` (ordered) are applied on ``conn``."""
    applied = await _applied(conn)
    if not applied:
        raise SchemaMismatchError("the database is not migrated: run `a2a-gateway migrate`")
    problem = _newer_than_code(applied, files)
    if problem:
        raise SchemaMismatchError(problem)
    missing = [name for number, name, _ in files if number not in applied]
    if missing:
        raise SchemaMismatchError(
            f"the database schema is behind this gateway (not applied: {', '.join(missing)}):"
            " run `a2a-gateway migrate`"
        )


async def check_schema(url: str, *, files: list[Migration] | None = None) -> None:
    """``SchemaMismatchError`` unless the database at ``url`` has exactly the migrations
    this code knows; ``StoreUnavailableError`` if it cannot be reached."""
    async with connect(url) as conn:
        files = files if files is not None else migration_files("postgres")
        await check_applied(conn, _ordered(files))
