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


@pytest.fixture(params=STORE_KINDS)
async def keyed_every_store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RunningGateway]:
    """As ``every_store``, with every endpoint keyed (no anonymous callers) and keys read from
    the store at each request (no key cache), so a test sees its key changes at once."""
    async with fresh_store_url(request.param, tmp_path, monkeypatch) as url:
        async with running_gateway(
            url, allow_unauthenticated_endpoints=False, api_key_cache_seconds=0
        ) as running:
            yield running
