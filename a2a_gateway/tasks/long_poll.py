"""A long-poll GetTask (A2A 1.1 draft, ``currentGeneration``): the task once its generation
is above the client's, or as it stands when the bound passes.

A waiting call is a subscription on the live hub, as a SubscribeToTask is: woken by the
task's next event on this replica, or relayed from the replica that runs it (PostgreSQL,
Redis), never by reading the store in a loop. It holds no task copy while it waits. Across
replicas with no hub between them (DynamoDB or SQLite without Redis) nothing wakes it, so it
answers at the bound.

What it answers: while the run is on this replica, the run's task with the text streamed so
far (``TaskRun.live_task``), at the run's generation; else the stored task, or — when it was
woken by the chunks of a run elsewhere, which the store does not hold — the stored task with
those chunks applied, at their generation. A client that long-polls again with the generation
it got is never answered the same task twice in a row.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from a2a.types import Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

from a2a_gateway.events import copy_task
from a2a_gateway.generation import generation_of, set_generation
from a2a_gateway.live.hub import LiveEvent, SubscriberBehind
from a2a_gateway.stores.base import TERMINAL_STATES, Scope

if TYPE_CHECKING:
    from a2a_gateway.tasks.engine import TaskEngine


async def task_beyond(
    engine: TaskEngine, scope: Scope, task: Task, beyond: int, seconds: float
) -> Task:
    """``task`` (just read from the store) once its generation is above ``beyond``, waiting
    at most ``seconds``; at once when it is above already, or ended."""
    answer = _answer_now(engine, task, beyond)
    if answer is not None or seconds <= 0:
        return answer or task
    run = engine.runs.get(task.id)
    sub = engine.hub.subscribe(task.id) if run is not None else engine.hub.follow(task.id)
    try:
        if run is None:  # it may have changed between the caller's read and the subscription
            stored = await engine.store.get_task(scope, task.id)
            task = stored.task if stored is not None else task
            answer = _answer_now(engine, task, beyond)
            if answer is not None:
                return answer
        woken = await _next_beyond(sub, beyond, seconds)
    finally:
        sub.close()
    return await _answer(engine, scope, task, woken)


def _answer_now(engine: TaskEngine, task: Task, beyond: int) -> Task | None:
    run = engine.runs.get(task.id)
    if run is not None and not run.finished:
        return run.live_task() if run.generation > beyond else None
    if generation_of(task) > beyond or task.status.state in TERMINAL_STATES:
        return task
    return None


async def _next_beyond(sub: object, beyond: int, seconds: float) -> list[LiveEvent]:
    """The events taken until one is above ``beyond`` (empty: none came in ``seconds``, or
    the stream ended or fell behind; the store then says how the task stands)."""
    taken: list[LiveEvent] = []
    try:
        async with asyncio.timeout(seconds):
            async for _event_id, event in sub:  # type: ignore[attr-defined]
                taken.append(event)
                if generation_of(event) > beyond:
                    return taken
    except (TimeoutError, SubscriberBehind):
        pass
    return []


async def _answer(engine: TaskEngine, scope: Scope, task: Task, woken: list[LiveEvent]) -> Task:
    run = engine.runs.get(task.id)
    if run is not None and not run.finished:
        return run.live_task()
    stored = await engine.store.get_task(scope, task.id)
    task = stored.task if stored is not None else task
    if not woken or generation_of(task) >= generation_of(woken[-1]):
        return task
    return _applied(task, woken)


def _applied(task: Task, events: list[LiveEvent]) -> Task:
    """``task`` with the live ``events`` of a run elsewhere applied, at the last one's
    generation."""
    out = copy_task(task)
    for event in events:
        if isinstance(event, TaskStatusUpdateEvent):
            out.status.CopyFrom(event.status)
        elif isinstance(event, TaskArtifactUpdateEvent):
            _apply_chunk(out, event)
    set_generation(out, generation_of(events[-1]))
    return out


def _apply_chunk(task: Task, event: TaskArtifactUpdateEvent) -> None:
    chunk = event.artifact
    artifact = next((a for a in task.artifacts if a.artifact_id == chunk.artifact_id), None)
    if artifact is None:
        artifact = task.artifacts.add()
        artifact.CopyFrom(chunk)
    elif event.append:
        artifact.parts.extend(chunk.parts)
    else:
        artifact.CopyFrom(chunk)
