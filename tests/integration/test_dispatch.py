"""Dispatch mode end to end, on every store: an API gateway (``dispatch = "lambda"``) whose
real boto3 Lambda client invokes a local invoke endpoint, which hands each event to a
worker gateway (``worker = true``) at its ``/events`` route, as the Lambda Web Adapter does.

The invoke endpoint answers an ``Event`` invocation 202 at once and delivers the payload
afterwards — once, twice (concurrently or one after the other, as Lambda's at-least-once
delivery may), never (a lost event) — or answers 500 (the invoke fails).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from a2a.client.errors import A2AClientError
from a2a.types import GetTaskRequest, Task, TaskState
from aiohttp import web

from a2a_gateway.stores.base import Scope
from a2a_gateway.tasks.dispatch import NOT_CLAIMED, NOT_DISPATCHED, SWEEP_EVENT
from tests.harness import RunningGateway, collect, reconstruct, running_gateway
from tests.messages import send_request
from tests.stores import dynamo_support
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.waiting import eventually

FUNCTION = "a2a-gateway-worker"
TIMINGS = {"remote_poll_seconds": 0.1, "lease_seconds": 30.0}
COMPLETED = TaskState.TASK_STATE_COMPLETED
FAILED = TaskState.TASK_STATE_FAILED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


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
            return web.json_response({"Type": "Service", "message": "invoke refused"}, status=self.status,
                                     headers={"x-amzn-ErrorType": "ServiceException"})
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
    """An API gateway and a worker gateway on one fresh store of ``kind``, and the invoke
    endpoint between them; an echo endpoint that spends ``delay`` seconds per word."""
    dynamo_support.use_moto_credentials(monkeypatch)  # boto3's Lambda client signs with these
    invoke = InvokeEndpoint()
    runner = web.AppRunner(invoke.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    invoke_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    options = {**TIMINGS, **settings}
    try:
        async with fresh_store_url(kind, directory, monkeypatch) as url:
            async with running_gateway(
                url, replica_id="gw-api", dispatch="lambda", dispatch_function=FUNCTION,
                dispatch_endpoint_url=invoke_url, dispatch_region="us-east-1", **options,
            ) as api:
                shared = api.store if kind == "memory" else None
                async with running_gateway(url, store=shared, replica_id="gw-worker", worker=True,
                                           **options) as worker:
                    invoke.worker_url = worker.base_url
                    endpoint_id = await api.add_endpoint(settings={"delay": 0.05})
                    try:
                        yield Deployment(api, worker, invoke, endpoint_id)
                    finally:
                        await invoke.settled()
    finally:
        await runner.cleanup()


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


async def test_blocking_send_is_run_by_the_worker(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    async with deployment(kind, tmp_path, monkeypatch) as d:
        words = " ".join(f"w{i}" for i in range(12))
        sending = asyncio.create_task(blocking_send(d.api, d.endpoint_id, words))
        # while it runs, the worker owns the task and the API instance runs nothing
        invoked = await eventually(lambda: d.invoke.invocations, what="the worker was invoked")
        task_id = invoked[0]["payload"]["task_id"]
        running = await eventually(lambda: d.api.store.get_task(d.scope, task_id), until=lambda s: s is not None and s.owner == "gw-worker",
                                   what="the worker claimed the task")
        assert task_id in d.worker.gateway.engine.runs and not d.api.gateway.engine.runs
        assert running.task.status.state == TaskState.TASK_STATE_WORKING
        task = await asyncio.wait_for(sending, 60)
        await d.invoke.settled()
    assert task.id == task_id and task.status.state == COMPLETED
    assert replies(task) == [f"echo: {words}"]
    assert invoked == [{"function": FUNCTION, "type": "Event", "payload": {
        "a2a_gateway": "run_task", "tenant": "default", "endpoint_id": d.endpoint_id,
        "principal": "anonymous", "task_id": task_id,
    }}]
    assert d.invoke.outcomes == [{"status": 200, "outcome": "ran"}]



async def test_the_worker_route_refuses_what_is_no_gateway_event_and_exists_only_on_workers():
    async with running_gateway(worker=True) as worker, running_gateway() as api:
        async with httpx.AsyncClient(timeout=30) as http:
            bad = await http.post(f"{worker.base_url}/events", content=b'{"a2a_gateway": "explode"}')
            missing = await http.post(f"{worker.base_url}/events", content=orjson.dumps({
                "a2a_gateway": "run_task", "tenant": "default", "endpoint_id": "ep", "principal": "anonymous",
                "task_id": "no-such-task"}))
            swept = await http.post(f"{worker.base_url}/events", content=orjson.dumps(SWEEP_EVENT))
            absent = await http.post(f"{api.base_url}/events", content=orjson.dumps(SWEEP_EVENT))
    assert bad.status_code == 400
    assert "must be \"run_task\" or \"sweep\"" in bad.json()["error"]
    assert (missing.status_code, missing.json()) == (200, {"outcome": "not_found"})
    assert (swept.status_code, swept.json()) == (200, {"outcome": "swept"})
    assert absent.status_code == 404
