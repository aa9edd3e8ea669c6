"""The agent card of an endpoint, built from its row (``card`` fields and capabilities).

The card lists JSON-RPC 1.0, JSON-RPC 0.3 (the same URL), HTTP+JSON 1.0 and, when the gateway
serves gRPC, GRPC 1.0 (its ``tenant`` is the endpoint id, which routes the request). The registry
builds it once when it loads a row, so a card the row cannot make is a problem of the
endpoint (answered on every route), never a failure of one request.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from a2a.types import AgentCard, AgentInterface, APIKeySecurityScheme, HTTPAuthSecurityScheme
from google.protobuf.json_format import ParseDict, ParseError

from a2a_gateway.auth.config import EndpointAuth
from a2a_gateway.errors import EndpointMisconfiguredError
from a2a_gateway.stores.base import Endpoint

CARD_FIELDS = {
    "provider", "version", "documentationUrl", "iconUrl", "defaultInputModes",
    "defaultOutputModes", "skills",
}
"""Card fields a row may set. Security schemes are not among them: the card states what the
gateway enforces."""
CAPABILITY_FLAGS = {"streaming": True, "pushNotifications": True, "extendedAgentCard": False}
"""Capabilities an endpoint row may switch, with their defaults."""
CATALOG_FLAG = "catalog"
"""Metadata key: ``false`` keeps the endpoint out of the agent catalog (default true)."""
SKILL_REQUIRED = ("id", "name", "description", "tags")
"""AgentSkill fields A2A 1.0 requires (a card without them fails strict clients)."""


def with_handler_fields(endpoint: Endpoint, fields: dict[str, Any]) -> Endpoint:
    """``endpoint`` with the card fields its handler contributes (``Handler.card_fields``,
    e.g. a remote agent's skills): only description and ``CARD_FIELDS``, and the row's own
    fields win. Interfaces and security stay the gateway's; of the capabilities, a handler adds
    only the ``extensions`` it implements (structured approvals), each unless the row declares
    the same URI."""
    allowed = {k: v for k, v in fields.items() if k in CARD_FIELDS or k == "description"}
    card = {**allowed, **endpoint.card}
    declared = capabilities(endpoint).get("extensions", [])
    if isinstance(declared, list) and fields.get("extensions"):
        uris = {e.get("uri") for e in declared if isinstance(e, dict)}
        added = [e for e in fields["extensions"] if e.get("uri") not in uris]
        if added:
            card["capabilities"] = {**capabilities(endpoint), "extensions": [*declared, *added]}
    if card == endpoint.card:
        return endpoint
    return dataclasses.replace(endpoint, card=card)


def capabilities(endpoint: Endpoint) -> dict[str, Any]:
    value = endpoint.card.get("capabilities", {})
    return value if isinstance(value, dict) else {}


def capability(endpoint: Endpoint, name: str) -> bool:
    return bool(capabilities(endpoint).get(name, CAPABILITY_FLAGS[name]))


def endpoint_urls(base_url: str, endpoint_id: str) -> tuple[str, str]:
    root = f"{base_url.rstrip('/')}/{endpoint_id}/a2a"
    return root, f"{root}/rest"


def build_card(
    endpoint: Endpoint, base_url: str, *, extended: bool = False, auth: EndpointAuth | None = None,
    grpc_url: str = "",
) -> AgentCard:
    """The endpoint's card; ``auth`` (None: anonymous calls) gives its security schemes,
    ``grpc_url`` (``host:port``; empty: none) the gRPC binding's address."""
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
    card.capabilities.streaming = capability(endpoint, "streaming")
    card.capabilities.push_notifications = capability(endpoint, "pushNotifications")
    # advertised only when there is one to serve
    card.capabilities.extended_agent_card = capability(endpoint, "extendedAgentCard") and bool(
        source.get("extended"))
    for ext in capabilities(endpoint).get("extensions", []):
        ParseDict(ext, card.capabilities.extensions.add(), ignore_unknown_fields=True)
    if auth is not None:
        _advertise_auth(card, auth)
    card.supported_interfaces.extend(
        [
            AgentInterface(url=jsonrpc_url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=jsonrpc_url, protocol_binding="JSONRPC", protocol_version="0.3"),
            AgentInterface(url=rest_url, protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ]
    )
    if grpc_url:
        card.supported_interfaces.add(url=grpc_url, protocol_binding="GRPC", protocol_version="1.0",
                                      tenant=endpoint.id)
    return card


def _advertise_auth(card: AgentCard, auth: EndpointAuth) -> None:
    """Each scheme the endpoint takes, each one an alternative. An endpoint that also takes
    anonymous calls lists the schemes it declared but requires none of them."""
    if auth.anonymous and not auth.declared:
        return
    schemes = card.security_schemes
    accepted = []
    if auth.api_key_header:
        schemes["apiKey"].api_key_security_scheme.CopyFrom(APIKeySecurityScheme(
            location="header", name=auth.api_key_header,
            description="an API key from a2a-gateway keys create",
        ))
        schemes["bearer"].http_auth_security_scheme.CopyFrom(HTTPAuthSecurityScheme(
            scheme="Bearer", description="the same API key, as a bearer token",
        ))
        accepted += ["apiKey", "bearer"]
    if auth.jwt:
        schemes["jwt"].http_auth_security_scheme.CopyFrom(HTTPAuthSecurityScheme(
            scheme="Bearer", bearer_format="JWT", description=f"a JWT issued by {auth.jwt.issuer}",
        ))
        accepted.append("jwt")
    if auth.trusted_header:
        schemes["proxy"].api_key_security_scheme.CopyFrom(APIKeySecurityScheme(
            location="header", name=auth.trusted_header,
            description="set by the authenticating proxy in front of the gateway after you sign "
            "in there; sent by anyone else it is ignored",
        ))
        accepted.append("proxy")
    if not auth.anonymous:
        for name in accepted:
            card.security_requirements.add().schemes[name].SetInParent()


def in_catalog(endpoint: Endpoint) -> bool:
    """Whether the row lets the agent catalog list it (its ``catalog`` flag, default true)."""
    return endpoint.metadata.get(CATALOG_FLAG, True) is not False


def check_card(endpoint: Endpoint) -> None:
    """Raise ``EndpointMisconfiguredError`` naming what is wrong with the row's card fields
    (and its ``catalog`` flag, which publishes the card)."""
    source = endpoint.card
    if not isinstance(source, dict):
        raise EndpointMisconfiguredError("card must be a JSON object")
    if not isinstance(endpoint.metadata.get(CATALOG_FLAG, True), bool):
        raise EndpointMisconfiguredError("catalog must be true or false")
    problems = _shape_problems(source)
    if problems:
        raise EndpointMisconfiguredError("invalid card: " + "; ".join(problems))
    try:
        build_card(endpoint, "http://localhost", extended=True)
    except (ParseError, TypeError, ValueError, AttributeError) as exc:
        raise EndpointMisconfiguredError(f"invalid card: {exc}") from None


def _shape_problems(source: dict[str, Any]) -> list[str]:
    problems = []
    caps = source.get("capabilities", {})
    if not isinstance(caps, dict):
        problems.append("capabilities must be an object")
    else:
        problems += [
            f"capabilities.{name} must be true or false"
            for name in CAPABILITY_FLAGS if name in caps and not isinstance(caps[name], bool)
        ]
        if not isinstance(caps.get("extensions", []), list):
            problems.append("capabilities.extensions must be a list")
    extended = source.get("extended", {})
    if not isinstance(extended, dict):
        problems.append("extended must be an object with skills")
    skills = [("skills", source.get("skills", []))]
    if isinstance(extended, dict):
        skills.append(("extended.skills", extended.get("skills", [])))
    for where, items in skills:
        if not isinstance(items, list):
            problems.append(f"{where} must be a list")
            continue
        for i, skill in enumerate(items):
            missing = [f for f in SKILL_REQUIRED if not isinstance(skill, dict) or not skill.get(f)]
            if missing:
                problems.append(f"{where}[{i}] needs {', '.join(missing)}")
    return problems
