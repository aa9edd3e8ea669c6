"""The params of SendMessage, SendStreamingMessage and GetTask, read straight into protobuf.

Every request of the hot methods goes through here. Each field the A2A spec defines on
``SendMessageRequest`` and ``GetTaskRequest`` has a reader of its own (a JSON key → a check
of the value's type → one assignment), so the common request costs a few dictionary
lookups and attribute writes, with no descriptor walk. A reader that meets anything it does
not fully understand — a value of another type, ``null``, bad base64, an enum name it does
not know, an int out of range, two members of a oneof, a field by its proto name — gives up,
and the whole request is parsed again by ``protojson.parse_dict``: what it returns or raises
is what every other request gets, so errors are word for word those of the general path
(``tests/unit/test_protojson_params.py`` compares both on generated requests). Unknown
fields are ignored, as ``ignore_unknown_fields`` does.

The REQUIRED-field walk (``validate_required_fields``) is skipped for these two requests
when a few attribute reads show every REQUIRED field set; when one may be missing, the walk
runs and its error is the one callers get.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from a2a.types import GetTaskRequest, SendMessageRequest
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from a2a_gateway.protojson import FallbackError, fill_struct, fill_value, parse_dict
from a2a_gateway.transport.required_fields import validate_required_fields

__all__ = ["check_required_fields", "parse_params", "read_params"]

Reader = Callable[[Message, Any], None]
"""Sets one field of a message from its JSON value, or raises ``FallbackError``."""

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _scalar(name: str, fits: Callable[[Any], bool]) -> Reader:
    def read(target: Message, value: Any) -> None:
        if not fits(value):
            raise FallbackError
        setattr(target, name, value)

    return read


def _string(name: str) -> Reader:
    return _scalar(name, lambda value: type(value) is str)


def _strings(name: str) -> Reader:
    def read(target: Message, value: Any) -> None:
        if type(value) is not list or any(type(item) is not str for item in value):
            raise FallbackError
        getattr(target, name).extend(value)

    return read


def _struct(name: str) -> Reader:
    return lambda target, value: fill_struct(getattr(target, name), value)


def _int32(name: str) -> Reader:
    return _scalar(name, lambda value: type(value) is int and _INT32_MIN <= value <= _INT32_MAX)


def _bool(name: str) -> Reader:
    return _scalar(name, lambda value: type(value) is bool)


def _message(name: str, readers: dict[str, Reader]) -> Reader:
    return lambda target, value: _read(getattr(target, name), value, readers)


def _read(target: Message, data: Any, readers: dict[str, Reader]) -> None:
    """Fills ``target`` from the JSON object ``data`` with the readers of its type."""
    if type(data) is not dict:
        raise FallbackError
    target.SetInParent()  # present even when no field of it is (``{}``, unknown fields only)
    for key, value in data.items():
        read = readers.get(key)
        if read is not None:
            read(target, value)
        elif key in _NOT_IGNORED.get(target.DESCRIPTOR, ()) or key.startswith("["):
            raise FallbackError  # a field by its proto name, or an extension
        # else: an unknown field, ignored


# --- Part -------------------------------------------------------------------------------


def _raw(target: Message, value: Any) -> None:
    if type(value) is not str:
        raise FallbackError
    try:
        target.raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise FallbackError from None


def _data(target: Message, value: Any) -> None:
    if value is None:
        raise FallbackError  # json_format's null for a Value field
    fill_value(target.data, value)


_PART = {
    "text": _string("text"),
    "raw": _raw,
    "url": _string("url"),
    "data": _data,
    "metadata": _struct("metadata"),
    "filename": _string("filename"),
    "mediaType": _string("media_type"),
}
_PART_CONTENT = frozenset({"text", "raw", "url", "data"})


def _parts(target: Message, value: Any) -> None:
    if type(value) is not list:
        raise FallbackError
    parts = target.parts  # type: ignore[attr-defined]
    for item in value:
        if type(item) is dict and len(item) > 1 and len(_PART_CONTENT.intersection(item)) > 1:
            raise FallbackError  # two members of the oneof: json_format's error
        _read(parts.add(), item, _PART)


# --- Message, SendMessageConfiguration, SendMessageRequest, GetTaskRequest --------------


def _role(target: Message, value: Any) -> None:
    number = _ROLES.get(value) if type(value) is str else None
    if number is None:
        if type(value) is not int or value not in _ROLE_NUMBERS:
            raise FallbackError
        number = value
    target.role = number  # type: ignore[attr-defined]


_MESSAGE_DESCRIPTOR = SendMessageRequest.DESCRIPTOR.fields_by_name["message"].message_type
_ROLES = {v.name: v.number for v in _MESSAGE_DESCRIPTOR.fields_by_name["role"].enum_type.values}
_ROLE_NUMBERS = frozenset(_ROLES.values())

_MESSAGE = {
    "messageId": _string("message_id"),
    "contextId": _string("context_id"),
    "taskId": _string("task_id"),
    "role": _role,
    "parts": _parts,
    "metadata": _struct("metadata"),
    "extensions": _strings("extensions"),
    "referenceTaskIds": _strings("reference_task_ids"),
}
_AUTHENTICATION = {"scheme": _string("scheme"), "credentials": _string("credentials")}
_PUSH_CONFIG = {
    "tenant": _string("tenant"),
    "id": _string("id"),
    "taskId": _string("task_id"),
    "url": _string("url"),
    "token": _string("token"),
    "authentication": _message("authentication", _AUTHENTICATION),
}
_CONFIGURATION = {
    "acceptedOutputModes": _strings("accepted_output_modes"),
    "taskPushNotificationConfig": _message("task_push_notification_config", _PUSH_CONFIG),
    "historyLength": _int32("history_length"),
    "returnImmediately": _bool("return_immediately"),
}
_SEND_MESSAGE = {
    "tenant": _string("tenant"),
    "message": _message("message", _MESSAGE),
    "configuration": _message("configuration", _CONFIGURATION),
    "metadata": _struct("metadata"),
}
_GET_TASK = {
    "tenant": _string("tenant"),
    "id": _string("id"),
    "historyLength": _int32("history_length"),
}

_READERS: dict[Descriptor, dict[str, Reader]] = {
    SendMessageRequest.DESCRIPTOR: _SEND_MESSAGE,
    GetTaskRequest.DESCRIPTOR: _GET_TASK,
}


def _proto_names(descriptor: Descriptor, seen: dict[Descriptor, frozenset[str]]) -> None:
    """Each message type's field names that differ from their JSON names (json_format
    reads them too, and a request naming a field twice is its to judge)."""
    if descriptor in seen or descriptor.full_name.startswith("google.protobuf."):
        return
    seen[descriptor] = frozenset(f.name for f in descriptor.fields if f.name != f.json_name)
    for field in descriptor.fields:
        if field.message_type is not None:
            _proto_names(field.message_type, seen)


_NOT_IGNORED: dict[Descriptor, frozenset[str]] = {}
for _descriptor in _READERS:
    _proto_names(_descriptor, _NOT_IGNORED)


def parse_params(data: Any, message: Message) -> Message:
    """``protojson.parse_dict(data, message)`` for a fresh ``message``, read directly when it
    is a SendMessageRequest or GetTaskRequest in plain JSON; raises ``ParseError``."""
    readers = _READERS.get(message.DESCRIPTOR)
    if readers is not None:
        try:
            _read(message, data, readers)
            return message
        except (FallbackError, OverflowError):
            message.Clear()
    return parse_dict(data, message)


# --- REQUIRED fields ----------------------------------------------------------------------


def _send_message_has_required(request: Any) -> bool:
    """Whether a SendMessageRequest has every field the A2A proto marks REQUIRED: the message,
    its id, role and parts; a push config's url, and its authentication's scheme."""
    if not request.HasField("message"):
        return False
    message = request.message
    if not (message.message_id and message.role and message.parts):
        return False
    if not request.configuration.HasField("task_push_notification_config"):
        return True
    push = request.configuration.task_push_notification_config
    return bool(push.url) and (
        not push.HasField("authentication") or bool(push.authentication.scheme)
    )


_HAS_REQUIRED: dict[Descriptor, Callable[[Any], bool]] = {
    SendMessageRequest.DESCRIPTOR: _send_message_has_required,
    GetTaskRequest.DESCRIPTOR: lambda request: bool(request.id),
}


def check_required_fields(message: Message) -> None:
    """``validate_required_fields``, skipped for a request of the hot methods whose REQUIRED
    fields are all plainly set (a few attribute reads instead of the walk)."""
    has_required = _HAS_REQUIRED.get(message.DESCRIPTOR)
    if has_required is None or not has_required(message):
        validate_required_fields(message)


def read_params(data: Any, message: Message) -> Message:
    """``parse_params``, then ``check_required_fields``; raises ``ParseError`` or the
    ``InvalidParamsError`` naming the missing fields."""
    parse_params(data, message)
    check_required_fields(message)
    return message
