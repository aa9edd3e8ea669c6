"""Request id, the request's trace (``observability.tracing``), log binding, one log line per
request, and exceptions → JSON errors.

This is the only place that turns exceptions into responses: gateway errors
(``a2a_gateway.errors`` has their table), a store outage and aiohttp's HTTP errors
become JSON bodies with the right HTTP status — a JSON-RPC error echoing the
request's id on the JSON-RPC URL, an AIP-193 body with the google.rpc status name
elsewhere. Anything else becomes a generic internal error and is logged with its
traceback, never sent to the client.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Awaitable, Callable

import orjson
import structlog
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import A2AError, InternalError, InvalidRequestError, MethodNotFoundError
from aiohttp import web

from a2a_gateway.errors import GatewayError
from a2a_gateway.observability.metrics import latency_histogram, outcome_counter, request_counter
from a2a_gateway.observability.tracing import RESPONSE_HEADER, RequestTrace, start_request
from a2a_gateway.state import GATEWAY
from a2a_gateway.stores.base import StoreUnavailableError
from a2a_gateway.transport.jsonrpc import V03_METHODS, V10_METHODS, error_body
from a2a_gateway.transport.keys import A2A_ERROR, A2A_METHOD, JSONRPC_ID, REQUEST_ID
from a2a_gateway.transport.rest import ROUTES as REST_ROUTES

log = structlog.get_logger("a2a_gateway.access")

KNOWN_METHODS = (
    frozenset(V10_METHODS) | frozenset(V03_METHODS) | {r[2].__name__ for r in REST_ROUTES}
)
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
"""Request ids taken from clients (anything else is replaced: it goes into every log line)."""
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Probes and scrapes: they have a trace id in their log line but no span."""
TRACE = web.RequestKey("trace", RequestTrace)


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else ""


async def trace_response_header(request: web.Request, response: web.StreamResponse) -> None:
    """``traceresponse``: the trace context the gateway used (``on_response_prepare``, so
    event streams carry it too)."""
    if (trace := request.get(TRACE)) is not None:
        response.headers[RESPONSE_HEADER] = trace.context.traceparent


def _endpoint_label(request: web.Request) -> str:
    """The endpoint id when the registry knows it (ids in URLs come from clients)."""
    endpoint_id = request.match_info.get("endpoint_id")
    gateway = request.app.get(GATEWAY)
    if endpoint_id is None or gateway is None:
        return ""
    return endpoint_id if gateway.registry.known(endpoint_id) else "unknown"


def _outcome(request: web.Request, status: int) -> str:
    """``ok`` or the name of the A2A error the request ended with."""
    error = request.get(A2A_ERROR)
    if error:
        return error
    return "ok" if status < 400 else "InternalError" if status >= 500 else "InvalidRequestError"


def _method_label(method: str | None) -> str:
    """A metrics label from a bounded set (method names come from clients)."""
    if method is None:
        return "other"
    return method if method in KNOWN_METHODS else "unknown"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _is_jsonrpc(request: web.Request) -> bool:
    return request.method == "POST" and request.path.rstrip("/").endswith("/a2a")


def error_response(
    request: web.Request, http_status: int, status: str, error: A2AError
) -> web.Response:
    """A JSON error with the HTTP status kept: on the JSON-RPC URL the JSON-RPC error of
    ``error`` with the request's id, elsewhere an AIP-193 body with ``status`` (a
    google.rpc status name)."""
    if _is_jsonrpc(request):
        body = error_body(request.get(JSONRPC_ID), error)
    else:
        body = build_rest_error_payload(error)
        body["error"].update(code=http_status, status=status)
    return web.Response(
        status=http_status, body=orjson.dumps(body), content_type="application/json"
    )


def _http_error(exc: web.HTTPException) -> tuple[str, A2AError]:
    """google.rpc status and A2A error for an HTTP error of aiohttp's (no such route,
    wrong verb, body over the limit)."""
    if exc.status == 413:
        return "INVALID_ARGUMENT", InvalidRequestError("request body is too large")
    if exc.status == 404:
        return "NOT_FOUND", MethodNotFoundError(exc.reason)
    if exc.status == 405:
        return "UNIMPLEMENTED", MethodNotFoundError(exc.reason)
    if exc.status == 409:  # the resource's state refuses it (an ended task cannot be canceled)
        return "FAILED_PRECONDITION", InvalidRequestError(exc.reason)
    if exc.status >= 500:
        return "INTERNAL", InternalError(exc.reason)
    return "INVALID_ARGUMENT", InvalidRequestError(exc.reason)


@web.middleware
async def request_context(request: web.Request, handler: Handler) -> web.StreamResponse:
    given = request.headers.get("X-Request-Id", "")
    request_id = given if _REQUEST_ID.fullmatch(given) else os.urandom(8).hex()
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    status = 500
    trace = request[TRACE] = start_request(request.method, _route(request), request.headers,
                                           span=request.path not in UNTRACED_PATHS)
    # each request runs in its own task, whose context starts without earlier bindings
    structlog.contextvars.bind_contextvars(
        request_id=request_id,
        endpoint_id=request.match_info.get("endpoint_id"),
        trace_id=trace.trace_id,
    )
    try:
        response = await handler(request)
        status = response.status
    except asyncio.CancelledError:
        trace.end(None, a2a_method=request.get(A2A_METHOD), endpoint=_endpoint_label(request),
                  outcome="cancelled")
        raise
    except web.HTTPException as exc:
        rpc_status, error = _http_error(exc)
        request[A2A_ERROR] = type(error).__name__
        response = error_response(request, exc.status, rpc_status, error)
        status = exc.status
    except StoreUnavailableError:
        log.warning("store_unavailable")
        unavailable = InternalError("the task store is unavailable; retry later")
        response = error_response(request, 503, "UNAVAILABLE", unavailable)
        response.headers["Retry-After"] = "1"
        status = 503
    except GatewayError as exc:
        request[A2A_ERROR] = type(exc).__name__
        response = error_response(request, exc.http_status, exc.status, exc.as_a2a_error())
        response.headers.update(exc.headers())
        if getattr(exc, "close_connection", False):
            response.force_close()  # the rest of a body that was not read is not waited for
        status = exc.http_status
    except Exception:
        log.exception("request_failed")
        response = error_response(request, 500, "INTERNAL", InternalError("internal error"))
    elapsed = time.perf_counter() - started
    method_label = _method_label(request.get(A2A_METHOD))
    request_counter(method_label, status).inc()
    latency_histogram(method_label).observe(elapsed)
    endpoint, outcome = _endpoint_label(request), _outcome(request, status)
    outcome_counter(method_label, endpoint, outcome).inc()
    trace.end(status, a2a_method=request.get(A2A_METHOD), endpoint=endpoint, outcome=outcome)
    log.info(
        "request",
        method=request.method,
        path=request.path,
        status=status,
        a2a_method=request.get(A2A_METHOD),
        a2a_error=request.get(A2A_ERROR),
        duration_ms=round(elapsed * 1000, 2),
    )
    if not response.prepared:
        response.headers.setdefault("X-Request-Id", request_id)
        if request.body_exists and not request.content.is_eof():
            response.force_close()  # what is left of an unread body may not decode: start afresh
    return response
