"""Serving agent cards (``a2a_gateway.agent_card`` builds them) with caching headers.

By default a card also carries the 0.3 top-level fields (``url``, ``preferredTransport``,
``protocolVersion``) so 0.3 clients can discover the endpoint; an endpoint whose
metadata sets ``strict_v1_card: true`` gets a strict 1.0 card instead.
"""

from __future__ import annotations

import hashlib
from email.utils import format_datetime
from typing import Any

import orjson
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from aiohttp import web
from google.protobuf.json_format import MessageToDict

from a2a_gateway.agent_card import build_card
from a2a_gateway.registry import EndpointRuntime


def card_document(runtime: EndpointRuntime, base_url: str) -> dict[str, Any]:
    card = build_card(runtime.endpoint, base_url, auth=runtime.auth)
    if runtime.endpoint.metadata.get("strict_v1_card"):
        return MessageToDict(card)
    return agent_card_to_dict(card)


def card_response(request: web.Request, runtime: EndpointRuntime, base_url: str, max_age: int) -> web.Response:
    # a changed row builds a new runtime, so the base URL is the only key needed here
    cached = runtime.extras.get("card")
    if cached is None or cached[0] != base_url:
        body = orjson.dumps(card_document(runtime, base_url))
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        cached = (base_url, body, etag)
        runtime.extras["card"] = cached
    _, body, etag = cached
    headers = {
        "ETag": etag,
        "Last-Modified": format_datetime(runtime.endpoint.updated_at, usegmt=True),
        "Cache-Control": f"public, max-age={max_age}",
        "Vary": "A2A-Version",
    }
    if etag in [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]:
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, content_type="application/json", headers=headers)
