"""Backend connections: the gateway's shared HTTP client holds a streamed run's connection
for the whole run, so its pool must have room for many runs at once.

150 SendStreamingMessage calls through the real OpenAI-chat bridge to a local SSE backend
that sends one delta per call, then holds every stream open until all 150 calls are open
at the same time: with httpx's default pool (100 connections) the 101st call waits for a
connection that no stream gives back, so only a pool of more than 150 lets them finish.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from tests.support.harness import collect, reconstruct, running_gateway
from tests.support.local_server import serve_locally
from tests.support.messages import send_request

STREAMS = 150


def chunk(text: str) -> bytes:
    return (
        b"data: "
        + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode()
        + b"\n\n"
    )


class HoldingBackend:
    """An OpenAI-compatible chat backend whose streams all wait for one another."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.open = 0
        self.most_open = 0
        self.all_open = asyncio.Event()

    async def completions(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        if self.open >= self.expected:
            self.all_open.set()
        try:
            await response.write(chunk("first"))
            await asyncio.wait_for(self.all_open.wait(), 45)
            await response.write(chunk(" second"))
            await response.write(b"data: [DONE]\n\n")
        finally:
            self.open -= 1
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completions)
        return app


async def test_150_concurrent_backend_streams_are_all_open_at_once():
    backend = HoldingBackend(STREAMS)
    async with serve_locally(backend.app()) as backend_url, running_gateway() as gw:
        ep = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler",
                                   settings={"base_url": f"{backend_url}/v1", "timeout": 120},
                                   card={"capabilities": {"streaming": True}})
        # two callers: each a2a-sdk client's own httpx pool holds 100 connections
        async with gw.client(ep, timeout=90) as first, gw.client(ep, timeout=90) as second:
            async def one(n: int) -> list:
                client = first if n % 2 else second
                return await collect(client.send_message(send_request(f"call {n}")))

            results = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(STREAMS))), 90)
    assert backend.most_open == STREAMS
    for events in results:
        assert events[-1].status_update.status.state == 3, events[-1]  # TASK_STATE_COMPLETED
        assert list(reconstruct(events).values()) == ["first second"]


def test_the_pool_serves_a_thousand_backend_streams_by_default():
    from a2a_gateway.settings import GatewaySettings

    assert GatewaySettings().backend_max_connections >= 1000
