"""The SQLite store's URL options: ``synchronous`` and ``wal_autocheckpoint``, and their
defaults."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from a2a_gateway.stores import open_store
from a2a_gateway.stores.base import StoreError

NORMAL, FULL = 1, 2  # PRAGMA synchronous


async def pragmas(url: str) -> tuple[int, int]:
    store = await open_store(url)
    try:
        db = store._db  # type: ignore[attr-defined]
        (synchronous,) = (await db.execute_fetchall("PRAGMA synchronous"))[0]
        (pages,) = (await db.execute_fetchall("PRAGMA wal_autocheckpoint"))[0]
        return synchronous, pages
    finally:
        await store.aclose()


async def test_defaults_are_normal_sync_and_a_4000_page_wal(tmp_path: Path):
    assert await pragmas(f"sqlite:///{tmp_path / 'a.db'}") == (NORMAL, 4000)


async def test_the_url_query_sets_synchronous_and_the_checkpoint_size_of_that_file(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'a.db'}?synchronous=full&wal_autocheckpoint=1000"
    assert await pragmas(url) == (FULL, 1000)
    assert [p.name for p in tmp_path.iterdir() if "?" in p.name] == []
    with sqlite3.connect(tmp_path / "a.db") as db:
        assert db.execute("SELECT COUNT(*) FROM tasks").fetchone() == (0,)


@pytest.mark.parametrize(
    "query", ["synchronous=OFF", "wal_autocheckpoint=many", "journal_mode=DELETE"]
)
async def test_an_unknown_or_unsafe_option_is_refused_with_a_clear_error(
    tmp_path: Path, query: str
):
    with pytest.raises(StoreError, match="synchronous|SQLite store option"):
        await open_store(f"sqlite:///{tmp_path / 'a.db'}?{query}")
    assert not list(tmp_path.iterdir())  # refused before anything was created
