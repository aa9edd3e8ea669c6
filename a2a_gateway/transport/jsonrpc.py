"""JSON-RPC binding: one URL serves A2A 1.0 (PascalCase methods) and 0.3 (``a/b`` methods).

Path of a request: envelope checks → version (``A2A-Version``; empty means 0.3)
→ extensions → params parsed into the SDK's protobuf (1.0) or pydantic (0.3)
models → the endpoint's ``RequestHandler`` (1.0) or ``RequestHandler03`` (0.3) →
result serialized back. 0.3 exists only here: the core speaks 1.0.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

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
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.error_handlers import build_error_details
from a2a.utils.errors import (
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    ContentTypeNotSupportedError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    VersionNotSupportedError,
)
from aiohttp import web
from google.protobuf.json_format import ParseError
from pydantic import ValidationError

from a2a_gateway.generation import READS_GENERATIONS, take_json_params, with_generation
from a2a_gateway.protojson import message_to_dict
from a2a_gateway.state import GATEWAY, Gateway
from a2a_gateway.tasks.streams import take_event_id
from a2a_gateway.transport.body import check_depth, read_body
from a2a_gateway.transport.call_context import call_context
from a2a_gateway.transport.keys import A2A_ERROR, A2A_METHOD, JSONRPC_ID
from a2a_gateway.transport.limits import check_request_limits
from a2a_gateway.transport.negotiate import (
    SPEAKS_1_0,
    V03,
    V10,
    V11,
    negotiate_extensions,
    parse_version,
    requested_version,
)
from a2a_gateway.transport.params import read_params
from a2a_gateway.transport.sse import accepts_event_stream, stream_events
from a2a_gateway.transport.stream_json import stream_response_dict


@dataclass(frozen=True, slots=True)
class Method:
    model: Any
    """The request's model: a protobuf class (1.0), or the name of an ``a2a.compat.v0_3.types``
    model (0.3, whose pydantic models load on the first 0.3 request)."""
    handler_method: str
    streaming: bool = False


V10_METHODS = {
    "SendMessage": Method(SendMessageRequest, "on_message_send"),
    "SendStreamingMessage": Method(SendMessageRequest, "on_message_send_stream", True),
    "GetTask": Method(GetTaskRequest, "on_get_task"),
    "ListTasks": Method(ListTasksRequest, "on_list_tasks"),
    "CancelTask": Method(CancelTaskRequest, "on_cancel_task"),
    "SubscribeToTask": Method(SubscribeToTaskRequest, "on_subscribe_to_task", True),
    "CreateTaskPushNotificationConfig": Method(
        TaskPushNotificationConfig, "on_create_task_push_notification_config"
    ),
    "GetTaskPushNotificationConfig": Method(
        GetTaskPushNotificationConfigRequest, "on_get_task_push_notification_config"
    ),
    "ListTaskPushNotificationConfigs": Method(
        ListTaskPushNotificationConfigsRequest, "on_list_task_push_notification_configs"
    ),
    "DeleteTaskPushNotificationConfig": Method(
        DeleteTaskPushNotificationConfigRequest, "on_delete_task_push_notification_config"
    ),
    "GetExtendedAgentCard": Method(GetExtendedAgentCardRequest, "on_get_extended_agent_card"),
}

V03_METHODS = {
    "message/send": Method("SendMessageRequest", "on_message_send"),
    "message/stream": Method("SendStreamingMessageRequest", "on_message_send_stream", True),
    "tasks/get": Method("GetTaskRequest", "on_get_task"),
    "tasks/cancel": Method("CancelTaskRequest", "on_cancel_task"),
    "tasks/resubscribe": Method("TaskResubscriptionRequest", "on_subscribe_to_task", True),
    "tasks/pushNotificationConfig/set": Method(
        "SetTaskPushNotificationConfigRequest", "on_create_task_push_notification_config"
    ),
    "tasks/pushNotificationConfig/get": Method(
        "GetTaskPushNotificationConfigRequest", "on_get_task_push_notification_config"
    ),
    "tasks/pushNotificationConfig/list": Method(
        "ListTaskPushNotificationConfigRequest", "on_list_task_push_notification_configs"
    ),
    "tasks/pushNotificationConfig/delete": Method(
        "DeleteTaskPushNotificationConfigRequest", "on_delete_task_push_notification_config"
    ),
    "agent/getAuthenticatedExtendedCard": Method(
        "GetAuthenticatedExtendedCardRequest", "on_get_extended_agent_card"
    ),
}

JSON_CONTENT_TYPES = ("application/json", "application/a2a+json", "application/json-rpc")


def json_response(body: dict[str, Any], headers: dict[str, str]) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json", headers=headers)


def error_body(request_id: Any, error: A2AError) -> dict[str, Any]:
    """A JSON-RPC error response with the code of ``error`` and ErrorInfo details."""
    code = JSON_RPC_ERROR_CODE_MAP.get(type(error), -32603)
    body: dict[str, Any] = {
        "code": code,
        "message": error.message,
        "data": build_error_details(error),
    }
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def result_to_json(result: Any, *, send: bool = False) -> Any:
    """Wire form of a 1.0 handler result: SendMessage answers ``{"task"|"message": …}``
    (a SendMessageResponse), the other methods the bare object."""
    if isinstance(result, Task):
        return {"task": message_to_dict(result)} if send else message_to_dict(result)
    if isinstance(result, Message):
        return {"message": message_to_dict(result)}
    if isinstance(result, ListTasksResponse):
        out = message_to_dict(result)
        out.setdefault("tasks", [])
        out.setdefault("nextPageToken", "")
        out.setdefault("pageSize", result.page_size)
        out.setdefault("totalSize", result.total_size)
        return out
    if result is None:
        return {}
    return message_to_dict(result)


def _dump_0_3(result: Any) -> Any:
    if isinstance(result, list):
        return [_dump_0_3(item) for item in result]
    if result is None:
        return None
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def _read_envelope(request: web.Request) -> dict[str, Any]:
    """The request object; its ``id`` is stored on the request as soon as it is read."""
    content_type = request.headers.get("Content-Type")
    if content_type is not None and not request.content_type.startswith(JSON_CONTENT_TYPES):
        raise ContentTypeNotSupportedError(
            f"Content-Type {request.content_type!r} is not supported; use application/json"
        )
    settings = request.app[GATEWAY].settings
    body = await read_body(request, settings)
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise JSONParseError("request body is not valid JSON") from None
    if not isinstance(payload, dict):
        raise InvalidRequestError(
            "request must be a JSON-RPC 2.0 object (batches are not supported)"
        )
    request_id = payload.get("id")
    if request_id is not None and (
        isinstance(request_id, bool) or not isinstance(request_id, str | int)
    ):
        raise InvalidRequestError("id must be a string, a number or null")
    request[JSONRPC_ID] = request_id
    if payload.get("jsonrpc") != "2.0" or not isinstance(payload.get("method"), str):
        raise InvalidRequestError(
            'not a JSON-RPC 2.0 request: jsonrpc must be "2.0" and method a string'
        )
    check_depth(payload, settings.max_json_depth)
    check_request_limits(payload.get("params"), settings)
    return payload


async def handle_jsonrpc(request: web.Request) -> web.StreamResponse:
    """Gateway errors (unknown or misconfigured endpoint, store outage) are left to the
    middleware, which echoes the id read here."""
    gateway = request.app[GATEWAY]
    headers = {"Vary": "A2A-Version"}
    try:
        payload = await _read_envelope(request)
        runtime = await gateway.registry.get(request.match_info["endpoint_id"])
        user = await gateway.auth.caller(request.headers, runtime.auth_view)
        method_name = payload["method"]
        request[A2A_METHOD] = method_name
        version = parse_version(requested_version(request))
        activated = negotiate_extensions(request, runtime)
        if activated:
            headers["A2A-Extensions"] = ", ".join(activated)
        context = call_context(request, gateway, runtime, user, activated)
        v10, v03 = gateway.request_handlers(runtime)
        if method_name in V10_METHODS:
            if version not in SPEAKS_1_0:
                raise VersionNotSupportedError(
                    f"{method_name} is an A2A 1.0 method: send the header A2A-Version: 1.0"
                )
            context.state[READS_GENERATIONS] = version == V11
            call = _call_1_0(
                request, gateway, V10_METHODS[method_name], v10, payload, context, headers
            )
        elif method_name in V03_METHODS:
            if version != V03:
                raise MethodNotFoundError(
                    f"{method_name} is an A2A 0.3 method; this request asked for A2A {version}"
                )
            call = _call_0_3(
                request, gateway, V03_METHODS[method_name], v03, payload, context, headers
            )
        else:
            raise MethodNotFoundError(f"method {method_name!r} not found")
        del payload  # the call holds it (a 1.0 stream lets it go once open: _call_1_0)
        return await call
    except A2AError as exc:
        request[A2A_ERROR] = type(exc).__name__
        return json_response(error_body(request.get(JSONRPC_ID), exc), headers)


def _parse_params(method: Method, payload: dict[str, Any]) -> Any:
    params = payload.get("params", {})
    if not isinstance(params, dict):
        raise InvalidParamsError("params must be an object")
    try:
        return read_params(params, method.model())  # REQUIRED fields checked too
    except ParseError as exc:
        raise InvalidParamsError(f"invalid params: {exc}") from None


async def _call_1_0(
    request: web.Request, gateway: Gateway, method: Method, handler: Any,
    payload: dict[str, Any], context: ServerCallContext, headers: dict[str, str],
) -> web.StreamResponse:
    if isinstance(payload.get("params"), dict):
        take_json_params(payload["params"], context.state)
    params = _parse_params(method, payload)
    request_id = payload.get("id")
    call = getattr(handler, method.handler_method)
    reads_generations = context.state[READS_GENERATIONS]
    if method.streaming:
        events = call(params, context)
        del params, payload  # a stream may idle for hours: it keeps no request

        def frame(event: Any) -> bytes:
            result = stream_response_dict(event)
            if reads_generations:
                with_generation(result, event)
            return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})

        return await _stream(request, gateway, events, frame, request_id, headers, V10, context)
    result = await call(params, context)
    out = result_to_json(result, send=method.handler_method == "on_message_send")
    if reads_generations:
        with_generation(out, result)
    return json_response({"jsonrpc": "2.0", "id": request_id, "result": out}, headers)


INT32_MAX = 2**31 - 1


def _check_0_3_params(params: Any) -> None:
    """What the SDK's 0.3 models take but its conversion to 1.0 cannot: a part without
    ``kind`` (the 0.3 schema requires it), file bytes that are not base64."""
    if not isinstance(params, dict):
        return
    message = params.get("message")
    parts = message.get("parts") if isinstance(message, dict) else None
    for i, part in enumerate(parts if isinstance(parts, list) else []):
        if not isinstance(part, dict):
            continue
        if "kind" not in part:
            raise InvalidParamsError(
                f"invalid params: params.message.parts.{i}.kind: Field required"
                " (text, file or data)"
            )
        file = part.get("file")
        data = file.get("bytes") if isinstance(file, dict) else None
        if isinstance(data, str) and not _is_base64(data):
            raise InvalidParamsError(
                f"invalid params: params.message.parts.{i}.file.bytes is not valid base64"
            )


def _check_0_3_history_length(envelope: Any) -> None:
    """A ``historyLength`` the 0.3 model took (``"9007199254740993"`` and ``1e10`` are
    integers to pydantic) that the conversion to 1.0 cannot put in its int32."""
    params = getattr(envelope, "params", None)
    for where, holder in (
        ("params", params),
        ("params.configuration", getattr(params, "configuration", None)),
    ):
        length = getattr(holder, "history_length", None)
        if length is not None and not 0 <= length <= INT32_MAX:
            raise InvalidParamsError(
                f"invalid params: {where}.historyLength must be between 0 and {INT32_MAX},"
                f" got {length}"
            )


def _is_base64(text: str) -> bool:
    """As the SDK's 0.3 conversion decodes it (characters outside the alphabet are skipped)."""
    try:
        base64.b64decode(text)
    except (binascii.Error, ValueError):
        return False
    return True


async def _call_0_3(
    request: web.Request, gateway: Gateway, method: Method, handler: Any,
    payload: dict[str, Any], context: ServerCallContext, headers: dict[str, str],
) -> web.StreamResponse:
    _check_0_3_params(payload.get("params"))
    from a2a.compat.v0_3 import types as t03

    try:
        envelope = getattr(t03, method.model).model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidParamsError(f"invalid params: {where}: {first['msg']}") from None
    _check_0_3_history_length(envelope)
    request_id = payload.get("id")
    call = getattr(handler, method.handler_method)
    if method.streaming:
        events = call(envelope, context)

        closes_on_input = method.handler_method == "on_message_send_stream"

        def frame(event: Any) -> bytes:
            body = _dump_0_3(event)
            result = body.get("result", {})
            if closes_on_input and result.get("kind") == "status-update" and (
                result.get("status", {}).get("state") in ("input-required", "auth-required")
            ):
                result["final"] = True  # 0.3 marks the event that ends the stream
            return orjson.dumps(body)

        return await _stream(request, gateway, events, frame, request_id, headers, V03, context)
    result = await call(envelope, context)
    body = _dump_0_3(result)
    params = payload.get("params")
    if (
        method.handler_method == "on_get_task"
        and isinstance(params, dict)
        and params.get("historyLength") == 0
    ):
        body.pop("history", None)  # the SDK's 0.3 conversion reads 0 as "unset"
    return json_response({"jsonrpc": "2.0", "id": request_id, "result": body}, headers)


def _stream(
    request: web.Request,
    gateway: Gateway,
    events: AsyncIterator[Any],
    frame: Callable[[Any], bytes],
    request_id: Any,
    headers: dict[str, str],
    version: str,
    context: ServerCallContext,
) -> Awaitable[web.StreamResponse]:
    """The JSON-RPC SSE stream; its errors carry the request's id. Not a coroutine itself: an
    open stream holds no frame of it.

    1.0 names them ``event: error`` (the a2a-sdk's clients read that), and an error before
    the first event is a plain JSON-RPC response (the 1.0 TCK, STREAM-SUB-003, reads
    nothing else). 0.3 servers sent errors as plain ``data:`` events — 0.3 clients look
    for ``error`` in the data and miss a named event — and, to a client that asked for
    ``text/event-stream``, an early error too (the 0.3 TCK reads nothing else). Every
    event carries the ``id:`` the request handler gave it (``Last-Event-ID`` on reconnect).
    """
    def error_frame(error: A2AError) -> bytes:
        return orjson.dumps(error_body(request_id, error))

    return stream_events(
        request, gateway.settings.sse_keepalive_seconds, events, frame, error_frame, headers,
        error_event="error" if version == V10 else None,
        early_errors_in_stream=version == V03 and accepts_event_stream(request),
        event_id=lambda: take_event_id(context),
    )
