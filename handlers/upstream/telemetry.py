"""What the gateway sees of each backend call: the trace hook its tracing installs
(``trace_calls``; handlers never import the gateway) and the latency histogram."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol

import httpx
from prometheus_client import Histogram

TRACE_HEADERS = frozenset({"traceparent", "tracestate"})

BACKEND_LATENCY = Histogram(
    "a2a_gateway_backend_call_seconds",
    "Time until a backend answers one call (status and headers; retries included)",
    ["backend", "outcome"],
)
"""``backend`` is ``Upstream.name``; ``outcome``: ok, http_error or unreachable."""


class TracedCall(Protocol):
    """One backend call as the gateway's tracing sees it."""

    headers: Mapping[str, str]
    """The trace context to send (``traceparent``, ``tracestate``); empty: the inbound one."""

    def end(self, status: int | None, error: BaseException | None) -> None: ...


class CallTracer(Protocol):
    def __call__(
        self, backend: str, method: str, url: str, inbound: Mapping[str, str]
    ) -> TracedCall:
        """``inbound``: the headers the call would send (the caller's trace context among them)."""


_tracer: CallTracer | None = None


def trace_calls(tracer: CallTracer | None) -> None:
    """Have ``tracer`` trace every backend call (the gateway's tracing installs itself here;
    handlers never import the gateway)."""
    global _tracer
    _tracer = tracer


def start_trace(backend: str, method: str, url: str, headers: httpx.Headers) -> TracedCall | None:
    """The trace of one call, or None when nothing traces calls; a trace context of its own
    replaces the inbound one in ``headers``."""
    if _tracer is None:
        return None
    trace = _tracer(backend, method, url, headers)
    if trace.headers:
        for name in TRACE_HEADERS:
            headers.pop(name, None)
        headers.update(trace.headers)
    return trace


def observe_latency(backend: str, started: float, response: httpx.Response | None) -> None:
    """Count one call that started at ``started`` (``time.perf_counter``) and got ``response``
    (None: no answer)."""
    if response is None:
        outcome = "unreachable"
    else:
        outcome = "ok" if response.status_code < 400 else "http_error"
    BACKEND_LATENCY.labels(backend, outcome).observe(time.perf_counter() - started)
