"""The upstream HTTP layer every bridge uses: one module per concept, the names bridges and the
gateway use re-exported here (``from handlers.upstream import Upstream``).

``Upstream`` is one backend: its base URL, the headers it needs (credentials), its secrets,
its timeout and its retry policy (``call``). ``Upstream.call`` makes one request, a plain JSON
answer or server-sent events (``sse``), bounded by the run's ``Deadline`` (``deadline``),
retried when the backend answers HTTP 429 or 503 as ``Retry-After`` asks (``retry``), with the
caller's trace context passed on (``request``), or the one the gateway's tracing gives
(``telemetry.trace_calls``), and the A2A task's ids as ``X-A2A-*`` headers (``correlation``).
Every failure is an ``UpstreamError`` (``errors``) whose ``reason`` is short, names the
backend and never carries a secret (``redaction``).
``BridgeSettings`` (``settings``) are what every bridge is configured with; ``transport``
holds the shared client and the transport for libraries that bring their own client.

Each name is imported from its module at its first use: the gateway builds the shared client
at start-up (``transport``) and a bridge that calls a backend loads the rest with its module.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {
    "Upstream": "call",
    "UpstreamCall": "call",
    "make_timeout": "call",
    "CORRELATION_HEADERS": "correlation",
    "correlation_headers": "correlation",
    "correlation_metadata": "correlation",
    "Deadline": "deadline",
    "RunTimedOut": "errors",
    "UnexpectedFrame": "errors",
    "UpstreamError": "errors",
    "clip": "errors",
    "error_detail": "errors",
    "http_error_reason": "errors",
    "transport_error_reason": "errors",
    "redact": "redaction",
    "shown_url": "redaction",
    "has_input": "request",
    "request_text": "request",
    "NO_RETRY": "retry",
    "Retry": "retry",
    "retry_after": "retry",
    "BridgeSettings": "settings",
    "DONE": "sse",
    "EventTooLarge": "sse",
    "SSEFrame": "sse",
    "SSEReader": "sse",
    "TRACE_HEADERS": "telemetry",
    "CallTracer": "telemetry",
    "TracedCall": "telemetry",
    "trace_calls": "telemetry",
    "BackendTransport": "transport",
    "backend_client": "transport",
}
"""Each re-exported name → the module of this package that defines it."""

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value  # found directly from now on
    return value
