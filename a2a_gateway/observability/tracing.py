"""Tracing: every request belongs to a W3C trace, and with OpenTelemetry configured the
gateway exports its spans over OTLP/HTTP.

A request's trace context is the caller's ``traceparent`` (and ``tracestate``) when it is
valid, else a new trace; an invalid one is ignored, never an error. Its trace id goes into
the request's log lines, and every backend call continues it: the upstream layer asks
``backend_call`` for the ``traceparent`` to send (``app`` hands it that hook).

Spans are exported when the ``otel`` extra is installed and an OTLP endpoint is set with
OpenTelemetry's standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; ``OTEL_SERVICE_NAME``, ``OTEL_TRACES_SAMPLER``, the
batch and exporter variables apply as usual): a server span per request (HTTP or gRPC), a
client span per store call and per backend call, whose id is the parent id the backend
receives. Spans carry names, ids, hosts and statuses, never headers, URLs' paths or message
text. Otherwise nothing of OpenTelemetry's SDK is imported and each hook costs a
context-variable read.

The provider is the gateway's own, not OpenTelemetry's global one: the a2a-sdk traces its
classes through the global provider, which would add a span per queue operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = structlog.get_logger(__name__)

RESPONSE_HEADER = "traceresponse"
"""The response header naming the trace context the gateway used (W3C Trace Context Level 2)."""
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A W3C trace context: the trace, the span the next hop is a child of, the flags and
    the vendors' ``tracestate``."""

    trace_id: str
    span_id: str
    flags: str = "01"
    state: str = ""

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> TraceParent | None:
        """The trace context of valid ``traceparent`` and ``tracestate`` headers, else None."""
        match = _TRACEPARENT.fullmatch(headers.get("traceparent", "").strip())
        if match is None:
            return None
        version, trace_id, span_id, flags, rest = match.groups()
        if (
            version == "ff"
            or (version == "00" and rest)
            or not int(trace_id, 16)
            or not int(span_id, 16)
        ):
            return None
        return cls(trace_id, span_id, flags, headers.get("tracestate", "").strip())

    @classmethod
    def new(cls) -> TraceParent:
        """A new trace, sampled: a backend that traces keeps its part of it."""
        return cls(os.urandom(16).hex(), os.urandom(8).hex())

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def headers(self) -> dict[str, str]:
        headers = {"traceparent": self.traceparent}
        if self.state:
            headers["tracestate"] = self.state
        return headers


_NO_SPAN = contextlib.nullcontext()
_REQUEST: ContextVar[TraceParent | None] = ContextVar("a2a_gateway_trace", default=None)
"""The trace context of the request being answered (a run keeps its request's context)."""


class RequestTrace:
    """The trace of one request: ``context`` is what the gateway continues (its server span
    when exported), ``trace_id`` goes into the log lines."""

    def __init__(
        self, context: TraceParent, span: Span | None = None, token: object = None
    ) -> None:
        self.context = context
        self._span = span
        self._token = token

    @property
    def trace_id(self) -> str:
        return self.context.trace_id

    def end(
        self, status: int | None, *, a2a_method: str | None, endpoint: str, outcome: str
    ) -> None:
        """The request was answered with ``status`` (None: it was cancelled)."""
        if self._span is not None and _exporter is not None:
            _exporter.end_request(self._span, self._token, status, a2a_method, endpoint, outcome)
            self._span = None

    def end_grpc(self, code: str, value: int, *, endpoint: str, outcome: str) -> None:
        """The gRPC call ended with status ``code`` (its name) of number ``value``."""
        if self._span is not None and _exporter is not None:
            _exporter.end_grpc_call(self._span, self._token, code, value, endpoint, outcome)
            self._span = None


def start_request(
    method: str, route: str, headers: Mapping[str, str], *, span: bool = True
) -> RequestTrace:
    """The trace of a request with these ``headers``, current from now on in this task; with
    ``span`` (and export on) a server span named after ``method`` and ``route``."""
    given = TraceParent.of(headers)
    if _exporter is not None and span:
        trace = _exporter.start_request(method, route, given)
    else:
        trace = RequestTrace(given or TraceParent.new())
    _REQUEST.set(trace.context)
    return trace


def start_grpc_call(service: str, method: str, metadata: Mapping[str, str]) -> RequestTrace:
    """The trace of a gRPC call whose ``metadata`` may carry a ``traceparent``, as
    ``start_request`` for HTTP; with export on, a server span ``service/method``."""
    given = TraceParent.of(metadata)
    if _exporter is not None:
        trace = _exporter.start_server_span(f"{service}/{method}", given, {
            "rpc.system": "grpc", "rpc.service": service, "rpc.method": method})
    else:
        trace = RequestTrace(given or TraceParent.new())
    _REQUEST.set(trace.context)
    return trace


def current_headers() -> dict[str, str]:
    """The trace context of the request being answered (its server span when exported), for
    work another process continues later (a dispatched run)."""
    context = _REQUEST.get()
    return context.headers() if context is not None else {}


@contextlib.contextmanager
def continuing(headers: Mapping[str, str]) -> Iterator[None]:
    """Work started inside (a task created here) continues the trace of ``headers`` instead
    of the current request's: a worker runs a task in its caller's trace, not in the trace of
    the event that delivered it."""
    token = _REQUEST.set(TraceParent.of(headers))
    detached = _exporter.detach_span() if _exporter is not None else None
    try:
        yield
    finally:
        if detached is not None and _exporter is not None:
            _exporter.reattach(detached)
        _REQUEST.reset(token)


GRPC_SERVER_ERRORS = frozenset(
    {"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"}
)
"""gRPC status codes that mark a server span as failed (OpenTelemetry's convention); the
others are the caller's doing."""


def store_call(operation: str, store: str) -> contextlib.AbstractContextManager[object]:
    """A span around one store call (within a request or a run only)."""
    if _exporter is None:
        return _NO_SPAN
    return _exporter.store_span(operation, store)


class BackendCall:
    """What one backend call sends (``headers``: the trace context) and reports at its end."""

    def __init__(self, headers: dict[str, str], span: Span | None = None) -> None:
        self.headers = headers
        self._span = span

    def end(self, status: int | None, error: BaseException | None) -> None:
        if self._span is not None and _exporter is not None:
            _exporter.end_backend_call(self._span, status, error)
            self._span = None


def backend_call(backend: str, method: str, url: str, inbound: Mapping[str, str]) -> BackendCall:
    """The trace of one call to ``backend``: a child of the current request's span (or run's),
    else of the request's trace context without a span (the gRPC binding), else of the
    ``inbound`` one (a run re-attached by the lease loop)."""
    if _exporter is not None:
        return _exporter.backend_call(backend, method, url, inbound)
    context = _REQUEST.get()
    return BackendCall(context.headers() if context is not None else {})


def export_configured(env: Mapping[str, str]) -> bool:
    """Whether OpenTelemetry's standard variables ask for OTLP export of traces."""
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    return (
        bool(endpoint)
        and not disabled
        and env.get("OTEL_TRACES_EXPORTER", "otlp").strip() != "none"
    )


def configure() -> None:
    """Export spans when ``export_configured`` (one exporter per process, until ``shutdown``)."""
    global _exporter
    if _exporter is not None or not export_configured(os.environ):
        return
    try:
        _exporter = _Exporter()
    except ImportError as exc:
        log.warning("tracing_unavailable", reason=f"{exc.name or 'opentelemetry'} is not installed",
                    hint="pip install 'a2a-gateway[otel]'")
        return
    log.info("tracing_enabled", endpoint=os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
             or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


async def shutdown() -> None:
    """Export the spans not exported yet and stop exporting (the gateway stops: a run's backend
    span may have just ended). A collector that does not answer is given
    ``OTEL_EXPORTER_OTLP_TIMEOUT`` (default 10 s); a later ``configure`` exports afresh."""
    global _exporter
    exporter, _exporter = _exporter, None
    if exporter is not None:
        await asyncio.to_thread(exporter.provider.shutdown)


class _Exporter:
    """OpenTelemetry's SDK with an OTLP/HTTP span exporter; imported only when configured."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: "a2a-gateway"}))
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self.provider.get_tracer("a2a_gateway")
        self._context = context
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self._error = trace.Status(trace.StatusCode.ERROR)

    def _headers(self, span: Span) -> dict[str, str]:
        headers: dict[str, str] = {}
        self._propagator.inject(headers, context=self._trace.set_span_in_context(span))
        return headers

    def start_request(self, method: str, route: str, given: TraceParent | None) -> RequestTrace:
        return self.start_server_span(f"{method} {route}".strip(), given,
                                      {"http.request.method": method, "http.route": route})

    def start_server_span(
        self, name: str, given: TraceParent | None, attributes: dict[str, str]
    ) -> RequestTrace:
        parent = self._propagator.extract(given.headers()) if given is not None else None
        span = self._tracer.start_span(name, context=parent, kind=self._trace.SpanKind.SERVER,
                                       attributes=attributes)
        token = self._context.attach(self._trace.set_span_in_context(span))
        used = TraceParent.of(self._headers(span))
        assert used is not None  # the SDK's ids are valid
        return RequestTrace(used, span, token)

    def end_request(self, span: Span, token: Any, status: int | None, a2a_method: str | None,
                    endpoint: str, outcome: str) -> None:
        if a2a_method:
            span.update_name(a2a_method)
            span.set_attribute("a2a.method", a2a_method)
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        self._end_server_span(span, token, status is None or status >= 500, endpoint, outcome)

    def end_grpc_call(
        self, span: Span, token: Any, code: str, value: int, endpoint: str, outcome: str
    ) -> None:
        span.set_attribute("rpc.grpc.status_code", value)
        self._end_server_span(span, token, code in GRPC_SERVER_ERRORS, endpoint, outcome)

    def _end_server_span(
        self, span: Span, token: Any, failed: bool, endpoint: str, outcome: str
    ) -> None:
        if endpoint:
            span.set_attribute("a2a.endpoint_id", endpoint)
        span.set_attribute("a2a.outcome", outcome)
        if failed:
            span.set_status(self._error)
        span.end()
        self._context.detach(token)

    def detach_span(self) -> object:
        """Make no span current (until ``reattach`` of what this returns)."""
        return self._context.attach(self._context.Context())

    def reattach(self, token: object) -> None:
        self._context.detach(token)

    @contextlib.contextmanager
    def store_span(self, operation: str, store: str) -> Iterator[None]:
        if not self._trace.get_current_span().get_span_context().is_valid:
            yield  # a background loop (leases, push deliveries): no trace to add to
            return
        span = self._tracer.start_span(f"store {operation}", kind=self._trace.SpanKind.CLIENT,
                                       attributes={"db.operation.name": operation,
                                                   "a2a_gateway.store": store})
        try:
            yield
        except BaseException as exc:
            self._failed(span, exc)
            raise
        finally:
            span.end()

    def backend_call(
        self, backend: str, method: str, url: str, inbound: Mapping[str, str]
    ) -> BackendCall:
        address, parent = urlsplit(url), None
        if not self._trace.get_current_span().get_span_context().is_valid:
            given = _REQUEST.get() or TraceParent.of(inbound)
            parent = self._propagator.extract(given.headers()) if given is not None else None
        span = self._tracer.start_span(
            f"{method} {address.hostname or ''}".strip(),
            context=parent,
            kind=self._trace.SpanKind.CLIENT,
            attributes={
                "http.request.method": method,
                "server.address": address.hostname or "",
                "server.port": address.port or (443 if address.scheme == "https" else 80),
                "a2a_gateway.backend": backend,
            },
        )
        return BackendCall(self._headers(span), span)

    def end_backend_call(self, span: Span, status: int | None, error: BaseException | None) -> None:
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if status is not None and status >= 400:
            span.set_attribute("error.type", str(status))
            span.set_status(self._error)
        elif error is not None:
            self._failed(span, error)
        span.end()

    def _failed(self, span: Span, error: BaseException) -> None:
        """Mark a failure by the error's class only (its message may carry anything); a
        cancel or an iterator closed early is the caller's choice, not a failure."""
        if isinstance(error, Exception):
            span.set_attribute("error.type", type(error).__name__)
            span.set_status(self._error)


_exporter: _Exporter | None = None
