"""Graceful shutdown: how a serving gateway stops on SIGTERM or SIGINT.

At once: ``/readyz`` answers 503 (a load balancer drains the replica), every new
request gets 503 with ``Retry-After`` (``refuse_when_stopping``), and the replica
claims no other replica's expired tasks. Open streams and blocking calls then go on
for up to ``shutdown_grace_seconds``; whatever still runs is handed over
(``TaskEngine.aclose``): each stream ends with a status event of its task's current
state (metadata ``kind: gateway_stopping``), each blocking caller gets the task as
it stands, and the leases are released so another replica re-attaches at once.
"""

from __future__ import annotations

import asyncio

import structlog
from aiohttp import web

from a2a_gateway.state import GATEWAY
from a2a_gateway.transport.sse import OPEN_STREAMS

log = structlog.get_logger(__name__)

_STILL_SERVED = frozenset({"/healthz", "/readyz", "/metrics"})
_POLL_SECONDS = 0.1


def stopping(app: web.Application) -> bool:
    gateway = app.get(GATEWAY)
    return gateway is not None and gateway.engine.stopping


@web.middleware
async def refuse_when_stopping(request: web.Request, handler: web.Handler) -> web.StreamResponse:
    """While the gateway stops, new work goes to another replica."""
    if request.path not in _STILL_SERVED and stopping(request.app):
        return web.json_response(
            {"error": "the gateway is shutting down; retry on another instance"},
            status=503, headers={"Retry-After": "1"},
        )
    return await handler(request)


async def drain(app: web.Application, grace_seconds: float) -> None:
    """Stop taking work, let what runs go on up to ``grace_seconds``, then hand it over."""
    engine = app[GATEWAY].engine
    engine.stopping = True
    log.info("shutdown_started", running_tasks=len(engine.runs), open_streams=len(app[OPEN_STREAMS]))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_seconds
    while (engine.runs or app[OPEN_STREAMS]) and loop.time() < deadline:
        await asyncio.sleep(_POLL_SECONDS)
    log.info("shutdown_handing_over", running_tasks=len(engine.runs), open_streams=len(app[OPEN_STREAMS]))
    await engine.aclose()
