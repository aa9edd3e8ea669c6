"""The upstream HTTP layer every bridge uses (Hermes, OpenClaw, the chat handler).

``Upstream`` is one backend: its base URL, the headers it needs (credentials),
its secrets, its timeout and its retry policy. ``Upstream.call`` makes one
request, a plain JSON answer or server-sent events, bounded by the run's
``Deadline``, retried when the backend answers HTTP 429 or 503 (as
``Retry-After`` asks), with the caller's trace context (``request.headers``)
passed on, or the one the gateway's tracing gives (``trace_calls``). Every failure is an ``UpstreamError`` whose ``reason`` is short,
names the backend, and never carries a secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, TypeVar

import httpx
import structlog
from prometheus_client import Histogram
from pydantic import Field

from handlers.base import HandlerRequest, ResponseModeSettings

DONE = "[DONE]"
MAX_REASON_CHARS = 500
RETRIED_STATUSES = frozenset({429, 503})
NEVER_PASSED_ON = frozenset({"authorization", "proxy-authorization", "cookie", "host",
                             "content-type", "content-length", "accept"})
"""Inbound headers never sent upstream, whatever the gateway selected: the caller's
credentials are for the gateway only, and the call sets the others itself."""

log = structlog.get_logger(__name__)
T = TypeVar("T")

BACKEND_LATENCY = Histogram(
    "a2a_gateway_backend_call_seconds",
    "Time until a backend answers one call (status and headers; retries included)",
    ["backend", "outcome"],
)
"""``backend`` is ``Upstream.name``; ``outcome``: ok, http_error or unreachable."""

TRACE_HEADERS = frozenset({"traceparent", "tracestate"})


class TracedCall(Protocol):
    """One backend call as the gateway's tracing sees it."""

    headers: Mapping[str, str]
    """The trace context to send (``traceparent``, ``tracestate``); empty: the inbound one."""

    def end(self, status: int | None, error: BaseException | None) -> None: ...


class CallTracer(Protocol):
    def __call__(self, backend: str, method: str, url: str, inbound: Mapping[str, str]) -> TracedCall:
        """``inbound``: the headers the call would send (the caller's trace context among them)."""


_tracer: CallTracer | None = None


def trace_calls(tracer: CallTracer | None) -> None:
    """Have ``tracer`` trace every backend call (the gateway's tracing installs itself here;
    handlers never import the gateway)."""
    global _tracer
    _tracer = tracer


class UpstreamError(Exception):
    """The backend could not be used; ``reason`` is safe to show to the A2A client.
    ``status`` and ``code`` are the HTTP status and the error code of an error answer."""

    def __init__(self, reason: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.code = code


class UnexpectedFrame(UpstreamError):
    """The backend sent a well-formed frame of a shape the bridge does not know.

    ``detail`` names what was wrong, never the frame's content (which may carry
    anything, secrets included)."""

    def __init__(self, backend: str, detail: str) -> None:
        super().__init__(f"{backend} sent an unexpected frame ({detail})")


class RunTimedOut(UpstreamError):
    """The run reached its ``run_timeout_seconds``."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a run must have ended: ``seconds`` after it started (``time.monotonic``)."""

    at: float
    seconds: float
    run: str
    """What runs, for the reason: e.g. ``the Hermes run``."""

    @classmethod
    def start(cls, seconds: float, run: str) -> Deadline:
        return cls(time.monotonic() + seconds, seconds, run)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    @property
    def reason(self) -> str:
        return f"{self.run} exceeded run_timeout_seconds={self.seconds:g}"

    async def within(self, awaitable: Awaitable[T]) -> T:
        """``await awaitable``, or ``RunTimedOut`` once the deadline passes. Use it
        around one await, never around a ``yield``: a timeout spanning a yield
        would cancel the consumer instead."""
        try:
            async with asyncio.timeout(self.remaining()):
                return await awaitable
        except TimeoutError:
            raise RunTimedOut(self.reason) from None


DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024


class BridgeSettings(ResponseModeSettings):
    """The settings every bridge shares: the response mode, a run's time bound and
    retries of HTTP 429/503."""

    run_timeout_seconds: float = Field(3600.0, gt=0)
    """Longest a run may take, from the first request to its final answer (streamed,
    polled or re-attached); then the task fails and the run is stopped where the
    backend allows it."""
    retry_attempts: int = Field(3, ge=0)
    """Retries of a request the backend refused with HTTP 429 or 503."""
    retry_backoff_seconds: float = Field(0.5, ge=0)
    """Wait before the first retry when the answer has no ``Retry-After``; doubles per retry."""
    retry_max_wait_seconds: float = Field(30.0, ge=0)
    """Longest wait before one retry, whatever ``Retry-After`` asks for."""
    max_event_bytes: int = Field(DEFAULT_MAX_EVENT_BYTES, gt=0)
    """Largest event the backend's stream may send (its lines, a line not ended yet
    included); a larger one fails the run, so a backend that never ends a line cannot
    fill the gateway's memory."""

    def deadline(self, run: str) -> Deadline:
        return Deadline.start(self.run_timeout_seconds, run)

    @property
    def retry(self) -> Retry:
        return Retry(self.retry_attempts, self.retry_backoff_seconds, self.retry_max_wait_seconds)


def retry_after(value: str | None) -> float | None:
    """The seconds a ``Retry-After`` header asks for (delay-seconds or an HTTP date)."""
    value = (value or "").strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass(frozen=True, slots=True)
class Retry:
    """Repeats a request the backend refused for now: HTTP 429 (rate limit, too many
    runs) or 503 (overloaded, starting)."""

    attempts: int
    """Retries after the first try."""
    backoff: float
    max_wait: float

    def wait(self, response: httpx.Response, retries: int,
             deadline: Deadline | None) -> float | None:
        """Seconds to wait before retry number ``retries + 1``, or None to give up:
        not a 429/503, no retries left, or the wait would end past the deadline."""
        if response.status_code not in RETRIED_STATUSES or retries >= self.attempts:
            return None
        asked = retry_after(response.headers.get("retry-after"))
        wait = min(self.backoff * 2**retries if asked is None else asked, self.max_wait)
        return wait if deadline is None or wait < deadline.remaining() else None

    async def send(self, http: httpx.AsyncClient, request: httpx.Request,
                   deadline: Deadline | None, *,
                   stream: bool = False) -> tuple[httpx.Response, int]:
        """The backend's last answer to ``request`` (the caller closes it) and the
        number of tries. Every try is bounded by ``deadline`` (``RunTimedOut``)."""
        tries = 0
        while True:
            sent = http.send(request, stream=stream)
            response = await (deadline.within(sent) if deadline else sent)
            wait = self.wait(response, tries, deadline)
            tries += 1
            if wait is None:
                return response, tries
            await response.aclose()
            log.info("backend_busy_retrying", url=shown_url(str(request.url)),
                     status=response.status_code, attempt=tries, wait_seconds=round(wait, 3))
            await asyncio.sleep(wait)


NO_RETRY = Retry(0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class SSEFrame:
    """One server-sent event: ``event`` is empty for bare ``data:`` frames."""

    event: str
    data: str
    id: str = ""
    """The frame's ``id:`` (a stream resumed with ``Last-Event-ID`` goes on after it)."""

    @property
    def done(self) -> bool:
        return self.data.strip() == DONE

    def object(self, backend: str) -> dict[str, Any]:
        """The data as a JSON object; anything else is ``UnexpectedFrame``."""
        try:
            value = json.loads(self.data)
        except ValueError:
            raise UnexpectedFrame(backend, "data that is not JSON") from None
        if not isinstance(value, dict):
            raise UnexpectedFrame(backend, "data that is not a JSON object")
        return value


_BOM = b"\xef\xbb\xbf"


class EventTooLarge(Exception):
    """An event (its lines so far, the unended one included) went past ``max_event_bytes``."""


class SSEReader:
    """The frames of an event stream, chunk by chunk: ``feed(chunk)`` gives every frame the
    chunk completes, in order, so one read of many frames is parsed at once.

    Lines end with CRLF, LF or CR (a CR that ends a chunk waits: it may be half a CRLF); a
    blank line ends an event; ``data:`` lines are joined with newlines, ``event:`` names it
    (the default ``message`` reads as ``""``), ``id:`` without a NUL is kept for the events
    that follow; comments, ``retry:`` and unknown fields are skipped. As httpx-sse does, an
    event is reported once any field was set, and one leading BOM is dropped.

    An event larger than ``max_event_bytes`` is ``EventTooLarge``. The chunks of a line not
    ended yet are kept as they came and joined once, when the line ends, so a long line
    costs time linear in its length (``scanned`` counts the bytes looked at)."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.scanned = 0
        self._pending: list[bytes] = []
        """The chunks since the last line end (a CR ending the last of them: ``_half_crlf``)."""
        self._pending_bytes = 0
        self._half_crlf = False
        self._event_bytes = 0
        """The bytes of the lines of the event being read."""
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._id = ""
        self._retry = False

    def feed(self, chunk: bytes) -> list[SSEFrame]:
        if not self._started:
            text = b"".join(self._pending) + chunk
            self._pending, self._pending_bytes = [], 0
            if _BOM.startswith(text):
                self._pending, self._pending_bytes = [text], len(text)
                return []
            self._started = True
            chunk = text.removeprefix(_BOM)
        self.scanned += len(chunk)
        if not self._half_crlf and b"\n" not in chunk and b"\r" not in chunk:
            self._pending.append(chunk)
            self._pending_bytes += len(chunk)
            self._check_size()
            return []
        return self._lines(b"".join(self._pending) + chunk)

    def _lines(self, text: bytes) -> list[SSEFrame]:
        self.scanned += len(text)
        self._half_crlf = text.endswith(b"\r")
        if self._half_crlf:
            text = text[:-1]
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, rest = text.split(b"\n")
        if self._half_crlf:
            rest += b"\r"
        self._pending, self._pending_bytes = ([rest], len(rest)) if rest else ([], 0)
        frames: list[SSEFrame] = []
        for line in lines:
            if line:
                self._event_bytes += len(line) + 1
                self._check_size()
                self._field(line.decode("utf-8", "replace"))
            else:
                self._event_bytes = 0
                if self._event or self._data or self._id or self._retry:
                    event = "" if self._event == "message" else self._event
                    frames.append(SSEFrame(event, "\n".join(self._data), self._id))
                    self._event, self._data, self._retry = "", [], False
        self._check_size()
        return frames

    def _check_size(self) -> None:
        if self._event_bytes + self._pending_bytes > self.max_event_bytes:
            self._pending, self._data = [], []
            raise EventTooLarge(self.max_event_bytes)

    def _field(self, line: str) -> None:
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            self._retry = self._retry or (value.isascii() and value.isdigit())


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def clip(text: str, limit: int = MAX_REASON_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_detail(body: bytes | str) -> tuple[str, str | None]:
    """The message and code of an OpenAI-style error body (``{"error": {"message",
    "code"}}``), a ``message`` or a FastAPI ``detail`` text, else the body itself and no code."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        value = json.loads(text)
    except ValueError:
        return clip(text), None
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            code = error.get("code")
            return clip(error["message"]), code if isinstance(code, str) else None
        if isinstance(error, str):
            return clip(error), None
        if isinstance(value.get("message"), str):
            return clip(value["message"]), None
        if isinstance(value.get("detail"), str):  # FastAPI's HTTPException (AgentOS)
            return clip(value["detail"]), None
    return clip(text), None


def http_error_reason(backend: str, status: int, message: str, attempts: int = 1) -> str:
    """A reason for a non-2xx answer; 401/403 never echo the body."""
    if status == 401:
        return (f"{backend} rejected the API key (HTTP 401); "
                "check the endpoint's API key setting")
    if status == 403:
        return f"{backend} refused the request (HTTP 403): the API key lacks a permission"
    if status == 429:
        return (f"{backend} is rate limiting requests (HTTP 429, {attempts} attempt(s)): "
                f"{message}")
    if status == 503:
        return f"{backend} is unavailable (HTTP 503, {attempts} attempt(s)): {message}"
    if status >= 500:
        return f"{backend} failed (HTTP {status}): {message}"
    return f"{backend} rejected the request (HTTP {status}): {message}"


_USERINFO = re.compile(r"(?<=://)[^/?#@]*@")


def shown_url(url: str) -> str:
    """``url`` as a caller may read it: without ``user:password@`` and the query, which may
    carry credentials."""
    return _USERINFO.sub("", url).partition("?")[0].partition("#")[0]


def transport_error_reason(backend: str, url: str, exc: BaseException, timeout: float) -> str:
    """A reason for an httpx error, naming the URL without its credentials."""
    url = shown_url(url)
    if isinstance(exc, httpx.ConnectTimeout):
        return f"cannot reach {backend} at {url}: connection timed out"
    if isinstance(exc, httpx.TimeoutException):
        return f"{backend} sent nothing for {timeout:g} s (timeout)"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot reach {backend} at {url}"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"{backend} closed the connection before the answer was complete"
    return f"connection to {backend} failed ({type(exc).__name__})"


def backend_client(max_connections: int, max_keepalive_connections: int,
                   keepalive_seconds: float) -> httpx.AsyncClient:
    """The HTTP client the bridges share (the gateway opens and closes it): room for
    ``max_connections`` backend calls at once (a stream holds its connection for the whole
    run), ``max_keepalive_connections`` idle ones kept ``keepalive_seconds`` for reuse."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(30.0, read=None),
        limits=httpx.Limits(max_connections=max_connections,
                            max_keepalive_connections=max_keepalive_connections,
                            keepalive_expiry=keepalive_seconds),
    )


def make_timeout(seconds: float) -> httpx.Timeout:
    """``seconds`` bounds each read (silence), write and pool wait; connect ≤ 10 s."""
    return httpx.Timeout(seconds, connect=min(10.0, seconds))


def request_text(request: HandlerRequest) -> str:
    """The message's text, then each data part as JSON on its own line."""
    pieces = [request.text] if request.text else []
    pieces += [json.dumps(d, ensure_ascii=False, sort_keys=True) for d in request.data]
    return "\n".join(pieces)


def has_input(request: HandlerRequest) -> bool:
    """True when the message carries text, data or a file for the backend."""
    return bool(request_text(request).strip() or request.files)


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

    def reason(self, text: str) -> str:
        return redact(text, self.secrets)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *,
             request: HandlerRequest | None = None, deadline: Deadline | None = None,
             retry: bool = True, events: bool = False,
             timeout: float | None = None, form: Mapping[str, str] | None = None) -> UpstreamCall:
        """One call to ``base_url + path``: ``async with upstream.call(...) as call``,
        then ``await call.json()`` or ``async for frame in call.frames()`` (``events``).
        ``form`` sends the fields form-encoded instead of ``body`` as JSON."""
        headers = httpx.Headers({k: v for k, v in (request.headers if request else {}).items()
                                 if k.lower() not in NEVER_PASSED_ON})
        headers.update(self.headers)  # case-insensitive: the backend's own headers win
        if events:
            headers.update({"Accept": "text/event-stream", "Cache-Control": "no-store"})
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

    def _start_trace(self) -> None:
        if _tracer is None:
            return
        self._trace = _tracer(self.backend, self.method, self.url, self.headers)
        if self._trace.headers:
            for name in TRACE_HEADERS:
                self.headers.pop(name, None)
            self.headers.update(self._trace.headers)

    def _end_trace(self, error: BaseException | None) -> None:
        if self._trace is not None:
            self._trace.end(self.response.status_code if self.response is not None else None, error)
            self._trace = None

    async def __aenter__(self) -> UpstreamCall:
        http = self.upstream.http
        self._start_trace()
        request = http.build_request(self.method, self.url, json=self.body, data=self.form,
                                     headers=self.headers, timeout=make_timeout(self.timeout))
        started, outcome = time.perf_counter(), "unreachable"
        try:
            try:
                self.response, attempts = await self.retry.send(http, request, self.deadline,
                                                                stream=True)
            finally:
                if self.response is not None:
                    outcome = "ok" if self.response.status_code < 400 else "http_error"
                BACKEND_LATENCY.labels(self.backend, outcome).observe(time.perf_counter() - started)
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

    async def json(self) -> dict[str, Any]:
        """The whole answer as a JSON object."""
        assert self.response is not None
        try:
            body = await self._within(self.response.aread())
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        try:
            value = json.loads(body)
        except ValueError:
            raise UpstreamError(
                f"{self.backend} answered with something that is not JSON") from None
        if not isinstance(value, dict):
            raise UpstreamError(f"{self.backend} answered with an unexpected JSON value")
        return value

    def frames(self) -> AsyncIterator[SSEFrame]:
        """The server-sent events of a streaming call, ``[DONE]`` included (one
        iterator per call: ``drain`` goes on where the caller stopped)."""
        if self._frames is None:
            self._frames = self._read_frames()
        return self._frames

    async def _read_frames(self) -> AsyncGenerator[SSEFrame, None]:
        assert self.response is not None
        if "text/event-stream" not in self.response.headers.get("content-type", "").partition(";")[0]:
            raise UpstreamError(self.reason(f"{self.backend} did not answer with an event stream"))
        reader, chunks = SSEReader(self.upstream.max_event_bytes), self.response.aiter_bytes()
        bound = _ReadBound(self.deadline)
        try:
            while True:
                try:
                    chunk = await bound.next(chunks)
                except StopAsyncIteration:
                    return
                except httpx.HTTPError as exc:
                    raise self._transport_error(exc) from None
                try:
                    frames = reader.feed(chunk)
                except EventTooLarge:
                    raise UpstreamError(self.reason(
                        f"{self.backend} sent an event larger than {reader.max_event_bytes} bytes")) from None
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
            self._timer = asyncio.get_running_loop().call_later(max(deadline.remaining(), 0), self._fire)
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


class BackendTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends through the gateway's shared backend client: for a
    bridge that talks to its backend through a library taking its own ``httpx.AsyncClient``
    (the a2a-sdk client). Its requests share the connection limits, are traced and timed
    like ``Upstream`` calls (the trace span ends with the answer's headers) and are retried
    on HTTP 429/503; closing it leaves the shared client open."""

    def __init__(self, http: httpx.AsyncClient, backend: str, retry: Retry) -> None:
        self.http = http
        self.backend = backend
        self.retry = retry

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        trace = _tracer(self.backend, request.method, str(request.url),
                        request.headers) if _tracer is not None else None
        if trace is not None and trace.headers:
            for name in TRACE_HEADERS:
                request.headers.pop(name, None)
            request.headers.update(trace.headers)
        started, outcome = time.perf_counter(), "unreachable"
        response: httpx.Response | None = None
        error: BaseException | None = None
        try:
            response, _ = await self.retry.send(self.http, request, None, stream=True)
            outcome = "ok" if response.status_code < 400 else "http_error"
            return response
        except BaseException as exc:
            error = exc
            raise
        finally:
            BACKEND_LATENCY.labels(self.backend, outcome).observe(time.perf_counter() - started)
            if trace is not None:
                trace.end(response.status_code if response is not None else None, error)

    async def aclose(self) -> None:
        """The shared client belongs to the gateway."""
