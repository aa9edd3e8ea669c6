"""An aiohttp app served on a free loopback port for one test: fake backends, webhook receivers,
JWKS servers, the gateway itself.

    async with serve_locally(app) as base_url:   # "http://127.0.0.1:PORT"
        ...
    async with serve_locally(app, tls=context) as base_url:   # "https://127.0.0.1:PORT"
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web


@asynccontextmanager
async def serve_locally(
    app: web.Application, *, tls: ssl.SSLContext | None = None, **runner_options: Any
) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
