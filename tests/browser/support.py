"""What the browser tests share: where the browser is, the operator key the demo gateway
takes, ``a2a-gateway demo`` (or ``serve``) as a child process, and the a2a-sdk client as the
other caller."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import GetTaskRequest, SendMessageRequest, StreamResponse, Task

from a2a_gateway.cli import DEMO_ENDPOINT_ID
from tests.support.cli_process import LISTENING, ROOT, cli_env

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SCREENSHOTS = ROOT / "tests" / "output" / "browser"
OPERATOR_KEY = "console-" + uuid.uuid4().hex
WAIT_SECONDS = 60
T = TypeVar("T")


def send(base_url: str, request: SendMessageRequest, *, streaming: bool,
         endpoint_id: str = DEMO_ENDPOINT_ID) -> list[StreamResponse]:
    """Every event of one SendMessage by the a2a-sdk client (run on its own event loop)."""

    async def call(client: Client) -> list[StreamResponse]:
        return [event async for event in client.send_message(request)]

    return asyncio.run(_with_client(base_url, endpoint_id, call, streaming=streaming))


def send_each(base_url: str, requests: list[SendMessageRequest], *, streaming: bool,
              endpoint_id: str = DEMO_ENDPOINT_ID) -> list[list[StreamResponse]]:
    """Every event of each SendMessage, all sent at once by one a2a-sdk client."""

    async def call(client: Client) -> list[list[StreamResponse]]:
        async def events(request: SendMessageRequest) -> list[StreamResponse]:
            return [event async for event in client.send_message(request)]

        return list(await asyncio.gather(*map(events, requests)))

    return asyncio.run(_with_client(base_url, endpoint_id, call, streaming=streaming))


def get_task(base_url: str, task_id: str, *, endpoint_id: str = DEMO_ENDPOINT_ID) -> Task:
    """The task as GetTask by the a2a-sdk client answers it."""

    async def call(client: Client) -> Task:
        return await client.get_task(GetTaskRequest(id=task_id))

    return asyncio.run(_with_client(base_url, endpoint_id, call, streaming=False))


async def _with_client(base_url: str, endpoint_id: str, call: Callable[[Client], Awaitable[T]], *,
                       streaming: bool) -> T:
    """``call`` given an a2a-sdk client of the endpoint, built from its card."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(WAIT_SECONDS)) as http:
        card = await A2ACardResolver(http, f"{base_url}/{endpoint_id}").get_agent_card()
        client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http,
                                            supported_protocol_bindings=["JSONRPC"])).create(card)
        try:
            return await call(client)
        finally:
            await client.close()


@contextmanager
def demo_gateway(**env: str) -> Iterator[str]:
    """The base URL of ``a2a-gateway demo`` on a memory store, with ``env`` added to its
    environment."""
    with gateway_process("demo", "--store", "memory://", **env) as base:
        yield base


@contextmanager
def gateway_process(*args: str, **env: str) -> Iterator[str]:
    """The base URL of ``a2a-gateway ARGS --port 0`` as a child process, with ``env`` added
    to its environment; terminated afterwards."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "a2a_gateway", *args, "--port", "0"],
        cwd=ROOT,
        env=cli_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    drain = threading.Thread(target=proc.stdout.read, daemon=True)  # a full pipe would stop it
    try:
        match = None
        while match is None:
            line = proc.stdout.readline()
            assert line, f"a2a-gateway {args[0]} exited before listening"
            match = LISTENING.search(line)
        drain.start()
        yield match[1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if drain.is_alive():
            drain.join(5)
        proc.stdout.close()
