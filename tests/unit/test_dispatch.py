"""Dispatch mode: the worker events (the task reference's payload, what is refused), the
settings check, and the engine recording tasks for workers and running them as a worker."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from a2a.types import Task
from a2a.types.a2a_pb2 import TASK_STATE_COMPLETED, TASK_STATE_INPUT_REQUIRED, TASK_STATE_WORKING
from pydantic import ValidationError

from a2a_gateway.endpoints.registry import EndpointRuntime
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import Scope, StoredTask
from a2a_gateway.stores.memory import MemoryStore
from a2a_gateway.tasks.dispatch import (
    DISPATCHED,
    BadEventError,
    DispatchSetupError,
    LambdaDispatcher,
    TaskRef,
    parse_event,
)
from a2a_gateway.tasks.engine import TaskEngine
from handlers.base import Completed, InputRequired, TextDelta
from tests.support.waiting import eventually
from tests.unit.test_task_engine import SCOPE, Scripted, make_engine, runtime_of, user_message

REF = TaskRef("acme", "ep-1", "alice", "task-1")


def test_a_task_reference_round_trips_as_ids_only():
    payload = REF.to_payload()
    assert orjson.loads(payload) == {
        "a2a_gateway": "run_task", "tenant": "acme", "endpoint_id": "ep-1", "principal": "alice",
        "task_id": "task-1",
    }
    assert parse_event(payload) == REF


def test_a_sweep_event_parses_as_no_reference():
    assert parse_event(b'{"a2a_gateway": "sweep"}') is None


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a gateway event"),
        (b'{"a2a_gateway": "explode"}', "not a gateway event"),
        (b'{"version": "0", "detail-type": "Scheduled Event"}', "not a gateway event"),
        (
            b'{"a2a_gateway": "run_task", "tenant": "acme", "endpoint_id": "ep-1",'
            b' "principal": "alice"}',
            "task_id",
        ),
        (
            b'{"a2a_gateway": "run_task", "tenant": "", "endpoint_id": 7, "principal": "a",'
            b' "task_id": "t"}',
            "tenant, endpoint_id",
        ),
        (b'{"a2a_gateway": "run_task", "task_id": "' + b"x" * 300_000 + b'"}', "too large"),
    ],
)
def test_other_events_are_refused_with_the_reason(body: bytes, reason: str):
    with pytest.raises(BadEventError, match=reason):
        parse_event(body)


def test_lambda_dispatch_needs_the_worker_function():
    with pytest.raises(ValidationError, match="dispatch_function"):
        GatewaySettings(dispatch="lambda")
    assert (
        GatewaySettings(dispatch="lambda", dispatch_function="worker").dispatch_function == "worker"
    )


# the engine in dispatch mode, without HTTP ---------------------------------------------

class Recorded:
    """A dispatcher that keeps what it is handed (a worker is run by the test)."""

    def __init__(self) -> None:
        self.refs: list[TaskRef] = []

    async def dispatch(self, ref: TaskRef) -> None:
        self.refs.append(ref)


class OneRuntime:
    """The registry of one endpoint."""

    def __init__(self, runtime: EndpointRuntime) -> None:
        self.runtime = runtime

    async def get(self, endpoint_id: str) -> EndpointRuntime:
        return self.runtime


class SlowReads(MemoryStore):
    """The memory store, each task read taking a moment: concurrent deliveries read alike."""

    async def get_task(self, scope: Scope, task_id: str) -> StoredTask | None:
        await asyncio.sleep(0.05)
        return await super().get_task(scope, task_id)


def dispatching(store: MemoryStore, replica: str) -> tuple[TaskEngine, Recorded]:
    engine, _, _, _ = make_engine(store, replica=replica)
    engine.dispatcher = Recorded()
    return engine, engine.dispatcher


async def test_deliveries_that_read_the_task_at_once_run_it_once():
    store = SlowReads()
    api, dispatcher = dispatching(store, "api")
    worker, _ = dispatching(store, "worker")
    handler = Scripted(lambda r: [TextDelta("one "), Completed()])
    outcome = await api.send(
        runtime_of(handler), SCOPE, user_message("go"), streaming=False, subscribe=False
    )
    assert (
        outcome.run is None
        and outcome.follow_version == 1
        and dispatcher.refs == [TaskRef.of(SCOPE, outcome.task.id)]
    )
    registry = OneRuntime(runtime_of(handler))
    outcomes = await asyncio.gather(
        *(worker.run_dispatched(registry, dispatcher.refs[0]) for _ in range(2))
    )
    assert sorted(outcomes) == ["duplicate", "ran"]
    assert len(handler.requests) == 1
    stored = await store.get_task(SCOPE, outcome.task.id)
    assert stored.task.status.state == TASK_STATE_COMPLETED and stored.owner is None
    assert DISPATCHED not in stored.run_state


async def test_an_answer_dispatched_while_the_asking_run_ends_is_not_overwritten():
    store = MemoryStore()
    api, dispatcher = dispatching(store, "api")
    worker, _ = dispatching(store, "worker")
    handler = Scripted(
        lambda r: (
            [TextDelta("asked")]
            + (
                [Completed(text="done")]
                if r.pending_input is not None
                else [InputRequired("which?", {}), "wait"]
            )
        )
    )
    handler.gate.clear()  # the asking run's iterator ends only when the test says so
    registry = OneRuntime(runtime_of(handler))
    first = await api.send(
        runtime_of(handler), SCOPE, user_message("go"), streaming=False, subscribe=False
    )
    asking = asyncio.create_task(worker.run_dispatched(registry, dispatcher.refs[0]))
    await eventually(
        lambda: store.get_task(SCOPE, first.task.id),
        until=lambda s: s.task.status.state == TASK_STATE_INPUT_REQUIRED,
        what="the question",
    )
    answer = user_message("that one", first.task.id, first.task.context_id)
    await api.send(runtime_of(handler), SCOPE, answer, streaming=False, subscribe=False)
    handler.gate.set()
    assert await asyncio.wait_for(asking, 10) == "ran"
    stored = await store.get_task(SCOPE, first.task.id)
    assert stored.owner == "dispatch" and stored.run_state[DISPATCHED]["action"] == "run"
    assert await asyncio.wait_for(worker.run_dispatched(registry, dispatcher.refs[1]), 10) == "ran"
    done = await store.get_task(SCOPE, first.task.id)
    assert done.task.status.state == TASK_STATE_COMPLETED and len(handler.requests) == 2


async def test_a_sweep_drives_the_runs_it_reattached_to_their_end():
    store = MemoryStore()
    worker, _ = dispatching(store, "worker")
    handler = Scripted(lambda r: [TextDelta("back "), "wait", Completed(text="back again")])
    handler.gate.clear()
    task = Task(id="t-lost", context_id="c-1")
    task.status.state = TASK_STATE_WORKING
    task.history.append(user_message("go", "t-lost", "c-1"))
    await store.create_task(
        SCOPE, task, run_ref="backend-run-1", owner="gone", lease_until=time.time() - 1
    )
    sweeping = asyncio.create_task(worker.sweep(OneRuntime(runtime_of(handler))))
    await eventually(lambda: handler.requests, what="the run re-attached")
    assert not sweeping.done()  # a worker's invocation lasts as long as the run it took over
    handler.gate.set()
    await asyncio.wait_for(sweeping, 10)
    stored = await store.get_task(SCOPE, "t-lost")
    assert (
        stored.task.status.state == TASK_STATE_COMPLETED
        and handler.requests[0].run_ref == "backend-run-1"
    )


def test_lambda_dispatch_without_a_region_stops_startup_with_the_setting_to_set(
    monkeypatch, tmp_path
):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(DispatchSetupError, match="set dispatch_region"):
        LambdaDispatcher("worker")
    assert LambdaDispatcher("worker", region="eu-west-1") is not None
