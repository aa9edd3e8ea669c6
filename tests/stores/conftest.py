"""The store contract suite runs against every store: one fixture, one factory each.

PostgreSQL and DynamoDB factories live beside this file (``pg_support.py``,
``dynamo_support.py``); they skip when their service is not configured (a failure in CI).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator

import pytest

from a2a_gateway.stores.base import Store

_SUPPORT = {"postgres": "tests.stores.pg_support", "dynamodb": "tests.stores.dynamo_support"}
STORE_KINDS = ["memory", "sqlite", *_SUPPORT]




@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[Store]:
    kind = request.param
    if kind == "memory":
        from a2a_gateway.stores.memory import MemoryStore

        opened: Store = MemoryStore()
        yield opened
        await opened.aclose()
        return
    if kind == "sqlite":
        from a2a_gateway.stores.sqlite import SQLiteStore

        opened = await SQLiteStore.open(str(tmp_path / "contract.db"))
        yield opened
        await opened.aclose()
        return
    support = importlib.import_module(_SUPPORT[kind])
    async with support.open_test_store(request) as opened:
        yield opened
