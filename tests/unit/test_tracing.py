"""W3C trace context as the gateway reads it: a valid ``traceparent`` is continued, anything
else starts a new trace; OTLP export is asked for by OpenTelemetry's standard variables."""

from __future__ import annotations

import pytest

from a2a_gateway.observability.tracing import TraceParent, export_configured

TRACE_ID, SPAN_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


@pytest.mark.parametrize("header", [
    f"00-{TRACE_ID}-{SPAN_ID}-01",
    f"  00-{TRACE_ID}-{SPAN_ID}-00 ",  # surrounding spaces are allowed
    f"cc-{TRACE_ID}-{SPAN_ID}-01-what-a-later-version-adds",
])
def test_a_valid_traceparent_is_continued(header):
    context = TraceParent.of({"traceparent": header, "tracestate": "vendor=1"})
    assert context is not None
    assert (context.trace_id, context.span_id, context.state) == (TRACE_ID, SPAN_ID, "vendor=1")
    assert context.traceparent == f"00-{TRACE_ID}-{SPAN_ID}-{header.strip()[53:55]}"


@pytest.mark.parametrize("header", [
    "", "not-a-trace",
    f"00-{TRACE_ID.upper()}-{SPAN_ID}-01",  # hex is lowercase
    f"00-{'0' * 32}-{SPAN_ID}-01", f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero ids are invalid
    f"ff-{TRACE_ID}-{SPAN_ID}-01",  # version ff is invalid
    f"00-{TRACE_ID}-{SPAN_ID}-01-extra",  # version 00 has exactly four fields
    f"00-{TRACE_ID}-{SPAN_ID}-1",
])
def test_an_invalid_traceparent_is_no_trace_context(header):
    assert TraceParent.of({"traceparent": header, "tracestate": "vendor=1"}) is None


def test_a_new_trace_has_valid_random_ids():
    first, second = TraceParent.new(), TraceParent.new()
    assert TraceParent.of(first.headers()) == first and first.trace_id != second.trace_id
    assert first.headers() == {"traceparent": first.traceparent}  # no tracestate of its own


@pytest.mark.parametrize(
    ("env", "exported"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "gw"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "TRUE"},
            False,
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
                "OTEL_TRACES_EXPORTER": "none",
            },
            False,
        ),
    ],
)
def test_export_is_asked_for_by_the_standard_variables(env, exported):
    assert export_configured(env) is exported
