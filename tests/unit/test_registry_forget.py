"""``EndpointRegistry.forget``: a cached endpoint row is re-read at the next request however
young it is, the unchanged handler is kept, and a read that a change crossed is not cached
as fresh (it would otherwise hide the change for ``endpoint_cache_seconds``)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from a2a_gateway.endpoints.registry import EndpointRegistry
from a2a_gateway.errors import EndpointNotFoundError
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import Endpoint
from a2a_gateway.stores.memory import MemoryStore


class CountingStore(MemoryStore):
    """Counts endpoint reads; ``gate``, when set, holds each read until it is opened."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.gate: asyncio.Event | None = None
        self.reading = asyncio.Event()

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        self.reads += 1
        found = await super().get_endpoint(endpoint_id)  # the row as it is now
        if self.gate is not None:
            self.reading.set()
            await self.gate.wait()
        return found


@pytest.fixture
async def registry():
    store = CountingStore()
    settings = GatewaySettings(store="memory://", endpoint_cache_seconds=3600)
    async with httpx.AsyncClient() as http:
        reg = EndpointRegistry(store, settings, http)
        yield reg, store
        await reg.aclose()


async def echo_endpoint(store: CountingStore) -> Endpoint:
    row = Endpoint(id=str(uuid.uuid4()), name="t", metadata={"module_name": "handlers.echo",
                                                             "class_name": "EchoHandler"})
    await store.create_endpoint(row)
    return row


async def disable(store: CountingStore, row: Endpoint) -> None:
    row.enabled, row.updated_at = False, datetime.now(UTC)
    await store.update_endpoint(row)


async def test_a_forgotten_row_is_read_again_and_an_unchanged_handler_kept(registry):
    reg, store = registry
    row = await echo_endpoint(store)
    first = await reg.get(row.id)
    assert await reg.get(row.id) is first and store.reads == 1  # cached for an hour
    reg.forget(row.id)
    assert await reg.get(row.id) is first and store.reads == 2  # re-read, same row: same handler
    await disable(store, row)
    assert (await reg.get(row.id)) is first  # not told: the cached copy still serves
    reg.forget()  # every endpoint
    with pytest.raises(EndpointNotFoundError):
        await reg.get(row.id)


async def test_a_read_crossed_by_a_change_is_used_once_not_cached(registry):
    reg, store = registry
    row = await echo_endpoint(store)
    store.gate = asyncio.Event()
    reading = asyncio.create_task(reg.get(row.id))
    await store.reading.wait()  # the row is read (enabled) ...
    await disable(store, row)
    reg.forget(row.id)  # ... and the change is announced before the read is cached
    store.gate.set()
    assert (await reading).endpoint.enabled  # the request that read it goes ahead
    store.gate = None
    with pytest.raises(EndpointNotFoundError):
        await reg.get(row.id)  # the next one reads the change
