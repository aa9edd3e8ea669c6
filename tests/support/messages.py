"""What a caller sends, built one way for every test: a2a-sdk user messages and SendMessage
requests, the same on the wire as JSON-RPC bodies (protocol 1.0 JSON names), and what a
handler is given for such a message."""

from __future__ import annotations

import uuid
from typing import Any

from a2a.types import Message, Part, Role, SendMessageConfiguration, SendMessageRequest
from google.protobuf.json_format import ParseDict

from handlers.base import HandlerRequest


def user_message(text: str = "hi", *, data: dict[str, Any] | None = None, **fields: Any) -> Message:
    """A user message with a fresh id: a text part (none when ``text`` is empty), then
    ``data`` as a JSON data part; ``fields`` are other Message fields (context_id, task_id)."""
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, **fields)
    if text:
        message.parts.append(Part(text=text))
    if data is not None:
        part = Part(media_type="application/json")
        ParseDict(data, part.data)
        message.parts.append(part)
    return message


def send_request(
    text: str = "hi", *, data: dict[str, Any] | None = None, immediately: bool = False,
    **fields: Any,
) -> SendMessageRequest:
    """A SendMessageRequest of ``user_message(text, data=data, **fields)``; with
    ``immediately``, it asks for the task at once (return_immediately)."""
    request = SendMessageRequest(message=user_message(text, data=data, **fields))
    if immediately:
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    return request


def handler_request(text: str = "ping", **fields: Any) -> HandlerRequest:
    """What a handler is given for a user message of ``text``: task-1 in context ctx-1 of
    endpoint ep-1 unless ``fields`` (other HandlerRequest fields) say otherwise."""
    defaults = {"task_id": "task-1", "context_id": "ctx-1", "message": Message(),
                "endpoint_id": "ep-1"}
    return HandlerRequest(text=text, **{**defaults, **fields})


def rpc(
    method: str, params: dict[str, Any] | None = None, rid: int | str = "req-1"
) -> dict[str, Any]:
    """A JSON-RPC 2.0 request body."""
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}


def wire_message(text: str = "hi", **fields: Any) -> dict[str, Any]:
    """A user message as JSON with a fresh messageId and one text part; ``fields`` in their
    JSON names (taskId, contextId, metadata, or messageId to choose the id)."""
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}],
            **fields}


def send_params(
    text: str = "hi", *, push: dict[str, Any] | None = None, **fields: Any
) -> dict[str, Any]:
    """SendMessage params as JSON (a JSON-RPC call's params, a REST message:send body) of
    ``wire_message(text, **fields)``; with ``push``, that push notification config inline."""
    params: dict[str, Any] = {"message": wire_message(text, **fields)}
    if push:
        params["configuration"] = {"taskPushNotificationConfig": push}
    return params


def send_body(
    text: str = "hi", *, push: dict[str, Any] | None = None, method: str = "SendMessage",
    rid: int | str = "req-1", **fields: Any,
) -> dict[str, Any]:
    """A JSON-RPC SendMessage (or ``method``) body of ``send_params(text, push=push, **fields)``."""
    return rpc(method, send_params(text, push=push, **fields), rid)


def params_0_3(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """message/send params of protocol 0.3: a user message of ``parts`` (0.3 JSON), with a
    fresh messageId unless ``fields`` (taskId, messageId, ...) say otherwise."""
    return {"message": {"kind": "message", "messageId": str(uuid.uuid4()), "role": "user",
                        "parts": list(parts), **fields}}
