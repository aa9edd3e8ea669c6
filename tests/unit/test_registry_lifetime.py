"""A handler's lifetime in the registry: opened once before its first request, a failed
open is the endpoint's problem (without the exception's text), and a replaced handler is
closed only once its last run has ended."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import httpx
import pytest

from a2a_gateway.endpoints.registry import EndpointRegistry
from a2a_gateway.errors import EndpointMisconfiguredError
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import Endpoint
from a2a_gateway.stores.memory import MemoryStore
from handlers.base import Completed, Handler, HandlerRequest

OPENED: list[int] = []
CLOSED: list[int] = []


class Counted(Handler):
    uses_context: ClassVar[bool] = False

    async def open(self) -> None:
        OPENED.append(id(self))

    async def run(self, request: HandlerRequest) -> AsyncIterator[Any]:
        yield Completed(text="ok")

    async def aclose(self) -> None:
        CLOSED.append(id(self))


class BrokenOpen(Counted):
    async def open(self) -> None:
        raise RuntimeError("cannot reach backend with password hunter2")


def endpoint(class_name: str, **metadata: Any) -> Endpoint:
    return Endpoint(id=str(uuid.uuid4()), name="t", metadata={
        "module_name": __name__, "class_name": class_name, **metadata})


@pytest.fixture
async def registry() -> AsyncIterator[tuple[EndpointRegistry, MemoryStore]]:
    OPENED.clear()
    CLOSED.clear()
    store = MemoryStore()
    settings = GatewaySettings(
        store="memory://", handler_allowlist=["tests."], endpoint_cache_seconds=0
    )
    async with httpx.AsyncClient() as http:
        reg = EndpointRegistry(store, settings, http)
        yield reg, store
        await reg.aclose()


async def test_a_handler_is_opened_once_before_its_first_request(registry):
    reg, store = registry
    row = endpoint("Counted")
    await store.create_endpoint(row)
    first = await reg.get(row.id)
    again = await reg.get(row.id)
    assert first is again
    assert OPENED == [id(first.handler)]


async def test_a_failed_open_is_the_endpoints_problem_without_the_exception_text(registry):
    reg, store = registry
    row = endpoint("BrokenOpen")
    await store.create_endpoint(row)
    with pytest.raises(EndpointMisconfiguredError) as raised:
        await reg.get(row.id)
    assert "handler failed to open (RuntimeError)" in raised.value.message
    assert "hunter2" not in raised.value.message


async def test_a_replaced_handler_closes_only_after_its_last_run(registry):
    reg, store = registry
    row = endpoint("Counted")
    await store.create_endpoint(row)
    old = await reg.get(row.id)
    old.run_started()  # a run of the old handler is going on
    row.metadata["note"] = "changed"
    row.updated_at = datetime.now(UTC) + timedelta(seconds=1)
    await store.update_endpoint(row)
    new = await reg.get(row.id)
    assert new is not old and new.handler is not old.handler
    await asyncio.sleep(0.05)  # a close would have happened by now
    assert CLOSED == []
    old.run_ended()
    for _ in range(100):
        if CLOSED:
            break
        await asyncio.sleep(0.01)
    assert CLOSED == [id(old.handler)]
