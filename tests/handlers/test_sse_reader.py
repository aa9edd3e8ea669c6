"""Reading a backend's event stream (``upstream.SSEReader`` and ``UpstreamCall.frames``):
the frames httpx-sse reads from the same bytes, however the body is cut into chunks,
every frame of a chunk at once, and the run's deadline kept by one timer per stream, not
one per frame (nor, in the Hermes bridge, one per event taken from its queue)."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx
import pytest
from httpx_sse import EventSource

from handlers.base import Completed, TextDelta
from handlers.openai_chat import OpenAIChatHandler, OpenAIChatSettings
from handlers.upstream import EventTooLarge, SSEFrame, SSEReader
from tests.handlers.openai_mock import Backend, TrackedStream, collect
from tests.handlers.test_hermes_parser import FakeHermes
from tests.handlers.test_hermes_parser import collect as hermes_collect
from tests.support.messages import handler_request

pytestmark = pytest.mark.timeout(30)

TRICKY = (
    "data: first\n\n"
    ": a comment\n\n"
    "event: message\ndata: named message\n\n"
    "event: delta\r\ndata: line one\r\ndata:line two\r\n\r\n"
    "id: 7\rdata: after a lone CR \u00e9\u4e2d\U0001F600\r\r"
    "data\n\n"
    "retry: 100\n\n"
    "id: a\0b\ndata: id with NUL ignored\n\n"
    "unknown: field\ndata: kept\n\n"
    "event: only-a-name\n\n"
    "data: no blank line at the end"
).encode()


async def _httpx_sse_frames(body: bytes) -> list[SSEFrame]:
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    return [SSEFrame(e.event if e.event != "message" else "", e.data, e.id)
            async for e in EventSource(response).aiter_sse()]


def test_an_event_over_the_bound_is_event_too_large_whether_one_line_or_many() -> None:
    within = SSEReader(max_event_bytes=100)
    assert within.feed(b"data: " + b"x" * 80 + b"\n\n") == [SSEFrame("", "x" * 80)]
    assert within.feed(b"data: " + b"y" * 80 + b"\n\n") == [SSEFrame("", "y" * 80)]  # per event
    for body in (b"data: " + b"x" * 200, b"data: xxxxxxxxxx\n" * 20):
        with pytest.raises(EventTooLarge):
            SSEReader(max_event_bytes=100).feed(body)
    in_chunks = SSEReader(max_event_bytes=100)
    with pytest.raises(EventTooLarge):
        for _ in range(30):
            in_chunks.feed(b"xxxxx")  # a line that never ends


def test_a_huge_line_in_small_chunks_is_looked_at_a_linear_number_of_times() -> None:
    reader = SSEReader(max_event_bytes=10 * 1024 * 1024)
    reader.feed(b"data: ")
    chunks = 20_000
    for _ in range(chunks):
        assert reader.feed(b"z" * 64) == []
    frames = reader.feed(b"\n\n")
    assert frames == [SSEFrame("", "z" * 64 * chunks)]
    fed = 6 + 64 * chunks + 2
    # each byte is looked at in its chunk and once more when its line ends; re-scanning
    # the kept line per chunk would be about chunks / 2 times the line's length
    assert reader.scanned <= 2 * fed, (reader.scanned, fed)


def _cut(body: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(body)), rng.randint(1, 40)))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


async def test_the_frames_are_those_httpx_sse_reads_however_the_body_is_cut() -> None:
    expected = await _httpx_sse_frames(TRICKY)
    assert len(expected) == 9 and expected[2] == SSEFrame("delta", "line one\nline two", "")
    rng = random.Random(13)
    for cutting in [
        [TRICKY],
        [bytes([b]) for b in TRICKY],
        *(_cut(TRICKY, rng) for _ in range(300)),
    ]:
        reader = SSEReader()
        assert [f for chunk in cutting for f in reader.feed(chunk)] == expected, cutting
    with_bom = SSEReader()  # the format allows one; httpx-sse would read a field "\ufeffdata"
    assert with_bom.feed(b"\xef\xbb") == [] and with_bom.feed(b"\xbf" + TRICKY + b"\n\n") == [
        *expected, SSEFrame("", "no blank line at the end", "7")]


def test_one_chunk_gives_all_the_frames_it_completes_and_keeps_the_rest() -> None:
    reader = SSEReader()
    assert reader.feed(b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4") == [
        SSEFrame("", "1"), SSEFrame("", "2"), SSEFrame("", "3")]
    assert reader.feed(b"\n\n") == [SSEFrame("", "4")]


def _burst(deltas: int) -> list[bytes]:
    def frame(body: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    chunks = [
        frame({"choices": [{"index": 0, "delta": {"content": f" w{n}"}}]}) for n in range(deltas)
    ]
    return [
        *chunks,
        frame({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        b"data: [DONE]\n\n",
    ]


class _Timers:
    """Counts the timers the running loop is asked for inside the block."""

    def __enter__(self) -> _Timers:
        self.loop, self.count = asyncio.get_running_loop(), 0
        self._call_at = self.loop.call_at

        def counting(*args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            self.count += 1
            return self._call_at(*args, **kwargs)

        self.loop.call_at = counting  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_at = self._call_at  # type: ignore[method-assign]


async def test_a_stream_keeps_the_run_deadline_with_one_timer_not_one_per_read() -> None:
    backend = Backend(lambda request: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=TrackedStream(_burst(300))))
    async with backend.client() as http:
        handler = OpenAIChatHandler(OpenAIChatSettings(base_url="http://backend.test/v1"), http)
        with _Timers() as timers:
            events = await collect(handler.run(handler_request()))
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == [f" w{n}" for n in range(300)]
    assert isinstance(events[-1], Completed) and events[-1].text == "".join(texts)
    assert timers.count <= 5  # was one asyncio.timeout per frame: 300 and more


async def test_hermes_takes_the_events_a_read_brought_without_a_timer_each() -> None:
    fake = FakeHermes()
    run_id = fake.rec.run_id  # type: ignore[union-attr]
    deltas = [
        json.dumps({"event": "message.delta", "run_id": run_id, "delta": f" w{n}"})
        for n in range(300)
    ]
    end = json.dumps(
        {
            "event": "run.completed",
            "run_id": run_id,
            "output": "".join(f" w{n}" for n in range(300)),
        }
    )
    body = "".join(f"data: {frame}\n\n" for frame in [*deltas, end])
    fake.queue("GET", f"/v1/runs/{run_id}/events", httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=body.encode()))
    with _Timers() as timers:
        events = await hermes_collect(fake)
    assert [e.text for e in events if isinstance(e, TextDelta)] == [f" w{n}" for n in range(300)]
    assert isinstance(events[-1], Completed)
    assert timers.count <= 10  # was an asyncio.timeout per event taken from the queue
