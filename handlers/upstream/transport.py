"""The HTTP client the bridges share, and a transport onto it for a bridge whose backend
library takes its own ``httpx.AsyncClient``."""

from __future__ import annotations

import time
from urllib.request import getproxies

import httpx

from handlers.upstream.aiohttp_transport import AiohttpTransport
from handlers.upstream.retry import Retry
from handlers.upstream.telemetry import observe_latency, start_trace


def backend_client(max_connections: int, max_keepalive_connections: int,
                   keepalive_seconds: float) -> httpx.AsyncClient:
    """The HTTP client the bridges share (the gateway opens and closes it): room for
    ``max_connections`` backend calls at once (a stream holds its connection for the whole
    run), idle ones kept ``keepalive_seconds`` for reuse. Its calls go through aiohttp's
    client (``AiohttpTransport``: a backend's event stream read at a fifth of the CPU), which
    keeps any number of idle connections within ``max_connections``, or none when
    ``max_keepalive_connections`` is 0; unless the environment names a proxy
    (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``): then through httpx's own transports,
    which apply it and keep at most ``max_keepalive_connections`` idle ones."""
    limits = httpx.Limits(max_connections=max_connections,
                          max_keepalive_connections=max_keepalive_connections,
                          keepalive_expiry=keepalive_seconds)
    transport = None
    if not _proxied():
        transport = AiohttpTransport(
            max_connections=max_connections,
            keepalive_seconds=keepalive_seconds if max_keepalive_connections else 0,
        )
    return httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None), limits=limits,
                             transport=transport)


def _proxied() -> bool:
    """Whether the environment names a proxy for HTTP(S) calls (as httpx reads it)."""
    return any(scheme in getproxies() for scheme in ("http", "https", "all"))


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
        trace = start_trace(self.backend, request.method, str(request.url), request.headers)
        started = time.perf_counter()
        response: httpx.Response | None = None
        error: BaseException | None = None
        try:
            response, _ = await self.retry.send(self.http, request, None, stream=True)
            return response
        except BaseException as exc:
            error = exc
            raise
        finally:
            observe_latency(self.backend, started, response)
            if trace is not None:
                trace.end(response.status_code if response is not None else None, error)

    async def aclose(self) -> None:
        """The shared client belongs to the gateway."""
