"""One aiohttp request served by an ASGI application (the MCP SDK's Streamable HTTP transport).

The request body is handed over as it arrives and the response is written as the application
sends it, so a server-sent event stream reaches the client event by event. aiohttp does not
cancel a handler whose client went away, so once the body is read ``receive`` reports
``http.disconnect`` when the connection closes (checked every ``DISCONNECT_POLL_SECONDS``) or
the response has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

ASGIMessage = MutableMapping[str, Any]
ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[ASGIMessage]],
     Callable[[ASGIMessage], Awaitable[None]]],
    Awaitable[None],
]
BODY_CHUNK_BYTES = 64 * 1024
DISCONNECT_POLL_SECONDS = 1.0


def asgi_scope(request: web.Request, extra: dict[str, Any]) -> dict[str, Any]:
    """The ASGI HTTP scope of ``request``, with ``extra`` keys added."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1"),
        "query_string": request.query_string.encode("latin-1"),
        "root_path": "",
        "headers": [
            (name.lower(), value) for name, value in request.raw_headers
        ],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
        **extra,
    }


class AsgiExchange:
    """The ``receive`` and ``send`` of one request, and the aiohttp response they build."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self._body_done = False
        self._finished = asyncio.Event()

    async def receive(self) -> ASGIMessage:
        if not self._body_done:
            chunk = await self.request.content.read(BODY_CHUNK_BYTES)
            self._body_done = self.request.content.at_eof()
            return {"type": "http.request", "body": chunk, "more_body": not self._body_done}
        while not self._finished.is_set() and not self._closed():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DISCONNECT_POLL_SECONDS):
                    await self._finished.wait()
        return {"type": "http.disconnect"}

    def _closed(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    async def send(self, message: ASGIMessage) -> None:
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for name, value in message.get("headers", []):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            self.response = response
            return
        if message["type"] != "http.response.body" or self.response is None:
            return
        if self._finished.is_set():
            return
        if not self.response.prepared:
            await self.response.prepare(self.request)
        body = message.get("body", b"")
        try:
            if body:
                await self.response.write(body)
            if not message.get("more_body", False):
                self._finished.set()
                await self.response.write_eof()
        except ConnectionResetError:
            self._finished.set()
            raise OSError("the client closed the connection") from None


async def serve_asgi(
    request: web.Request, app: ASGIApp, extra_scope: dict[str, Any]
) -> web.StreamResponse:
    """Run ``app`` for ``request`` and return the response it wrote."""
    exchange = AsgiExchange(request)
    await app(asgi_scope(request, extra_scope), exchange.receive, exchange.send)
    if exchange.response is None:
        raise web.HTTPInternalServerError(reason="the MCP transport sent no response")
    if not exchange.response.prepared:
        await exchange.response.prepare(request)
        await exchange.response.write_eof()
    return exchange.response
