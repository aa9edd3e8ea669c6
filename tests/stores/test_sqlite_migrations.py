"""SQLite upgrades itself on open: a file from an older release gets the missing migrations."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

from a2a_gateway.stores.base import ApiKey
from a2a_gateway.stores.migrations import migration_files
from a2a_gateway.stores.sqlite import SQLiteStore


def _write_file_from_before_api_keys(path: str) -> None:
    number, _, sql = migration_files("sqlite")[0]
    conn = sqlite3.connect(path)
    try:
        conn.executescript(f"{sql}\nPRAGMA user_version = {number};")
        conn.execute(
            "INSERT INTO endpoints (id, tenant, name, created_at, updated_at)"
            " VALUES ('ep-old', 'default', 'written before the upgrade', ?, ?)",
            ("2025-01-01T00:00:00+00:00", "2025-01-01T00:00:00+00:00"),
        )
        conn.commit()
    finally:
        conn.close()


async def test_a_file_from_before_api_keys_is_upgraded_on_open_keeping_its_rows(tmp_path):
    path = str(tmp_path / "old.db")
    _write_file_from_before_api_keys(path)
    store = await SQLiteStore.open(path)
    try:
        # every migration after the first, whichever later ones this code has
        assert store.applied_migrations == [name for _, name, _ in migration_files("sqlite")[1:]]
        assert store.applied_migrations[:5] == [
            "0002_api_keys.sql",
            "0003_push_deliveries.sql",
            "0004_tasks_active_by_endpoint.sql",
            "0005_tasks_by_endpoint.sql",
            "0006_backend_health.sql",
        ]
        assert (await store.get_endpoint("ep-old")).name == "written before the upgrade"
        key = ApiKey(
            id="0123456789abcdef", endpoint_id="ep-old", tenant="default", principal="ci",
            name="", key_hash="ab" * 32, created_at=datetime(2026, 3, 1, 0, 0, 0, 7, tzinfo=UTC),
        )
        await store.create_api_key(key)
    finally:
        await store.aclose()
    reopened = await SQLiteStore.open(path)
    try:
        assert reopened.applied_migrations == []
        assert await reopened.get_api_key(key.id) == key
    finally:
        await reopened.aclose()
