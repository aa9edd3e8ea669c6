"""Per-endpoint agent cards: built from the endpoint row, served with caching headers.

The card lists JSON-RPC 1.0, JSON-RPC 0.3 (the same URL) and HTTP+JSON 1.0. By
default it also carries the 0.3 top-level fields (``url``, ``preferredTransport``,
``protocolVersion``) so 0.3 clients can discover the endpoint; an endpoint whose
metadata sets ``strict_v1_card: true`` gets a strict 1.0 card instead.
"""

from __future__ import annotations

import hashlib
from email.utils import format_datetime
from typing import Any

import orjson
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import AgentCard, AgentInterface
from aiohttp import web
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a_gateway.registry import EndpointRuntime

CARD_FIELDS = {
    "provider", "version", "documentationUrl", "iconUrl", "defaultInputModes",
    "defaultOutputModes", "skills", "securitySchemes", "securityRequirements",
}


def endpoint_urls(base_url: str, endpoint_id: str) -> tuple[str, str]:
    root = f"{base_url.rstrip('/')}/{endpoint_id}/a2a"
    return root, f"{root}/rest"


def build_card(runtime: EndpointRuntime, base_url: str, *, extended: bool = False) -> AgentCard:
    endpoint = runtime.endpoint
    source: dict[str, Any] = endpoint.card
    jsonrpc_url, rest_url = endpoint_urls(base_url, endpoint.id)
    card = AgentCard(
        name=endpoint.name,
        description=endpoint.description or source.get("description") or endpoint.name,
        version=str(source.get("version", "1.0.0")),
    )
    fields = {k: v for k, v in source.items() if k in CARD_FIELDS}
    if extended:
        extra = source.get("extended") or {}
        fields["skills"] = [*fields.get("skills", []), *extra.get("skills", [])]
    ParseDict(fields, card, ignore_unknown_fields=True)
    if not card.default_input_modes:
        card.default_input_modes.extend(["text/plain", "application/json"])
    if not card.default_output_modes:
        card.default_output_modes.extend(["text/plain", "application/json"])
    if not card.skills:
        card.skills.add(id="chat", name=endpoint.name, description=card.description, tags=["chat"])
    card.capabilities.streaming = runtime.streaming
    card.capabilities.push_notifications = runtime.push_notifications
    card.capabilities.extended_agent_card = runtime.extended_card
    for ext in runtime.extensions:
        ParseDict(ext, card.capabilities.extensions.add(), ignore_unknown_fields=True)
    card.supported_interfaces.extend(
        [
            AgentInterface(url=jsonrpc_url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=jsonrpc_url, protocol_binding="JSONRPC", protocol_version="0.3"),
            AgentInterface(url=rest_url, protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ]
    )
    return card


def card_document(runtime: EndpointRuntime, base_url: str) -> dict[str, Any]:
    card = build_card(runtime, base_url)
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
