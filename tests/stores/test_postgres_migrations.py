"""The PostgreSQL migration runner and the schema check ``serve`` relies on."""

from __future__ import annotations

import asyncio
import hashlib
import re
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

import asyncpg
import pytest

from a2a_gateway.stores.base import ApiKey, Endpoint, StoreUnavailableError
from a2a_gateway.stores.migrations import migration_files
from a2a_gateway.stores.postgres import (
    MigrationError,
    PostgresStore,
    SchemaMismatchError,
    check_schema,
    migrate_postgres,
)
from a2a_gateway.stores.postgres_connection import redacted, split_url
from tests.stores.pg_support import admin_dsn, fresh_database

pytestmark = pytest.mark.postgres

CREATE_A = (1, "0001_a.sql", "CREATE TABLE a (id int PRIMARY KEY);")
ALTER_A = (
    2,
    "0002_a_name.sql",
    "ALTER TABLE a ADD COLUMN name text;\nINSERT INTO a VALUES (1, 'x');",
)


@pytest.fixture
async def empty_db():
    admin_dsn()
    async with fresh_database(template=None) as url:
        yield url


async def fetch(url: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetch(sql)
    finally:
        await conn.close()


async def test_migrate_applies_every_file_in_order_once(empty_db):
    files = migration_files("postgres")
    assert await migrate_postgres(empty_db) == [name for _, name, _ in files]
    rows = await fetch(
        empty_db, "SELECT version, name, checksum FROM schema_migrations ORDER BY version"
    )
    assert [(r["version"], r["name"]) for r in rows] == [(n, name) for n, name, _ in files]
    sha256 = [hashlib.sha256(sql.encode()).hexdigest() for _, _, sql in files]
    assert [r["checksum"] for r in rows] == sha256
    assert await migrate_postgres(empty_db) == []
    await check_schema(empty_db)


async def test_migrate_sorts_by_number_whatever_the_given_order(empty_db):
    applied = await migrate_postgres(empty_db, files=[ALTER_A, CREATE_A])
    assert applied == ["0001_a.sql", "0002_a_name.sql"]
    assert [tuple(r) for r in await fetch(empty_db, "SELECT id, name FROM a")] == [(1, "x")]


async def test_duplicate_migration_numbers_are_refused(empty_db):
    with pytest.raises(MigrationError, match="share a number"):
        await migrate_postgres(empty_db, files=[CREATE_A, (1, "0001_b.sql", "SELECT 1;")])


async def test_concurrent_runners_one_applies_the_other_waits_and_applies_nothing(empty_db):
    slow = (1, "0001_slow.sql", "SELECT pg_sleep(0.3);\nCREATE TABLE a (id int PRIMARY KEY);")
    files = [slow, ALTER_A]
    started = time.monotonic()
    results = await asyncio.gather(
        migrate_postgres(empty_db, files=files), migrate_postgres(empty_db, files=files)
    )
    assert sorted(results, key=len) == [[], ["0001_slow.sql", "0002_a_name.sql"]]
    assert time.monotonic() - started >= 0.3
    assert len(await fetch(empty_db, "SELECT * FROM schema_migrations")) == 2


async def test_an_edited_applied_file_is_refused_and_nothing_else_runs(empty_db):
    await migrate_postgres(empty_db, files=[CREATE_A])
    edited = (1, "0001_a.sql", CREATE_A[2] + "\n-- a harmless-looking edit\n")
    with pytest.raises(MigrationError, match="0001_a.sql was changed after it was applied"):
        await migrate_postgres(empty_db, files=[edited, ALTER_A])
    assert len(await fetch(empty_db, "SELECT * FROM schema_migrations")) == 1
    assert await fetch(empty_db, "SELECT * FROM a") == []


async def test_a_failing_file_rolls_back_entirely(empty_db):
    broken = (2, "0002_broken.sql", "CREATE TABLE b (id int);\nSELECT no_such_column FROM a;")
    with pytest.raises(MigrationError, match="0002_broken.sql failed"):
        await migrate_postgres(empty_db, files=[CREATE_A, broken])
    rows = await fetch(empty_db, "SELECT name FROM schema_migrations")
    assert [r["name"] for r in rows] == ["0001_a.sql"]
    assert (await fetch(empty_db, "SELECT to_regclass('b') AS b"))[0]["b"] is None


async def test_no_transaction_header_allows_create_index_concurrently(empty_db):
    concurrently = (
        2,
        "0002_a_index.sql",
        "-- Index built without blocking writes.\n-- no-transaction\n"
        "CREATE INDEX CONCURRENTLY a_by_id ON a (id);",
    )
    assert await migrate_postgres(empty_db, files=[CREATE_A, concurrently]) == [
        "0001_a.sql",
        "0002_a_index.sql",
    ]
    assert (await fetch(empty_db, "SELECT to_regclass('a_by_id') IS NOT NULL AS ok"))[0]["ok"]


async def test_check_schema_refuses_an_unmigrated_database(empty_db):
    with pytest.raises(SchemaMismatchError, match="not migrated: run `a2a-gateway migrate`"):
        await check_schema(empty_db)


async def test_check_schema_refuses_a_schema_behind_the_code(empty_db):
    await migrate_postgres(empty_db, files=[CREATE_A])
    behind = r"behind this gateway \(not applied: 0002_a_name.sql\)"
    with pytest.raises(SchemaMismatchError, match=behind):
        await check_schema(empty_db, files=[CREATE_A, ALTER_A])


async def test_check_schema_and_migrate_refuse_a_schema_newer_than_the_code(empty_db):
    await migrate_postgres(empty_db, files=[CREATE_A, ALTER_A])
    with pytest.raises(SchemaMismatchError, match=r"newer than this gateway.*0002_a_name.sql"):
        await check_schema(empty_db, files=[CREATE_A])
    with pytest.raises(MigrationError, match="newer than this gateway"):
        await migrate_postgres(empty_db, files=[CREATE_A])


def _before_api_keys() -> tuple[list, list[str]]:
    """The migrations of the release before API keys, and the names of the ones after."""
    files = migration_files("postgres")
    first_new = next(i for i, f in enumerate(files) if f[1] == "0005_api_keys.sql")
    return files[:first_new], [name for _, name, _ in files[first_new:]]


async def test_a_database_from_before_api_keys_is_refused_then_upgraded_keeping_its_rows(empty_db):
    previous, added = _before_api_keys()
    await migrate_postgres(empty_db, files=previous)
    store = await PostgresStore.open(empty_db)
    try:
        await store.create_endpoint(Endpoint(id="ep-old", name="written before the upgrade"))
        assert added[:6] == [
            "0005_api_keys.sql", "0006_push_deliveries.sql", "0007_tasks_active_by_endpoint.sql",
            "0008_tasks_by_endpoint.sql", "0009_endpoint_changed_notify.sql",
            "0010_backend_health.sql",
        ]
        behind = (
            rf"behind this gateway \(not applied: {re.escape(', '.join(added))}\)"
            r".*a2a-gateway migrate"
        )
        with pytest.raises(SchemaMismatchError, match=behind):
            await store.check_schema()
        with pytest.raises(SchemaMismatchError, match="api_keys.*run `a2a-gateway migrate`"):
            await store.get_api_key("0123456789abcdef")

        assert await migrate_postgres(empty_db) == added
        await store.check_schema()
        assert (await store.get_endpoint("ep-old")).name == "written before the upgrade"
        key = ApiKey(
            id="0123456789abcdef", endpoint_id="ep-old", tenant="default", principal="ci",
            name="", key_hash="ab" * 32, created_at=datetime(2026, 3, 1, 0, 0, 0, 7, tzinfo=UTC),
        )
        await store.create_api_key(key)
        assert await store.list_api_keys("ep-old") == [key]
    finally:
        await store.aclose()


async def test_serve_on_a_database_from_before_api_keys_asks_for_migrate(empty_db):
    previous, _ = _before_api_keys()
    await migrate_postgres(empty_db, files=previous)
    refused = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "a2a_gateway", "serve", "--store", empty_db, "--port", "0"],
        capture_output=True, text=True, timeout=60,
    )
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert "0005_api_keys.sql" in output and "a2a-gateway migrate" in output
    assert "Traceback" not in output


async def test_store_check_schema_passes_on_the_migrated_template():
    admin_dsn()
    async with fresh_database() as url:
        store = await PostgresStore.open(url)
        try:
            await store.check_schema()
            await store.ping()
        finally:
            await store.aclose()


async def test_store_on_an_unmigrated_database_says_to_migrate(empty_db):
    store = await PostgresStore.open(empty_db)
    try:
        with pytest.raises(SchemaMismatchError, match="not migrated"):
            await store.get_endpoint("x")
    finally:
        await store.aclose()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_unreachable_server_is_a_retriable_error_without_the_password():
    url = f"postgresql://gw:s3cret@127.0.0.1:{_closed_port()}/a2a?pool_size=3&connect_timeout=2"
    for attempt in (PostgresStore.open(url), migrate_postgres(url), check_schema(url)):
        with pytest.raises(StoreUnavailableError) as info:
            await attempt
        assert "s3cret" not in str(info.value) and "127.0.0.1" in str(info.value)


def test_gateway_options_are_taken_out_of_the_url_and_passwords_out_of_messages():
    url = "postgres://u:pw@db:5433/a2a?pool_size=20&sslmode=require"
    dsn, opts = split_url(url, {"command_timeout": 5})
    assert dsn == "postgresql://u:pw@db:5433/a2a?sslmode=require"
    assert opts["pool_size"] == 20 and opts["command_timeout"] == 5.0
    assert redacted(dsn) == "postgresql://u@db:5433/a2a"
    with pytest.raises(TypeError, match="pool_sise"):
        split_url("postgresql://db/a2a", {"pool_sise": 3})


async def test_lost_connections_are_retriable_and_the_pool_recovers():
    admin_dsn()
    async with fresh_database() as url:
        store = await PostgresStore.open(url, pool_size=2, pool_min_size=2)
        try:
            await store.ping()
            dbname = url.rsplit("/", 1)[1]
            await fetch(
                admin_dsn(),
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                f" WHERE datname = '{dbname}' AND pid <> pg_backend_pid()",
            )
            outcomes = []
            for _ in range(3):
                try:
                    await store.get_endpoint("x")
                    outcomes.append("ok")
                except StoreUnavailableError:
                    outcomes.append("unavailable")
            assert outcomes[-1] == "ok", outcomes
        finally:
            await store.aclose()
