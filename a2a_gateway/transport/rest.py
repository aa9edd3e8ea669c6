"""HTTP+JSON binding of A2A 1.0 under ``/{endpoint_id}/a2a/rest``.

Routes follow the spec's table (``POST /message:send``, ``GET /tasks/{id}`` …);
errors are AIP-193 bodies with the SDK's HTTP status mapping. Only 1.0 is served
here; a request without ``A2A-Version`` is taken as 1.0, since 0.3's REST routes
were different (``/v1/...``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from a2a.server.context import ServerCallContext
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import (
    A2A_ERROR_MAPPING,
    A2AError,
    ContentTypeNotSupportedError,
    InvalidAgentResponseError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from aiohttp import web
from google.protobuf.json_format import ParseError

from a2a_gateway.generation import READS_GENERATIONS, take_json_params, with_generation
from a2a_gateway.protojson import message_to_dict
from a2a_gateway.state import GATEWAY, Gateway
from a2a_gateway.tasks.streams import take_event_id
from a2a_gateway.transport.body import check_depth, read_body
from a2a_gateway.transport.call_context import call_context
from a2a_gateway.transport.jsonrpc import JSON_CONTENT_TYPES, result_to_json
from a2a_gateway.transport.keys import A2A_ERROR, A2A_METHOD
from a2a_gateway.transport.limits import check_request_limits
from a2a_gateway.transport.negotiate import (
    SPEAKS_1_0,
    V10,
    V11,
    negotiate_extensions,
    parse_version,
    requested_version,
)
from a2a_gateway.transport.params import check_required_fields, parse_params
from a2a_gateway.transport.sse import stream_events
from a2a_gateway.transport.stream_json import stream_response_dict

if TYPE_CHECKING:
    from a2a_gateway.tasks.request_handler import GatewayRequestHandler

REST_HEADERS = web.RequestKey("rest_headers", dict)


def _headers(request: web.Request) -> dict[str, str]:
    return request[REST_HEADERS]


Route = Callable[
    [web.Request, Gateway, "GatewayRequestHandler", ServerCallContext],
    Awaitable[web.StreamResponse],
]


# A2A v1.0.0 mapped these differently from v1.0.1 (which the a2a-sdk follows);
# ``rest_error_statuses = "1.0.0"`` serves clients written against v1.0.0.
V1_0_0_STATUSES: dict[type[A2AError], tuple[int, str]] = {
    TaskNotCancelableError: (409, "FAILED_PRECONDITION"),
    InvalidAgentResponseError: (502, "INTERNAL"),
    PushNotificationNotSupportedError: (400, "UNIMPLEMENTED"),
    UnsupportedOperationError: (400, "UNIMPLEMENTED"),
    VersionNotSupportedError: (400, "UNIMPLEMENTED"),
}


def rest_error(
    error: A2AError, content_type: str, headers: dict[str, str], statuses: str = "1.0.1"
) -> web.Response:
    """AIP-193 error body; HTTP status per the A2A version's table (415 for a bad media type)."""
    payload = build_rest_error_payload(error)
    mapping = A2A_ERROR_MAPPING.get(type(error))
    status = mapping.http_code if mapping else 500
    if statuses == "1.0.0" and type(error) in V1_0_0_STATUSES:
        status, payload["error"]["status"] = V1_0_0_STATUSES[type(error)]
    if isinstance(error, ContentTypeNotSupportedError):
        status = 415  # an unsupported media type is what HTTP calls it
    payload["error"]["code"] = status
    return web.Response(
        status=status,
        body=orjson.dumps(payload),
        content_type=content_type,
        headers=headers,
    )


def _ok(gateway: Gateway, body: Any, headers: dict[str, str]) -> web.Response:
    return web.Response(
        body=orjson.dumps(body), content_type=gateway.settings.rest_content_type, headers=headers
    )


async def _body(request: web.Request, model: Any, state: dict[str, Any] | None = None) -> Any:
    """The JSON body as ``model``; with ``state``, its 1.1 fields go there (``generation``)."""
    if request.headers.get("Content-Type") and not request.content_type.startswith(
        JSON_CONTENT_TYPES
    ):
        raise ContentTypeNotSupportedError(
            f"Content-Type {request.content_type!r} is not supported"
        )
    settings = request.app[GATEWAY].settings
    raw = await read_body(request, settings)
    try:
        data = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        raise InvalidParamsError("request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise InvalidParamsError("request body must be a JSON object")
    check_depth(data, settings.max_json_depth)
    check_request_limits(data, settings)
    if state is not None:
        take_json_params(data, state)
    try:
        parsed = parse_params(data, model)
    except ParseError as exc:
        raise InvalidParamsError(f"invalid request body: {exc}") from None
    return parsed


def _query(
    request: web.Request, model: Any, ints: tuple[str, ...] = (), bools: tuple[str, ...] = (),
    state: dict[str, Any] | None = None,
) -> Any:
    data: dict[str, Any] = {}
    for key, value in request.query.items():
        if key == "A2A-Version":
            continue
        if key in ints:
            try:
                data[key] = int(value)
            except ValueError:
                raise InvalidParamsError(f"{key} must be an integer") from None
        elif key in bools:
            data[key] = value.lower() in ("1", "true", "yes")
        else:
            data[key] = value
    if state is not None:
        take_json_params(data, state)
    try:
        return parse_params(data, model)
    except ParseError as exc:
        raise InvalidParamsError(f"invalid query parameters: {exc}") from None


def _stream(
    request: web.Request, gateway: Gateway, events: Any, context: ServerCallContext
) -> Awaitable[web.StreamResponse]:
    """An SSE stream; each event carries the ``id:`` the request handler gave it. Not a
    coroutine itself: an open stream holds no frame of it."""
    reads_generations = context.state[READS_GENERATIONS]

    def frame(event: Any) -> bytes:
        out = stream_response_dict(event)
        return orjson.dumps(with_generation(out, event) if reads_generations else out)

    def error_frame(error: A2AError) -> bytes:
        return orjson.dumps(build_rest_error_payload(error))

    return stream_events(
        request,
        gateway.settings.sse_keepalive_seconds,
        events,
        frame,
        error_frame,
        _headers(request),
        event_id=lambda: take_event_id(context),
    )


async def send_message(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    params = await _body(request, SendMessageRequest(), context.state)
    check_required_fields(params)
    result = await handler.on_message_send(params, context)
    return _ok(gateway, _with_generation(result_to_json(result, send=True), result, context),
               _headers(request))


async def stream_message(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    params = await _body(request, SendMessageRequest(), context.state)
    check_required_fields(params)
    events = handler.on_message_send_stream(params, context)
    del params  # a stream may idle for hours: it keeps no request
    return await _stream(request, gateway, events, context)


async def get_task(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    params = _query(request, GetTaskRequest(), ints=("historyLength",), state=context.state)
    params.id = request.match_info["task_id"]
    task = await handler.on_get_task(params, context)
    return _ok(gateway, _with_generation(message_to_dict(task), task, context), _headers(request))


def _with_generation(out: Any, result: Any, context: ServerCallContext) -> Any:
    return with_generation(out, result) if context.state[READS_GENERATIONS] else out


async def list_tasks(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    params = _query(
        request, ListTasksRequest(), ints=("pageSize", "historyLength"), bools=("includeArtifacts",)
    )
    result = await handler.on_list_tasks(params, context)
    return _ok(gateway, result_to_json(result), _headers(request))


async def cancel_task(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    task = await handler.on_cancel_task(
        CancelTaskRequest(id=request.match_info["task_id"]), context
    )
    return _ok(gateway, message_to_dict(task), _headers(request))


async def subscribe(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    events = handler.on_subscribe_to_task(
        SubscribeToTaskRequest(id=request.match_info["task_id"]), context
    )
    return await _stream(request, gateway, events, context)


async def create_push_config(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    params = await _body(request, TaskPushNotificationConfig())
    params.task_id = request.match_info["task_id"]
    config = await handler.on_create_task_push_notification_config(params, context)
    return _ok(gateway, message_to_dict(config), _headers(request))


async def list_push_configs(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    params = ListTaskPushNotificationConfigsRequest(task_id=request.match_info["task_id"])
    result = await handler.on_list_task_push_notification_configs(params, context)
    body = message_to_dict(result)
    body.setdefault("configs", [])
    return _ok(gateway, body, _headers(request))


async def get_push_config(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    params = GetTaskPushNotificationConfigRequest(
        task_id=request.match_info["task_id"], id=request.match_info["config_id"]
    )
    config = await handler.on_get_task_push_notification_config(params, context)
    return _ok(gateway, message_to_dict(config), _headers(request))


async def delete_push_config(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    params = DeleteTaskPushNotificationConfigRequest(
        task_id=request.match_info["task_id"], id=request.match_info["config_id"]
    )
    await handler.on_delete_task_push_notification_config(params, context)
    return _ok(gateway, {}, _headers(request))


async def extended_card(request, gateway, handler, context):  # type: ignore[no-untyped-def]
    card = await handler.on_get_extended_agent_card(GetExtendedAgentCardRequest(), context)
    return _ok(gateway, message_to_dict(card), _headers(request))


_TASK = "{task_id:[^/:]+}"
ROUTES: list[tuple[str, str, Route]] = [
    ("POST", "/message:send", send_message),
    ("POST", "/message:stream", stream_message),
    ("GET", "/tasks", list_tasks),
    ("POST", f"/tasks/{_TASK}:cancel", cancel_task),
    ("POST", f"/tasks/{_TASK}:subscribe", subscribe),
    ("GET", f"/tasks/{_TASK}:subscribe", subscribe),
    ("GET", f"/tasks/{_TASK}", get_task),
    ("POST", f"/tasks/{_TASK}/pushNotificationConfigs", create_push_config),
    ("GET", f"/tasks/{_TASK}/pushNotificationConfigs", list_push_configs),
    ("GET", f"/tasks/{_TASK}/pushNotificationConfigs/{{config_id}}", get_push_config),
    ("DELETE", f"/tasks/{_TASK}/pushNotificationConfigs/{{config_id}}", delete_push_config),
    ("GET", "/extendedAgentCard", extended_card),
]


def rest_view(route: Route) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def view(request: web.Request) -> web.StreamResponse:
        gateway = request.app[GATEWAY]
        runtime = await gateway.registry.get(request.match_info["endpoint_id"])
        user = await gateway.auth.caller(request.headers, runtime.auth_view)
        headers = {"Vary": "A2A-Version"}
        request[REST_HEADERS] = headers
        request[A2A_METHOD] = route.__name__
        try:
            version = parse_version(requested_version(request), empty_means=V10)
            if version not in SPEAKS_1_0:
                raise VersionNotSupportedError("the HTTP+JSON binding serves A2A 1.0 and 1.1")
            activated = negotiate_extensions(request, runtime)
            if activated:
                headers["A2A-Extensions"] = ", ".join(activated)
            context = call_context(request, gateway, runtime, user, activated)
            context.state[READS_GENERATIONS] = version == V11
            handler, _ = gateway.request_handlers(runtime)
            return await route(request, gateway, handler, context)
        except A2AError as exc:
            request[A2A_ERROR] = type(exc).__name__
            settings = gateway.settings
            return rest_error(
                exc, settings.rest_content_type, headers, settings.rest_error_statuses
            )

    view.__name__ = route.__name__
    return view
