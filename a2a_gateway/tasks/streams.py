"""What a task stream yields, as ``(event_id, event)`` pairs: the stream of a
SendStreamingMessage, the stream of a SubscribeToTask, and the wait of a blocking send
whose task runs on another replica.

A stream starts from a point that stands for everything before it (the Task, with the
text streamed so far, taken together with the subscription; or, for a reconnecting
client, its last event id) and then follows the hub — or, for a task run elsewhere,
the follower — until the task settles. Nothing is missed or seen twice. A client so
slow that its subscription drops what it had pending (``SubscriberBehind``) starts over
from a fresh starting point, taken the same way; its stream goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

from a2a.server.context import ServerCallContext
from a2a.types import Message, Task, TaskStatusUpdateEvent
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError

from a2a_gateway.events import (
    GATEWAY_STOPPING,
    INTERRUPTED_STATES,
    artifact_event,
    copy_task,
    status_event,
)
from a2a_gateway.live.hub import LiveEvent, SubscriberBehind, Subscription
from a2a_gateway.stores.base import TERMINAL_STATES, Scope
from a2a_gateway.tasks.engine import SendOutcome, TaskEngine
from a2a_gateway.tasks.follower import follow_task

StreamItem = tuple[str | None, LiveEvent | Message]
"""An event and its SSE id (None: the stream cannot be resumed, e.g. a message answer)."""

T = TypeVar("T")

EVENT_ID = "sse_event_id"
"""``ServerCallContext.state`` key: the id of the event a stream is about to yield (the
transport writes it as the SSE ``id:`` line)."""

LAST_EVENT_ID = "Last-Event-ID"
"""The request header of a reconnecting SSE client: the id of the last event it got."""


def tagged(context: ServerCallContext, event_id: str | None, event: T) -> T:
    """``event``, with ``event_id`` noted for the transport that frames it (None: no id)."""
    context.state[EVENT_ID] = event_id
    return event


def take_event_id(context: ServerCallContext) -> str | None:
    """The id ``tagged`` noted for the event just yielded (the transport's side)."""
    return context.state.pop(EVENT_ID, None)


async def send_stream(engine: TaskEngine, outcome: SendOutcome) -> AsyncIterator[StreamItem]:
    """The events of a SendStreamingMessage: the task, then until it settles or asks."""
    run, sub = outcome.run, outcome.subscription
    try:
        if run is None:
            yield engine.hub.unlogged_id(), outcome.task  # type: ignore[misc]
            if outcome.follow_version is not None:
                async for item in _elsewhere(engine, outcome, stop_when_interrupted=True):
                    yield item
            return
        await run.created.wait()
        if run.store_error is not None and run.version is None:
            raise run.store_error
        if run.reply is not None:
            yield None, run.reply  # no task: nothing to resume
            return
        yield sub.position, run.pop_initial_task()
        async for item in _until_settled(engine, run.scope, sub, stop_when_interrupted=True):  # type: ignore[arg-type]
            yield item
            del item  # as in _until_settled
    finally:
        if sub is not None:
            sub.close()


async def subscribe_stream(
    engine: TaskEngine, scope: Scope, task_id: str, last_event_id: str | None
) -> AsyncIterator[StreamItem]:
    """The events of a SubscribeToTask: after ``last_event_id`` when this replica still has
    them; otherwise the task (and its text so far), then what follows."""
    stored = await engine.store.get_task(scope, task_id)
    if stored is None:
        raise TaskNotFoundError(f"Task {task_id} not found")
    hub = engine.hub
    sub = await hub.reconnect(task_id, last_event_id) if last_event_id else None
    if sub is None and stored.task.status.state in TERMINAL_STATES:
        raise UnsupportedOperationError(f"Task {task_id} is in a terminal state")
    run = engine.runs.get(task_id)
    if sub is None and run is None:
        yield hub.unlogged_id(), stored.task
        followed = follow_task(
            engine.store,
            hub,
            scope,
            stored.task,
            stored.version,
            interval=engine.limits.remote_poll_seconds,
            stop_when_interrupted=False,
        )
        async for item in _until_closing(engine, scope, task_id, followed):
            yield item
        return
    del stored  # the run here has the task: an idle stream keeps no other copy of it
    start: list[StreamItem] = []
    if sub is None:
        # snapshot and subscription in one step: nothing is missed or seen twice
        snapshot = copy_task(run.task)  # type: ignore[union-attr]
        sub = hub.subscribe(task_id)
        start = _starting_point(engine, snapshot, sub.position)
        del snapshot
    try:
        while start:
            yield start.pop(0)  # nor what it already sent
        async for item in _until_settled(engine, scope, sub, stop_when_interrupted=False):
            yield item
            del item  # as in _until_settled
    finally:
        sub.close()


def _starting_point(engine: TaskEngine, snapshot: Task, position: str) -> list[StreamItem]:
    """The events that stand for a local run's stream up to ``position``: the Task, then
    the text so far as one chunk (only both together: the Task lacks the streamed text)."""
    chunk = engine.text_so_far(snapshot.id)
    if chunk is None:
        return [(position, snapshot)]
    return [(engine.hub.unlogged_id(), snapshot), (position, chunk)]


async def _start_over(engine: TaskEngine, scope: Scope, sub: Subscription) -> list[StreamItem]:
    """A fresh starting point for a subscriber that fell behind, its first item the Task:
    while the run goes on here, taken from it together with ``catch_up``; once it ended,
    the final task with its artifacts and status as events (nothing more is published)."""
    run = engine.runs.get(sub.task_id)
    if run is not None and not run.finished:
        return _starting_point(engine, copy_task(run.task), sub.catch_up())
    if run is not None:
        task = copy_task(run.task)
    else:
        stored = await engine.store.get_task(scope, sub.task_id)
        if stored is None:
            return []
        task = stored.task
    position, hub = sub.catch_up(), engine.hub
    start: list[StreamItem] = [(hub.unlogged_id(), task)]
    start += [(hub.unlogged_id(), artifact_event(task, a, last_chunk=True)) for a in task.artifacts]
    return [*start, (position, status_event(task))]


async def settled_elsewhere(engine: TaskEngine, outcome: SendOutcome) -> Task:
    """Wait for a run on another replica to reach a terminal or interrupted state."""
    async for _ in _elsewhere(engine, outcome, stop_when_interrupted=True):
        pass
    stored = await engine.store.get_task(outcome.scope, outcome.task.id)  # type: ignore[arg-type,union-attr]
    return stored.task if stored is not None else outcome.task  # type: ignore[return-value]


def _elsewhere(
    engine: TaskEngine, outcome: SendOutcome, *, stop_when_interrupted: bool
) -> AsyncIterator[StreamItem]:
    followed = follow_task(
        engine.store, engine.hub, outcome.scope, outcome.task, outcome.follow_version,  # type: ignore[arg-type]
        interval=engine.limits.remote_poll_seconds, stop_when_interrupted=stop_when_interrupted,
        after_version=outcome.follow_version,
    )
    return _until_closing(engine, outcome.scope, outcome.task.id, followed)  # type: ignore[arg-type,union-attr]


async def _until_closing(
    engine: TaskEngine, scope: Scope, task_id: str, items: AsyncIterator[StreamItem]
) -> AsyncIterator[StreamItem]:
    """The items of a task run elsewhere, until this gateway hands its work over: then a
    status event of the task as stored, saying that this replica stops."""
    closing = asyncio.ensure_future(engine.closing.wait())
    following: asyncio.Future[StreamItem] | None = None
    try:
        while True:
            following = asyncio.ensure_future(anext(items))
            await asyncio.wait({following, closing}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                break
            try:
                item = following.result()
            except StopAsyncIteration:
                return
            yield item
        stored = await engine.store.get_task(scope, task_id)
        if stored is not None:
            yield engine.hub.unlogged_id(), status_event(stored.task, GATEWAY_STOPPING)
    finally:
        closing.cancel()
        if following is not None and not following.done():
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await following
        await items.aclose()  # type: ignore[attr-defined]


async def _until_settled(
    engine: TaskEngine, scope: Scope, sub: Subscription, *, stop_when_interrupted: bool
) -> AsyncIterator[StreamItem]:
    while True:
        try:
            async for event_id, event in sub:
                settles = isinstance(event, TaskStatusUpdateEvent) and _settles(
                    event.status.state, stop_when_interrupted
                )
                yield event_id, event
                if settles:
                    return
                del event  # a quiet stream keeps no event it passed on (≈ 1.5 KB each)
            return
        except SubscriberBehind:
            start = await _start_over(engine, scope, sub)
        for item in start:
            yield item
        if start and _settles(start[0][1].status.state, stop_when_interrupted):  # type: ignore[union-attr]
            return


def _settles(state: int, stop_when_interrupted: bool) -> bool:
    return state in TERMINAL_STATES or (stop_when_interrupted and state in INTERRUPTED_STATES)
