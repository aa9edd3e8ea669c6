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
"""

from handlers.upstream.call import Upstream, UpstreamCall, make_timeout
from handlers.upstream.correlation import (
    CORRELATION_HEADERS,
    correlation_headers,
    correlation_metadata,
)
from handlers.upstream.deadline import Deadline
from handlers.upstream.errors import (
    RunTimedOut,
    UnexpectedFrame,
    UpstreamError,
    clip,
    error_detail,
    http_error_reason,
    transport_error_reason,
)
from handlers.upstream.redaction import redact, shown_url
from handlers.upstream.request import has_input, request_text
from handlers.upstream.retry import NO_RETRY, Retry, retry_after
from handlers.upstream.settings import BridgeSettings
from handlers.upstream.sse import DONE, EventTooLarge, SSEFrame, SSEReader
from handlers.upstream.telemetry import TRACE_HEADERS, CallTracer, TracedCall, trace_calls
from handlers.upstream.transport import BackendTransport, backend_client

__all__ = [
    "CORRELATION_HEADERS",
    "DONE",
    "NO_RETRY",
    "TRACE_HEADERS",
    "BackendTransport",
    "BridgeSettings",
    "CallTracer",
    "Deadline",
    "EventTooLarge",
    "Retry",
    "RunTimedOut",
    "SSEFrame",
    "SSEReader",
    "TracedCall",
    "UnexpectedFrame",
    "Upstream",
    "UpstreamCall",
    "UpstreamError",
    "backend_client",
    "clip",
    "correlation_headers",
    "correlation_metadata",
    "error_detail",
    "has_input",
    "http_error_reason",
    "make_timeout",
    "redact",
    "request_text",
    "retry_after",
    "shown_url",
    "trace_calls",
    "transport_error_reason",
]
