"""SSE framing for A2A streams: ``data:`` events, ``event: error``, keepalive comments.

A client that goes away ends the response quietly; it never cancels the task
behind the stream.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}


class SSEStream:
    def __init__(self, response: web.StreamResponse, keepalive_seconds: float) -> None:
        self._response = response
        self._keepalive_seconds = keepalive_seconds
        self._keepalive: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.connected = True

    @classmethod
    async def open(
        cls, request: web.Request, keepalive_seconds: float, headers: dict[str, str] | None = None
    ) -> SSEStream:
        response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **(headers or {})})
        await response.prepare(request)
        stream = cls(response, keepalive_seconds)
        if keepalive_seconds > 0:
            stream._keepalive = asyncio.create_task(stream._ping())
        return stream

    async def _write(self, chunk: bytes) -> bool:
        if not self.connected:
            return False
        try:
            async with self._lock:
                await self._response.write(chunk)
        except (ConnectionResetError, RuntimeError):
            self.connected = False
        return self.connected

    async def send(self, data: bytes, event: str | None = None) -> bool:
        prefix = f"event: {event}\n".encode() if event else b""
        return await self._write(prefix + b"data: " + data + b"\n\n")

    async def _ping(self) -> None:
        while self.connected:
            await asyncio.sleep(self._keepalive_seconds)
            await self._write(b": ping\n\n")

    async def close(self) -> web.StreamResponse:
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive
        if self.connected:
            with contextlib.suppress(ConnectionResetError, RuntimeError):
                await self._response.write_eof()
        return self._response
