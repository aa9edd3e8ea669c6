"""The URL table of the gateway, nothing else.

Every endpoint lives under ``/{endpoint_id}``. The optional default endpoint is also served
at the root (RFC 8615 puts ``.well-known`` there, and clients given ``http://host/<id>``
without a trailing slash resolve the card to ``http://host/.well-known/agent-card.json``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from a2a_gateway.endpoints.card_signing import JWKS_PATH
from a2a_gateway.state import GATEWAY
from a2a_gateway.transport import health, rest, worker
from a2a_gateway.transport.admin import add_admin_routes
from a2a_gateway.transport.card import card_response, jwks_response
from a2a_gateway.transport.catalog import add_catalog_routes
from a2a_gateway.transport.feed import endpoint_events, gateway_events
from a2a_gateway.transport.jsonrpc import handle_jsonrpc
from a2a_gateway.transport.mcp import add_mcp_routes

View = Callable[[web.Request], Awaitable[web.StreamResponse]]
ENDPOINT = "/{endpoint_id}"


async def agent_card(request: web.Request) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    runtime = await gateway.registry.get(request.match_info["endpoint_id"])
    return card_response(
        request, runtime, gateway.base_url(request), gateway.settings.card_max_age_seconds,
        gateway.card_signer, gateway.grpc_url(request),
    )


async def jwks(request: web.Request) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    return jwks_response(request, gateway.card_signer, gateway.settings.card_max_age_seconds)


def _endpoint_routes() -> list[tuple[str, str, View]]:
    """(method, path below the endpoint, view), the busiest first: the router tries them in
    order."""
    return [
        ("POST", "/a2a", handle_jsonrpc),
        ("POST", "/a2a/", handle_jsonrpc),
        ("GET", "/.well-known/agent-card.json", agent_card),
        # the card's path before A2A 0.3 (a2a-sdk 0.2, @a2a-js/sdk 0.3.0-0.3.1 look there)
        ("GET", "/.well-known/agent.json", agent_card),
        *[
            (method, f"/a2a/rest{path}", rest.rest_view(route))
            for method, path, route in rest.ROUTES
        ],
    ]


def _as_endpoint(endpoint_id: str, view: View) -> View:
    async def at_root(request: web.Request) -> web.StreamResponse:
        request.match_info["endpoint_id"] = endpoint_id
        structlog.contextvars.bind_contextvars(endpoint_id=endpoint_id)
        return await view(request)

    return at_root


def add_routes(
    app: web.Application, *, default_endpoint: str = "", worker_events_path: str = ""
) -> None:
    """``worker_events_path``: serve the worker route there (empty: this is no worker)."""
    routes = _endpoint_routes()
    for method, path, view in routes:
        app.router.add_route(method, f"{ENDPOINT}{path}", view)
    # operators' feed (not at the root); no HEAD: a stream's events would follow a bodiless answer
    app.router.add_get(f"{ENDPOINT}/events", endpoint_events, allow_head=False)
    app.router.add_get(
        "/events", gateway_events, allow_head=False
    )  # every endpoint's, for gateway operators
    app.router.add_get("/healthz", health.healthz)
    app.router.add_get("/readyz", health.readyz)
    app.router.add_get("/metrics", health.metrics)
    app.router.add_get(JWKS_PATH, jwks)
    add_catalog_routes(app)
    add_mcp_routes(app)
    add_admin_routes(app)
    if worker_events_path:
        app.router.add_post(worker_events_path, worker.worker_event)
    if default_endpoint:
        for method, path, view in routes:
            app.router.add_route(method, path, _as_endpoint(default_endpoint, view))
