"""The gateway's Lambda handler run by the real ``awslambdaric`` (a process of its own, as in
a Lambda execution environment) against a local Lambda service (tests/lambda_runtime.py),
called with boto3's Lambda client, on the DynamoDB store (moto server).

Function URL events come back as Lambda proxy responses; a task written in one execution
environment is read in another (the store keeps it, not the process); an event the gateway
refuses fails the invocation through the Runtime API's error route, and the runtime goes on.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import boto3
from botocore.config import Config
import pytest

from a2a_gateway.stores.base import Endpoint
from a2a_gateway.stores.dynamodb import DynamoDBStore
from tests.lambda_runtime import (
    FUNCTION_URL_HOST, FakeLambda, fake_lambda, function_url_event, proxy_body, runtime_process,
)
from tests.messages import rpc, send_body
from tests.stores import dynamo_support as support

pytestmark = pytest.mark.dynamodb

PUBLIC_BASE_URL = f"https://{FUNCTION_URL_HOST}"
ONCE = Config(retries={"total_max_attempts": 1}, read_timeout=120)
"""An invoke is not retried, so a lost invocation fails the test instead of hiding."""


@pytest.fixture
async def store_url() -> AsyncIterator[str]:
    async with support.fresh_tables() as url:
        yield url


async def add_echo(store_url: str) -> str:
    store = await DynamoDBStore.open(store_url, **support.CREDENTIALS)
    try:
        endpoint = Endpoint(id=str(uuid.uuid4()), name="Echo", metadata={
            "module_name": "handlers.echo", "class_name": "EchoHandler", "public": True, "delay": 0})
        await store.create_endpoint(endpoint)
        return endpoint.id
    finally:
        await store.aclose()


async def invoke(fake: FakeLambda, event: dict[str, Any]) -> dict[str, Any]:
    """A synchronous invoke with boto3's Lambda client: ``{"StatusCode", "FunctionError"?,
    "Payload": <decoded JSON>}``."""
    def call() -> dict[str, Any]:
        client = boto3.client("lambda", endpoint_url=fake.endpoint_url, region_name=support.REGION,
                              config=ONCE, **support.CREDENTIALS)
        try:
            answer = client.invoke(FunctionName="a2a-gateway-api", Payload=json.dumps(event).encode())
            return {**answer, "Payload": json.loads(answer["Payload"].read())}
        finally:
            client.close()

    return await asyncio.to_thread(call)


async def test_function_url_events_are_served_and_the_task_outlives_the_execution_environment(
    store_url: str,
):
    endpoint_id = await add_echo(store_url)
    async with fake_lambda() as fake:
        async with runtime_process(fake, store=store_url, public_base_url=PUBLIC_BASE_URL):
            card = await invoke(fake, function_url_event(
                "GET", f"/{endpoint_id}/.well-known/agent-card.json"))
            assert card["StatusCode"] == 200 and "FunctionError" not in card, card
            response = card["Payload"]
            assert response["statusCode"] == 200
            assert response["headers"]["content-type"].startswith("application/json")
            document = proxy_body(response)
            assert document["name"] == "Echo"
            assert {i["url"] for i in document["supportedInterfaces"]} >= {
                f"{PUBLIC_BASE_URL}/{endpoint_id}/a2a"}

            sent = (await invoke(fake, function_url_event(
                "POST", f"/{endpoint_id}/a2a", send_body("hello lambda", rid="send-1"),
                headers={"a2a-version": "1.0"})))["Payload"]
            assert sent["statusCode"] == 200
            answer = proxy_body(sent)
            assert answer["id"] == "send-1", answer
            task = answer["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED"
            assert task["artifacts"][0]["parts"][0]["text"] == "echo: hello lambda"

            missing = (await invoke(fake, function_url_event("GET", "/no/such/route")))["Payload"]
            assert missing["statusCode"] == 404

        # a new execution environment (a cold start): only the store knows the task
        async with runtime_process(fake, store=store_url, public_base_url=PUBLIC_BASE_URL):
            got = (await invoke(fake, function_url_event(
                "POST", f"/{endpoint_id}/a2a", rpc("GetTask", {"id": task["id"]}, "get-1"),
                headers={"a2a-version": "1.0"})))["Payload"]
            assert got["statusCode"] == 200
            stored = proxy_body(got)["result"]
            assert stored["id"] == task["id"] and stored["status"]["state"] == "TASK_STATE_COMPLETED"
            assert stored["artifacts"] == task["artifacts"]

            listed = (await invoke(fake, function_url_event(
                "GET", f"/{endpoint_id}/a2a/rest/tasks", query="pageSize=1",
                headers={"a2a-version": "1.0"})))["Payload"]
            assert listed["statusCode"] == 200
            assert [t["id"] for t in proxy_body(listed)["tasks"]] == [task["id"]]
    assert fake.init_errors == []


async def test_an_event_the_gateway_refuses_fails_the_invocation_and_the_runtime_goes_on(
    store_url: str,
):
    async with fake_lambda() as fake, runtime_process(fake, store=store_url):
        # not a worker: the gateway has no /events route, so the event is refused
        failed = await invoke(fake, {"a2a_gateway": "sweep"})
        assert failed["FunctionError"] == "Unhandled"
        assert failed["Payload"]["errorType"] == "InvocationFailedError"
        assert failed["Payload"]["errorMessage"].startswith("/events answered 404")
        (invocation,) = fake.invocations
        assert invocation.error["errorType"] == "InvocationFailedError" and invocation.result is None

        healthy = await invoke(fake, function_url_event("GET", "/healthz"))
        assert healthy["Payload"]["statusCode"] == 200
        assert proxy_body(healthy["Payload"]) == {"status": "ok"}
