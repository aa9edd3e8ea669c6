"""A local Lambda service for one function: the Runtime API its runtime (the real
``awslambdaric``) polls, and the Invoke API a caller (boto3, the gateway's dispatcher) uses.

    async with fake_lambda() as fake:   # fake.runtime_api for AWS_LAMBDA_RUNTIME_API,
        ...                              # fake.endpoint_url for a boto3 Lambda client

``POST /2015-03-31/functions/{name}/invocations`` queues the payload for the runtime: with
``X-Amz-Invocation-Type: Event`` it answers 202 at once (and delivers the event
``1 + fake.duplicates`` times, as Lambda's at-least-once delivery may), otherwise it waits for
the runtime's response (an error comes back with ``X-Amz-Function-Error: Unhandled``, as at
AWS). Every invocation is kept in ``fake.invocations`` with its outcome.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.stores import dynamo_support

RUNTIME = "/2018-06-01/runtime"
HANDLER = "a2a_gateway.lambda_handler.handler"
FUNCTION_URL_HOST = "abcdefghij.lambda-url.eu-central-1.on.aws"


@dataclass
class Invocation:
    payload: bytes
    function: str
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    result: Any = None
    error: dict[str, Any] | None = None
    error_type: str | None = None

    def finish(self, body: bytes, *, error_type: str | None = None) -> None:
        if error_type is None:
            self.result = json.loads(body)
        else:
            self.error, self.error_type = json.loads(body), error_type
        if not self.done.done():
            self.done.set_result(None)


class FakeLambda:
    def __init__(self, *, timeout_seconds: float = 60.0) -> None:
        self.timeout_seconds = timeout_seconds
        self.duplicates = 0
        """Extra deliveries of each asynchronous invoke (Lambda may deliver an event twice)."""
        self.invocations: list[Invocation] = []
        self.init_errors: list[dict[str, Any]] = []
        self._pending: asyncio.Queue[Invocation] = asyncio.Queue()
        self._by_id: dict[str, Invocation] = {}
        self.runtime_api = ""
        self.endpoint_url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(f"{RUNTIME}/invocation/next", self._next)
        app.router.add_post(f"{RUNTIME}/invocation/{{id}}/response", self._response)
        app.router.add_post(f"{RUNTIME}/invocation/{{id}}/error", self._error)
        app.router.add_post(f"{RUNTIME}/init/error", self._init_error)
        app.router.add_post("/2015-03-31/functions/{name}/invocations", self._invoke)
        return app

    def deliver(self, payload: bytes, function: str = "function") -> Invocation:
        """Queue one invocation for the runtime."""
        invocation = Invocation(payload, function)
        self.invocations.append(invocation)
        self._by_id[invocation.id] = invocation
        self._pending.put_nowait(invocation)
        return invocation

    async def _next(self, request: web.Request) -> web.Response:
        invocation = await self._pending.get()
        deadline = int((time.time() + self.timeout_seconds) * 1000)
        return web.Response(body=invocation.payload, content_type="application/json", headers={
            "Lambda-Runtime-Aws-Request-Id": invocation.id,
            "Lambda-Runtime-Deadline-Ms": str(deadline),
            "Lambda-Runtime-Invoked-Function-Arn":
                f"arn:aws:lambda:eu-central-1:123456789012:function:{invocation.function}",
            "Lambda-Runtime-Trace-Id": f"Root=1-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:24]}",
        })

    async def _response(self, request: web.Request) -> web.Response:
        self._by_id[request.match_info["id"]].finish(await request.read())
        return web.Response(status=202)

    async def _error(self, request: web.Request) -> web.Response:
        error_type = request.headers.get("Lambda-Runtime-Function-Error-Type", "Unhandled")
        self._by_id[request.match_info["id"]].finish(await request.read(), error_type=error_type)
        return web.Response(status=202)

    async def _init_error(self, request: web.Request) -> web.Response:
        self.init_errors.append(json.loads(await request.read()))
        return web.Response(status=202)

    async def _invoke(self, request: web.Request) -> web.Response:
        payload, function = await request.read(), request.match_info["name"]
        kind = request.headers.get("X-Amz-Invocation-Type", "RequestResponse")
        if kind == "Event":
            for _ in range(1 + self.duplicates):
                self.deliver(payload, function)
            return web.Response(status=202)
        if kind == "DryRun":
            return web.Response(status=204)
        invocation = self.deliver(payload, function)
        await asyncio.wait_for(asyncio.shield(invocation.done), self.timeout_seconds)
        if invocation.error is not None:
            return web.json_response(
                invocation.error, headers={"X-Amz-Function-Error": "Unhandled"}
            )
        return web.json_response(invocation.result)


@asynccontextmanager
async def fake_lambda(**options: Any) -> AsyncIterator[FakeLambda]:
    """The fake on a free loopback port for the duration of the block."""
    fake = FakeLambda(**options)
    # a runtime killed while it polls must not take the next invocation with it
    runner = web.AppRunner(
        fake.app(), access_log=None, shutdown_timeout=0.1, handler_cancellation=True
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fake.runtime_api = f"127.0.0.1:{port}"
    fake.endpoint_url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()


@asynccontextmanager
async def runtime_process(
    fake: FakeLambda, **settings: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m awslambdaric`` serving the gateway's handler against ``fake``, with
    ``settings`` as ``A2A_GATEWAY_*`` variables, moto's dummy AWS credentials and moto as
    Secrets Manager."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "A2A_GATEWAY_"))}
    env |= {"AWS_LAMBDA_RUNTIME_API": fake.runtime_api, "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_ACCESS_KEY_ID": dynamo_support.CREDENTIALS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": dynamo_support.CREDENTIALS["aws_secret_access_key"],
            "AWS_DEFAULT_REGION": dynamo_support.REGION,
            "AWS_ENDPOINT_URL_SECRETS_MANAGER": dynamo_support.moto_endpoint()}
    env |= {f"A2A_GATEWAY_{name.upper()}": value for name, value in settings.items()}
    with tempfile.TemporaryFile() as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "awslambdaric", HANDLER, env=env, stdout=log, stderr=log)
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
            log.seek(0)
            sys.stderr.write(
                log.read()[-4000:].decode(errors="replace")
            )  # shown if the test failed


def function_url_event(method: str, path: str, body: Any = None, *, query: str = "",
                       headers: dict[str, str] | None = None) -> dict[str, Any]:
    """What a Lambda Function URL hands the function for one HTTP request (payload format
    2.0); a JSON ``body`` is sent base64-encoded, as Function URLs do for any body."""
    raw = b"" if body is None else json.dumps(body).encode()
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": {
            "host": FUNCTION_URL_HOST,
            "x-forwarded-proto": "https",
            "user-agent": "curl/8.5.0",
            **({"content-type": "application/json"} if raw else {}),
            **(headers or {}),
        },
        "requestContext": {
            "accountId": "anonymous",
            "apiId": FUNCTION_URL_HOST.split(".")[0],
            "domainName": FUNCTION_URL_HOST,
            "domainPrefix": FUNCTION_URL_HOST.split(".")[0],
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.7",
                "userAgent": "curl/8.5.0",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "timeEpoch": int(time.time() * 1000),
        },
        "body": base64.b64encode(raw).decode(),
        "isBase64Encoded": True,
    }


def proxy_body(response: dict[str, Any]) -> Any:
    """The JSON body of a Lambda proxy response."""
    raw = response["body"]
    return json.loads(base64.b64decode(raw) if response.get("isBase64Encoded") else raw)
