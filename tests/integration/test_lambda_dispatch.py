"""Dispatch mode through the Lambda path, on the DynamoDB store (moto server): an API gateway
(``dispatch = "lambda"``) whose boto3 client invokes the worker function asynchronously at a
local Lambda service (tests/support/lambda_runtime.py), and the worker as a Lambda execution
environment — the real ``awslambdaric`` running the gateway's handler with ``worker = true``,
two of them, as Lambda runs concurrent invocations in environments of their own.

A blocking and a streaming SendMessage through the API complete through the async invoke,
also when Lambda delivers the event twice (one delivery runs the task, the other finds it
claimed; the reply is there once); the scheduled sweep event is answered; an event the worker
refuses fails its invocation through the Runtime API's error route. With Redis (API and
workers given ``redis_url``), the worker's text reaches the API's stream live, chunk by chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import boto3
import pytest
from a2a.types import GetTaskRequest, TaskState

from a2a_gateway.stores.base import Endpoint
from a2a_gateway.tasks.dispatch import SWEEP_EVENT
from tests.stores import dynamo_support as support
from tests.support.harness import (
    RunningGateway,
    collect,
    reconstruct,
    require_env,
    running_gateway,
)
from tests.support.lambda_runtime import FakeLambda, Invocation, fake_lambda, runtime_process
from tests.support.messages import send_request
from tests.support.waiting import eventually

pytestmark = pytest.mark.dynamodb

WORKER = "a2a-gateway-worker"
COMPLETED = TaskState.TASK_STATE_COMPLETED


@dataclass
class Deployment:
    api: RunningGateway
    worker: FakeLambda
    endpoint_id: str


@contextlib.asynccontextmanager
async def deployed(delay: float, **shared: str) -> AsyncIterator[Deployment]:
    """An API gateway and two worker environments on fresh tables, all given ``shared``."""
    async with support.fresh_tables() as url, fake_lambda() as fake:
        # two execution environments: a duplicate may run beside the first delivery
        async with runtime_process(fake, store=url, worker="true", **shared), \
                runtime_process(fake, store=url, worker="true", **shared):
            async with running_gateway(
                url,
                dispatch="lambda",
                dispatch_function=WORKER,
                dispatch_endpoint_url=fake.endpoint_url,
                dispatch_region=support.REGION,
                remote_poll_seconds=0.1,
                **shared,
            ) as api:
                endpoint = Endpoint(id=str(uuid.uuid4()), name="Echo", metadata={
                    "module_name": "handlers.echo", "class_name": "EchoHandler", "delay": delay})
                await api.store.create_endpoint(endpoint)
                yield Deployment(api, fake, endpoint.id)


@pytest.fixture
async def deployment(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Deployment]:
    support.use_moto_credentials(monkeypatch)
    async with deployed(0.02) as running:
        yield running


async def finished(fake: FakeLambda, count: int) -> list[Invocation]:
    """The first ``count`` invocations, once each has its outcome."""
    async def done() -> list[Invocation]:
        return [i for i in fake.invocations[:count] if i.done.done()]

    return await eventually(done, until=lambda found: len(found) == count, timeout=60,
                            what=f"{count} invocations of the worker finished")


def async_invoke(fake: FakeLambda, event: dict) -> int:
    client = boto3.client("lambda", endpoint_url=fake.endpoint_url, region_name=support.REGION,
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    try:
        return client.invoke(FunctionName=WORKER, InvocationType="Event",
                             Payload=json.dumps(event).encode())["StatusCode"]
    finally:
        client.close()


@pytest.mark.parametrize("deliveries", [1, 2], ids=["once", "twice"])
async def test_a_blocking_send_is_run_by_the_worker_lambda(deployment: Deployment, deliveries: int):
    deployment.worker.duplicates = deliveries - 1
    async with deployment.api.client(deployment.endpoint_id, streaming=False, timeout=60) as client:
        (answer,) = await collect(client.send_message(send_request("hello worker")))
        task = answer.task
        assert task.status.state == COMPLETED
        invocations = await finished(deployment.worker, deliveries)
        assert all(i.error is None for i in invocations), [i.error for i in invocations]
        events = [json.loads(i.payload) for i in invocations]
        assert {e["task_id"] for e in events} == {task.id} and {
            e["a2a_gateway"] for e in events
        } == {"run_task"}
        expected = {1: ["ran"], 2: ["duplicate", "ran"]}[deliveries]
        assert sorted(i.result["outcome"] for i in invocations) == expected
        stored = await client.get_task(GetTaskRequest(id=task.id))
        assert [[p.text for p in a.parts] for a in stored.artifacts] == [["echo: hello worker"]]
        assert [[p.text for p in a.parts] for a in task.artifacts] == [["echo: hello worker"]]


async def test_a_streaming_send_follows_the_worker_s_run(deployment: Deployment):
    async with deployment.api.client(deployment.endpoint_id, streaming=True, timeout=60) as client:
        events = await collect(client.send_message(send_request("stream me")))
    final = events[-1]
    assert (
        final.status_update.status.state
        if final.HasField("status_update")
        else final.task.status.state
    ) == COMPLETED
    assert list(reconstruct(events).values()) == ["echo: stream me"]
    (invocation,) = await finished(deployment.worker, 1)
    assert invocation.result == {"outcome": "ran"}


async def test_the_sweep_is_answered_and_a_refused_event_fails_its_invocation(
    deployment: Deployment,
):
    assert await asyncio.to_thread(async_invoke, deployment.worker, SWEEP_EVENT) == 202
    assert await asyncio.to_thread(async_invoke, deployment.worker, {"a2a_gateway": "bogus"}) == 202
    swept, refused = await finished(deployment.worker, 2)
    assert swept.result == {"outcome": "swept"}
    assert refused.result is None and refused.error["errorType"] == "InvocationFailedError"
    assert refused.error["errorMessage"].startswith("/events answered 400")


@pytest.mark.redis
async def test_with_redis_the_worker_s_text_streams_live_to_the_api(monkeypatch):
    redis_url = require_env("A2A_TEST_REDIS_URL")
    support.use_moto_credentials(monkeypatch)
    shared = {"redis_url": redis_url, "redis_prefix": f"t{uuid.uuid4().hex[:8]}:"}
    words = [f"w{n}" for n in range(20)]
    async with deployed(0.2, **shared) as running:
        async with running.api.client(running.endpoint_id, streaming=True, timeout=60) as client:
            seen = []
            async for event in client.send_message(send_request(" ".join(words))):
                seen.append((time.monotonic(), event))
    events = [event for _, event in seen]
    assert list(reconstruct(events).values()) == ["echo: " + " ".join(words)]
    chunks = [t for t, e in seen if e.HasField("artifact_update") and e.artifact_update.append]
    # from the store alone the answer comes as one artifact at the end; live, chunk by chunk
    kinds = [(round(t - seen[0][0], 2), e.WhichOneof("payload")) for t, e in seen]
    assert len(chunks) >= 4 and chunks[-1] - chunks[0] > 0.5, kinds
