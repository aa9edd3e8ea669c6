"""A backend stream's events are bounded (``max_event_bytes``): a backend that never ends a
line fails its task with the reason, and the gateway stops reading (and keeping) its bytes."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from aiohttp import web

from tests.support.harness import running_gateway
from tests.support.local_server import serve_locally
from tests.support.messages import send_body

pytestmark = pytest.mark.timeout(120)

CHUNK = 16 * 1024
WOULD_SEND = 32 * 1024 * 1024


class EndlessLineBackend:
    """An OpenAI-style chat backend whose stream is one ``data:`` line that never ends."""

    def __init__(self) -> None:
        self.sent = 0
        self.ended = asyncio.Event()

    async def completions(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            await response.write(b"data: ")
            while self.sent < WOULD_SEND:
                await response.write(b"x" * CHUNK)
                self.sent += CHUNK
        except (ConnectionError, asyncio.CancelledError):
            pass  # the gateway stopped reading
        finally:
            self.ended.set()
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completions)
        return app


async def test_an_event_over_max_event_bytes_fails_the_task_and_the_stream_is_dropped():
    backend = EndlessLineBackend()
    bound = 256 * 1024
    async with serve_locally(backend.app()) as backend_url, running_gateway() as gw, \
            httpx.AsyncClient(timeout=90) as http:
        ep = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler",
                                   settings={"base_url": f"{backend_url}/v1", "timeout": 60,
                                             "max_event_bytes": bound, "retry_attempts": 0})
        r = await http.post(
            gw.jsonrpc_url(ep), json=send_body("hi"), headers={"A2A-Version": "1.0"}
        )
        task = r.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_FAILED", task
        reason = task["status"]["message"]["parts"][0]["text"]
        assert reason == f"the chat backend sent an event larger than {bound} bytes", reason
        await asyncio.wait_for(backend.ended.wait(), 30)
    # the gateway closed the stream soon after the bound: what the backend managed to send
    # is the bound plus what the sockets buffer, not the whole endless line
    assert backend.sent < WOULD_SEND // 4, backend.sent
