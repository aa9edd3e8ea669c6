"""Fixtures of the integration suites."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.harness import RunningGateway, running_gateway


@pytest.fixture(params=STORE_KINDS)
async def every_store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RunningGateway]:
    """A running gateway on each store in turn (memory, SQLite, PostgreSQL, DynamoDB), each fresh.
    Suites take it as their ``gw`` fixture."""
    async with fresh_store_url(request.param, tmp_path, monkeypatch) as url:
        async with running_gateway(url) as running:
            yield running
