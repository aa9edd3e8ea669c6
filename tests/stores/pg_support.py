"""PostgreSQL for the tests: a fresh database per test, copied from a migrated template.

``A2A_TEST_POSTGRES_DSN`` points at a throwaway cluster (``.ci/services/00-postgres.sh``
starts one). The template is built once from ``migrations/postgres`` and named after
the migrations' checksums, so a changed migration gets a new template and concurrent
test sessions on one cluster share it safely. Copying it takes ~30 ms.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from a2a_gateway.stores.migrations import migration_files
from a2a_gateway.stores.postgres import migrate_postgres
from a2a_gateway.stores.postgres_migrations import checksum
from tests.support.harness import require_env

ENV_VAR = "A2A_TEST_POSTGRES_DSN"
_TEMPLATE_LOCK = 0x6132615F74706C74  # "a2a_tplt": serializes template builds across sessions
_template: str | None = None


def admin_dsn() -> str:
    """The cluster's DSN; skips the test when unset (fails it when ``CI=true``)."""
    return require_env(ENV_VAR)


def database_url(dsn: str, name: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))


def _template_name() -> str:
    digest = hashlib.sha256()
    for _, name, sql in migration_files("postgres"):
        digest.update(f"{name}:{checksum(sql)}\n".encode())
    return f"a2a_template_{digest.hexdigest()[:12]}"


async def _ensure_template(admin: asyncpg.Connection, dsn: str) -> str:
    global _template
    if _template is not None:
        return _template
    name = _template_name()
    await admin.execute("SELECT pg_advisory_lock($1)", _TEMPLATE_LOCK)
    try:
        exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            # built under another name and renamed when complete, so an interrupted
            # build never leaves a half-migrated template behind
            building = f"{name}_building"
            await admin.execute(f'DROP DATABASE IF EXISTS "{building}"')
            await admin.execute(f'CREATE DATABASE "{building}"')
            await migrate_postgres(database_url(dsn, building))
            await admin.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
    finally:
        await admin.execute("SELECT pg_advisory_unlock($1)", _TEMPLATE_LOCK)
    _template = name
    return name


@asynccontextmanager
async def fresh_database(template: str | None = "migrated") -> AsyncIterator[str]:
    """The URL of a new database, dropped afterwards: a copy of the migrated template,
    or empty when ``template`` is None."""
    dsn = admin_dsn()
    admin = await asyncpg.connect(dsn)
    try:
        source = await _ensure_template(admin, dsn) if template else "template0"
        name = f"t_{uuid.uuid4().hex[:16]}"
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
        try:
            yield database_url(dsn, name)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()

