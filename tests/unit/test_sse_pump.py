"""The SSE pump: every event reaches the socket one loop turn after it is published, a stop
ends a pump that waits, and the caller's own cancellation still goes through."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from a2a_gateway.live.backlog import Backlog
from a2a_gateway.transport.sse import KEEPALIVE, SSEStream


class _Response:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    async def write(self, chunk: bytes) -> None:
        self.chunks.append(chunk)

    async def write_eof(self) -> None:
        pass


class _Events:
    """An event source fed by the test, as the live hub feeds a stream."""

    def __init__(self) -> None:
        self.backlog = Backlog(1 << 20)
        self.closed = False

    def put(self, data: bytes) -> None:
        self.backlog.put("id", data, len(data))

    async def iterate(self) -> Any:
        try:
            while True:
                _, event = await self.backlog.take()
                yield event
        finally:
            self.closed = True


async def _turns_until(condition: Any, limit: int = 20) -> int:
    for turn in range(limit):
        if condition():
            return turn
        await asyncio.sleep(0)
    raise AssertionError("never happened")


async def test_an_event_is_written_one_loop_turn_after_it_is_published() -> None:
    response, events = _Response(), _Events()
    stream = SSEStream(response, keepalive_seconds=0)  # type: ignore[arg-type]
    pump = asyncio.create_task(stream.pump(events.iterate(), lambda e: e))
    await asyncio.sleep(0)  # the pump waits for its first event
    for n in range(3):
        events.put(b"event %d" % n)
        assert (
            await _turns_until(lambda: len(response.chunks) == n + 1) <= 1
        )  # was 3: a task and a wait per event
    assert response.chunks == [b"data: event %d\n\n" % n for n in range(3)]
    stream.end()
    await asyncio.wait_for(pump, 5)


async def test_a_stop_ends_a_waiting_pump_quietly_and_closes_its_events() -> None:
    response, events = _Response(), _Events()
    stream = SSEStream(response, keepalive_seconds=0)  # type: ignore[arg-type]
    source = events.iterate()
    pump = asyncio.create_task(stream.pump(source, lambda e: e))
    events.put(b"one")
    await _turns_until(lambda: response.chunks)
    stream.end()
    await asyncio.wait_for(pump, 5)  # returns, no CancelledError
    assert not pump.cancelled() and pump.result() is None
    assert events.closed
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    assert pump.cancelling() == 0


async def test_the_callers_cancellation_is_not_taken_for_a_stop() -> None:
    events = _Events()
    stream = SSEStream(_Response(), keepalive_seconds=0)  # type: ignore[arg-type]
    pump = asyncio.create_task(stream.pump(events.iterate(), lambda e: e))
    await asyncio.sleep(0)
    pump.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pump
    assert events.closed


async def test_a_client_gone_while_idle_is_noticed_by_the_keepalive_and_ends_the_pump() -> None:
    class _Gone(_Response):
        async def write(self, chunk: bytes) -> None:
            raise ConnectionResetError

    events = _Events()
    stream = SSEStream(_Gone(), keepalive_seconds=0.05)  # type: ignore[arg-type]
    pump = asyncio.create_task(stream.pump(events.iterate(), lambda e: e))
    await asyncio.wait_for(pump, 5)
    assert not stream.connected and events.closed
    await stream.close()


async def test_one_task_pings_every_idle_stream_and_none_stays_silent_past_the_interval() -> None:
    loop = asyncio.get_running_loop()
    before = len(asyncio.all_tasks())
    responses = [_Response() for _ in range(50)]
    streams = [SSEStream(r, keepalive_seconds=0.2) for r in responses]  # type: ignore[arg-type]
    busy = streams[0]
    assert len(asyncio.all_tasks()) - before == 1  # was one task per stream
    started = loop.time()
    while loop.time() - started < 1.0:
        await busy.send(b"data")  # a stream that sends needs no keepalive
        await asyncio.sleep(0.05)
    for response in responses[1:]:
        assert 2 <= response.chunks.count(KEEPALIVE) <= 7  # one per 0.15-0.2 s idle
    assert KEEPALIVE not in responses[0].chunks
    for stream in streams:
        await stream.close()
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == before  # the last stream to close stops it
