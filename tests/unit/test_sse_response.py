"""A stream's headers leave in the same socket write as its first event (one send, not two);
a stream whose first event may wait still sends its headers at once."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp import web

from a2a_gateway.transport.sse import SSEStream, stream_events


def _counting(request: web.Request, writes: list[bytes]) -> None:
    transport = request.transport
    write, writelines = transport.write, transport.writelines

    def counted_write(data: Any) -> None:
        writes.append(bytes(data))
        write(data)

    def counted_writelines(lines: Any) -> None:
        writes.append(b"".join(lines))
        writelines(lines)

    transport.write, transport.writelines = counted_write, counted_writelines


async def _serve(handler: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/"


async def test_the_headers_and_the_first_event_are_one_socket_write() -> None:
    writes: list[bytes] = []
    release = asyncio.Event()

    async def events() -> Any:
        yield b'{"first":1}'
        await release.wait()
        yield b'{"second":2}'

    async def handler(request: web.Request) -> web.StreamResponse:
        _counting(request, writes)
        return await stream_events(request, 0, events(), lambda e: e, lambda e: b"{}", {})

    runner, url = await _serve(handler)
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            assert response.headers["Content-Type"] == "text/event-stream"
            assert (await response.content.readline()).startswith(b"data: ")
            assert len(writes) == 1  # was 2: the headers alone, then the event
            assert writes[0].startswith(b"HTTP/1.1 200") and b'data: {"first":1}' in writes[0]
            release.set()
            body = await response.content.read()
            assert b'data: {"second":2}' in body
    finally:
        await runner.cleanup()


async def test_a_stream_opened_without_an_event_sends_its_headers_at_once() -> None:
    never = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        stream = await SSEStream.open(request, 0)
        await never.wait()  # the feed's reconnect: nothing to send yet
        return await stream.close()

    runner, url = await _serve(handler)
    try:
        async with aiohttp.ClientSession() as http:
            response = await asyncio.wait_for(http.get(url), timeout=30)
            assert response.status == 200
            response.close()
    finally:
        never.set()
        await runner.cleanup()
