"""REQUIRED-field validation of A2A requests, as the a2a-sdk does it, but planned once.

The SDK's ``validate_proto_required_fields`` reads every field's options on every
call; here each message type's required fields and nested message fields are
found once (from the ``google.api.field_behavior`` annotations of the A2A proto)
and each request walks only the fields that are set.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from a2a.utils.errors import InvalidParamsError
from google.api.field_behavior_pb2 import REQUIRED, field_behavior
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message as ProtoMessage


@cache
def _plan(
    descriptor: Descriptor,
) -> tuple[tuple[FieldDescriptor, ...], tuple[FieldDescriptor, ...]]:
    """(required fields, message-typed fields worth descending into) of a message type."""
    required, nested = [], []
    for field in descriptor.fields:
        if REQUIRED in field.GetOptions().Extensions[field_behavior]:
            required.append(field)
        if (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and not field.message_type.full_name.startswith("google.protobuf.")
        ):
            nested.append(field)
    return tuple(required), tuple(nested)


def _missing(msg: ProtoMessage, prefix: str, errors: list[dict[str, str]]) -> None:
    required, nested = _plan(msg.DESCRIPTOR)
    for field in required:
        value = getattr(msg, field.name)
        if field.is_repeated:
            if not value:
                errors.append(
                    {
                        "field": prefix + field.name,
                        "message": "Field must contain at least one element.",
                    }
                )
        elif field.has_presence:
            if not msg.HasField(field.name):
                errors.append({"field": prefix + field.name, "message": "Field is required."})
        elif value == field.default_value:
            errors.append({"field": prefix + field.name, "message": "Field is required."})
    for field in nested:
        value: Any = getattr(msg, field.name)
        if field.is_repeated:
            if field.message_type.GetOptions().map_entry:
                continue
            for i, item in enumerate(value):
                _missing(item, f"{prefix}{field.name}[{i}].", errors)
        elif msg.HasField(field.name):
            _missing(value, f"{prefix}{field.name}.", errors)


def validate_required_fields(msg: ProtoMessage) -> None:
    """``InvalidParamsError`` (with the missing fields) unless every REQUIRED field is set."""
    errors: list[dict[str, str]] = []
    _missing(msg, "", errors)
    if errors:
        fields = ", ".join(e["field"] for e in errors)
        raise InvalidParamsError(
            message=f"missing required fields: {fields}", data={"errors": errors}
        )
