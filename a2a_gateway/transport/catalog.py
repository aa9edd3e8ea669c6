"""The agent catalog: ``GET /.well-known/ai-catalog.json`` and ``GET /agents``.

``/.well-known/ai-catalog.json`` follows the AI Catalog draft of the Agent Registry discovery
work: ``specVersion``, ``host`` and ``entries``, each entry typed
``application/a2a-agent-card+json`` with the URL of the endpoint's agent card. ``/agents`` is
the JSON list of those cards, each the bytes its card route serves. Which endpoints a caller
sees is ``a2a_gateway.endpoints.catalog``'s to decide.

A body is built once per view (the endpoints seen, of one listing), base URL and route, and
served with an ETag; ``If-None-Match`` gets a 304. The answer depends on the caller's
credential, so it is ``private`` and varies by the headers that carry one.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from a2a_gateway.endpoints.catalog import CatalogView, EndpointCatalog
from a2a_gateway.state import GATEWAY, Gateway
from a2a_gateway.transport.card import cached_json, card_body, etag_of

CATALOG_PATH = "/.well-known/ai-catalog.json"
AGENTS_PATH = "/agents"
SPEC_VERSION = "1.0"
A2A_CARD_TYPE = "application/a2a-agent-card+json"
BODIES_CACHED_BYTES = 32 * 1024 * 1024
"""Size of the catalog bodies remembered (one per view, base URL and route), the least recently
served dropped first."""


@dataclass(slots=True)
class CatalogState:
    """The gateway's catalog (made with the first request, once the gateway is running) and
    the bodies built from it."""

    catalog: EndpointCatalog | None = None
    bodies: OrderedDict[tuple[Any, ...], tuple[bytes, str]] = field(default_factory=OrderedDict)
    cached_bytes: int = 0

    def of(self, gateway: Gateway) -> EndpointCatalog:
        if self.catalog is None:
            self.catalog = EndpointCatalog(gateway.store, gateway.registry, gateway.auth,
                                           gateway.settings)
        return self.catalog


CATALOG = web.AppKey("agent_catalog", CatalogState)


def catalog_document(
    view: CatalogView, gateway: Gateway, base_url: str, grpc_url: str
) -> dict[str, Any]:
    """The AI Catalog of ``view``: one entry per endpoint, from the card it serves."""
    entries = []
    for runtime in view.runtimes:
        body, _ = card_body(runtime, base_url, gateway.card_signer, grpc_url)
        card = orjson.loads(body)
        entries.append({
            "identifier": f"urn:uuid:{runtime.endpoint.id}",
            "displayName": card.get("name", ""),
            "type": A2A_CARD_TYPE,
            "mediaType": A2A_CARD_TYPE,  # the same field in earlier versions of the draft
            "url": f"{base_url.rstrip('/')}/{runtime.endpoint.id}/.well-known/agent-card.json",
            "description": card.get("description", ""),
            "tags": [s.get("name", "") for s in card.get("skills", [])],
        })
    return {
        "specVersion": SPEC_VERSION,
        "host": {"displayName": "a2a-gateway", "identifier": base_url.rstrip("/")},
        "entries": entries,
    }


def agents_body(view: CatalogView, gateway: Gateway, base_url: str, grpc_url: str) -> bytes:
    """The JSON list of the cards of ``view``, each as its card route serves it."""
    cards = [card_body(r, base_url, gateway.card_signer, grpc_url)[0] for r in view.runtimes]
    return b"[" + b",".join(cards) + b"]"


async def _respond(request: web.Request, route: str) -> web.Response:
    gateway = request.app[GATEWAY]
    state = request.app[CATALOG]
    catalog = state.of(gateway)
    view = await catalog.view(request.headers)
    base_url = gateway.base_url(request)
    grpc_url = gateway.grpc_url(request)  # as the card route builds them: one card cache
    key = (route, base_url, grpc_url, view.key)
    cached = state.bodies.get(key)
    if cached is None:
        body = (agents_body(view, gateway, base_url, grpc_url) if route == AGENTS_PATH
                else orjson.dumps(catalog_document(view, gateway, base_url, grpc_url)))
        cached = state.bodies[key] = (body, etag_of(body))
        state.cached_bytes += len(body)
        while state.cached_bytes > BODIES_CACHED_BYTES and len(state.bodies) > 1:
            state.cached_bytes -= len(state.bodies.popitem(last=False)[1][0])
    state.bodies.move_to_end(key)
    body, etag = cached
    max_age = math.ceil(gateway.settings.endpoint_cache_seconds)
    headers = {
        "Cache-Control": f"private, max-age={max_age}",
        "Vary": ", ".join(sorted(view.credential_headers)),
    }
    return cached_json(request, body, etag, max_age, headers)


async def ai_catalog(request: web.Request) -> web.Response:
    return await _respond(request, CATALOG_PATH)


async def agents(request: web.Request) -> web.Response:
    return await _respond(request, AGENTS_PATH)


def add_catalog_routes(app: web.Application) -> None:
    app[CATALOG] = CatalogState()
    app.router.add_get(CATALOG_PATH, ai_catalog)
    app.router.add_get(AGENTS_PATH, agents)
