"""Request id, log binding, one log line per request, and exceptions → JSON errors.

This is the only place that turns exceptions into responses: A2A and gateway
errors become JSON bodies with the right status; anything else becomes a
generic internal error (JSON-RPC -32603 on the JSON-RPC URL) and is logged with
its traceback, never sent to the client.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Awaitable, Callable

import orjson
import structlog
from a2a.utils.errors import InternalError
from aiohttp import web

from a2a_gateway.errors import GatewayError
from a2a_gateway.metrics import latency_histogram, request_counter
from a2a_gateway.stores.base import StoreUnavailableError
from a2a_gateway.transport.jsonrpc import V03_METHODS, V10_METHODS, error_body
from a2a_gateway.transport.keys import A2A_ERROR, A2A_METHOD, REQUEST_ID
from a2a_gateway.transport.rest import ROUTES as REST_ROUTES

log = structlog.get_logger("a2a_gateway.access")

KNOWN_METHODS = frozenset(V10_METHODS) | frozenset(V03_METHODS) | {r[2].__name__ for r in REST_ROUTES}
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
"""Request ids taken from clients (anything else is replaced: it goes into every log line)."""


def _method_label(method: str | None) -> str:
    """A metrics label from a bounded set (method names come from clients)."""
    if method is None:
        return "other"
    return method if method in KNOWN_METHODS else "unknown"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _is_jsonrpc(request: web.Request) -> bool:
    return request.method == "POST" and request.path.rstrip("/").endswith("/a2a")


def error_response(request: web.Request, status: int, message: str, code: str) -> web.Response:
    """A JSON error with the HTTP status kept: a JSON-RPC envelope on the JSON-RPC URL,
    an AIP-193 style body elsewhere."""
    if _is_jsonrpc(request):
        body = error_body(None, InternalError(message))
    else:
        body = {"error": {"code": status, "status": code, "message": message}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


@web.middleware
async def request_context(request: web.Request, handler: Handler) -> web.StreamResponse:
    given = request.headers.get("X-Request-Id", "")
    request_id = given if _REQUEST_ID.fullmatch(given) else os.urandom(8).hex()
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    status = 500
    # each request runs in its own task, whose context starts without earlier bindings
    structlog.contextvars.bind_contextvars(
        request_id=request_id, endpoint_id=request.match_info.get("endpoint_id")
    )
    try:
        response = await handler(request)
        status = response.status
    except web.HTTPRequestEntityTooLarge:
        response = error_response(request, 413, "request body is too large", "PAYLOAD_TOO_LARGE")
        status = 413
    except web.HTTPException as exc:
        response = error_response(request, exc.status, exc.reason, exc.reason.upper().replace(" ", "_"))
        status = exc.status
    except StoreUnavailableError:
        log.warning("store_unavailable")
        response = error_response(request, 503, "the task store is unavailable; retry later", "UNAVAILABLE")
        response.headers["Retry-After"] = "1"
        status = 503
    except GatewayError as exc:
        response = error_response(request, exc.http_status, exc.message, type(exc).__name__)
        status = exc.http_status
    except Exception:
        log.exception("request_failed")
        response = error_response(request, 500, "internal error", "INTERNAL")
    elapsed = time.perf_counter() - started
    method_label = _method_label(request.get(A2A_METHOD))
    request_counter(method_label, status).inc()
    latency_histogram(method_label).observe(elapsed)
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
    return response
