"""Graceful shutdown: how a serving gateway stops on SIGTERM or SIGINT.

At once: ``/readyz`` answers 503 (a load balancer drains the replica), every new
request gets 503 with ``Retry-After`` (``refuse_when_stopping``), and the replica
claims no other replica's expired tasks. Open streams and blocking calls then go on
for up to ``shutdown_grace_seconds``; whatever still runs is handed over
(``TaskEngine.aclose``): each stream ends with a status event of its task's current
state (metadata ``kind: gateway_stopping``; for a task run elsewhere, as stored), each
blocking caller gets the task as it stands, and the leases are released so another
replica takes the tasks over at its next lease check. A second signal ends the grace
period at once (the hand-over still happens).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from aiohttp import web

from a2a_gateway.errors import GatewayStoppingError
from a2a_gateway.observability.metrics import HANDED_OVER
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
    """While the gateway stops, new work goes to another replica (the error is written by
    ``transport.middleware.request_context``, as a JSON-RPC or REST error)."""
    if request.path not in _STILL_SERVED and stopping(request.app):
        raise GatewayStoppingError()
    return await handler(request)


async def drain(app: web.Application, hurry: asyncio.Event | None = None) -> None:
    """Stop taking work, let what runs go on up to ``shutdown_grace_seconds`` (less once
    ``hurry`` is set), hand it over, and give the streams up to ``shutdown_close_seconds``
    to send their last event."""
    gateway = app[GATEWAY]
    engine, streams = gateway.engine, app[OPEN_STREAMS]
    engine.stopping = True
    gateway.hub.feed.close_all()  # feed clients hold no work: they reconnect to another replica
    log.info("shutdown_started", running_tasks=len(engine.runs), open_streams=len(streams))
    await _until(
        lambda: not engine.runs and not streams, gateway.settings.shutdown_grace_seconds, hurry
    )
    log.info("shutdown_handing_over", running_tasks=len(engine.runs), open_streams=len(streams),
             hurried=hurry is not None and hurry.is_set())
    HANDED_OVER.inc(len(engine.runs))
    await engine.aclose()
    await _until(lambda: not streams, gateway.settings.shutdown_close_seconds)


async def _until(
    done: Callable[[], bool], seconds: float, hurry: asyncio.Event | None = None
) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not done() and asyncio.get_running_loop().time() < deadline:
        if hurry is not None and hurry.is_set():
            return
        await asyncio.sleep(_POLL_SECONDS)
