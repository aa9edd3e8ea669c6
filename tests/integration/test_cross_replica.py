"""Two gateway replicas on one store: subscribe, cancel and answer on a replica that does not
run the task.

With the in-process hub a remote subscriber follows the store (durable changes);
the PostgreSQL hub adds the live chunks (tests/integration/test_postgres_replicas.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
from a2a.client.errors import A2AClientError
from a2a.types import CancelTaskRequest, GetTaskRequest, SubscribeToTaskRequest, TaskState

from a2a_gateway.stores.memory import MemoryStore
from handlers.base import (
    Completed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRequired,
    RunStarted,
)
from tests.replicas.answered_elsewhere import (
    ReadsTogether,
    answer_on_b_joins_the_owners_history,
    answers_on_the_owner_and_on_b_at_once_one_wins,
    serve_asks_twice,
    two_answers_at_one_generation_one_wins,
)
from tests.support.harness import running_gateway
from tests.support.held import add_held_echo
from tests.support.messages import send_request
from tests.support.waiting import eventually

FAST = {"lease_seconds": 0.6, "remote_poll_seconds": 0.1}
QUIET_LEASES = {"lease_seconds": 60, "remote_poll_seconds": 0.1}
"""No lease check (it reads the task too) within a test's bounds."""


async def test_subscribe_on_another_replica_gets_task_then_final_state(
    monkeypatch: pytest.MonkeyPatch,
):
    store = MemoryStore()
    async with running_gateway(store=store, replica_id="a", **FAST) as a, \
            running_gateway(store=store, replica_id="b", **FAST) as b:
        # the run waits after its first word until B's subscriber has the task (a 1 s run
        # could end before B was asked on a loaded machine, and a subscribe to an ended task
        # is refused)
        ep, release = await add_held_echo(a, monkeypatch, settings={"delay": 0.05}, replicas=(b,))
        words = " ".join(f"w{i}" for i in range(20))
        async with a.client(ep) as on_a, b.client(ep) as on_b:
            stream = on_a.send_message(send_request(words))
            try:
                first = await anext(stream)
                following = on_b.subscribe(SubscribeToTaskRequest(id=first.task.id))
                remote = [await anext(following)]
            finally:
                release.set()
            remote += [e async for e in following]
            _ = [e async for e in stream]
    assert remote[0].HasField("task") and remote[0].task.id == first.task.id
    finals = [e for e in remote if e.HasField("artifact_update")]
    assert finals[-1].artifact_update.artifact.parts[0].text == f"echo: {words}"
    assert remote[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_cancel_on_another_replica_stops_the_run_at_its_owner():
    store = MemoryStore()
    async with running_gateway(store=store, replica_id="a", **FAST) as a, \
            running_gateway(store=store, replica_id="b", **FAST) as b:
        ep = await a.add_endpoint(settings={"delay": 0.1})
        async with a.client(ep) as on_a, b.client(ep, streaming=False) as on_b:
            stream = on_a.send_message(send_request(" ".join(["word"] * 100)))
            first = await anext(stream)
            await anext(stream)
            canceled = await on_b.cancel_task(CancelTaskRequest(id=first.task.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            rest = [e async for e in stream]  # the owner's stream ends soon after
            assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
            await eventually(lambda: first.task.id not in a.gateway.engine.runs, timeout=10,
                             what="the run leaves the owner's table")
            final = await on_a.get_task(GetTaskRequest(id=first.task.id))
    assert final.status.state == TaskState.TASK_STATE_CANCELED
    assert not final.artifacts  # the run never completed after the cancel


class WaitsForApproval(Handler):
    """Asks for approval and keeps its run open until ``resume`` delivers the answer,
    as a backend like Hermes does (any replica may deliver it)."""

    Settings = HandlerSettings
    uses_context: ClassVar[bool] = False
    answers: ClassVar[dict[str, asyncio.Event]] = {}

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        answered = self.answers.setdefault(request.task_id, asyncio.Event())
        yield RunStarted(request.task_id)
        yield InputRequired("approve?", {"choices": ["once", "deny"]})
        await answered.wait()
        yield Completed(text="approved and done")

    async def resume(self, request: HandlerRequest) -> bool:
        self.answers.setdefault(request.run_ref or "", asyncio.Event()).set()
        return True


async def test_answer_sent_to_another_replica_reaches_the_owners_run(monkeypatch):
    import handlers.echo

    monkeypatch.setattr(handlers.echo, "WaitsForApproval", WaitsForApproval, raising=False)
    store = MemoryStore()
    async with running_gateway(store=store, replica_id="a", **FAST) as a, \
            running_gateway(store=store, replica_id="b", **FAST) as b:
        ep = await a.add_endpoint("handlers.echo:WaitsForApproval")
        async with a.client(ep, streaming=False) as on_a, b.client(ep) as on_b:
            (first,) = [e async for e in on_a.send_message(send_request("do it"))]
            assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            answer = send_request("once")
            answer.message.task_id = first.task.id
            events = [e async for e in on_b.send_message(answer)]
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        assert b.gateway.hub.subscriber_count(first.task.id) == 0
        assert first.task.id not in b.gateway.engine.runs  # the run stayed at its owner


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_answer_sent_to_another_replica_joins_the_owners_history(
    kind, monkeypatch, tmp_path
):
    serve_asks_twice(monkeypatch)
    one_store: dict[str, Any] = (
        {"store": MemoryStore()} if kind == "memory"
        else {"store_url": f"sqlite:///{tmp_path / 'store.db'}"}
    )
    async with running_gateway(**one_store, replica_id="a", **FAST) as a, \
            running_gateway(**one_store, replica_id="b", **FAST) as b:
        await answer_on_b_joins_the_owners_history(a, b)


async def test_two_replicas_answering_at_one_generation_one_wins():
    store = ReadsTogether()  # both replicas read the question before either records an answer
    async with running_gateway(store=store, replica_id="a", **FAST) as a, \
            running_gateway(store=store, replica_id="b", **FAST) as b:
        await two_answers_at_one_generation_one_wins(a, b, store.arm)


async def test_the_owner_and_another_replica_answering_at_once_one_wins(monkeypatch):
    serve_asks_twice(monkeypatch)
    store = ReadsTogether()  # both replicas read the question before either takes an answer
    async with running_gateway(store=store, replica_id="a", **QUIET_LEASES) as a, \
            running_gateway(store=store, replica_id="b", **QUIET_LEASES) as b:
        await answers_on_the_owner_and_on_b_at_once_one_wins(a, b, store.arm)


class BackendDownAtResume(WaitsForApproval):
    """Its backend cannot be reached when an answer is delivered."""

    async def resume(self, request: HandlerRequest) -> bool:
        raise ConnectionError("backend down")


async def test_an_answer_the_backend_never_got_is_withdrawn_and_the_task_asks_again(
    monkeypatch,
):
    import handlers.echo

    monkeypatch.setattr(handlers.echo, "BackendDownAtResume", BackendDownAtResume, raising=False)
    store = MemoryStore()
    async with running_gateway(store=store, replica_id="a", **FAST) as a, \
            running_gateway(store=store, replica_id="b", **FAST) as b:
        ep = await a.add_endpoint("handlers.echo:BackendDownAtResume")
        async with a.client(ep, streaming=False) as on_a, b.client(ep, streaming=False) as on_b:
            (asked,) = [e async for e in on_a.send_message(send_request("do it"))]
            answer = send_request("once", task_id=asked.task.id)
            with pytest.raises(A2AClientError):  # the handler's error reaches the caller
                _ = [e async for e in on_b.send_message(answer)]
            after = await on_b.get_task(GetTaskRequest(id=asked.task.id))
        stored = next(iter(store._tasks.values()))
    assert after.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [m.message_id for m in after.history] == [
        m.message_id for m in asked.task.history]  # the answer is not in it
    assert stored.owner == "a"  # the run that asks still owns the task
