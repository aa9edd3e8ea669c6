"""What of the inbound A2A request goes upstream: the text a backend receives for the
message, and the inbound headers passed on (trace context, never credentials)."""

from __future__ import annotations

import json

from handlers.base import HandlerRequest

NEVER_PASSED_ON = frozenset({"authorization", "proxy-authorization", "cookie", "host",
                             "content-type", "content-length", "accept"})
"""Inbound headers never sent upstream, whatever the gateway selected: the caller's
credentials are for the gateway only, and the call sets the others itself."""


def request_text(request: HandlerRequest) -> str:
    """The message's text, then each data part as JSON on its own line."""
    pieces = [request.text] if request.text else []
    pieces += [json.dumps(d, ensure_ascii=False, sort_keys=True) for d in request.data]
    return "\n".join(pieces)


def has_input(request: HandlerRequest) -> bool:
    """True when the message carries text, data or a file for the backend."""
    return bool(request_text(request).strip() or request.files)


def passed_on(request: HandlerRequest | None) -> dict[str, str]:
    """The inbound headers a call sends on (the gateway selected them)."""
    if request is None:
        return {}
    return {k: v for k, v in request.headers.items() if k.lower() not in NEVER_PASSED_ON}
