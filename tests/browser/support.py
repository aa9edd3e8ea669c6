"""What the browser tests share: where the browser is, the operator key the demo gateway
takes, ``a2a-gateway demo`` as a child process, and the a2a-sdk client as the other caller."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import SendMessageRequest, StreamResponse

from a2a_gateway.cli import DEMO_ENDPOINT_ID
from tests.cli_process import LISTENING, ROOT, cli_env

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SCREENSHOTS = ROOT / "tests" / "output" / "browser"
OPERATOR_KEY = "console-" + uuid.uuid4().hex
WAIT_SECONDS = 60


def send(base_url: str, request: SendMessageRequest, *, streaming: bool,
         endpoint_id: str = DEMO_ENDPOINT_ID) -> list[StreamResponse]:
    """Every event of one SendMessage by the a2a-sdk client (run on its own event loop)."""

    async def call() -> list[StreamResponse]:
        async with httpx.AsyncClient(timeout=httpx.Timeout(WAIT_SECONDS)) as http:
            card = await A2ACardResolver(http, f"{base_url}/{endpoint_id}").get_agent_card()
            client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http,
                                                supported_protocol_bindings=["JSONRPC"])).create(card)
            try:
                return [event async for event in client.send_message(request)]
            finally:
                await client.close()

    return asyncio.run(call())


@contextmanager
def demo_gateway(**env: str) -> Iterator[str]:
    """The base URL of ``a2a-gateway demo`` on a memory store, with ``env`` added to its
    environment."""
    proc = subprocess.Popen([sys.executable, "-m", "a2a_gateway", "demo", "--store", "memory://", "--port", "0"],
                            cwd=ROOT, env=cli_env(**env), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    assert proc.stdout is not None
    drain = threading.Thread(target=proc.stdout.read, daemon=True)  # a full pipe would stop it
    try:
        match = None
        while match is None:
            line = proc.stdout.readline()
            assert line, "the demo gateway exited before listening"
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
