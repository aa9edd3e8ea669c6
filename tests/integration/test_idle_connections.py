"""Connections that send no request are closed, on raw sockets to a served gateway: a new
connection has ``header_timeout_seconds`` to send its first request's line and headers
(nothing sent, or a byte at a time), a keep-alive connection ``keepalive_timeout_seconds``
after its last response. A silent SSE stream and a slow upload are not idle: both go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import time
from collections.abc import AsyncIterator

import pytest

from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import rpc, wire_message
from tests.support.waiting import eventually

HEADER, KEEPALIVE = 1.0, 3.0
TIMEOUTS = {"header_timeout_seconds": HEADER, "keepalive_timeout_seconds": KEEPALIVE}
EARLY = 0.1  # timers may fire this much before the second the client counts from
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

pytestmark = pytest.mark.timeout(120)


@contextlib.asynccontextmanager
async def _connection(
    gw: RunningGateway,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = gw.base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _seconds_until_closed(reader: asyncio.StreamReader, since: float) -> float:
    """Seconds from ``since`` until the server closed the connection without answering."""
    assert await asyncio.wait_for(reader.read(), timeout=30) == b""
    return time.monotonic() - since


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(status, body) of one response with a Content-Length, leaving the connection open."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), timeout=30)
    return int(lines[0].split()[1]), body


def _post(path: str, body: bytes, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
             "A2A-Version: 1.0", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout():
    async with running_gateway(**TIMEOUTS) as gw, _connection(gw) as (reader, _):
        opened = time.monotonic()
        seconds = await _seconds_until_closed(reader, opened)
    assert HEADER - EARLY <= seconds < KEEPALIVE - 0.5  # the header timeout, not the keep-alive one


async def test_a_head_sent_a_byte_at_a_time_is_cut_at_the_header_timeout():
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000
    sent = 0
    async with running_gateway(**TIMEOUTS) as gw, _connection(gw) as (reader, writer):
        opened = time.monotonic()

        async def trickle() -> None:
            nonlocal sent
            with contextlib.suppress(ConnectionError):
                for byte in head:  # 250 s if nothing stopped it
                    writer.write(bytes([byte]))
                    await writer.drain()
                    sent += 1
                    await asyncio.sleep(0.25)

        trickling = asyncio.create_task(trickle())
        try:
            seconds = await _seconds_until_closed(reader, opened)
            assert not trickling.done()
        finally:
            trickling.cancel()
    assert HEADER - EARLY <= seconds < KEEPALIVE - 0.5
    assert sent >= 3  # bytes kept arriving; they did not restart the clock


async def test_an_idle_keepalive_connection_is_closed_after_the_keepalive_timeout():
    async with running_gateway(**TIMEOUTS) as gw, _connection(gw) as (reader, writer):
        writer.write(HEALTHZ)
        assert (await _response(reader))[0] == 200
        await asyncio.sleep(
            HEADER + 0.5
        )  # past the header timeout: a keep-alive wait is not cut by it
        writer.write(HEALTHZ)
        assert (await _response(reader))[0] == 200
        answered = time.monotonic()
        seconds = await _seconds_until_closed(reader, answered)
    assert KEEPALIVE - EARLY <= seconds < KEEPALIVE + 10


async def test_a_stream_silent_longer_than_both_timeouts_gets_its_events():
    delay = KEEPALIVE + 1.0  # each word of the echo follows the last after this silence
    async with running_gateway(**TIMEOUTS, sse_keepalive_seconds=60) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": delay})
        body = json.dumps(rpc("SendStreamingMessage", {"message": wire_message("word")})).encode()
        async with _connection(gw) as (reader, writer):
            writer.write(_post(f"/{endpoint_id}/a2a", body, Accept="text/event-stream") + body)
            received, longest_silence = b"", 0.0
            last = time.monotonic()
            async with asyncio.timeout(60):
                while b"TASK_STATE_COMPLETED" not in received:
                    chunk = await reader.read(65536)
                    assert chunk, f"the stream was closed before its end: {received!r}"
                    now = time.monotonic()
                    received, longest_silence, last = (
                        received + chunk,
                        max(longest_silence, now - last),
                        now,
                    )
    assert received.startswith(b"HTTP/1.1 200") and b"text/event-stream" in received
    assert b'"text":" word"' in received
    assert longest_silence > KEEPALIVE


async def test_an_upload_slower_than_both_timeouts_is_answered():
    async with running_gateway(**TIMEOUTS, body_read_timeout_seconds=30) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        message = json.dumps(rpc("SendMessage", {"message": wire_message("slow upload")}))
        body = (message[:-1] + " " * 1000 + "}").encode()  # padded with JSON whitespace
        pieces = [body[i:i + 150] for i in range(0, len(body), 150)]
        async with _connection(gw) as (reader, writer):
            writer.write(_post(f"/{endpoint_id}/a2a", body))
            started = time.monotonic()
            for piece in pieces:  # one piece every 0.5 s: about 4 s in all
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.5)
            assert time.monotonic() - started > KEEPALIVE
            status, answer = await _response(reader)
    assert status == 200, answer
    assert json.loads(answer)["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_hundreds_of_silent_connections_are_all_closed_and_their_sockets_released():
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("counting open files needs /proc")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048 and (hard == resource.RLIM_INFINITY or hard >= 2048):
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    async with running_gateway(**TIMEOUTS) as gw:
        baseline = _open_fds()
        count = min(500, (resource.getrlimit(resource.RLIMIT_NOFILE)[0] - baseline - 64) // 2)

        async def silent() -> float:
            async with _connection(gw) as (reader, _):
                return await _seconds_until_closed(reader, time.monotonic())

        waits = []
        for _ in range(count // 50):  # 50 at a time: within the listen backlog
            waits += [asyncio.create_task(silent()) for _ in range(50)]
            await asyncio.sleep(0.05)
        seconds = await asyncio.gather(*waits)
        await eventually(_open_fds, until=lambda fds: fds <= baseline, timeout=10,
                         what=f"open files back to {baseline}")
    assert count >= 400 and len(seconds) == count // 50 * 50
    assert max(seconds) < KEEPALIVE - 0.5  # each closed by the header timeout
