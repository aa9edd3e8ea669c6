"""Serve recorded OpenAI-style answers through ``httpx.MockTransport`` so the
handlers run their real HTTP path (request building, SSE parsing, closing)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx

from handlers.base import HandlerEvent

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "openclaw"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


class TrackedStream(httpx.AsyncByteStream):
    """A response body given in chunks; records whether the client closed it early."""

    def __init__(self, chunks: list[bytes], *, hang: bool = False) -> None:
        self.chunks = chunks
        self.hang = hang
        self.sent = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        import asyncio

        for chunk in self.chunks:
            self.sent += 1
            yield chunk
        if self.hang:
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


def sse_chunks(raw: bytes) -> list[bytes]:
    """Split a recorded SSE body into one chunk per event."""
    return [part + b"\n\n" for part in raw.split(b"\n\n") if part.strip()]


class Backend:
    """A scripted backend: ``responder(request) -> httpx.Response``; keeps the requests."""

    def __init__(self, responder: Callable[[httpx.Request], httpx.Response]) -> None:
        self.responder = responder
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.responder(request)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


def sse_response(raw: bytes | TrackedStream, status: int = 200) -> httpx.Response:
    stream = raw if isinstance(raw, TrackedStream) else TrackedStream(sse_chunks(raw))
    return httpx.Response(status, headers={"content-type": "text/event-stream"}, stream=stream)


def json_response(body: bytes | dict[str, Any], status: int = 200) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.Response(status, headers={"content-type": "application/json"}, content=content)


async def collect(events: AsyncIterator[HandlerEvent]) -> list[HandlerEvent]:
    return [event async for event in events]
