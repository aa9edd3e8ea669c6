"""Dispatch mode end to end, on every store: an API gateway (``dispatch = "lambda"``) whose
real boto3 Lambda client invokes a local invoke endpoint, which hands each event to a
worker gateway (``worker = true``) at its ``/events`` route, as the Lambda Web Adapter does.

The invoke endpoint answers an ``Event`` invocation 202 at once and delivers the payload
afterwards — once, twice (concurrently or one after the other, as Lambda's at-least-once
delivery may), never (a lost event) — or answers 500 (the invoke fails).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from a2a.client.errors import A2AClientError
from a2a.types import GetTaskRequest, SubscribeToTaskRequest, Task, TaskState
from aiohttp import web

from a2a_gateway.observability import tracing
from a2a_gateway.observability.tracing import TraceParent
from a2a_gateway.stores.base import Scope
from a2a_gateway.tasks.dispatch import NOT_CLAIMED, NOT_DISPATCHED, SWEEP_EVENT
from handlers.base import HandlerEvent, HandlerRequest
from tests.stores import dynamo_support
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.harness import RunningGateway, collect, reconstruct, running_gateway
from tests.support.held import HeldEcho
from tests.support.local_server import serve_locally
from tests.support.messages import send_body, send_request
from tests.support.waiting import eventually
from tests.support.webhooks import webhook_receiver

FUNCTION = "a2a-gateway-worker"
TIMINGS = {"remote_poll_seconds": 0.1, "lease_seconds": 30.0}
COMPLETED = TaskState.TASK_STATE_COMPLETED
FAILED = TaskState.TASK_STATE_FAILED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


class CountingEcho(HeldEcho):
    """The echo agent, counting the runs of each task (the backend calls) and keeping the
    trace context a backend call of each run would send; held like ``HeldEcho`` while its
    gate is set (a test sees the run in progress, however slow the machine)."""

    runs: Counter[str] = Counter()
    traces: dict[str, TraceParent | None] = {}

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        CountingEcho.runs[request.task_id] += 1
        sent = tracing.backend_call(
            "echo", "POST", "http://backend.invalid/", request.headers
        ).headers
        CountingEcho.traces[request.task_id] = TraceParent.of(sent)
        async for event in super().run(request):
            yield event


@dataclass
class InvokeEndpoint:
    """The Lambda API's ``Invoke`` for asynchronous invocations, delivering to a worker."""

    worker_url: str = ""
    copies: int = 1
    concurrent: bool = True
    status: int = 202
    invocations: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    _deliveries: set[asyncio.Task[None]] = field(default_factory=set)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/2015-03-31/functions/{name}/invocations", self.invoke)
        return app

    async def invoke(self, request: web.Request) -> web.Response:
        payload = await request.read()
        self.invocations.append({
            "function": request.match_info["name"],
            "type": request.headers.get("X-Amz-Invocation-Type"),
            "payload": orjson.loads(payload),
        })
        if self.status != 202:
            return web.json_response(
                {"Type": "Service", "message": "invoke refused"},
                status=self.status,
                headers={"x-amzn-ErrorType": "ServiceException"},
            )
        if request.headers.get("X-Amz-Invocation-Type") != "Event":
            return web.json_response({"message": "only Event invocations here"}, status=400)
        delivery = asyncio.create_task(self._deliver(payload))
        self._deliveries.add(delivery)
        delivery.add_done_callback(self._deliveries.discard)
        return web.Response(status=202)

    async def _deliver(self, payload: bytes) -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            async def once() -> None:
                response = await http.post(f"{self.worker_url}/events", content=payload)
                self.outcomes.append({"status": response.status_code, **response.json()})
            if self.concurrent:
                await asyncio.gather(*(once() for _ in range(self.copies)))
            else:
                for _ in range(self.copies):
                    await once()

    async def settled(self) -> None:
        """Every delivery so far answered by the worker."""
        while self._deliveries:
            await asyncio.gather(*self._deliveries)


@dataclass
class Deployment:
    api: RunningGateway
    worker: RunningGateway
    invoke: InvokeEndpoint
    endpoint_id: str

    @property
    def scope(self) -> Scope:
        return Scope("default", self.endpoint_id, "anonymous")


@asynccontextmanager
async def deployment(kind: str, directory: Path, monkeypatch: pytest.MonkeyPatch,
                     **settings: Any) -> AsyncIterator[Deployment]:
    """An API gateway and a worker gateway on one fresh store of ``kind``, the invoke
    endpoint between them, and a ``CountingEcho`` endpoint (0.05 s per word)."""
    dynamo_support.use_moto_credentials(monkeypatch)  # boto3's Lambda client signs with these
    invoke = InvokeEndpoint()
    options = {**TIMINGS, "handler_allowlist": ["handlers.", "tests."], **settings}
    async with (
        serve_locally(invoke.app()) as invoke_url,
        fresh_store_url(kind, directory, monkeypatch) as url,
    ):
        async with running_gateway(
            url,
            replica_id="gw-api",
            dispatch="lambda",
            dispatch_function=FUNCTION,
            dispatch_endpoint_url=invoke_url,
            dispatch_region="us-east-1",
            **options,
        ) as api:
            shared = api.store if kind == "memory" else None
            async with running_gateway(url, store=shared, replica_id="gw-worker", worker=True,
                                       **options) as worker:
                invoke.worker_url = worker.base_url
                endpoint_id = await api.add_endpoint(
                    f"{__name__}:CountingEcho", settings={"delay": 0.05}
                )
                try:
                    yield Deployment(api, worker, invoke, endpoint_id)
                finally:
                    await invoke.settled()


@pytest.fixture(params=STORE_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


async def stored_task(gw: RunningGateway, endpoint_id: str, task_id: str) -> Task:
    async with gw.client(endpoint_id, streaming=False) as client:
        return await client.get_task(GetTaskRequest(id=task_id))


async def blocking_send(gw: RunningGateway, endpoint_id: str, text: str, **fields: Any) -> Task:
    async with gw.client(endpoint_id, streaming=False, timeout=60) as client:
        events = await collect(client.send_message(send_request(text, **fields)))
    assert events[-1].HasField("task"), events
    return events[-1].task


def replies(task: Task) -> list[str]:
    return ["".join(p.text for p in a.parts) for a in task.artifacts if a.name == "response"]


async def test_blocking_send_is_run_by_the_worker(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    release = asyncio.Event()
    monkeypatch.setattr(HeldEcho, "gate", release)  # after the first word
    async with deployment(kind, tmp_path, monkeypatch) as d:
        words = " ".join(f"w{i}" for i in range(5))
        sending = asyncio.create_task(blocking_send(d.api, d.endpoint_id, words))
        try:  # while it runs, the worker owns the task and the API instance runs nothing
            invoked = await eventually(lambda: d.invoke.invocations,
                                       what="the worker was invoked")
            task_id = invoked[0]["payload"]["task_id"]
            running = await eventually(lambda: d.api.store.get_task(d.scope, task_id),
                                       until=lambda s: s is not None and s.owner == "gw-worker",
                                       what="the worker claimed the task")
            assert task_id in d.worker.gateway.engine.runs and not d.api.gateway.engine.runs
            assert running.task.status.state == TaskState.TASK_STATE_WORKING
        finally:
            release.set()
        task = await asyncio.wait_for(sending, 60)
        await d.invoke.settled()
    assert task.id == task_id and task.status.state == COMPLETED
    assert replies(task) == [f"echo: {words}"]
    assert invoked == [{"function": FUNCTION, "type": "Event", "payload": {
        "a2a_gateway": "run_task", "tenant": "default", "endpoint_id": d.endpoint_id,
        "principal": "anonymous", "task_id": task_id,
    }}]
    assert d.invoke.outcomes == [{"status": 200, "outcome": "ran"}]


async def test_the_worker_runs_the_task_in_the_callers_trace(kind: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    caller = TraceParent("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    async with deployment(kind, tmp_path, monkeypatch) as d, httpx.AsyncClient(timeout=60) as http:
        url = f"{d.api.base_url}/{d.endpoint_id}/a2a"
        traced = await http.post(
            url, json=send_body("traced"), headers={"A2A-Version": "1.0", **caller.headers()}
        )
        untraced = await http.post(url, json=send_body("untraced"), headers={"A2A-Version": "1.0"})
        await d.invoke.settled()
    assert d.invoke.outcomes == [{"status": 200, "outcome": "ran"}] * 2
    for answer, trace_id in ((traced, caller.trace_id), (untraced, None)):
        task = answer.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer.text
        given = TraceParent.of({"traceparent": answer.headers["traceresponse"]})
        assert given is not None and given.trace_id == (trace_id or given.trace_id)
        on_worker = CountingEcho.traces[task["id"]]
        # the API instance's trace (the caller's, or the one it began), not the worker event's
        assert on_worker is not None and on_worker.trace_id == given.trace_id


async def test_the_worker_route_refuses_what_is_no_gateway_event_and_exists_only_on_workers():
    async with running_gateway(worker=True) as worker, running_gateway() as api:
        async with httpx.AsyncClient(timeout=30) as http:
            bad = await http.post(
                f"{worker.base_url}/events", content=b'{"a2a_gateway": "explode"}'
            )
            missing = await http.post(
                f"{worker.base_url}/events",
                content=orjson.dumps(
                    {
                        "a2a_gateway": "run_task",
                        "tenant": "default",
                        "endpoint_id": "ep",
                        "principal": "anonymous",
                        "task_id": "no-such-task",
                    }
                ),
            )
            swept = await http.post(f"{worker.base_url}/events", content=orjson.dumps(SWEEP_EVENT))
            absent = await http.post(f"{api.base_url}/events", content=orjson.dumps(SWEEP_EVENT))
    assert bad.status_code == 400
    assert "must be \"run_task\" or \"sweep\"" in bad.json()["error"]
    assert (missing.status_code, missing.json()) == (200, {"outcome": "not_found"})
    assert (swept.status_code, swept.json()) == (200, {"outcome": "swept"})
    assert absent.status_code == 405  # /events is only the operators' feed (GET) there


async def test_a_streaming_send_follows_the_worker_run_to_the_reply(kind: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch):
    async with deployment(kind, tmp_path, monkeypatch) as d:
        # PostgreSQL: 5 s, beyond the hub's watch refresh (2 s), from which on the worker
        # forwards the text of a task it claimed after the stream began following it
        text = " ".join(f"word{i}" for i in range(100 if kind == "postgres" else 20))
        async with d.api.client(d.endpoint_id, timeout=60) as client:
            events = await collect(client.send_message(send_request(text)))
        await d.invoke.settled()
    assert (
        events[0].HasField("task") and events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    )
    assert events[-1].status_update.status.state == COMPLETED
    assert list(reconstruct(events).values()) == [f"echo: {text}"]
    chunks = [
        e for e in events if e.HasField("artifact_update") and not e.artifact_update.last_chunk
    ]
    if kind == "postgres":  # the hub spans instances: the worker's text arrives as it is written
        assert len(chunks) > 5
    else:  # the stream follows the store: the final artifact
        assert chunks == []
    assert d.invoke.outcomes == [{"status": 200, "outcome": "ran"}]
    assert CountingEcho.runs[events[0].task.id] == 1


@pytest.mark.parametrize("concurrent", [True, False], ids=["concurrent", "sequential"])
async def test_a_duplicated_delivery_runs_the_task_once(kind: str, concurrent: bool, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    async with deployment(kind, tmp_path, monkeypatch) as d:
        d.invoke.copies, d.invoke.concurrent = 2, concurrent
        task = await blocking_send(d.api, d.endpoint_id, "only once")
        await d.invoke.settled()
        stored = await d.api.store.get_task(d.scope, task.id)
    assert sorted(o["outcome"] for o in d.invoke.outcomes) == ["duplicate", "ran"]
    assert task.status.state == COMPLETED and replies(task) == ["echo: only once"]
    assert replies(stored.task) == ["echo: only once"] and len(stored.task.artifacts) == 1
    assert CountingEcho.runs[task.id] == 1


async def test_an_answer_to_an_input_request_is_dispatched_too(kind: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    async with deployment(kind, tmp_path, monkeypatch) as d:
        asked = await blocking_send(d.api, d.endpoint_id, "?input first")
        assert asked.status.state == INPUT_REQUIRED
        answered = await blocking_send(d.api, d.endpoint_id, "the answer", task_id=asked.id,
                                       context_id=asked.context_id)
        await d.invoke.settled()
    assert answered.status.state == COMPLETED and replies(answered) == ["echo: the answer"]
    assert [i["payload"]["task_id"] for i in d.invoke.invocations] == [asked.id, asked.id]
    assert d.invoke.outcomes == [{"status": 200, "outcome": "ran"}] * 2
    assert CountingEcho.runs[asked.id] == 2
    assert not d.api.gateway.engine.runs


async def test_a_failed_invoke_fails_the_task_and_tells_the_caller(kind: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch):
    async with deployment(kind, tmp_path, monkeypatch) as d:
        d.invoke.status = 500
        async with httpx.AsyncClient(timeout=60) as http:
            response = await http.post(
                d.api.jsonrpc_url(d.endpoint_id),
                json=send_body("never runs", rid=7),
                headers={"A2A-Version": "1.0"},
            )
        task_id = d.invoke.invocations[0]["payload"]["task_id"]
        stored = await d.api.store.get_task(d.scope, task_id)
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    body = response.json()
    assert body["id"] == 7 and body["error"]["code"] == -32603
    assert "could not be handed to a worker" in body["error"]["message"]
    assert stored.task.status.state == FAILED and stored.owner is None
    assert stored.task.status.message.parts[0].text == NOT_DISPATCHED
    assert d.invoke.outcomes == [] and CountingEcho.runs[task_id] == 0


async def test_a_task_no_worker_claims_is_failed_by_the_sweep(kind: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    # a long lease: no replica's lease loop runs during the test, only the sweep event; a claim
    # deadline of 3 s leaves the early sweep time to come first on a busy machine
    async with deployment(
        kind, tmp_path, monkeypatch, dispatch_claim_seconds=3.0, lease_seconds=600
    ) as d:
        d.invoke.copies = 0  # accepted, never delivered
        sending = asyncio.create_task(blocking_send(d.api, d.endpoint_id, "lost event"))
        invoked = await eventually(lambda: d.invoke.invocations, what="the worker was invoked")
        task_id = invoked[0]["payload"]["task_id"]
        waiting = await d.api.store.get_task(d.scope, task_id)
        assert (waiting.owner, waiting.task.status.state) == (
            "dispatch",
            TaskState.TASK_STATE_SUBMITTED,
        )
        async with httpx.AsyncClient(timeout=60) as http:
            early = await http.post(
                f"{d.worker.base_url}/events", content=orjson.dumps(SWEEP_EVENT)
            )
            assert early.json() == {"outcome": "swept"}
            still = await d.api.store.get_task(d.scope, task_id)
            assert (
                still.task.status.state == TaskState.TASK_STATE_SUBMITTED
            )  # its claim is still on
            await eventually(
                lambda: d.api.store.get_task(d.scope, task_id),
                until=lambda s: (s.lease_until or 0) < time.time(),
                what="the claim ran out",
            )
            swept = await http.post(
                f"{d.worker.base_url}/events", content=orjson.dumps(SWEEP_EVENT)
            )
        task = await asyncio.wait_for(sending, 60)
    assert swept.json() == {"outcome": "swept"}
    assert task.id == task_id and task.status.state == FAILED
    assert task.status.message.parts[0].text == NOT_CLAIMED
    assert CountingEcho.runs[task_id] == 0


async def test_a_failed_invoke_ends_a_streaming_send_with_the_error(kind: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch):
    async with deployment(kind, tmp_path, monkeypatch) as d:
        d.invoke.status = 500
        async with d.api.client(d.endpoint_id, timeout=60) as client:
            with pytest.raises(A2AClientError) as raised:
                await collect(client.send_message(send_request("never streams")))
        task_id = d.invoke.invocations[0]["payload"]["task_id"]
        stored = await d.api.store.get_task(d.scope, task_id)
    assert "HTTP Error 503" in str(raised.value)  # retriable; the body names the reason (above)
    assert stored.task.status.state == FAILED


async def test_a_task_handed_over_at_once_is_followed_by_subscribe_and_get(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    async with deployment(kind, tmp_path, monkeypatch) as d:
        text = " ".join(["follow"] * 40)  # two seconds: still running when the subscription starts
        async with d.api.client(d.endpoint_id, streaming=False) as blocking, \
                d.api.client(d.endpoint_id, timeout=60) as streaming:
            first = await collect(blocking.send_message(send_request(text, immediately=True)))
            task_id = first[-1].task.id
            followed = await collect(streaming.subscribe(SubscribeToTaskRequest(id=task_id)))
            final = await blocking.get_task(GetTaskRequest(id=task_id))
        await d.invoke.settled()
    assert first[-1].task.status.state == TaskState.TASK_STATE_SUBMITTED
    assert followed[0].HasField("task") and followed[-1].status_update.status.state == COMPLETED
    assert list(reconstruct(followed).values()) == [f"echo: {text}"]
    assert final.status.state == COMPLETED and replies(final) == [f"echo: {text}"]


async def test_the_worker_sends_the_push_notifications_of_an_inline_config(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    async with deployment(kind, tmp_path, monkeypatch) as d, webhook_receiver() as hooks:
        push = {"url": hooks.url("/hook"), "token": "t-1"}
        async with httpx.AsyncClient(timeout=60) as http:
            response = await http.post(
                d.api.jsonrpc_url(d.endpoint_id),
                json=send_body("notify me", push=push),
                headers={"A2A-Version": "1.0"},
            )
        task = response.json()["result"]["task"]
        await hooks.wait_for("/hook", count=2)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    states = [body.get("task", body.get("statusUpdate", {})).get("status", {}).get("state")
              for _, body in hooks.posts_to("/hook")]
    assert states[0] == "TASK_STATE_SUBMITTED" and states[-1] == "TASK_STATE_COMPLETED"
    assert all(
        headers["X-A2A-Notification-Token"] == "t-1" for headers, _ in hooks.posts_to("/hook")
    )


async def test_the_api_instance_shows_the_backend_health_of_the_worker_runs(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    operator = {"Authorization": "Bearer op-dispatch-0123456789"}
    async with (
        deployment(kind, tmp_path, monkeypatch, operator_keys=["op-dispatch-0123456789"]) as d,
        httpx.AsyncClient(base_url=d.api.base_url, headers=operator, timeout=60) as admin,
    ):
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            down = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
        unreachable = await d.api.add_endpoint("handlers.openai_chat:OpenAIChatHandler",
                                               settings={"base_url": down, "model": "m"})
        failed = await blocking_send(d.api, unreachable, "hello")
        answered = await blocking_send(d.api, d.endpoint_id, "hello")
        await d.invoke.settled()
        # the worker's outcomes are in the store (the API instance ran nothing)
        stored = await d.api.store.list_backend_health()
        health = {endpoint: (await admin.get(f"/admin/api/endpoints/{endpoint}")).json()["health"]
                  for endpoint in (unreachable, d.endpoint_id)}
        listed = {
            e["id"]: e["health"]
            for e in (await admin.get("/admin/api/endpoints")).json()["endpoints"]
        }
    assert failed.status.state == FAILED and answered.status.state == COMPLETED
    assert (
        not d.api.gateway.engine.runs
        and d.invoke.outcomes == [{"status": 200, "outcome": "ran"}] * 2
    )
    assert (stored[unreachable].errors, stored[d.endpoint_id].successes) == (1, 1)
    assert health[unreachable]["status"] == "failing" and health[unreachable]["errors"] == 1
    assert health[unreachable]["last_error"]["message"].startswith(
        "cannot reach the chat backend at http://127.0.0.1:"
    )
    assert health[d.endpoint_id]["status"] == "ok" and health[d.endpoint_id]["successes"] == 1
    assert listed == health
