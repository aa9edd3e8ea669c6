"""What the OpenAI-style handlers share: one streamed or plain HTTP call, its
server-sent events, and turning transport and HTTP errors into short reasons
that never carry the API key.

Used by ``handlers.openclaw`` (``/v1/responses``) and ``handlers.openai_chat``
(``/v1/chat/completions``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import EventSource, SSEError

from handlers.base import HandlerRequest

DONE = "[DONE]"
MAX_REASON_CHARS = 500


class UpstreamError(Exception):
    """The backend could not be used; ``reason`` is safe to show to the A2A client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SSEFrame:
    """One server-sent event: ``event`` is empty for bare ``data:`` frames."""

    event: str
    data: str

    @property
    def done(self) -> bool:
        return self.data.strip() == DONE

    def json(self) -> dict[str, Any] | None:
        """The data as a JSON object, or None when it is not one."""
        try:
            value = json.loads(self.data)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret (and ``Bearer <secret>``) replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def clip(text: str, limit: int = MAX_REASON_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_message(body: bytes | str) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the body itself."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        value = json.loads(text)
    except ValueError:
        return clip(text)
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return clip(error["message"])
        if isinstance(error, str):
            return clip(error)
        if isinstance(value.get("message"), str):
            return clip(value["message"])
    return clip(text)


def http_error_reason(backend: str, status: int, body: bytes) -> str:
    """A reason for a non-2xx answer; 401/403 never echo the body."""
    if status == 401:
        return (f"{backend} rejected the gateway's credentials (HTTP 401); "
                "check the endpoint's API key setting")
    if status == 403:
        return f"{backend} refused the request (HTTP 403): the API key lacks a permission"
    message = error_message(body)
    if status == 429:
        return f"{backend} is rate limiting requests (HTTP 429): {message}"
    if status >= 500:
        return f"{backend} failed (HTTP {status}): {message}"
    return f"{backend} rejected the request (HTTP {status}): {message}"


def transport_error_reason(backend: str, url: str, exc: BaseException, timeout: float) -> str:
    """A reason for an httpx error (the URL never carries the key)."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"cannot reach {backend} at {url}: connection timed out"
    if isinstance(exc, httpx.TimeoutException):
        return f"{backend} sent nothing for {timeout:g} s (timeout)"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot reach {backend} at {url}"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"{backend} closed the connection before the answer was complete"
    if isinstance(exc, SSEError):
        return f"{backend} did not answer with an event stream"
    return f"connection to {backend} failed ({type(exc).__name__})"


def make_timeout(seconds: float) -> httpx.Timeout:
    """``seconds`` bounds each read (silence), write and pool wait; connect ≤ 10 s."""
    return httpx.Timeout(seconds, connect=min(10.0, seconds))


def request_text(request: HandlerRequest) -> str:
    """The message's text, then each data part as JSON on its own line."""
    pieces = [request.text] if request.text else []
    pieces += [json.dumps(d, ensure_ascii=False, sort_keys=True) for d in request.data]
    return "\n".join(pieces)


class UpstreamCall:
    """One POST to an OpenAI-style backend, as an SSE stream or one JSON answer.

    ``async with UpstreamCall(...) as call: async for frame in call.frames(): …``.
    Leaving the block (normally, by an error, or because the task was canceled and
    the handler's iterator closed) closes the HTTP response, which is how the
    backend learns that the client went away.
    """

    def __init__(self, http: httpx.AsyncClient, *, backend: str, url: str,
                 body: dict[str, Any], headers: dict[str, str], timeout: float,
                 secrets: Iterable[str | None] = ()) -> None:
        self.http = http
        self.backend = backend
        self.url = url
        self.body = body
        self.headers = headers
        self.timeout = timeout
        self.secrets = [s for s in secrets if s]
        self._stack = contextlib.AsyncExitStack()
        self.response: httpx.Response | None = None
        self._frames: AsyncGenerator[SSEFrame, None] | None = None

    def reason(self, text: str) -> str:
        return redact(text, self.secrets)

    async def __aenter__(self) -> UpstreamCall:
        headers = dict(self.headers)
        if self.body.get("stream"):
            headers.setdefault("Accept", "text/event-stream")
            headers.setdefault("Cache-Control", "no-store")
        try:
            self.response = await self._stack.enter_async_context(self.http.stream(
                "POST", self.url, json=self.body, headers=headers,
                timeout=make_timeout(self.timeout)))
            if self.response.status_code >= 400:
                body = await self.response.aread()
                raise UpstreamError(self.reason(
                    http_error_reason(self.backend, self.response.status_code, body)))
        except httpx.HTTPError as exc:
            await self._stack.aclose()
            raise UpstreamError(self.reason(
                transport_error_reason(self.backend, self.url, exc, self.timeout))) from None
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._frames is not None:
                await self._frames.aclose()
        finally:
            await self._stack.aclose()

    async def json(self) -> dict[str, Any]:
        """The whole answer as a JSON object (non-streaming calls)."""
        assert self.response is not None
        try:
            body = await self.response.aread()
        except httpx.HTTPError as exc:
            raise UpstreamError(self.reason(
                transport_error_reason(self.backend, self.url, exc, self.timeout))) from None
        try:
            value = json.loads(body)
        except ValueError:
            raise UpstreamError(f"{self.backend} answered with something that is not JSON") from None
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
        events = EventSource(self.response).aiter_sse()
        try:
            while True:
                try:
                    sse = await anext(events)
                except StopAsyncIteration:
                    return
                except (httpx.HTTPError, SSEError) as exc:
                    raise UpstreamError(self.reason(transport_error_reason(
                        self.backend, self.url, exc, self.timeout))) from None
                yield SSEFrame(sse.event if sse.event != "message" else "", sse.data)
        finally:
            await events.aclose()

    async def drain(self, seconds: float = 2.0) -> None:
        """Read what is left of the stream (after the terminal event) for a little
        while, so the backend sees a clean end of stream rather than a disconnect."""
        with contextlib.suppress(UpstreamError, asyncio.TimeoutError):
            async with asyncio.timeout(seconds):
                async for frame in self.frames():
                    if frame.done:
                        break
