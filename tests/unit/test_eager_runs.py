"""A blocking send's run starts eagerly (``TaskRun.start(eager=True)``, Python 3.12+): its
first step runs before the send returns, in the run's own task. On Python 3.11 the setting
has no effect and every run starts on the next loop turn; these tests say which applies and
check it, so they hold (and can fail) on either."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from a2a.types import TaskArtifactUpdateEvent
from a2a.types.a2a_pb2 import TASK_STATE_COMPLETED, TASK_STATE_FAILED, TASK_STATE_WORKING

from a2a_gateway.tasks.engine import EngineLimits
from a2a_gateway.tasks.run import EAGER_TASKS
from handlers.base import Completed, HandlerRequest, TextDelta
from tests.unit.test_task_engine import (
    SCOPE,
    Scripted,
    drain,
    make_engine,
    runtime_of,
    user_message,
)


def engine_with(eager: bool) -> Any:
    engine, store, _, _ = make_engine()
    engine.limits = EngineLimits(cancel_wait_seconds=1.0, eager_blocking_runs=eager)
    return engine, store


def echo() -> Scripted:
    return Scripted(lambda r: [TextDelta("echo: "), TextDelta(r.text), Completed()])


async def test_a_blocking_send_whose_handler_never_waits_is_over_when_the_send_returns():
    for eager in (True, False):
        engine, store = engine_with(eager)
        outcome = await engine.send(runtime_of(echo()), SCOPE, user_message("hi"),
                                    streaming=False, subscribe=False, blocking=True)
        run = outcome.run
        assert run.settled.is_set() is (eager and EAGER_TASKS)
        assert (engine.runs.get(run.task.id) is None) is (eager and EAGER_TASKS)
        await asyncio.wait_for(run.settled.wait(), 10)
        stored = await store.get_task(SCOPE, run.task.id)
        assert stored.task.status.state == TASK_STATE_COMPLETED
        assert stored.task.artifacts[0].parts[0].text == "echo: hi"
        assert store.writes == 1  # still written once, in its final state
        assert engine.services.starting.count == 0
        assert run.task.id not in engine.runs


class RecordsTasks(Scripted):
    """Notes ``asyncio.current_task()`` before its first event, and again after a real wait."""

    def __init__(self) -> None:
        super().__init__(None)
        self.tasks: list[asyncio.Task[Any] | None] = []

    async def run(self, request: HandlerRequest) -> AsyncIterator[Any]:
        self.tasks.append(asyncio.current_task())
        yield TextDelta("a")
        await asyncio.sleep(0.01)
        self.tasks.append(asyncio.current_task())
        async with asyncio.timeout(5):  # tied to the current task: it must be the run's
            await asyncio.sleep(0)
        yield Completed()


async def test_an_eagerly_started_handler_steps_in_the_runs_own_task_throughout():
    """What Python 3.11 cannot give a step run outside its task: libraries that tie state to
    the current task (anyio's cancel scopes in httpcore, ``asyncio.timeout``) see one task."""
    for eager in (True, False):
        engine, _ = engine_with(eager)
        handler = RecordsTasks()
        outcome = await engine.send(runtime_of(handler), SCOPE, user_message("hi"),
                                    streaming=False, subscribe=False, blocking=True)
        assert len(handler.tasks) == (1 if eager and EAGER_TASKS else 0)
        await asyncio.wait_for(outcome.run.settled.wait(), 10)
        first, later = handler.tasks
        assert first is later is not None and first is not asyncio.current_task()
        assert outcome.run.task.status.state == TASK_STATE_COMPLETED


async def test_a_run_that_waits_after_its_eager_step_is_stopped_and_handed_over_as_any():
    engine, store = engine_with(True)
    held = Scripted(lambda r: [TextDelta("partial"), "wait", Completed()])
    held.gate.clear()
    outcome = await engine.send(runtime_of(held), SCOPE, user_message("hi"),
                                streaming=False, subscribe=False, blocking=True)
    run = outcome.run
    assert not run.settled.is_set()
    assert run.text_so_far == ("partial" if EAGER_TASKS else "")
    await asyncio.sleep(0.05)
    assert not run.settled.is_set() and engine.runs[run.task.id] is run
    await asyncio.wait_for(engine.aclose(), 10)  # the hand-over stops the run through its task
    assert run.settled.is_set()  # the blocking caller is answered with the task as it stands
    stored = await store.get_task(SCOPE, run.task.id)
    assert stored.task.status.state == TASK_STATE_WORKING
    assert stored.run_state["partial_text"]["text"] == "partial"
    assert engine.services.starting.count == 0


async def test_a_handler_that_fails_in_its_eager_step_fails_the_task_as_before():
    def boom(request: HandlerRequest) -> list[Any]:
        raise RuntimeError("backend said no")

    for eager in (True, False):
        engine, store = engine_with(eager)
        outcome = await engine.send(runtime_of(Scripted(boom)), SCOPE, user_message("hi"),
                                    streaming=False, subscribe=False, blocking=True)
        await asyncio.wait_for(outcome.run.settled.wait(), 10)
        stored = await store.get_task(SCOPE, outcome.run.task.id)
        assert stored.task.status.state == TASK_STATE_FAILED
        assert "backend said no" not in str(stored.task)  # the handler's error stays in the log


async def test_a_stream_never_starts_eagerly_so_its_subscription_sees_every_event():
    engine, _ = engine_with(True)
    outcome = await engine.send(runtime_of(echo()), SCOPE, user_message("hi"),
                                streaming=True, subscribe=True)
    assert not outcome.run.settled.is_set()
    events = await asyncio.wait_for(drain(outcome.subscription), 10)
    text = ""
    for event in events:
        if isinstance(event, TaskArtifactUpdateEvent):
            chunk = "".join(p.text for p in event.artifact.parts)
            text = text + chunk if event.append else chunk
    assert text == "echo: hi"
    assert events[-1].status.state == TASK_STATE_COMPLETED
