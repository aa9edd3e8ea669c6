"""The task engine, its runs, ownership and recovery, without HTTP: an engine on the memory
store and the in-process hub, driving scripted handlers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from a2a.types import Message, Part, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from a2a.types.a2a_pb2 import (
    ROLE_USER,
    TASK_STATE_AUTH_REQUIRED,
    TASK_STATE_CANCELED,
    TASK_STATE_COMPLETED,
    TASK_STATE_FAILED,
    TASK_STATE_INPUT_REQUIRED,
    TASK_STATE_WORKING,
)
from a2a.utils.errors import ContentTypeNotSupportedError

from a2a_gateway.endpoints.backend_health import BackendHealth
from a2a_gateway.endpoints.registry import EndpointRuntime
from a2a_gateway.events import GATEWAY_LOST, new_id
from a2a_gateway.live.hub import LiveHub
from a2a_gateway.stores.base import Endpoint, Scope
from a2a_gateway.stores.memory import MemoryStore
from a2a_gateway.tasks.conversation import Conversation
from a2a_gateway.tasks.engine import EngineLimits, TaskEngine
from a2a_gateway.tasks.follower import follow_task
from a2a_gateway.tasks.ownership import Ownership
from a2a_gateway.tasks.run import RunServices, TaskRun
from handlers.base import (
    ArtifactDelta,
    AuthRequired,
    Completed,
    Handler,
    HandlerRequest,
    InputRequired,
    RunStarted,
    TextDelta,
    data_part,
    file_part,
    text_part,
)
from tests.support.waiting import eventually

SCOPE = Scope("default", "00000000-0000-4000-8000-000000000001", "alice")


class CountingStore(MemoryStore):
    """The memory store, counting task writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    async def create_task(self, *args: Any, **kwargs: Any) -> int:
        self.writes += 1
        return await super().create_task(*args, **kwargs)

    async def update_task(self, *args: Any, **kwargs: Any) -> int:
        self.writes += 1
        return await super().update_task(*args, **kwargs)


class RecordingPush:
    def __init__(self) -> None:
        self.states: list[int] = []

    async def save_inline_config(self, scope: Scope, task_id: str, config: Any) -> Any:
        return config

    async def notify(self, runtime: Any, scope: Scope, task: Any, configs: Any = None) -> None:
        self.states.append(task.status.state)


class Scripted(Handler):
    """Yields the events of ``script(request)``; ``gate`` (when set) holds the run open."""

    supports_reattach: ClassVar[bool] = True
    accepted_file_types: ClassVar[tuple[str, ...]] = ("image/*",)

    def __init__(self, script: Any) -> None:
        super().__init__(Handler.Settings(), None)  # type: ignore[arg-type]
        self.script = script
        self.requests: list[HandlerRequest] = []
        self.canceled: list[str | None] = []
        self.closed = False
        self.gate = asyncio.Event()
        self.gate.set()

    async def run(self, request: HandlerRequest) -> AsyncIterator[Any]:
        self.requests.append(request)
        for event in self.script(request):
            if event == "wait":
                await self.gate.wait()
                continue
            yield event

    def reattach(self, request: HandlerRequest) -> AsyncIterator[Any]:
        return self.run(request)

    async def cancel(self, request: HandlerRequest) -> bool:
        self.canceled.append(request.run_ref)
        return False

    async def aclose(self) -> None:
        self.closed = True


def user_message(text: str, task_id: str = "", context_id: str = "", *parts: Part) -> Message:
    msg = Message(message_id=new_id(), role=ROLE_USER, task_id=task_id, context_id=context_id)
    msg.parts.append(Part(text=text))
    msg.parts.extend(parts)
    return msg


def make_engine(store: MemoryStore | None = None, replica: str = "r1", lease: float = 30.0):
    store = store or CountingStore()
    hub, push = LiveHub(), RecordingPush()
    services = RunServices(
        store,
        hub,
        push,
        Ownership(store, replica, lease),
        Conversation(store, 50),
        BackendHealth(store),
    )
    return (
        TaskEngine(services, EngineLimits(cancel_wait_seconds=1.0, remote_poll_seconds=0.05)),
        store,
        hub,
        push,
    )


def runtime_of(handler: Handler) -> EndpointRuntime:
    return EndpointRuntime(Endpoint(id=SCOPE.endpoint_id, name="t", tenant=SCOPE.tenant), handler)


async def drain(sub: Any) -> list[Any]:
    """The events of a subscription (without their event ids)."""
    out = []
    async for item in sub:
        out.append(item[1] if isinstance(item, tuple) else item)
    return out


async def test_a_streamed_reply_costs_a_few_writes_and_the_stream_rebuilds_the_stored_artifact():
    words = [f"w{i} " for i in range(200)]
    engine, store, hub, push = make_engine()
    handler = Scripted(lambda r: [TextDelta(w) for w in words] + [Completed()])
    outcome = await engine.send(
        runtime_of(handler), SCOPE, user_message("hi"), streaming=True, subscribe=True
    )
    events = await asyncio.wait_for(drain(outcome.subscription), 10)
    stored = await store.get_task(SCOPE, outcome.run.task.id)
    assert stored.task.status.state == TASK_STATE_COMPLETED
    assert stored.task.artifacts[0].parts[0].text == "".join(words)
    chunks = [e for e in events if isinstance(e, TaskArtifactUpdateEvent)]
    assert "".join(p.text for e in chunks for p in e.artifact.parts) == "".join(words)
    assert chunks[-1].last_chunk and chunks[-1].append  # the end appends (maybe merged with deltas)
    assert store.writes == 2  # created WORKING, then COMPLETED
    assert push.states == [TASK_STATE_COMPLETED]
    assert engine.runs == {}  # on_done took the run out


async def test_named_artifacts_with_file_and_data_parts_stream_and_are_stored():
    png = b"\x89PNG\r\n\x1a\n"
    engine, store, hub, _ = make_engine()
    handler = Scripted(
        lambda r: [
            ArtifactDelta("report", [text_part("part one, ")], name="report"),
            ArtifactDelta("report", [text_part("part two")], append=True, last_chunk=True),
            ArtifactDelta(
                "chart",
                [file_part("image/png", data=png, name="chart.png")],
                name="chart",
                last_chunk=True,
            ),
            ArtifactDelta("facts", [data_part({"n": 3})], name="facts", last_chunk=True),
            Completed(text="done"),
        ]
    )
    outcome = await engine.send(
        runtime_of(handler), SCOPE, user_message("go"), streaming=True, subscribe=True
    )
    events = await asyncio.wait_for(drain(outcome.subscription), 10)
    chunks = [e for e in events if isinstance(e, TaskArtifactUpdateEvent)]
    # nobody read while they were published: the two report chunks wait, and come, as one
    assert [(c.artifact.artifact_id, c.append, c.last_chunk) for c in chunks[:3]] == [
        ("report", False, True), ("chart", False, True), ("facts", False, True),
    ]
    assert [p.text for p in chunks[0].artifact.parts] == ["part one, ", "part two"]
    task = (await store.get_task(SCOPE, outcome.run.task.id)).task
    by_id = {a.artifact_id: a for a in task.artifacts}
    assert [p.text for p in by_id["report"].parts] == ["part one, ", "part two"]
    assert by_id["chart"].parts[0].raw == png and by_id["chart"].parts[0].media_type == "image/png"
    assert by_id["facts"].parts[0].data.struct_value["n"] == 3
    assert any(a.name == "response" and a.parts[0].text == "done" for a in task.artifacts)


async def test_auth_required_waits_with_its_prompt_and_the_answer_resumes_the_task():
    def script(request: HandlerRequest) -> list[Any]:
        if not request.history:
            return [AuthRequired("authorize at https://idp.example/consent", {"url": "https://idp.example/consent"})]
        return [Completed(text=f"authorized: {request.text}")]

    engine, store, _, push = make_engine()
    handler = Scripted(script)
    runtime = runtime_of(handler)
    first = await engine.send(
        runtime, SCOPE, user_message("book it"), streaming=False, subscribe=False
    )
    await asyncio.wait_for(first.run.settled.wait(), 10)
    task = (await store.get_task(SCOPE, first.run.task.id)).task
    assert task.status.state == TASK_STATE_AUTH_REQUIRED
    assert "consent" in task.status.message.parts[0].text
    second = await engine.send(
        runtime, SCOPE, user_message("done", task.id), streaming=False, subscribe=False
    )
    await asyncio.wait_for(second.run.settled.wait(), 10)
    final = (await store.get_task(SCOPE, task.id)).task
    assert final.status.state == TASK_STATE_COMPLETED
    assert final.artifacts[0].parts[0].text == "authorized: done"
    assert push.states == [TASK_STATE_AUTH_REQUIRED, TASK_STATE_COMPLETED]


async def test_file_parts_reach_the_handler_typed_and_unsupported_ones_are_refused_before_writing():
    engine, store, _, _ = make_engine()
    handler = Scripted(lambda r: [Completed(text="ok")])
    runtime = runtime_of(handler)
    image = file_part("image/png", data=b"img", name="a.png")
    outcome = await engine.send(
        runtime, SCOPE, user_message("look", "", "", image), streaming=False, subscribe=False
    )
    await asyncio.wait_for(outcome.run.settled.wait(), 10)
    [request] = handler.requests
    assert [(f.media_type, f.name, f.data) for f in request.files] == [
        ("image/png", "a.png", b"img")
    ]
    writes = store.writes
    pdf = file_part("application/pdf", uri="https://files.example/a.pdf")
    with pytest.raises(ContentTypeNotSupportedError, match="application/pdf"):
        await engine.send(
            runtime, SCOPE, user_message("read", "", "", pdf), streaming=False, subscribe=False
        )
    assert store.writes == writes
    assert len((await store.list_tasks(SCOPE, _query())).tasks) == 1


def _query() -> Any:
    from a2a_gateway.stores.base import TaskQuery

    return TaskQuery(page_size=50)


async def test_cancel_of_a_running_task_goes_to_the_instance_that_started_it():
    engine, store, _, push = make_engine()
    handler = Scripted(lambda r: [RunStarted("run-7"), TextDelta("a"), "wait", Completed()])
    handler.gate.clear()
    runtime = runtime_of(handler)
    outcome = await engine.send(
        runtime, SCOPE, user_message("slow"), streaming=False, subscribe=False
    )
    await asyncio.wait_for(outcome.run.created.wait(), 10)
    runtime.handler = Scripted(lambda r: [])  # the registry rebuilt the endpoint meanwhile
    task = await engine.cancel(runtime, SCOPE, outcome.run.task.id)
    assert task.status.state == TASK_STATE_CANCELED
    assert handler.canceled == ["run-7"]
    assert runtime.handler.canceled == []
    assert push.states[-1] == TASK_STATE_CANCELED
    assert engine.runs == {}


async def test_cancel_of_an_idle_task_is_written_by_a_run_and_reloads_on_a_concurrent_change():
    engine, store, _, _ = make_engine()
    handler = Scripted(lambda r: [InputRequired("which one?")])
    runtime = runtime_of(handler)
    outcome = await engine.send(
        runtime, SCOPE, user_message("pick"), streaming=False, subscribe=False
    )
    await asyncio.wait_for(outcome.run.settled.wait(), 10)
    task_id = outcome.run.task.id
    await eventually(lambda: task_id not in engine.runs, timeout=10, what="the run ended")
    stored = await store.get_task(SCOPE, task_id)
    assert stored.task.status.state == TASK_STATE_INPUT_REQUIRED

    original_get = store.get_task
    bumped = False

    async def get_then_bump(scope: Scope, tid: str) -> Any:
        nonlocal bumped
        got = await original_get(scope, tid)
        if not bumped and got is not None:  # another writer lands right after our read
            bumped = True
            other = await original_get(scope, tid)
            other.task.metadata.update({"seen": True})
            await MemoryStore.update_task(store, scope, other.task, expected_version=other.version)
        return got

    store.get_task = get_then_bump  # type: ignore[method-assign]
    task = await engine.cancel(runtime, SCOPE, task_id)
    assert task.status.state == TASK_STATE_CANCELED
    final = (await original_get(SCOPE, task_id)).task
    assert final.status.state == TASK_STATE_CANCELED
    assert final.metadata["seen"] is True  # the other write was kept, not overwritten


async def test_a_task_whose_owner_vanished_is_failed_as_lost_or_reattached():
    store = CountingStore()
    gone, _, _, _ = make_engine(store, replica="gone", lease=0.01)
    blocked = Scripted(lambda r: [RunStarted("ref-1"), TextDelta("x"), "wait"])
    blocked.gate.clear()
    outcome = await gone.send(
        runtime_of(blocked), SCOPE, user_message("a"), streaming=False, subscribe=False
    )
    await asyncio.wait_for(outcome.run.created.wait(), 10)
    await outcome.run.stop()  # the replica dies: nothing renews the lease
    await lease_over(store, outcome.run.task.id)

    class Registry:
        def __init__(self, handler: Handler) -> None:
            self.runtime = runtime_of(handler)

        async def get(self, endpoint_id: str) -> EndpointRuntime:
            return self.runtime

    class NoReattach(Scripted):
        supports_reattach: ClassVar[bool] = False

    heir, _, _, push = make_engine(store, replica="heir")
    await heir.recover_expired(Registry(NoReattach(lambda r: [])))  # type: ignore[arg-type]
    failed = (await store.get_task(SCOPE, outcome.run.task.id)).task
    assert failed.status.state == TASK_STATE_FAILED
    assert failed.status.message.parts[0].text == GATEWAY_LOST
    assert push.states == [TASK_STATE_FAILED]

    second = await gone.send(
        runtime_of(blocked), SCOPE, user_message("b"), streaming=False, subscribe=False
    )
    await asyncio.wait_for(second.run.created.wait(), 10)
    await second.run.stop()
    await lease_over(store, second.run.task.id)
    reattaching = Scripted(lambda r: [Completed(text=f"re-attached to {r.run_ref}")])
    await heir.recover_expired(Registry(reattaching))  # type: ignore[arg-type]
    await eventually(lambda: not heir.runs, timeout=10, what="the re-attached run ended")
    done = (await store.get_task(SCOPE, second.run.task.id)).task
    assert done.status.state == TASK_STATE_COMPLETED
    assert done.artifacts[0].parts[0].text == "re-attached to ref-1"


async def test_the_follower_turns_store_changes_into_events_until_the_task_settles():
    engine, store, hub, _ = make_engine()
    handler = Scripted(lambda r: [RunStarted("r"), "wait", Completed(text="the answer")])
    handler.gate.clear()
    outcome = await engine.send(
        runtime_of(handler), SCOPE, user_message("q"), streaming=False, subscribe=False
    )
    await asyncio.wait_for(outcome.run.created.wait(), 10)
    stored = await store.get_task(SCOPE, outcome.run.task.id)
    follower = LiveHub()  # another replica's hub: it hears nothing, so the store is polled
    events: list[Any] = []

    async def follow() -> None:
        async for event in follow_task(store, follower, SCOPE, stored.task, stored.version,
                                       interval=0.02, stop_when_interrupted=False):
            events.append(event[1] if isinstance(event, tuple) else event)

    following = asyncio.create_task(follow())
    handler.gate.set()
    await asyncio.wait_for(following, 10)
    assert (
        isinstance(events[0], TaskArtifactUpdateEvent)
        and events[0].artifact.parts[0].text == "the answer"
    )
    assert (
        isinstance(events[-1], TaskStatusUpdateEvent)
        and events[-1].status.state == TASK_STATE_COMPLETED
    )


async def test_an_answer_to_a_live_run_goes_to_its_open_iterator():
    class Approvals(Scripted):
        async def resume(self, request: HandlerRequest) -> bool:
            self.answer = request.text
            self.gate.set()
            return True

    handler = Approvals(
        lambda r: [
            RunStarted("h1"),
            InputRequired("approve?", {"choices": ["yes", "no"]}),
            "wait",
            Completed(text="approved"),
        ]
    )
    handler.gate.clear()
    engine, store, _, _ = make_engine()
    runtime = runtime_of(handler)
    first = await engine.send(
        runtime, SCOPE, user_message("deploy"), streaming=False, subscribe=False
    )
    await asyncio.wait_for(first.run.settled.wait(), 10)
    assert first.run.task.status.state == TASK_STATE_INPUT_REQUIRED
    second = await engine.send(
        runtime, SCOPE, user_message("yes", first.run.task.id), streaming=True, subscribe=True
    )
    assert second.run is first.run
    events = await asyncio.wait_for(drain(second.subscription), 10)
    assert handler.answer == "yes"
    assert [e.status.state for e in events if isinstance(e, TaskStatusUpdateEvent)][
        -1
    ] == TASK_STATE_COMPLETED
    assert len(handler.requests) == 1  # no second run


async def test_the_registry_closes_a_replaced_handler_only_after_its_runs_end():
    handler = Scripted(lambda r: [TextDelta("a"), "wait", Completed()])
    handler.gate.clear()
    engine, _, _, _ = make_engine()
    runtime = runtime_of(handler)
    outcome = await engine.send(runtime, SCOPE, user_message("x"), streaming=False, subscribe=False)
    await asyncio.wait_for(outcome.run.created.wait(), 10)
    closing = asyncio.create_task(runtime.close_when_idle())
    await asyncio.sleep(0.05)  # a close that did not wait for the run would have happened by now
    assert not handler.closed and not closing.done()
    handler.gate.set()
    await asyncio.wait_for(closing, 10)
    assert handler.closed
    assert outcome.run.task.status.state == TASK_STATE_COMPLETED


async def lease_over(store: MemoryStore, task_id: str) -> None:
    """Until the task's lease has run out (nothing renews it)."""
    await eventually(lambda: store.get_task(SCOPE, task_id),
                     until=lambda stored: (stored.lease_until or 0) < time.time(),
                     timeout=10, interval=0.01, what=f"the lease of {task_id} ran out")


async def test_caller_context_reaches_the_handler():
    from a2a_gateway.tasks.conversation import Caller

    engine, _, _, _ = make_engine()
    handler = Scripted(lambda r: [Completed(text="ok")])
    caller = Caller.of("alice", {"https://ext.example/v1"},
                       {"traceparent": "00-abc-def-01", "authorization": "Bearer secret"})
    outcome = await engine.send(runtime_of(handler), SCOPE, user_message("hi"), streaming=False,
                                subscribe=False, caller=caller)
    await asyncio.wait_for(outcome.run.settled.wait(), 10)
    [request] = handler.requests
    assert request.principal == "alice"
    assert request.extensions == frozenset({"https://ext.example/v1"})
    assert request.headers == {"traceparent": "00-abc-def-01"}  # never the credentials



async def test_a_stopping_replica_hands_its_runs_over_with_the_text_so_far_and_claims_nothing():
    store = CountingStore()
    ghost, _, _, _ = make_engine(store, replica="ghost", lease=0.01)
    idle = Scripted(lambda r: [RunStarted("ref-ghost"), "wait"])
    idle.gate.clear()
    orphan = await ghost.send(
        runtime_of(idle), SCOPE, user_message("x"), streaming=False, subscribe=False
    )
    await asyncio.wait_for(orphan.run.created.wait(), 10)
    await orphan.run.stop()  # its lease runs out: any replica but a stopping one claims it

    stopping, _, _, _ = make_engine(store, replica="stopping", lease=30.0)
    blocked = Scripted(
        lambda r: [RunStarted("ref-1"), TextDelta("partial "), TextDelta("text"), "wait"]
    )
    blocked.gate.clear()
    outcome = await stopping.send(
        runtime_of(blocked), SCOPE, user_message("a"), streaming=True, subscribe=True
    )
    run = outcome.run
    await eventually(
        lambda: run.text_so_far == "partial text", timeout=10, what="the text streamed"
    )
    listening = asyncio.create_task(drain(outcome.subscription))
    await lease_over(store, orphan.run.task.id)
    await stopping.aclose()
    await stopping.recover_expired(None)  # type: ignore[arg-type]  # stopping: never asks the registry
    events = await asyncio.wait_for(listening, 10)
    assert run.settled.is_set()  # a blocking caller is answered with the task as it stands
    last = events[-1]
    assert isinstance(last, TaskStatusUpdateEvent) and last.status.state == TASK_STATE_WORKING
    assert dict(last.metadata) == {"kind": "gateway_stopping"}
    handed = await store.get_task(SCOPE, run.task.id)
    assert (
        handed.owner == "stopping" and handed.lease_until <= time.time()
    )  # released: claimable now
    assert (
        await store.get_task(SCOPE, orphan.run.task.id)
    ).owner == "ghost"  # not claimed while stopping

    class Registry:
        async def get(self, endpoint_id: str) -> EndpointRuntime:
            return runtime_of(NoReattach(lambda r: []))

    class NoReattach(Scripted):
        supports_reattach: ClassVar[bool] = False

    heir, _, _, _ = make_engine(store, replica="heir")
    await heir.recover_expired(Registry())  # type: ignore[arg-type]
    failed = (await store.get_task(SCOPE, run.task.id)).task
    assert failed.status.state == TASK_STATE_FAILED
    assert failed.status.message.parts[0].text == GATEWAY_LOST
    assert [p.text for p in failed.artifacts[0].parts] == ["partial text"]
    assert failed.artifacts[0].metadata["partial"] is True
    assert failed.artifacts[0].name == "response"


class SwallowsOneCancel(Scripted):
    """Streams a word every few milliseconds through ``asyncio.wait_for`` and, as Python
    3.11's ``wait_for`` does when a cancel meets a result, once goes on after a cancel."""

    async def run(self, request: HandlerRequest) -> AsyncIterator[Any]:
        yield RunStarted("ref-swallow")
        swallowed = False
        for i in range(20_000):  # a run of minutes
            try:
                await asyncio.sleep(0.005)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed = True
            yield TextDelta(f"w{i} ")
        yield Completed()


async def test_a_handler_that_swallows_the_stop_is_still_handed_over_at_once():
    engine, store, _, _ = make_engine()
    outcome = await engine.send(runtime_of(SwallowsOneCancel(None)), SCOPE, user_message("a"),
                                streaming=True, subscribe=True)
    run = outcome.run
    await eventually(lambda: "w3 " in run.text_so_far, timeout=10, what="a few words streamed")
    listening = asyncio.create_task(drain(outcome.subscription))
    async with asyncio.timeout(20):  # before: aclose waited for the run's end (minutes)
        await engine.aclose()
    events = await asyncio.wait_for(listening, 10)
    last = events[-1]
    assert isinstance(last, TaskStatusUpdateEvent) and last.status.state == TASK_STATE_WORKING
    assert dict(last.metadata) == {"kind": "gateway_stopping"}
    stored = await store.get_task(SCOPE, run.task.id)
    assert stored.task.status.state == TASK_STATE_WORKING
    assert stored.run_state["partial_text"]["text"] == run.text_so_far


async def test_runs_of_handlers_that_never_wait_take_turns_on_the_loop():
    engine, _, _, _ = make_engine()
    busy = Scripted(lambda r: [TextDelta(f"w{i} ") for i in range(2000)] + [Completed()])
    first = await engine.send(
        runtime_of(busy), SCOPE, user_message("a"), streaming=True, subscribe=True
    )
    second = await engine.send(
        runtime_of(busy), SCOPE, user_message("b"), streaming=True, subscribe=True
    )
    listening = [asyncio.create_task(drain(o.subscription)) for o in (first, second)]
    await asyncio.wait_for(second.run.created.wait(), 10)
    assert not first.run.finished  # before: the first run held the loop to its end
    await asyncio.wait_for(asyncio.gather(*listening), 10)
    assert first.run.finished and second.run.finished


class SlowToStart(Scripted):
    """Takes ``steps`` loop turns before its first event (a stream's request, its creation in
    the store, ...), then notes how far ``busy`` got meanwhile."""

    def __init__(self, steps: int, busy: TaskRun) -> None:
        super().__init__(lambda r: [])
        self.steps, self.busy, self.progress = steps, busy, [self.words_of(busy)]

    @staticmethod
    def words_of(run: TaskRun) -> int:
        return len(run.text_so_far.split())

    async def run(self, request: HandlerRequest) -> AsyncIterator[Any]:
        for _ in range(self.steps):
            await asyncio.sleep(0)
        yield TextDelta("hello")  # the run asks for the next event once it applied this one
        self.progress.append(self.words_of(self.busy))
        yield Completed()


async def test_a_starting_run_takes_its_steps_before_the_batches_of_running_ones():
    engine, _, _, _ = make_engine()
    busy = Scripted(lambda r: [TextDelta(f"w{i} ") for i in range(5000)] + [Completed()])
    running = await engine.send(runtime_of(busy), SCOPE, user_message("a"), streaming=True,
                                subscribe=False)
    while not running.run.text_so_far:  # the busy run is under way
        await asyncio.sleep(0)
    starting = SlowToStart(4, running.run)
    started = await engine.send(runtime_of(starting), SCOPE, user_message("b"),
                                streaming=True, subscribe=False)
    await asyncio.wait_for(started.run.settled.wait(), 10)
    # its five steps (four turns, then the first event) went by within two batches of the
    # busy run (32 events each), not one batch per step
    assert starting.progress[1] - starting.progress[0] <= 64, starting.progress
    await asyncio.wait_for(running.run.settled.wait(), 30)
    assert engine.services.starting.count == 0  # the runs go back to plain batches


async def test_a_run_stopped_before_its_first_step_no_longer_counts_as_starting():
    engine, _, _, _ = make_engine()
    outcome = await engine.send(runtime_of(Scripted(lambda r: [TextDelta("never")])), SCOPE,
                                user_message("a"), streaming=True, subscribe=False)
    assert engine.services.starting.count == 1
    await outcome.run.stop()  # its driver is canceled before it ran a line
    assert engine.services.starting.count == 0
