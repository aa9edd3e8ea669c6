"""SSE responses for A2A streams: ``data:`` events with their ``id:``, ``event: error``,
keepalive comments.

A keepalive is one comment line with no blank line after it (``KEEPALIVE``): valid SSE
that any decoder skips. With a blank line it would end an (empty) event, and some decoders
dispatch that once an ``id:`` was seen (httpx-sse 0.4, so a2a-sdk clients up to 0.3.26 fail
their stream with a JSON error on it) although the SSE rules drop an event without data.

A client that goes away ends the response quietly; it never cancels the task
behind the stream. A client that vanished while its task is idle is noticed by
the next keepalive write, so no response waits forever for a listener that is
gone. On shutdown every open stream is ended cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import structlog
from a2a.utils.errors import A2AError, InternalError
from aiohttp import web

from a2a_gateway.transport.keys import A2A_ERROR

log = structlog.get_logger(__name__)

OPEN_STREAMS = web.AppKey("open_sse_streams", set)

EventId = Callable[[], str | None] | None
"""Gives the id of the event just taken from a stream (None: the event has none)."""

KEEPALIVE = b": ping\n"
"""A comment line, not ended by a blank line: it keeps proxies from timing the stream out
and is never an event, whatever the decoder (see the module docstring)."""

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "Connection": "keep-alive",
}


class _Keepalives:
    """The keepalive comments of the open streams of one event loop that share an interval:
    one task for all of them instead of one per stream. Every quarter interval it pings the
    streams that have sent nothing for three quarters of it, so none stays silent longer
    than the interval; each ping is its own short task (a client slow to read delays only
    its own)."""

    _running: ClassVar[dict[tuple[int, float], _Keepalives]] = {}

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop = loop
        self.seconds = seconds
        self.streams: set[SSEStream] = set()
        self._pings: set[asyncio.Task[bool]] = set()
        self._task = loop.create_task(self._run())

    @classmethod
    def join(cls, stream: SSEStream, seconds: float) -> _Keepalives:
        loop = asyncio.get_running_loop()
        key = (id(loop), seconds)
        keepalives = cls._running.get(key)
        if keepalives is None or keepalives.loop is not loop:
            keepalives = cls._running[key] = cls(loop, seconds)
        keepalives.streams.add(stream)
        return keepalives

    def leave(self, stream: SSEStream) -> None:
        """``stream`` closed; the last one to leave stops the task."""
        self.streams.discard(stream)
        if not self.streams:
            key = (id(self.loop), self.seconds)
            if self._running.get(key) is self:
                del self._running[key]
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.seconds / 4)
            silent_since = time.monotonic() - self.seconds * 0.75
            for stream in [s for s in self.streams if s.last_write <= silent_since]:
                ping = self.loop.create_task(stream.ping())
                self._pings.add(ping)
                ping.add_done_callback(self._pings.discard)


class _EventStreamResponse(web.StreamResponse):
    """Its headers wait for the first write and leave in the same socket write (aiohttp
    sends a StreamResponse's headers alone by default; its Response buffers them the same
    way). Only for a stream that writes at once: a client waits for the headers."""

    _send_headers_immediately = False


class SSEStream:
    __slots__ = ("_response", "_keepalives", "_lock", "connected", "stopped", "last_write",
                 "_waiting", "_stopped_wait", "_registry")

    def __init__(self, response: web.StreamResponse, keepalive_seconds: float) -> None:
        self._response = response
        self._keepalives: _Keepalives | None = None
        self._lock = asyncio.Lock()
        self.connected = True
        self.stopped = False
        """The client is gone or the server shuts down: stop sending."""
        self.last_write = time.monotonic()
        self._waiting: asyncio.Task[Any] | None = None
        """The pump's task while it waits for the next event (``_stop`` cancels that wait)."""
        self._stopped_wait = False
        self._registry: set[SSEStream] | None = None
        if keepalive_seconds > 0:
            self._keepalives = _Keepalives.join(self, keepalive_seconds)

    @classmethod
    async def open(
        cls, request: web.Request, keepalive_seconds: float, headers: dict[str, str] | None = None,
        *, sending_at_once: bool = False,
    ) -> SSEStream:
        """``sending_at_once``: an event is sent right after (the headers wait for it)."""
        response_type = _EventStreamResponse if sending_at_once else web.StreamResponse
        response = response_type(status=200, headers={**SSE_HEADERS, **(headers or {})})
        await response.prepare(request)
        stream = cls(response, keepalive_seconds)
        stream._registry = request.app.get(OPEN_STREAMS)
        if stream._registry is not None:
            stream._registry.add(stream)
        return stream

    async def _write(self, chunk: bytes) -> bool:
        if not self.connected:
            return False
        self.last_write = time.monotonic()
        try:
            async with self._lock:
                await self._response.write(chunk)
        except (ConnectionError, RuntimeError):  # ConnectionError: gone while a write waited for it
            self.connected = False
            self._stop()
        return self.connected

    async def ping(self) -> bool:
        """A keepalive comment; a client gone meanwhile is noticed here."""
        return await self._write(KEEPALIVE)

    async def send(
        self, data: bytes, event: str | None = None, event_id: str | None = None
    ) -> bool:
        prefix = f"event: {event}\n".encode() if event else b""
        if event_id:
            prefix += f"id: {event_id}\n".encode()
        return await self._write(prefix + b"data: " + data + b"\n\n")

    def end(self) -> None:
        """Stop the stream at the next opportunity (server shutdown)."""
        self._stop()

    def _stop(self) -> None:
        self.stopped = True
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting, self._stopped_wait = None, True

    async def pump(
        self, events: AsyncIterator[Any], frame: Callable[[Any], bytes], event_id: EventId = None
    ) -> None:
        """Send every event of ``events`` until it ends, the client leaves or the server stops;
        ``event_id()``, called right after each event arrives, gives its id.

        The next event is awaited in the pump's own task (no helper task per event: an
        event reaches the socket in one turn of the loop after it was published); a stop
        cancels that wait, and the cancel is taken back here."""
        me = asyncio.current_task()
        while not self.stopped:
            self._waiting = me
            try:
                event = await anext(events)
            except StopAsyncIteration:
                return
            except asyncio.CancelledError:
                if self._stopped_wait and me is not None and me.uncancel() == 0:
                    return  # our own stop, not the request's cancellation
                raise
            finally:
                self._waiting = None
            if self._stopped_wait:  # the stop came as the event did
                if me is not None:
                    me.uncancel()
                return
            sent = await self.send(frame(event), event_id=event_id() if event_id else None)
            del event  # an idle stream keeps no event it sent
            if not sent:
                return

    async def close(self) -> web.StreamResponse:
        if self._registry is not None:
            self._registry.discard(self)
        if self._keepalives is not None:
            self._keepalives.leave(self)
        if self.connected:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._response.write_eof()
        return self._response


def accepts_event_stream(request: web.Request) -> bool:
    """Whether the request's ``Accept`` names ``text/event-stream`` (``*/*`` does not count)."""
    ranges = ",".join(request.headers.getall("Accept", [])).split(",")
    return any(r.split(";")[0].strip().lower() == "text/event-stream" for r in ranges)


async def stream_events(
    request: web.Request,
    keepalive_seconds: float,
    events: AsyncIterator[Any],
    frame: Callable[[Any], bytes],
    error_frame: Callable[[A2AError], bytes],
    headers: dict[str, str],
    *,
    error_event: str | None = "error",
    early_errors_in_stream: bool = False,
    event_id: EventId = None,
) -> web.StreamResponse:
    """SSE response for a handler's event stream; an error ends it as an ``error_event``
    event (``None``: a plain ``data:`` event, as A2A 0.3 sent them). The first event is
    fetched before any header is sent, so an error there is still a plain error
    response — unless ``early_errors_in_stream``: then, as the a2a-sdk does, it is the
    stream's one event (a client that asked for ``text/event-stream`` may read nothing else).
    ``event_id()`` gives the id of the event just taken from ``events`` (the ``id:`` line
    a reconnecting client sends back as ``Last-Event-ID``)."""
    early_error: A2AError | None = None
    first_id: str | None = None
    try:
        first = await anext(events)
        first_id = event_id() if event_id else None
    except StopAsyncIteration:
        first = None
    except A2AError as exc:
        if not early_errors_in_stream:
            await events.aclose()  # type: ignore[attr-defined]
            raise
        first, early_error = None, exc
    except BaseException:
        await events.aclose()  # type: ignore[attr-defined]
        raise
    stream = await SSEStream.open(request, keepalive_seconds, headers, sending_at_once=True)
    try:
        if early_error is not None:
            request[A2A_ERROR] = type(early_error).__name__
            await stream.send(error_frame(early_error), event=error_event)
        elif first is not None:
            sent = await stream.send(frame(first), event_id=first_id)
            first = None  # an idle stream keeps neither its first event (a Task) nor its frame
            if sent:
                await stream.pump(events, frame, event_id)
    except A2AError as exc:
        await stream.send(error_frame(exc), event=error_event)
    except Exception:
        log.exception("stream_failed")
        await stream.send(error_frame(InternalError()), event=error_event)
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    return await stream.close()
