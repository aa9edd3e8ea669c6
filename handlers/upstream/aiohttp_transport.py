"""An httpx transport that sends through aiohttp's HTTP client: the bridges keep httpx's API
(requests, retries, errors, ``MockTransport`` in tests) while a response's bytes are read by
aiohttp's parser, which hands over everything one socket read holds.

Why: a backend streams one HTTP chunk per server-sent event, and httpcore's h11 turns each
chunk into an event of its own that climbs six generator layers: reading a backend's event
stream cost ~39 µs of CPU per event that way against ~9 µs on this transport
(``bench/backend_read.py``, bench/README.md). What stays as it was: the request as httpx
built it (headers, body), content decoding and cookies (httpx's, on the raw bytes: aiohttp's
own are off), HTTP/1.1 keep-alive (a response read to its end gives its connection back; one
closed early closes it), TLS with httpx's default context, the timeouts of each request
(connect, read, pool) and the errors (httpx's, as httpcore raises them). It knows no proxy:
``backend_client`` keeps httpx's own transports when the environment names one.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import yarl

_MAX_HEADER_BYTES = 16 * 1024
"""The longest status or header line taken (h11's bound of a response head; aiohttp's
default is 8 KiB)."""


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests through one ``aiohttp.ClientSession`` (opened at the first
    request, in the running loop; closed by ``aclose``): at most ``max_connections`` at
    once, an idle one kept ``keepalive_seconds`` (0: none kept). Without ``verify``, TLS
    uses httpx's default context, made with the session: loading the CA bundle costs
    20–40 ms of CPU, which a gateway that never calls a backend does not pay at start-up."""

    def __init__(self, *, max_connections: int, keepalive_seconds: float,
                 verify: ssl.SSLContext | None = None) -> None:
        self._max_connections = max_connections
        self._keepalive_seconds = keepalive_seconds
        self._ssl = verify
        self._session: aiohttp.ClientSession | None = None

    def _opened(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, ssl=self._ssl or httpx.create_ssl_context(),
                keepalive_timeout=self._keepalive_seconds or None,
                force_close=not self._keepalive_seconds,
                use_dns_cache=False,  # resolved at every connect, as httpcore does
            )
            # what httpx does above the transport stays httpx's alone: cookies, decoding,
            # proxies; header lines as long as h11 takes them
            self._session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False, trust_env=False, skip_auto_headers=("User-Agent",),
                max_line_size=_MAX_HEADER_BYTES, max_field_size=_MAX_HEADER_BYTES,
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._opened()
        timeout = request.extensions.get("timeout", {})
        # credentials in the URL are already in the Authorization header httpx built, and
        # aiohttp refuses both (httpcore never sends them either: only the path goes out).
        # The URL goes out exactly as httpx encoded it: yarl would decode "%3A" to ":" in a
        # path, and a signed request (AWS SigV4 signs the encoded path) would then fail.
        url = yarl.URL(str(request.url.copy_with(username=None, password=None)), encoded=True)
        try:
            response = await session.request(
                request.method, url,
                headers=[(k.decode("latin-1"), v.decode("latin-1"))
                         for k, v in request.headers.raw],
                data=await request.aread() or None, allow_redirects=False,
                timeout=_client_timeout(timeout),
            )
        except Exception as exc:
            raise _httpx_error(exc, request, before_answer=True) from exc
        return httpx.Response(
            response.status,
            headers=[(k, v) for k, v in response.raw_headers],
            stream=_Body(response, request),
            extensions={"http_version": b"HTTP/1.1",
                        "reason_phrase": (response.reason or "").encode("latin-1")},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


class _Body(httpx.AsyncByteStream):
    """A response's bytes as they arrive; closing it early closes the connection."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except Exception as exc:
            raise _httpx_error(exc, self._request, before_answer=False) from exc

    async def aclose(self) -> None:
        if self._response.content.at_eof():
            self._response.release()  # the connection goes back to the pool
        else:
            self._response.close()


def _client_timeout(timeout: dict[str, Any]) -> aiohttp.ClientTimeout:
    """The request's httpx timeouts: ``pool`` bounds the wait for a connection, ``connect``
    the connect, ``read`` each read (``write`` has no aiohttp counterpart: a request body
    is written at once)."""
    pool, connect = timeout.get("pool"), timeout.get("connect")
    waiting = None if pool is None or connect is None else pool + connect
    return aiohttp.ClientTimeout(total=None, connect=waiting, sock_connect=connect,
                                 sock_read=timeout.get("read"))


def _httpx_error(exc: Exception, request: httpx.Request, *, before_answer: bool) -> Exception:
    """The httpx error an aiohttp error stands for (what httpcore would have raised), so
    callers see one family of errors whatever the transport."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message, request=request)
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return httpx.ReadTimeout(message, request=request)
    if isinstance(exc, asyncio.TimeoutError):
        return (httpx.PoolTimeout if before_answer else httpx.ReadTimeout)(message, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ClientSSLError):
        return httpx.ConnectError(message, request=request)
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(message, request=request)
    if isinstance(exc, aiohttp.ClientResponseError):  # a malformed answer
        return httpx.RemoteProtocolError(message, request=request)
    if isinstance(exc, aiohttp.ClientError | OSError):
        return (httpx.ConnectError if before_answer else httpx.ReadError)(message, request=request)
    return exc  # not the connection's: raised as it is
