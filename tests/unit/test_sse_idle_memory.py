"""An idle SSE stream keeps nothing of what it already sent: not its first event (the Task,
about 1 KB of protobuf memory) nor that event's frame (the Task's JSON, a few KB), while it
waits for the next event; and an ``SSEStream`` has no ``__dict__``."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import weakref
from typing import Any

import aiohttp
from aiohttp import web

from a2a_gateway.transport.sse import SSEStream, stream_events
from tests.unit.test_sse_response import _serve


class _Event:
    """Stands for a protobuf event: something a weak reference can watch."""

    def __init__(self, body: bytes) -> None:
        self.body = body


BIG = 1_000_000
"""Bytes of the first event's frame: what keeping it would show in ``tracemalloc``."""


async def test_an_idle_stream_keeps_neither_its_first_event_nor_its_frame() -> None:
    release, watched = asyncio.Event(), {}

    async def events() -> Any:
        first = _Event(b"first")
        watched["first"] = weakref.ref(first)
        yield first
        del first
        await release.wait()
        yield _Event(b'{"second":2}')

    def frame(event: _Event) -> bytes:
        return b'{"task":"' + b"x" * BIG + b'"}' if event.body == b"first" else event.body

    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream_events(request, 0, events(), frame, lambda e: b"{}", {})

    runner, url = await _serve(handler)
    tracemalloc.start()
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            sent = len(b'data: {"task":"') + BIG + len(b'"}\n\n')
            assert (await response.content.readexactly(sent)).endswith(b'x"}\n\n')
            gc.collect()
            assert watched["first"]() is None  # the stream idles without its first event
            assert tracemalloc.get_traced_memory()[0] < BIG // 2  # nor its frame
            release.set()
            assert b'data: {"second":2}' in await response.content.read()
    finally:
        tracemalloc.stop()
        await runner.cleanup()


def test_a_stream_has_slots_only() -> None:
    assert not hasattr(SSEStream, "__dict__") or "__dict__" not in dir(SSEStream)
    assert "_registry" in SSEStream.__slots__
