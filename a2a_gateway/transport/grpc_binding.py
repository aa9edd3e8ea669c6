"""gRPC binding of A2A 1.0: the a2a-sdk's generated ``lf.a2a.v1.A2AService`` on ``grpc.aio``,
for every endpoint, through the same request handler as the HTTP bindings.

Routing: one server serves every endpoint. A request's ``tenant`` field names the endpoint:
each card's GRPC interface carries the endpoint id as its ``tenant``, and A2A clients (the
a2a-sdk's among them) copy it into every request. A request without one goes to the default
endpoint (``default_endpoint``), as the root URL does on HTTP; an unknown or disabled endpoint
is NOT_FOUND.

Metadata carries what HTTP headers carry: ``a2a-version`` (empty: 1.0; only 1.0 is served),
``a2a-extensions`` and the credentials (``authorization``, the API key header), checked by the
same ``Authenticator``, so principals and isolation are those of HTTP.

Errors are a ``google.rpc.Status`` with an ``ErrorInfo`` (reason, domain ``a2a-protocol.org``)
in ``grpc-status-details-bin``, with the status codes of the A2A version
``rest_error_statuses`` names. Anything unexpected is logged and answered INTERNAL without
its details.

Streams behave as SSE streams do: a client that leaves or whose deadline passes ends its stream
and never the task; a stopping gateway lets them run through the grace period, and they end
after the hand-over's last event (they count among the app's open streams).

Each call is one log line (``grpc_request``) and counts in the request metrics under its A2A
method name, as on HTTP. This module imports grpcio; it is imported only when ``grpc_port``
is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import structlog
from a2a.server.context import ServerCallContext
from a2a.types import SendMessageResponse, Task, a2a_pb2_grpc
from a2a.utils.errors import (
    A2A_ERROR_MAPPING,
    A2A_ERROR_REASONS,
    A2AError,
    InternalError,
    InvalidParamsError,
    TaskNotFoundError,
    VersionNotSupportedError,
)
from a2a.utils.grpc_status import status_to_grpc
from a2a.utils.proto_utils import to_stream_response, validation_errors_to_bad_request
from aiohttp import web
from google.protobuf import any_pb2, empty_pb2
from google.protobuf.message import Message as ProtoMessage
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from multidict import CIMultiDict

from a2a_gateway.auth.peer import PEER
from a2a_gateway.errors import EndpointNotFoundError, GatewayError, GatewayStoppingError
from a2a_gateway.generation import READS_GENERATIONS, take_grpc_params, without_generation
from a2a_gateway.observability.metrics import latency_histogram, outcome_counter
from a2a_gateway.observability.tracing import start_grpc_call
from a2a_gateway.protojson import message_to_dict
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.state import GATEWAY, Gateway
from a2a_gateway.stores.base import StoreUnavailableError
from a2a_gateway.tasks.request_handler import GatewayRequestHandler
from a2a_gateway.transport.limits import check_request_limits
from a2a_gateway.transport.negotiate import (
    SPEAKS_1_0,
    V10,
    V11,
    activated_extensions,
    parse_version,
)
from a2a_gateway.transport.params import check_required_fields
from a2a_gateway.transport.rest import V1_0_0_STATUSES
from a2a_gateway.transport.sse import OPEN_STREAMS

log = structlog.get_logger("a2a_gateway.grpc")

SERVICE = "lf.a2a.v1.A2AService"
ERROR_DOMAIN = "a2a-protocol.org"
GRPC_SERVER = web.AppKey("grpc_server", grpc.aio.Server)


# errors ----------------------------------------------------------------------------------------

def rich_status(error: A2AError, code: grpc.StatusCode) -> status_pb2.Status:
    """``google.rpc.Status`` of ``error``: its message, an ErrorInfo with its A2A reason and, for
    invalid params with field errors, a BadRequest."""
    status = status_pb2.Status(code=code.value[0], message=error.message)
    info = error_details_pb2.ErrorInfo(
        reason=A2A_ERROR_REASONS.get(type(error), "UNKNOWN_ERROR"),
        domain=ERROR_DOMAIN,
        metadata={
            k: str(v) for k, v in (error.data or {}).items() if isinstance(v, str | int | float)
        },
    )
    status.details.add().Pack(info)
    if (
        isinstance(error, InvalidParamsError)
        and isinstance(error.data, dict)
        and error.data.get("errors")
    ):
        detail = any_pb2.Any()
        detail.Pack(validation_errors_to_bad_request(error.data["errors"]))
        status.details.append(detail)
    return status


def status_code(error: A2AError, statuses: str) -> grpc.StatusCode:
    """The gRPC code of an A2A error in the table of A2A ``statuses`` (``1.0.1`` or ``1.0.0``)."""
    if statuses == "1.0.0" and type(error) in V1_0_0_STATUSES:
        return grpc.StatusCode[V1_0_0_STATUSES[type(error)][1]]
    mapping = A2A_ERROR_MAPPING.get(type(error))
    return grpc.StatusCode[mapping.grpc_status] if mapping else grpc.StatusCode.INTERNAL


def error_status(exc: Exception, statuses: str) -> status_pb2.Status:
    """What an exception of a call answers: protocol errors by the A2A table, gateway errors
    (unknown endpoint, no credentials, rate limit, outage, stopping) by their status name."""
    if isinstance(exc, A2AError):
        return rich_status(exc, status_code(exc, statuses))
    if isinstance(exc, GatewayError):
        return rich_status(exc.as_a2a_error(), grpc.StatusCode[exc.status])
    if isinstance(exc, StoreUnavailableError):
        return rich_status(InternalError("the task store is unavailable; retry later"),
                           grpc.StatusCode.UNAVAILABLE)
    return rich_status(InternalError("internal error"), grpc.StatusCode.INTERNAL)


async def abort(context: grpc.aio.ServicerContext, status: status_pb2.Status) -> None:
    code, message, trailers = status_to_grpc(status)
    context.set_trailing_metadata(trailers)
    await context.abort(code, message)


# the service -----------------------------------------------------------------------------------

def metadata_headers(context: grpc.aio.ServicerContext) -> CIMultiDict[str]:
    """The call's text metadata as case-insensitive headers (what the HTTP bindings read)."""
    return CIMultiDict(
        (key, value) for key, value in (context.invocation_metadata() or ())
        if isinstance(value, str)
    )


def peer_address(context: grpc.aio.ServicerContext) -> str | None:
    """The TCP peer's address (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``) without its port."""
    kind, _, rest = (context.peer() or "").partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host = rest.rsplit(":", 1)[0]
    return host.strip("[]")


class GrpcStream:
    """A gRPC stream among the app's open streams: shutdown ends it as it ends SSE streams."""

    def __init__(self) -> None:
        self.done = asyncio.Event()

    def end(self) -> None:
        self.done.set()


Call = Callable[[GatewayRequestHandler, Any, ServerCallContext], Awaitable[Any]]


class A2AService(a2a_pb2_grpc.A2AServiceServicer):
    def __init__(self, app: web.Application) -> None:
        self._app = app

    @property
    def _gateway(self) -> Gateway:
        return self._app[GATEWAY]

    async def SendMessage(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await self._unary("SendMessage", request, context, _send)

    async def SendStreamingMessage(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:  # noqa: N802
        async for item in self._stream(
            "SendStreamingMessage", request, context, "on_message_send_stream"
        ):
            yield item

    async def GetTask(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await self._unary("GetTask", request, context, _call("on_get_task"))

    async def ListTasks(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await self._unary("ListTasks", request, context, _call("on_list_tasks"))

    async def CancelTask(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await self._unary("CancelTask", request, context, _call("on_cancel_task"))

    async def SubscribeToTask(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:  # noqa: N802
        async for item in self._stream("SubscribeToTask", request, context, "on_subscribe_to_task"):
            yield item

    async def CreateTaskPushNotificationConfig(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:  # noqa: N802
        return await self._unary("CreateTaskPushNotificationConfig", request, context,
                                 _call("on_create_task_push_notification_config"))

    async def GetTaskPushNotificationConfig(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:  # noqa: N802
        return await self._unary("GetTaskPushNotificationConfig", request, context,
                                 _call("on_get_task_push_notification_config"))

    async def ListTaskPushNotificationConfigs(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:  # noqa: N802
        return await self._unary("ListTaskPushNotificationConfigs", request, context,
                                 _call("on_list_task_push_notification_configs"))

    async def DeleteTaskPushNotificationConfig(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:  # noqa: N802
        return await self._unary(
            "DeleteTaskPushNotificationConfig", request, context, _delete_push_config
        )

    async def GetExtendedAgentCard(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        return await self._unary(
            "GetExtendedAgentCard", request, context, _call("on_get_extended_agent_card")
        )

    # the path of every call ------------------------------------------------------------------

    async def _prepare(
        self, request: ProtoMessage, context: grpc.aio.ServicerContext, headers: CIMultiDict[str]
    ) -> tuple[GatewayRequestHandler, ServerCallContext]:
        """The endpoint's request handler and the call's context, as the HTTP bindings make
        them: endpoint, caller, version, extensions, then the request's own checks."""
        gateway = self._gateway
        if gateway.engine.stopping:
            raise GatewayStoppingError()
        endpoint_id = self._endpoint_id(request)
        if not endpoint_id:
            raise EndpointNotFoundError(
                "name the endpoint in the request's tenant field"
                " (the tenant of the card's GRPC interface)"
            )
        runtime = await gateway.registry.get(endpoint_id)
        structlog.contextvars.bind_contextvars(endpoint_id=endpoint_id)
        PEER.set(peer_address(context))
        user = await gateway.auth.caller(headers, runtime.auth_view)
        version = parse_version(headers.get("A2A-Version", "").strip(), empty_means=V10)
        if version not in SPEAKS_1_0:
            raise VersionNotSupportedError("the gRPC binding serves A2A 1.0 and 1.1")
        activated = activated_extensions(headers.getall("A2A-Extensions", []), runtime)
        if activated:
            await context.send_initial_metadata((("a2a-extensions", ", ".join(activated)),))
        check_required_fields(request)
        if hasattr(request, "message"):
            check_request_limits(message_to_dict(request), gateway.settings)
        handler, _ = gateway.request_handlers(runtime)
        call_context = ServerCallContext.model_construct(
            state={"headers": headers, "base_url": http_base_url(gateway.settings),
                   "grpc_url": gateway.settings.public_grpc_url or grpc_address(gateway)},
            user=user,
            tenant=runtime.endpoint.tenant,
            requested_extensions=set(activated),
        )
        call_context.state[READS_GENERATIONS] = version == V11
        take_grpc_params(request, call_context.state)
        return handler, call_context

    async def _unary(
        self, name: str, request: Any, context: grpc.aio.ServicerContext, call: Call
    ) -> Any:
        record, failure = CallRecord(name, metadata_headers(context)), None
        try:
            handler, call_context = await self._prepare(request, context, record.headers)
            result = await call(handler, request, call_context)
            return result if call_context.state[READS_GENERATIONS] else without_generation(result)
        except asyncio.CancelledError:
            record.outcome, record.code = "cancelled", grpc.StatusCode.CANCELLED
            raise
        except Exception as exc:  # every exception becomes a status, none reaches grpc as UNKNOWN
            failure = self._failure(record, exc)
        finally:
            record.end(self._endpoint_label(request))
        await abort(context, failure)

    async def _stream(
        self, name: str, request: Any, context: grpc.aio.ServicerContext, method: str
    ) -> AsyncIterator[Any]:
        record, failure = CallRecord(name, metadata_headers(context)), None
        open_streams = self._app[OPEN_STREAMS]
        stream = GrpcStream()
        open_streams.add(stream)
        try:
            handler, call_context = await self._prepare(request, context, record.headers)
            events = getattr(handler, method)(request, call_context)
            strip = not call_context.state[READS_GENERATIONS]
            try:
                async for event in _until_ended(events, stream.done):
                    record.answered()
                    response = to_stream_response(event)
                    yield without_generation(response) if strip else response
            finally:
                await events.aclose()
        except asyncio.CancelledError:  # the client left, or its deadline passed: the task goes on
            record.outcome, record.code = "cancelled", grpc.StatusCode.CANCELLED
            raise
        except Exception as exc:
            failure = self._failure(record, exc)
        finally:
            open_streams.discard(stream)
            record.end(self._endpoint_label(request))
        if failure is not None:
            await abort(context, failure)

    def _failure(self, record: CallRecord, exc: Exception) -> status_pb2.Status:
        if not isinstance(exc, A2AError | GatewayError | StoreUnavailableError):
            log.exception("grpc_call_failed", grpc_method=record.name)
        status = error_status(exc, self._gateway.settings.rest_error_statuses)
        record.failed(exc, status)
        return status

    def _endpoint_id(self, request: ProtoMessage) -> str:
        return getattr(request, "tenant", "") or self._gateway.settings.default_endpoint

    def _endpoint_label(self, request: ProtoMessage) -> str:
        """The endpoint id when the registry knows it (ids in requests come from clients)."""
        endpoint_id = self._endpoint_id(request)
        return endpoint_id if self._gateway.registry.known(endpoint_id) else "unknown"


class CallRecord:
    """The trace, log line and metrics of one call: its outcome (``ok``, ``cancelled`` or the
    error's name, as on HTTP) and its latency to the response (to the first event of a stream)."""

    def __init__(self, name: str, headers: CIMultiDict[str]) -> None:
        self.name = name
        self.headers = headers
        self.outcome, self.code = "ok", grpc.StatusCode.OK
        self._started = time.perf_counter()
        self._answered = False
        self._trace = start_grpc_call(SERVICE, name, headers)
        structlog.contextvars.bind_contextvars(trace_id=self._trace.trace_id)

    def answered(self) -> None:
        if not self._answered:
            self._answered = True
            latency_histogram(self.name).observe(time.perf_counter() - self._started)

    def failed(self, exc: Exception, status: status_pb2.Status) -> None:
        self.outcome = (
            type(exc).__name__ if isinstance(exc, A2AError | GatewayError) else "InternalError"
        )
        self.code = next(c for c in grpc.StatusCode if c.value[0] == status.code)

    def end(self, endpoint: str) -> None:
        self.answered()
        outcome_counter(self.name, endpoint, self.outcome).inc()
        log.info(
            "grpc_request",
            grpc_method=self.name,
            grpc_status=self.code.name,
            outcome=self.outcome,
            duration_ms=round((time.perf_counter() - self._started) * 1000, 2),
        )
        self._trace.end_grpc(
            self.code.name, self.code.value[0], endpoint=endpoint, outcome=self.outcome
        )


async def _until_ended(events: AsyncIterator[Any], ended: asyncio.Event) -> AsyncIterator[Any]:
    """The events of ``events`` until it ends or ``ended`` is set (server shutdown)."""
    done = asyncio.ensure_future(ended.wait())
    try:
        while True:
            following = asyncio.ensure_future(anext(events))
            try:
                await asyncio.wait({following, done}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not following.done():
                    following.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await following
            if following.cancelled():
                return
            try:
                yield following.result()
            except StopAsyncIteration:
                return
    finally:
        done.cancel()


def _call(method: str) -> Call:
    async def call(handler: GatewayRequestHandler, request: Any, context: ServerCallContext) -> Any:
        result = await getattr(handler, method)(request, context)
        if result is None and method in ("on_get_task", "on_cancel_task"):
            raise TaskNotFoundError()
        return result

    return call


async def _send(
    handler: GatewayRequestHandler, request: Any, context: ServerCallContext
) -> SendMessageResponse:
    result = await handler.on_message_send(request, context)
    if isinstance(result, Task):
        return SendMessageResponse(task=result)
    return SendMessageResponse(message=result)


async def _delete_push_config(
    handler: GatewayRequestHandler, request: Any, context: ServerCallContext
) -> empty_pb2.Empty:
    await handler.on_delete_task_push_notification_config(request, context)
    return empty_pb2.Empty()


def http_base_url(settings: GatewaySettings) -> str:
    """Base of the HTTP URLs in an extended card fetched over gRPC (there is no Host header)."""
    return settings.public_base_url or f"http://{settings.host}:{settings.port}"


def grpc_address(gateway: Gateway) -> str:
    """The gRPC binding's ``host:port`` in an extended card fetched over gRPC."""
    return f"{gateway.settings.grpc_host or gateway.settings.host}:{gateway.grpc_port}"


# the server ------------------------------------------------------------------------------------

class _Health(health.aio.HealthServicer):
    """grpc.health.v1: SERVING, NOT_SERVING once the gateway stops (as ``/readyz``)."""

    def __init__(self, app: web.Application) -> None:
        super().__init__()
        self._app = app

    async def Check(self, request: Any, context: grpc.aio.ServicerContext) -> Any:  # noqa: N802
        if self._app[GATEWAY].engine.stopping:
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.NOT_SERVING)
        return await super().Check(request, context)


def server_options(settings: GatewaySettings) -> list[tuple[str, int]]:
    """Message size bound and keepalive pings (idle streams survive proxies; dead peers go)."""
    keepalive_ms = int(settings.grpc_keepalive_seconds * 1000)
    return [
        ("grpc.max_receive_message_length", settings.grpc_max_message_bytes),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", int(settings.grpc_keepalive_timeout_seconds * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", max(keepalive_ms // 3, 1000)),
    ]


async def start(app: web.Application) -> int:
    """Start the gRPC server of ``app`` (kept as ``app[GRPC_SERVER]``); the port it listens on.
    ``OSError`` when the port cannot be bound or the TLS files cannot be read."""
    settings = app[GATEWAY].settings
    server = grpc.aio.server(options=server_options(settings))
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(A2AService(app), server)
    health_pb2_grpc.add_HealthServicer_to_server(_Health(app), server)
    if settings.grpc_reflection:
        from grpc_reflection.v1alpha import reflection

        reflection.enable_server_reflection(
            (SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
    address = f"{settings.grpc_host or settings.host}:{settings.grpc_port}"
    try:
        if settings.grpc_tls_cert_file:
            key = Path(settings.grpc_tls_key_file).read_bytes()
            chain = Path(settings.grpc_tls_cert_file).read_bytes()
            port = server.add_secure_port(address, grpc.ssl_server_credentials([(key, chain)]))
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:
        raise OSError(f"cannot listen for gRPC on {address}") from None
    await server.start()
    app[GRPC_SERVER] = server
    log.info("grpc_listening", address=address, port=port, tls=bool(settings.grpc_tls_cert_file))
    return port


async def stop(app: web.Application) -> None:
    """Stop the gRPC server: calls still open get ``shutdown_close_seconds``, then are cancelled."""
    server = app.get(GRPC_SERVER)
    if server is not None:
        await server.stop(app[GATEWAY].settings.shutdown_close_seconds)
