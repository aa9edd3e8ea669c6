"""Ownership leases: when the replica running a task dies, another one takes it over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import ClassVar

import pytest
from a2a.types import TaskState

from a2a_gateway.stores.base import Scope
from a2a_gateway.stores.memory import MemoryStore
from handlers.base import (
    Completed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    RunStarted,
    TextDelta,
)
from tests.support.harness import running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually


class SlowBackend(Handler):
    """A backend run that outlives the gateway; ``reattach`` finds its result."""

    Settings = HandlerSettings
    uses_context: ClassVar[bool] = False
    supports_reattach: ClassVar[bool] = True

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield RunStarted(f"run-{request.task_id}")
        yield TextDelta("partial")
        await asyncio.sleep(60)
        yield Completed(text="never reached")

    async def reattach(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Completed(text=f"finished by the backend for {request.run_ref}")


class SlowUnattachable(SlowBackend):
    supports_reattach: ClassVar[bool] = False


@pytest.fixture(autouse=True)
def _register(monkeypatch):
    import handlers.echo

    monkeypatch.setattr(handlers.echo, "SlowBackend", SlowBackend, raising=False)
    monkeypatch.setattr(handlers.echo, "SlowUnattachable", SlowUnattachable, raising=False)


async def _start_and_lose(store: MemoryStore, handler: str) -> tuple[str, str]:
    """Start a task on replica A, then let A die without finishing it."""
    async with running_gateway(store=store, lease_seconds=0.6, replica_id="replica-a") as a:
        ep = await a.add_endpoint(handler)
        request = send_request("go", immediately=True)
        async with a.client(ep, streaming=False) as client:
            (event,) = [e async for e in client.send_message(request)]
        stored = await store.get_task(Scope("default", ep, "anonymous"), event.task.id)
        assert stored.owner == "replica-a" and stored.run_ref == f"run-{event.task.id}"
    return ep, event.task.id


async def _wait_terminal(store: MemoryStore, ep: str, task_id: str):
    terminal = (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED)
    return await eventually(lambda: store.get_task(Scope("default", ep, "anonymous"), task_id),
                            until=lambda stored: stored.task.status.state in terminal,
                            timeout=10, what="the task ends on the other replica")


async def test_expired_lease_is_reattached_by_another_replica():
    store = MemoryStore()
    ep, task_id = await _start_and_lose(store, "handlers.echo:SlowBackend")
    async with running_gateway(store=store, lease_seconds=0.6, replica_id="replica-b"):
        stored = await _wait_terminal(store, ep, task_id)
    assert stored.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert stored.task.artifacts[0].parts[0].text == f"finished by the backend for run-{task_id}"
    assert stored.owner is None


async def test_expired_lease_without_reattach_fails_with_gateway_lost():
    store = MemoryStore()
    ep, task_id = await _start_and_lose(store, "handlers.echo:SlowUnattachable")
    async with running_gateway(store=store, lease_seconds=0.6, replica_id="replica-b"):
        stored = await _wait_terminal(store, ep, task_id)
    assert stored.task.status.state == TaskState.TASK_STATE_FAILED
    assert stored.task.status.message.parts[0].text == "gateway instance lost"


async def test_live_replica_keeps_renewing_its_lease():
    store = MemoryStore()
    async with running_gateway(store=store, lease_seconds=0.6, replica_id="replica-a") as a:
        ep = await a.add_endpoint("handlers.echo:SlowBackend")
        async with running_gateway(store=store, lease_seconds=0.6, replica_id="replica-b"):
            request = send_request("go", immediately=True)
            async with a.client(ep, streaming=False) as client:
                (event,) = [e async for e in client.send_message(request)]
            await asyncio.sleep(
                1.5
            )  # several lease periods, in which no one may take the task over
            stored = await store.get_task(Scope("default", ep, "anonymous"), event.task.id)
            assert stored.owner == "replica-a"
            assert stored.task.status.state == TaskState.TASK_STATE_WORKING


async def test_a_replica_that_shuts_down_hands_its_runs_over_at_once():
    store = MemoryStore()
    async with running_gateway(store=store, lease_seconds=120, replica_id="replica-a") as a:
        ep = await a.add_endpoint("handlers.echo:SlowBackend")
        request = send_request("go", immediately=True)
        async with a.client(ep, streaming=False) as client:
            (event,) = [e async for e in client.send_message(request)]
    # the lease was 120 s: only the release at shutdown lets B take over right away
    async with running_gateway(store=store, lease_seconds=120, replica_id="replica-b"):
        stored = await _wait_terminal(store, ep, event.task.id)
    assert stored.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert (
        stored.task.artifacts[0].parts[0].text == f"finished by the backend for run-{event.task.id}"
    )
