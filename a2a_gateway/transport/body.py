"""Request bodies: read within the size, time and whole-process memory limits, then parsed
as JSON no deeper than the nesting limit.

``gzip`` and ``deflate`` bodies are decoded as they arrive, never more at once than the
limit has room for (a compressed bomb meets ``max_body_bytes`` like any other body); every
other ``Content-Encoding`` is refused with 415. The bytes of all bodies being read at once are
bounded by ``max_inflight_body_bytes``: past it a request is answered 503 with
``Retry-After`` instead of buffering, so no number of stalled uploads grows memory
without bound. A body's reservation ends when it has been read; parsing follows at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from typing import Any

from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
)
from aiohttp import web

from a2a_gateway.errors import GatewayError
from a2a_gateway.settings import GatewaySettings

ACCEPTED_ENCODINGS = ("identity", "gzip", "deflate")


class BodyBudget:
    """Bytes of request bodies the whole process holds while reading them."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.max_bytes:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


BODY_BUDGET = web.AppKey("body_budget", BodyBudget)


class BodyError(GatewayError):
    """A body that cannot be read; the connection is closed after the answer."""

    status = "INVALID_ARGUMENT"
    a2a_error = InvalidRequestError
    close_connection = True


class BodyTooLargeError(BodyError):
    http_status = 413


class BodyTimeoutError(BodyError):
    http_status = 408
    status = "DEADLINE_EXCEEDED"


class BodyBudgetError(BodyError):
    http_status = 503
    status = "UNAVAILABLE"
    a2a_error = InternalError  # the server's state, not the request's fault: retry later

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class UnsupportedEncodingError(BodyError):
    http_status = 415
    a2a_error = ContentTypeNotSupportedError

    def headers(self) -> dict[str, str]:
        return {"Accept-Encoding": ", ".join(ACCEPTED_ENCODINGS[1:])}


class BadEncodingError(BodyError):
    http_status = 400


def _check_encoding(request: web.Request) -> str:
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower() or "identity"
    if encoding not in ACCEPTED_ENCODINGS:
        raise UnsupportedEncodingError(
            f"Content-Encoding {encoding[:40]!r} is not supported (use gzip, deflate or none)"
        )
    return encoding


def _too_large(settings: GatewaySettings) -> BodyTooLargeError:
    limit = settings.max_body_bytes
    return BodyTooLargeError(f"request body is too large: over max_body_bytes ({limit} bytes)")


class _Decoder:
    """gzip or deflate (zlib-wrapped, or raw as some clients send it) that never yields
    more than it is asked for, so a small bomb cannot expand in memory."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._zlib: Any = None

    def feed(self, data: bytes, room: int) -> bytes:
        """At most ``room + 1`` decoded bytes of ``data`` (more than ``room``: too large)."""
        if self._zlib is None:
            if self.encoding == "gzip":
                wbits = 16 + zlib.MAX_WBITS
            else:
                wbits = zlib.MAX_WBITS if data[0] & 0x0F == 8 else -zlib.MAX_WBITS
            self._zlib = zlib.decompressobj(wbits)
        try:
            return self._zlib.decompress(data, room + 1)
        except zlib.error:
            raise self.bad() from None

    def finish(self) -> None:
        if self._zlib is not None and (not self._zlib.eof or self._zlib.unused_data):
            raise self.bad()

    def bad(self) -> BadEncodingError:
        return BadEncodingError(f"request body is not valid {self.encoding} data")


async def read_body(request: web.Request, settings: GatewaySettings) -> bytes:
    """The decoded body, or a ``BodyError`` naming the limit it broke."""
    encoding = _check_encoding(request)
    limit = settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise _too_large(settings)
    # aiohttp decodes itself unless the server runs with auto_decompress=False (server_options)
    decoded_by_aiohttp = getattr(request.content, "total_compressed_bytes", None) is not None
    decoder = _Decoder(encoding) if encoding != "identity" and not decoded_by_aiohttp else None
    budget = request.app[BODY_BUDGET]
    chunks: list[bytes] = []
    held = 0
    # a body that arrived whole with the headers needs no bound on the wait (the timer: ~3 µs)
    complete = request.content.is_eof()
    try:
        async with (
            contextlib.nullcontext()
            if complete
            else asyncio.timeout(settings.body_read_timeout_seconds)
        ):
            while chunk := await request.content.readany():
                if decoder is not None:
                    chunk = decoder.feed(chunk, limit - held)
                if held + len(chunk) > limit:
                    raise _too_large(settings)
                if not budget.take(len(chunk)):
                    raise BodyBudgetError(
                        "too many request bodies are being received at once "
                        f"(max_inflight_body_bytes, {budget.max_bytes} bytes); retry later"
                    )
                held += len(chunk)
                chunks.append(chunk)
        if decoder is not None:
            decoder.finish()
    except TimeoutError:
        seconds = settings.body_read_timeout_seconds
        raise BodyTimeoutError(
            f"request body not received within body_read_timeout_seconds ({seconds:g} s)"
        ) from None
    except web.RequestPayloadError as exc:  # bad chunking, or bad data aiohttp was decoding
        if encoding == "identity":
            raise BadEncodingError("request body could not be read (bad chunked encoding)") from exc
        raise BadEncodingError(f"request body is not valid {encoding} data") from exc
    finally:
        budget.give(held)
    return b"".join(chunks)


def check_depth(value: Any, limit: int) -> None:
    """``InvalidParamsError`` if ``value`` nests objects and arrays deeper than ``limit``
    (checked without recursion, before any converter recurses into it)."""
    level: list[Any] = [value]
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            raise InvalidParamsError(f"request nests deeper than max_json_depth ({limit} levels)")
        following: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                following.extend(v for v in item.values() if isinstance(v, dict | list))
            elif isinstance(item, list):
                following.extend(v for v in item if isinstance(v, dict | list))
        level = following
