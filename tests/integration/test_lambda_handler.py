"""The gateway's Lambda handler run by the real ``awslambdaric`` (a process of its own, as in
a Lambda execution environment) against a local Lambda service (tests/support/lambda_runtime.py),
called with boto3's Lambda client, on the DynamoDB store (moto server).

Function URL events come back as Lambda proxy responses; a task written in one execution
environment is read in another (the store keeps it, not the process); the gateway's secrets
come from a Secrets Manager secret (moto), not from the environment, the same one the
operator's commands read; an event the gateway
refuses fails the invocation through the Runtime API's error route, and the runtime goes on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import boto3
import pytest
from botocore.config import Config

from a2a_gateway.stores.base import Endpoint
from a2a_gateway.stores.dynamodb import DynamoDBStore
from tests.stores import dynamo_support as support
from tests.support.cli_process import run_cli
from tests.support.lambda_runtime import (
    FUNCTION_URL_HOST,
    FakeLambda,
    fake_lambda,
    function_url_event,
    proxy_body,
    runtime_process,
)
from tests.support.messages import rpc, send_body

pytestmark = pytest.mark.dynamodb

PUBLIC_BASE_URL = f"https://{FUNCTION_URL_HOST}"
AWS_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
ONCE = Config(retries={"total_max_attempts": 1}, read_timeout=120)
"""An invoke is not retried, so a lost invocation fails the test instead of hiding."""


@pytest.fixture
async def store_url() -> AsyncIterator[str]:
    async with support.fresh_tables() as url:
        yield url


async def add_echo(store_url: str) -> str:
    """A public echo endpoint."""
    store = await DynamoDBStore.open(store_url, **support.CREDENTIALS)
    try:
        endpoint = Endpoint(
            id=str(uuid.uuid4()),
            name="Echo",
            metadata={
                "module_name": "handlers.echo",
                "class_name": "EchoHandler",
                "delay": 0,
                "public": True,
            },
        )
        await store.create_endpoint(endpoint)
        return endpoint.id
    finally:
        await store.aclose()


def operator(*args: str, **env: str) -> str:
    """An ``a2a-gateway`` command as deploy/README.md runs it against the stack (here: moto);
    the last line of its output."""
    done = run_cli(*args, AWS_DEFAULT_REGION=support.REGION, **AWS_CREDENTIALS,
                   AWS_ENDPOINT_URL_SECRETS_MANAGER=support.moto_endpoint(), **env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@asynccontextmanager
async def settings_secret(settings: dict[str, str]) -> AsyncIterator[str]:
    """A Secrets Manager secret (on moto) holding ``settings``; its ARN."""
    client = boto3.client("secretsmanager", endpoint_url=support.moto_endpoint(),
                          region_name=support.REGION, **support.CREDENTIALS)
    name = f"a2a-gateway-test-{uuid.uuid4().hex[:8]}"
    arn = client.create_secret(Name=name, SecretString=json.dumps(settings))["ARN"]
    try:
        yield arn
    finally:
        client.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
        client.close()


async def invoke(fake: FakeLambda, event: dict[str, Any]) -> dict[str, Any]:
    """A synchronous invoke with boto3's Lambda client: ``{"StatusCode", "FunctionError"?,
    "Payload": <decoded JSON>}``."""
    def call() -> dict[str, Any]:
        client = boto3.client("lambda", endpoint_url=fake.endpoint_url, region_name=support.REGION,
                              config=ONCE, **support.CREDENTIALS)
        try:
            answer = client.invoke(
                FunctionName="a2a-gateway-api", Payload=json.dumps(event).encode()
            )
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

            # buffered: a stream comes back whole, its events in order, the last one final
            streamed = (
                await invoke(
                    fake,
                    function_url_event(
                        "POST",
                        f"/{endpoint_id}/a2a",
                        send_body("two words", method="SendStreamingMessage"),
                        headers={"a2a-version": "1.0", "accept": "text/event-stream"},
                    ),
                )
            )["Payload"]
            assert streamed["statusCode"] == 200
            assert streamed["headers"]["content-type"].startswith("text/event-stream")
            frames = base64.b64decode(streamed["body"]).decode().split("\n\n")
            events = [json.loads(line[len("data: "):]) for frame in frames
                      for line in frame.splitlines() if line.startswith("data: ")]
            final = events[-1]["result"]["statusUpdate"]
            assert final["status"]["state"] == "TASK_STATE_COMPLETED"

            missing = (await invoke(fake, function_url_event("GET", "/no/such/route")))["Payload"]
            assert missing["statusCode"] == 404

        # a new execution environment (a cold start): only the store knows the task
        async with runtime_process(fake, store=store_url, public_base_url=PUBLIC_BASE_URL):
            got = (await invoke(fake, function_url_event(
                "POST", f"/{endpoint_id}/a2a", rpc("GetTask", {"id": task["id"]}, "get-1"),
                headers={"a2a-version": "1.0"})))["Payload"]
            assert got["statusCode"] == 200
            stored = proxy_body(got)["result"]
            assert (
                stored["id"] == task["id"] and stored["status"]["state"] == "TASK_STATE_COMPLETED"
            )
            assert stored["artifacts"] == task["artifacts"]

            listed = (await invoke(fake, function_url_event(
                "GET", f"/{endpoint_id}/a2a/rest/tasks", query="pageSize=1",
                headers={"a2a-version": "1.0"})))["Payload"]
            assert listed["statusCode"] == 200
            page = proxy_body(listed)  # the query string arrived: one task of two, the newest
            assert [t["id"] for t in page["tasks"]] == [final["taskId"]] and page["nextPageToken"]
    assert fake.init_errors == []


async def test_an_event_the_gateway_refuses_fails_the_invocation_and_the_runtime_goes_on(
    store_url: str,
):
    async with fake_lambda() as fake, runtime_process(fake, store=store_url):
        # not a worker: /events is only the operators' feed (GET), so the event is refused
        failed = await invoke(fake, {"a2a_gateway": "sweep"})
        assert failed["FunctionError"] == "Unhandled"
        assert failed["Payload"]["errorType"] == "InvocationFailedError"
        assert failed["Payload"]["errorMessage"].startswith(
            "/events answered 405"
        )  # GET only: the feed
        (invocation,) = fake.invocations
        assert (
            invocation.error["errorType"] == "InvocationFailedError" and invocation.result is None
        )

        healthy = await invoke(fake, function_url_event("GET", "/healthz"))
        assert healthy["Payload"]["statusCode"] == 200
        assert proxy_body(healthy["Payload"]) == {"status": "ok"}


async def test_a_key_made_with_the_settings_secret_opens_the_gateway(store_url: str):
    hmac_secret = uuid.uuid4().hex
    call = rpc("ListTasks", {}, "list-1")
    async with (
        settings_secret({"A2A_GATEWAY_API_KEY_SECRET": hmac_secret}) as arn,
        fake_lambda() as fake,
    ):
        # as deploy/README.md step 5: the operator's commands read the same secret
        endpoint_id = await asyncio.to_thread(
            operator, "endpoints", "add", "--store", store_url, "--name", "Echo",
            "--handler", "handlers.echo:EchoHandler", A2A_GATEWAY_SECRETS_MANAGER_ID=arn)
        key = await asyncio.to_thread(
            operator, "keys", "create", "--store", store_url, "--endpoint", endpoint_id,
            A2A_GATEWAY_SECRETS_MANAGER_ID=arn)
        async with runtime_process(fake, store=store_url, secrets_manager_id=arn):
            with_key = await invoke(
                fake,
                function_url_event(
                    "POST",
                    f"/{endpoint_id}/a2a",
                    call,
                    headers={"a2a-version": "1.0", "x-api-key": key},
                ),
            )
            assert with_key["Payload"]["statusCode"] == 200, proxy_body(with_key["Payload"])
            assert proxy_body(with_key["Payload"])["result"]["tasks"] == []
            without = (await invoke(fake, function_url_event(
                "POST", f"/{endpoint_id}/a2a", call, headers={"a2a-version": "1.0"})))["Payload"]
            assert without["statusCode"] == 401 and "www-authenticate" in without["headers"]
        # the same key against the default HMAC secret: the secret above was what let it in
        async with runtime_process(fake, store=store_url):
            refused = await invoke(
                fake,
                function_url_event(
                    "POST",
                    f"/{endpoint_id}/a2a",
                    call,
                    headers={"a2a-version": "1.0", "x-api-key": key},
                ),
            )
            assert refused["Payload"]["statusCode"] == 401


async def test_a_settings_secret_that_cannot_be_read_stops_serve_in_one_line(store_url: str):
    missing = "arn:aws:secretsmanager:eu-central-1:123456789012:secret:a2a-gateway-missing-AbCdEf"
    done = await asyncio.to_thread(
        run_cli, "serve", "--store", store_url, A2A_GATEWAY_SECRETS_MANAGER_ID=missing,
                   AWS_ENDPOINT_URL_SECRETS_MANAGER=support.moto_endpoint(),
                   AWS_DEFAULT_REGION=support.REGION, **AWS_CREDENTIALS)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"a2a-gateway: cannot read the settings secret {missing}: ResourceNotFoundException")


async def test_a_gateway_that_cannot_start_fails_each_invocation_with_the_reason():
    async with fake_lambda() as fake, runtime_process(fake, store="nosuch://x") as process:
        for _ in range(2):  # each invocation tries to start the gateway again
            failed = await invoke(fake, function_url_event("GET", "/healthz"))
            assert failed["FunctionError"] == "Unhandled"
            assert failed["Payload"]["errorType"] == "UnknownStoreError"
            assert "nosuch" in failed["Payload"]["errorMessage"]
        assert process.returncode is None and fake.init_errors == []
