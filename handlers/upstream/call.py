"""One backend (``Upstream``) and one call to it (``UpstreamCall``): a plain JSON answer or
server-sent events, bounded by the run's ``Deadline``, retried on HTTP 429/503, traced and
timed; every failure an ``UpstreamError`` with a safe reason."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import httpx
from pydantic import SecretStr

from handlers.base import HandlerRequest
from handlers.upstream.correlation import correlation_headers
from handlers.upstream.deadline import Deadline
from handlers.upstream.errors import (
    RunTimedOut,
    UpstreamError,
    error_detail,
    http_error_reason,
    transport_error_reason,
)
from handlers.upstream.json_lines import JSON_LINES_TYPES, JSONLinesReader
from handlers.upstream.redaction import redact
from handlers.upstream.request import passed_on
from handlers.upstream.retry import NO_RETRY, Retry
from handlers.upstream.settings import BridgeSettings
from handlers.upstream.sse import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, SSEFrame, SSEReader
from handlers.upstream.telemetry import TracedCall, observe_latency, start_trace

T = TypeVar("T")


def make_timeout(seconds: float) -> httpx.Timeout:
    """``seconds`` bounds each read (silence), write and pool wait; connect ≤ 10 s."""
    return httpx.Timeout(seconds, connect=min(10.0, seconds))


@dataclass(frozen=True, slots=True)
class Upstream:
    """One backend, as every call to it needs it."""

    http: httpx.AsyncClient
    name: str
    """The backend in reasons: ``Hermes``, ``OpenClaw``, ``the chat backend``."""
    base_url: str
    headers: Mapping[str, str]
    """Sent with every call (credentials, routing); they win over inbound headers."""
    timeout: float
    """Seconds the backend may stay silent (connect: at most 10 s)."""
    retry: Retry
    secrets: tuple[str, ...] = ()
    """Never shown: removed from every reason."""
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    """The bound of one event of a streaming call (``BridgeSettings.max_event_bytes``)."""
    json_lines: bool = False
    """A streaming call answers with JSON lines (n8n), one frame a line, not SSE."""

    @classmethod
    def for_backend(cls, http: httpx.AsyncClient, name: str, settings: BridgeSettings, *,
                    url: str, timeout: float, api_key: SecretStr | None = None,
                    key_header: str = "Authorization", bearer: bool | None = None,
                    headers: Mapping[str, str] | None = None, secret_headers: bool = False,
                    drop_suffix: str = "") -> Upstream:
        """The backend a bridge's settings describe: ``url`` without its trailing ``/`` (and
        ``drop_suffix``), ``headers``, then ``api_key`` in ``key_header``, as ``Bearer <key>``
        when ``bearer`` (by default: when that header is ``Authorization``). The key, and the
        headers' values when ``secret_headers``, never show in a reason."""
        key = api_key.get_secret_value() if api_key is not None else ""
        sent = dict(headers or {})
        secrets = [key, *(sent.values() if secret_headers else ())]
        if bearer is None:
            bearer = key_header.lower() == "authorization"
        if key:
            sent[key_header] = f"Bearer {key}" if bearer else key
        return cls(http, name, url.rstrip("/").removesuffix(drop_suffix), sent, timeout,
                   settings.retry, tuple(s for s in secrets if s), settings.max_event_bytes)

    def reason(self, text: str) -> str:
        return redact(text, self.secrets)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
             request: HandlerRequest | None = None, deadline: Deadline | None = None,
             retry: bool = True, events: bool = False,
             timeout: float | None = None, form: Mapping[str, str] | None = None) -> UpstreamCall:
        """One call to ``base_url + path``: ``async with upstream.call(...) as call``,
        then ``await call.json()`` or ``async for frame in call.frames()`` (``events``).
        ``form`` sends the fields form-encoded instead of ``body`` as JSON. With ``request``,
        the call carries its trace context and its task's ids (``correlation``)."""
        headers = httpx.Headers(passed_on(request))
        headers.update(correlation_headers(request))  # the gateway's ids, not the caller's
        if events:
            accept = "application/json" if self.json_lines else "text/event-stream"
            headers.update({"Accept": accept, "Cache-Control": "no-store"})
        headers.update(self.headers)  # case-insensitive: the backend's own headers win
        return UpstreamCall(self, method, self.base_url + path, body, headers,
                            timeout or self.timeout, deadline, self.retry if retry else NO_RETRY,
                            form)

    async def json(self, method: str, path: str, body: dict[str, Any] | None = None,
                   **options: Any) -> dict[str, Any]:
        """The JSON object the backend answers to one call."""
        async with self.call(method, path, body, **options) as call:
            return await call.json()


class UpstreamCall:
    """One request to a backend (made by ``Upstream.call``), as an SSE stream or one
    JSON answer.

    Every wait, the retries included, ends at ``deadline`` (``RunTimedOut``). Leaving
    the block (normally, by an error, or because the task was canceled and the
    handler's iterator closed) closes the HTTP response, which is how the backend
    learns that the client went away.
    """

    def __init__(self, upstream: Upstream, method: str, url: str, body: dict[str, Any] | None,
                 headers: httpx.Headers, timeout: float, deadline: Deadline | None,
                 retry: Retry, form: Mapping[str, str] | None = None) -> None:
        self.upstream = upstream
        self.backend = upstream.name
        self.method = method
        self.url = url
        self.body = body
        self.headers = headers
        self.timeout = timeout
        self.deadline = deadline
        self.retry = retry
        self.form = form
        self._stack = contextlib.AsyncExitStack()
        self.response: httpx.Response | None = None
        self._frames: AsyncGenerator[SSEFrame, None] | None = None
        self._trace: TracedCall | None = None

    def reason(self, text: str) -> str:
        return self.upstream.reason(text)

    async def _within(self, awaitable: Awaitable[T]) -> T:
        return await (self.deadline.within(awaitable) if self.deadline else awaitable)

    def _transport_error(self, exc: BaseException) -> UpstreamError:
        return UpstreamError(self.reason(
            transport_error_reason(self.backend, self.url, exc, self.timeout)))

    def _end_trace(self, error: BaseException | None) -> None:
        if self._trace is not None:
            self._trace.end(self.response.status_code if self.response is not None else None, error)
            self._trace = None

    async def __aenter__(self) -> Self:
        http = self.upstream.http
        self._trace = start_trace(self.backend, self.method, self.url, self.headers)
        request = http.build_request(self.method, self.url, json=self.body, data=self.form,
                                     headers=self.headers, timeout=make_timeout(self.timeout))
        started = time.perf_counter()
        try:
            try:
                self.response, attempts = await self.retry.send(http, request, self.deadline,
                                                                stream=True)
            finally:
                observe_latency(self.backend, started, self.response)
            self._stack.push_async_callback(self.response.aclose)
            status = self.response.status_code
            if status >= 400:
                message, code = error_detail(await self._within(self.response.aread()))
                raise UpstreamError(self.reason(
                    http_error_reason(self.backend, status, message, attempts)), status, code)
        except httpx.HTTPError as exc:
            await self._stack.aclose()
            self._end_trace(exc)
            raise self._transport_error(exc) from None
        except BaseException as exc:
            await self._stack.aclose()
            self._end_trace(exc)
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._frames is not None:
                await self._frames.aclose()
        finally:
            await self._stack.aclose()
            self._end_trace(exc[1] if isinstance(exc[1], BaseException) else None)

    @property
    def is_event_stream(self) -> bool:
        """The answer is server-sent events (not one JSON answer)."""
        assert self.response is not None
        kind = self.response.headers.get("content-type", "").partition(";")[0]
        return kind.strip().lower() == "text/event-stream"

    async def json_value(self) -> Any:
        """The whole answer as a JSON value of any type."""
        assert self.response is not None
        try:
            body = await self._within(self.response.aread())
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        try:
            return json.loads(body)
        except ValueError:
            raise UpstreamError(
                f"{self.backend} answered with something that is not JSON") from None

    async def json(self) -> dict[str, Any]:
        """The whole answer as a JSON object."""
        value = await self.json_value()
        if not isinstance(value, dict):
            raise UpstreamError(f"{self.backend} answered with an unexpected JSON value")
        return value

    def frames(self) -> AsyncIterator[SSEFrame]:
        """The server-sent events of a streaming call, ``[DONE]`` included (one
        iterator per call: ``drain`` goes on where the caller stopped)."""
        if self._frames is None:
            self._frames = self._read_frames()
        return self._frames

    def _frame_reader(self) -> SSEReader | JSONLinesReader:
        """The reader of the answer's frames, once its content type is the expected one."""
        assert self.response is not None
        kind = self.response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if self.upstream.json_lines:
            if kind not in JSON_LINES_TYPES:
                raise UpstreamError(self.reason(f"{self.backend} did not answer with JSON lines"))
            return JSONLinesReader(self.upstream.max_event_bytes)
        if "text/event-stream" not in kind:
            raise UpstreamError(self.reason(f"{self.backend} did not answer with an event stream"))
        return SSEReader(self.upstream.max_event_bytes)

    async def _read_frames(self) -> AsyncGenerator[SSEFrame, None]:
        assert self.response is not None
        reader, chunks = self._frame_reader(), self.response.aiter_bytes()
        bound = _ReadBound(self.deadline)
        try:
            while True:
                try:
                    chunk = await bound.next(chunks)
                except StopAsyncIteration:
                    if isinstance(reader, JSONLinesReader):  # a last line without its LF
                        for frame in reader.finish():
                            yield frame
                    return
                except httpx.HTTPError as exc:
                    raise self._transport_error(exc) from None
                try:
                    frames = reader.feed(chunk)
                except EventTooLarge:
                    raise UpstreamError(
                        self.reason(
                            f"{self.backend} sent an event larger than"
                            f" {reader.max_event_bytes} bytes"
                        )
                    ) from None
                for frame in frames:
                    yield frame
        finally:
            bound.close()
            await chunks.aclose()

    async def drain(self, seconds: float = 2.0) -> None:
        """Read what is left of the stream (after the terminal event) for a little
        while, so the backend sees a clean end of stream rather than a disconnect."""
        with contextlib.suppress(UpstreamError, asyncio.TimeoutError):
            async with asyncio.timeout(seconds):
                async for frame in self.frames():
                    if frame.done:
                        break


class _ReadBound:
    """The run's deadline over the reads of one stream: one timer for the whole stream
    (not one per read), which cancels the read waiting when it fires; a read that starts
    after it fired ends at once. The cancel is taken back and becomes ``RunTimedOut``."""

    def __init__(self, deadline: Deadline | None) -> None:
        self._deadline = deadline
        self._timer: asyncio.TimerHandle | None = None
        self._reading: asyncio.Task[Any] | None = None
        self._task: asyncio.Task[Any] | None = None
        self._passed = False

    def _fire(self) -> None:
        self._passed = True
        if self._reading is not None:
            self._reading.cancel()

    async def next(self, chunks: AsyncIterator[bytes]) -> bytes:
        deadline = self._deadline
        if deadline is None:
            return await anext(chunks)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                max(deadline.remaining(), 0), self._fire
            )
        if self._passed:
            raise RunTimedOut(deadline.reason)
        if self._task is None:
            self._task = asyncio.current_task()  # the run's: one task reads a stream
        self._reading = me = self._task
        try:
            return await anext(chunks)
        except asyncio.CancelledError:
            if self._passed and me is not None and me.uncancel() == 0:
                raise RunTimedOut(deadline.reason) from None
            raise
        finally:
            self._reading = None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
