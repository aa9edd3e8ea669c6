"""Shared fixtures: a running gateway on the memory store with an echo endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.harness import RunningGateway, running_gateway


@pytest.fixture
async def gw() -> AsyncIterator[RunningGateway]:
    async with running_gateway() as running:
        yield running


@pytest.fixture
async def echo_id(gw: RunningGateway) -> str:
    return await gw.add_endpoint("handlers.echo:EchoHandler", settings={"delay": 0.0}, name="echo")
