"""What the browser tests share: where the browser is, the operator key the demo gateway
takes, and the a2a-sdk client as the other caller."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import SendMessageRequest, StreamResponse

from a2a_gateway.cli import DEMO_ENDPOINT_ID
from tests.cli_process import ROOT

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

