"""Liveness (``/healthz``), readiness (``/readyz``: the store answers and the gateway is not
stopping) and ``/metrics``."""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from a2a_gateway.observability.metrics import RUNNING, SSE_STREAMS
from a2a_gateway.state import GATEWAY
from a2a_gateway.stores.base import StoreError
from a2a_gateway.transport.sse import OPEN_STREAMS


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    if gateway.engine.stopping:  # drained by the load balancer while open work ends
        return web.json_response({"status": "stopping"}, status=503)
    try:
        async with asyncio.timeout(2.0):
            await gateway.store.ping()
    except (StoreError, TimeoutError):
        return web.json_response({"status": "unavailable", "store": "unreachable"}, status=503)
    live = "ok" if gateway.hub.listening else "degraded (followers poll the store)"
    return web.json_response(
        {"status": "ready", "running_tasks": len(gateway.engine.runs), "live_path": live}
    )


async def metrics(request: web.Request) -> web.Response:
    RUNNING.set(len(request.app[GATEWAY].engine.runs))
    SSE_STREAMS.set(len(request.app.get(OPEN_STREAMS, ())))
    body = generate_latest()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
