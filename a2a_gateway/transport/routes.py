"""The URL table of the gateway, nothing else."""

from __future__ import annotations

from aiohttp import web

from a2a_gateway.gateway import GATEWAY
from a2a_gateway.transport import health, rest
from a2a_gateway.transport.card import card_response
from a2a_gateway.transport.jsonrpc import handle_jsonrpc

ENDPOINT = "/{endpoint_id}"


async def agent_card(request: web.Request) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    runtime = await gateway.registry.get(request.match_info["endpoint_id"])
    return card_response(request, runtime, gateway.base_url(request), gateway.settings.card_max_age_seconds)


def add_routes(app: web.Application) -> None:
    # the router tries resources in order: the busiest first
    app.router.add_post(f"{ENDPOINT}/a2a", handle_jsonrpc)
    app.router.add_post(f"{ENDPOINT}/a2a/", handle_jsonrpc)
    app.router.add_get(f"{ENDPOINT}/.well-known/agent-card.json", agent_card)
    app.router.add_get("/healthz", health.healthz)
    app.router.add_get("/readyz", health.readyz)
    app.router.add_get("/metrics", health.metrics)
    for method, path, route in rest.ROUTES:
        app.router.add_route(method, f"{ENDPOINT}/a2a/rest{path}", rest.rest_view(route))
