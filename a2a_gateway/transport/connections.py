"""Connection timeouts: how long a client may hold a connection without sending a request.

aiohttp closes a connection that is waiting for a request head after ``keepalive_timeout``,
counted from the connection's start and from the end of each response and not restarted by
the bytes that arrive, so a head sent a byte at a time is bounded as well as an idle
connection. A response being written (an SSE stream, however silent) or a body being read
is not waiting, so neither is cut; bodies have their own timeout (``transport.body``).

aiohttp has no separate timeout for the first request's head: ``GatewayServer`` adds it
(``header_timeout``, as nginx's ``client_header_timeout``), closing a new connection that
has not sent a whole request line and headers by then. The keep-alive wait that follows
a response stays aiohttp's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler


class GatewayServer(web.Server):
    """aiohttp's Server, closing connections whose first request head is late."""

    def __init__(self, *args: Any, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout
        self._head_timers: dict[RequestHandler, asyncio.TimerHandle] = {}

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self._head_timers[handler] = self._loop.call_later(
            self.header_timeout, self._close_if_headless, handler)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        if (timer := self._head_timers.pop(handler, None)) is not None:
            timer.cancel()
        super().connection_lost(handler, exc)

    def _close_if_headless(self, handler: RequestHandler) -> None:
        del self._head_timers[handler]
        if handler._request_count == 0:  # counts the heads parsed, malformed ones too
            handler.force_close()


class GatewayRunner(web.AppRunner):
    """``web.AppRunner`` serving ``app`` with a ``GatewayServer``."""

    def __init__(self, app: web.Application, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.header_timeout = header_timeout

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()  # starts the app; its Server is then rebuilt
        return GatewayServer(
            made.request_handler, request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation, header_timeout=self.header_timeout,
            **made._kwargs,
        )
