"""The ids a request names (message, task, context, reference task, push config ids, the
tenant): none may hold a NUL character.

The stores keep ids as text, and PostgreSQL text cannot hold NUL: such an id would be
answered on one store and fail to be written on another. The A2A specification and the
a2a-sdk put no other rule on an id's characters, so NUL alone is refused, on every store
and binding alike (the request handler checks each request once).
"""

from __future__ import annotations

from functools import cache

from a2a.utils.errors import InvalidParamsError
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message as ProtoMessage


def _is_id(field: FieldDescriptor) -> bool:
    name = field.name
    return field.type == FieldDescriptor.TYPE_STRING and (
        name in ("id", "tenant") or name.endswith(("_id", "_ids"))
    )


def _searched(descriptor: Descriptor) -> bool:
    """Whether a message type is looked into: not protobuf's own types (Struct, Timestamp…)
    nor map entries."""
    return (
        not descriptor.full_name.startswith("google.protobuf.")
        and not descriptor.GetOptions().map_entry
    )


@cache
def _holds_ids(descriptor: Descriptor) -> bool:
    """Whether a message of this type can hold an id, at any depth (parts, for one, cannot:
    a request's parts are not walked)."""
    seen, todo = set(), [descriptor]
    while todo:
        current = todo.pop()
        if current.full_name in seen or not _searched(current):
            continue
        seen.add(current.full_name)
        if any(_is_id(f) for f in current.fields):
            return True
        todo += [f.message_type for f in current.fields if f.type == FieldDescriptor.TYPE_MESSAGE]
    return False


@cache
def _plan(
    descriptor: Descriptor,
) -> tuple[tuple[FieldDescriptor, ...], tuple[FieldDescriptor, ...]]:
    """(id fields, message-typed fields that can hold ids) of a message type."""
    ids = tuple(f for f in descriptor.fields if _is_id(f))
    nested = tuple(
        f
        for f in descriptor.fields
        if f.type == FieldDescriptor.TYPE_MESSAGE
        and _searched(f.message_type)
        and _holds_ids(f.message_type)
    )
    return ids, nested


def _check(msg: ProtoMessage, prefix: str) -> None:
    ids, nested = _plan(msg.DESCRIPTOR)
    for field in ids:
        value = getattr(msg, field.name)
        values = value if field.is_repeated else (value,)
        if any("\0" in v for v in values):
            raise InvalidParamsError(f"{prefix}{field.json_name} must not contain a NUL character")
    for field in nested:
        value = getattr(msg, field.name)
        if field.is_repeated:
            for i, item in enumerate(value):
                _check(item, f"{prefix}{field.json_name}[{i}].")
        elif msg.HasField(field.name):
            _check(value, f"{prefix}{field.json_name}.")


def check_ids(request: ProtoMessage) -> None:
    """``InvalidParamsError`` naming the first id of ``request`` that holds a NUL."""
    # UTF-8 keeps U+0000 as the byte 0, so an encoding without that byte has no NUL in any
    # string: the walk over the id fields (ten times the cost) runs only when it has one
    if b"\0" in request.SerializeToString():
        _check(request, "")
