"""A fresh, empty store URL of each kind the gateway supports, for one test.

``memory`` and ``sqlite`` need no service; ``postgres`` comes from ``pg_support`` and skips when
its server is not configured (a failure in CI); ``dynamodb`` comes from ``dynamo_support``, on a
moto server the run starts itself when none is given. Anything in the test may open the URL:
the gateway with ``running_gateway(url)``, a store with ``open_store(url)``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.stores import dynamo_support, pg_support

STORE_KINDS = ["memory", "sqlite", "postgres", "dynamodb"]


@asynccontextmanager
async def fresh_store_url(
    kind: str, directory: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    """The URL of a new store of ``kind`` (files in ``directory``), removed afterwards. For
    ``dynamodb`` the environment gets moto's dummy credentials, since the URL carries none."""
    if kind == "memory":
        yield "memory://"
    elif kind == "sqlite":
        yield f"sqlite:///{directory / 'store.db'}"
    elif kind == "postgres":
        async with pg_support.fresh_database() as url:
            yield url
    elif kind == "dynamodb":
        dynamo_support.use_moto_credentials(monkeypatch)
        async with dynamo_support.fresh_tables() as url:
            yield url
    else:
        raise ValueError(f"unknown store kind {kind!r}")
