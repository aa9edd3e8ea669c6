"""The store contract suite runs against every store kind (``store_urls.STORE_KINDS``), each
on a fresh store; PostgreSQL skips when its server is not configured (a failure in CI).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from a2a_gateway.stores import open_store
from a2a_gateway.stores.base import Store
from tests.stores.store_urls import STORE_KINDS, fresh_store_url


@pytest.fixture(params=STORE_KINDS)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Store]:
    async with fresh_store_url(request.param, tmp_path, monkeypatch) as url:
        opened = await open_store(url)
        try:
            yield opened
        finally:
            await opened.aclose()
