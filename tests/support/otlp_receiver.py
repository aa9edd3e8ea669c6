"""An OTLP/HTTP trace receiver for tests: ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest`` body, as a collector takes it; the spans are kept, decoded.

    receiver = OTLPReceiver()
    async with serve_locally(receiver.app()) as url:   # OTEL_EXPORTER_OTLP_ENDPOINT=url
        ...
        spans = await receiver.spans_of(trace_id, count=3)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.waiting import eventually

SERVER, CLIENT = 2, 3  # opentelemetry.proto.trace.v1.Span.SpanKind
ERROR = 2  # opentelemetry.proto.trace.v1.Status.StatusCode


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, ids as lowercase hex (the parent id is empty for a root span)."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    status: int
    start_ns: int
    end_ns: int


class OTLPReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.content_types: set[str] = set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        return app

    async def _traces(self, request: web.Request) -> web.Response:
        self.content_types.add(request.content_type)
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(ReceivedSpan(
                        service=resource.get("service.name", ""),
                        name=span.name,
                        kind=span.kind,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        status=span.status.code,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                    ))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def of_trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.trace_id == trace_id]

    async def wait_for(
        self, trace_id: str, *, until: Any, what: str, timeout: float = 30
    ) -> list[ReceivedSpan]:
        """The spans of ``trace_id`` once ``until(spans)`` holds."""
        return await eventually(
            lambda: self.of_trace(trace_id), until=until, timeout=timeout, what=what
        )
