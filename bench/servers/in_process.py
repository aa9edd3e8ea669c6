"""The gateway with one echo endpoint, served in the benchmark's own process."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from a2a_gateway.app import build_app, server_options

try:
    from a2a_gateway.cli import tune_gc_for_serving
except ImportError:  # an earlier gateway (send_path.py --ref): its own module held it
    from a2a_gateway.gc_policy import tune_for_serving as tune_gc_for_serving
from a2a_gateway.observability.logs import configure_logging
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import Endpoint


@dataclass(frozen=True)
class EchoGateway:
    app: web.Application
    endpoint_id: str
    port: int

    @property
    def jsonrpc_path(self) -> str:
        return f"/{self.endpoint_id}/a2a"


@contextlib.asynccontextmanager
async def echo_gateway(
    store: str, card: dict[str, Any] | None = None
) -> AsyncIterator[EchoGateway]:
    """The gateway on ``store`` (log level warning, as `serve` configures it) with an echo
    agent of delay 0, listening on a free port of 127.0.0.1 for the block, the garbage
    collector tuned as ``serve`` tunes it."""
    settings = GatewaySettings(
        store=store, log_level="warning", allow_unauthenticated_endpoints=True
    )
    configure_logging(settings.log_level, settings.log_format)
    endpoint = Endpoint(
        id=str(uuid.uuid4()), name="echo", card=card or {},
        metadata={"module_name": "handlers.echo", "class_name": "EchoHandler", "delay": 0.0},
    )
    app = build_app(settings, endpoints=[endpoint])
    runner = web.AppRunner(app, access_log=None, **server_options(settings))
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        tune_gc_for_serving(settings.gc_young_threshold)  # as `serve` does once it listens
        yield EchoGateway(app, endpoint.id, port)
    finally:
        await runner.cleanup()
