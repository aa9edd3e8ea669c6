"""Store calls per request, through a running gateway on every store: a blocking
SendMessage costs at most two, a streamed reply of 1,000 deltas at most two task writes."""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import ClassVar

import pytest
from a2a.types import ListTasksRequest, TaskState

from a2a_gateway.stores.base import Scope, Store
from handlers.base import (
    Completed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    SessionUpdate,
    TextDelta,
)
from tests.support.harness import RunningGateway
from tests.support.held import add_held_echo
from tests.support.messages import send_request
from tests.support.waiting import eventually

TASK_WRITES = ("create_task", "update_task")
LIVE_RELAY = ("notify",)
"""PostgreSQL's NOTIFY of live events to other replicas: the live path, not the task store."""
PUSH_POLL = ("claim_push_deliveries",)
"""The push outbox's poll for due deliveries, once a second whatever the requests do: counted,
it failed a test whenever a request took long enough to overlap it (a loaded machine)."""


@contextmanager
def counting(store: Store) -> Iterator[Counter[str]]:
    """Counts the store's public coroutine calls by name while the block runs."""
    calls: Counter[str] = Counter()
    names = [n for n, m in inspect.getmembers(type(store))
             if not n.startswith("_") and inspect.iscoroutinefunction(m)]

    def wrap(name: str):
        method = getattr(store, name)

        async def counted(*args, **kwargs):
            calls[name] += 1
            return await method(*args, **kwargs)

        return counted

    for name in names:
        if name not in LIVE_RELAY + PUSH_POLL:
            setattr(store, name, wrap(name))
    try:
        yield calls
    finally:
        for name in names:
            if name not in LIVE_RELAY + PUSH_POLL:
                delattr(store, name)


class Remembering(Handler):
    """Answers with the number of turns it was given and keeps a session counter."""

    Settings = HandlerSettings
    uses_context: ClassVar[bool] = True

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        seen = int(request.session.get("seen", 0))
        yield SessionUpdate({"seen": seen + 1})
        yield Completed(text=f"turns {len(request.history)} seen {seen}")


class ThousandDeltas(Handler):
    Settings = HandlerSettings
    uses_context: ClassVar[bool] = True

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        for i in range(1000):
            yield TextDelta(f"t{i} ")
            if i % 50 == 0:
                await asyncio.sleep(0)
        yield Completed(text="".join(f"t{i} " for i in range(1000)))


@pytest.fixture(autouse=True)
def _register_handlers(monkeypatch):
    import handlers.echo

    monkeypatch.setattr(handlers.echo, "Remembering", Remembering, raising=False)
    monkeypatch.setattr(handlers.echo, "StoreCallsThousand", ThousandDeltas, raising=False)


@pytest.fixture
def gw(every_store: RunningGateway) -> RunningGateway:
    return every_store


def final_text(task) -> str:
    return "".join(p.text for p in task.artifacts[0].parts)


async def blocking_send(gw: RunningGateway, ep: str, **fields):
    async with gw.client(ep, streaming=False) as client:
        events = [e async for e in client.send_message(send_request("hi", **fields))]
    assert len(events) == 1 and events[0].HasField("task"), events
    return events[0].task


async def test_blocking_send_without_context_is_one_store_call(gw: RunningGateway):
    ep = await gw.add_endpoint("handlers.echo:EchoHandler", settings={"delay": 0})
    await blocking_send(gw, ep)  # warm: endpoint loaded, handler built
    with counting(gw.store) as calls:
        task = await blocking_send(gw, ep)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    # created in its final state: no WORKING write, no push configs to read
    assert calls == {"create_task": 1}, calls
    stored = await gw.store.get_task(Scope("default", ep), task.id)
    assert stored.task.status.state == TaskState.TASK_STATE_COMPLETED and stored.owner is None
    assert final_text(stored.task) == "echo: hi"


async def test_blocking_send_in_a_new_context_costs_two_store_calls_and_remembers(
    gw: RunningGateway,
):
    ep = await gw.add_endpoint("handlers.echo:Remembering")
    await blocking_send(gw, ep)  # warm
    with counting(gw.store) as calls:
        first = await blocking_send(gw, ep)  # new context: nothing to read
    assert final_text(first) == "turns 0 seen 0"
    assert calls == {"put_context": 1, "create_task": 1}, calls
    with counting(gw.store) as calls:
        second = await blocking_send(gw, ep, context_id=first.context_id)
    # a context the client named is read at the request and again before its turn is
    # written (a turn another task recorded meanwhile is kept)
    assert final_text(second) == "turns 2 seen 1"
    assert calls == {"get_context": 2, "put_context": 1, "create_task": 1}, calls
    context = await gw.store.get_context(Scope("default", ep), first.context_id)
    assert [t["text"] for t in context.turns] == ["hi", "turns 0 seen 0", "hi", "turns 2 seen 1"]
    assert context.session == {"seen": 2}


async def test_a_task_that_asks_a_question_is_written_before_its_caller_is_answered(
    gw: RunningGateway,
):
    ep = await gw.add_endpoint("handlers.echo:EchoHandler", settings={"delay": 0})
    with counting(gw.store) as calls:
        async with gw.client(ep, streaming=False) as client:
            asked = [e async for e in client.send_message(send_request("please ?input"))][-1].task
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    stored = await gw.store.get_task(Scope("default", ep), asked.id)
    assert stored.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert calls["create_task"] == 1, calls  # created WORKING, then written as it asks


async def test_streamed_reply_of_1000_deltas_costs_at_most_two_task_writes(gw: RunningGateway):
    ep = await gw.add_endpoint("handlers.echo:StoreCallsThousand")
    with counting(gw.store) as calls:
        async with gw.client(ep) as client:
            events = [e async for e in client.send_message(send_request("go"))]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert sum(calls[n] for n in TASK_WRITES) <= 2, calls


async def test_a_long_blocking_run_is_written_while_it_runs_so_list_tasks_sees_it(
    gw: RunningGateway, monkeypatch: pytest.MonkeyPatch,
):
    # about 3 s of words, past unseen_task_seconds (1 s); then the run waits before it
    # completes until it is listed (a 3 s run could end before the listing under load)
    words = " ".join(f"w{i}" for i in range(30))
    ep, release = await add_held_echo(gw, monkeypatch, words=len(f"echo: {words}".split()),
                                      settings={"delay": 0.1})
    async with gw.client(ep, streaming=False) as blocked, gw.client(ep, streaming=False) as lister:
        reply = asyncio.create_task(anext(blocked.send_message(send_request(words))))

        async def working() -> list:
            page = await lister.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))
            return list(page.tasks)

        try:
            seen = await eventually(working, timeout=20, what="the running task listed")
        finally:
            release.set()
        done = (await reply).task
    assert [t.id for t in seen] == [done.id] and not reply.cancelled()
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    stored = await gw.store.get_task(Scope("default", ep), done.id)
    assert stored.task.status.state == TaskState.TASK_STATE_COMPLETED and stored.owner is None
