"""The worker route (``worker = true``): the events a worker Lambda gets, as the AWS Lambda
Web Adapter posts them (``worker_events_path``, ``/events`` by default).

A ``run_task`` event is claimed and run here; the answer (``{"outcome": "ran"}``, or
``duplicate`` / ``not_found`` for a task nothing is left to do for) comes once the run
ended (and the backend health write it started, ``backend_health``), so the invocation lasts
as long as the run. A ``sweep`` event answers ``swept``.
Anything else is 400 with the reason.
"""

from __future__ import annotations

from aiohttp import web

from a2a_gateway.state import GATEWAY
from a2a_gateway.tasks.dispatch import BadEventError, parse_event
from a2a_gateway.transport.body import read_body


async def worker_event(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    try:
        ref = parse_event(await read_body(request, gateway.settings))
    except BadEventError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    if ref is None:
        await gateway.engine.sweep(gateway.registry)
        return web.json_response({"outcome": "swept"})
    outcome = await gateway.engine.run_dispatched(gateway.registry, ref)
    await gateway.engine.services.health.settled()  # Lambda may freeze the worker once it answers
    return web.json_response({"outcome": outcome})
