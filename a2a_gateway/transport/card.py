"""Serving agent cards (``a2a_gateway.endpoints.card`` builds them) and the JWKS of their
signing keys, with caching headers.

By default a card also carries the 0.3 top-level fields (``url``, ``preferredTransport``,
``protocolVersion``) so 0.3 clients can discover the endpoint; an endpoint whose
metadata sets ``strict_v1_card: true`` gets a strict 1.0 card instead. With signing keys
configured, a card is signed once per cached body (``a2a_gateway.endpoints.card_signing``).
"""

from __future__ import annotations

import hashlib
from email.utils import format_datetime
from typing import Any

import orjson
from aiohttp import web
from google.protobuf.json_format import MessageToDict

from a2a_gateway.endpoints.card import build_card
from a2a_gateway.endpoints.card_signing import CardSigner
from a2a_gateway.endpoints.registry import EndpointRuntime


def card_document(
    runtime: EndpointRuntime, base_url: str, signer: CardSigner, grpc_url: str = ""
) -> dict[str, Any]:
    card = build_card(runtime.endpoint, base_url, auth=runtime.auth, grpc_url=grpc_url)
    signer.sign(card, base_url)
    if runtime.endpoint.metadata.get("strict_v1_card"):
        return MessageToDict(card)
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict  # loads late

    return agent_card_to_dict(card)


def card_body(
    runtime: EndpointRuntime, base_url: str, signer: CardSigner, grpc_url: str = ""
) -> tuple[bytes, str]:
    """The served card's JSON and its ETag, built once per runtime and URLs."""
    # a changed row builds a new runtime, so the URLs are the only key needed here
    key = f"{base_url} {grpc_url}"
    cached = runtime.card_cache
    if cached is None or cached[0] != key:
        body = orjson.dumps(card_document(runtime, base_url, signer, grpc_url))
        cached = runtime.card_cache = (key, body, etag_of(body))
    return cached[1], cached[2]


def card_response(
    request: web.Request, runtime: EndpointRuntime, base_url: str, max_age: int, signer: CardSigner,
    grpc_url: str = "",
) -> web.Response:
    body, etag = card_body(runtime, base_url, signer, grpc_url)
    headers = {
        "Last-Modified": format_datetime(runtime.endpoint.updated_at, usegmt=True),
        "Vary": "A2A-Version",
    }
    return cached_json(request, body, etag, max_age, headers)


def jwks_response(request: web.Request, signer: CardSigner, max_age: int) -> web.Response:
    """The public card-signing keys; 404 when cards are not signed."""
    if not signer.enabled:
        raise web.HTTPNotFound()
    body = orjson.dumps(signer.jwks)
    return cached_json(request, body, etag_of(body), max_age, {}, "application/jwk-set+json")


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def cached_json(
    request: web.Request, body: bytes, etag: str, max_age: int, headers: dict[str, str],
    content_type: str = "application/json",
) -> web.Response:
    """``body`` with its ETag, or 304 when the request's ``If-None-Match`` holds it; ``headers``
    may set another ``Cache-Control``."""
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={max_age}", **headers}
    if etag in [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]:
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, content_type=content_type, headers=headers)
