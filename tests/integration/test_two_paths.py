"""The two output paths: live deltas never reach the store; the final result is written once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import ClassVar

import pytest
from a2a.types import TaskState

from a2a_gateway.stores.memory import MemoryStore
from handlers.base import (
    Completed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    TextDelta,
)
from tests.support.harness import running_gateway
from tests.support.messages import send_request


class CountingStore(MemoryStore):
    """Counts task writes (creates and updates)."""

    def __init__(self) -> None:
        super().__init__()
        self.task_writes = 0

    async def create_task(self, *args, **kwargs):
        self.task_writes += 1
        return await super().create_task(*args, **kwargs)

    async def update_task(self, *args, **kwargs):
        self.task_writes += 1
        return await super().update_task(*args, **kwargs)


class ThousandDeltas(Handler):
    """Streams 1,000 numbered tokens, yielding to the loop now and then."""

    Settings = HandlerSettings
    uses_context: ClassVar[bool] = False

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        for i in range(1000):
            yield TextDelta(f"t{i} ")
            if i % 50 == 0:
                await asyncio.sleep(0)
        yield Completed(text="".join(f"t{i} " for i in range(1000)))


@pytest.fixture(autouse=True)
def _register_handler(monkeypatch):
    import handlers.echo

    monkeypatch.setattr(handlers.echo, "ThousandDeltas", ThousandDeltas, raising=False)


async def test_thousand_delta_reply_costs_at_most_five_task_writes_and_reconstructs_exactly():
    store = CountingStore()
    async with running_gateway(store=store) as gw:
        ep = await gw.add_endpoint("handlers.echo:ThousandDeltas")
        request = send_request("go")
        async with gw.client(ep) as client:
            events = [e async for e in client.send_message(request)]
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    # every token reached the streaming client, one part each (tokens the client had not
    # read yet wait, and come, as one chunk of their parts), then the empty last chunk
    assert [p.text for c in chunks for p in c.artifact.parts].count("") == 1
    assert sum(len(c.artifact.parts) for c in chunks) == 1001 and chunks[-1].last_chunk
    text = ""
    for e in events:
        if e.HasField("artifact_update"):
            chunk = "".join(p.text for p in e.artifact_update.artifact.parts)
            text = text + chunk if e.artifact_update.append else chunk
    expected = "".join(f"t{i} " for i in range(1000))
    assert text == expected
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    stored = await store.get_task(next(iter(store._tasks))[0], events[0].task.id)
    assert stored.task.artifacts[0].parts[0].text == expected
    assert store.task_writes <= 5, store.task_writes
