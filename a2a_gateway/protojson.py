"""ProtoJSON for the A2A messages on the hot path, with protobuf's ``json_format`` as fallback.

``json_format`` looks up every field's descriptor, options and type on every call,
which made it a quarter of a blocking SendMessage's CPU. Here each field gets a
converter once (per descriptor) and each message walks only its set fields
(``ListFields``). Whatever these converters do not cover — a type or value they
do not expect, a JSON shape that is not plainly valid — falls back to
``json_format`` for the whole message, so results and error messages are
``json_format``'s own; ``tests/unit/test_protojson.py`` checks both agree.

One difference: unknown fields are ignored, as ``ignore_unknown_fields`` does, but
an unknown enum value is an error naming the valid ones (``json_format`` would drop
it like an unknown field, and the request would then seem to lack the field), and so is
a number its field cannot hold. ``json_format`` would store some of those as another
value (an enum number beyond int32 wraps: ``9007199254740993`` becomes 1; ``1.5`` is
enum 1; ``"1e39"`` is a float's infinity) and let others out as a bare ``ValueError``
or ``OverflowError``.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import math
import sys
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

__all__ = ["FallbackError", "fill_struct", "fill_value", "message_to_dict", "parse_dict"]

FD = FieldDescriptor
_INT64 = {FD.CPPTYPE_INT64, FD.CPPTYPE_UINT64}
_FLOAT = {FD.CPPTYPE_FLOAT, FD.CPPTYPE_DOUBLE}
_INT_RANGES = {
    FD.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    FD.CPPTYPE_UINT32: (0, 2**32 - 1),
    FD.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    FD.CPPTYPE_UINT64: (0, 2**64 - 1),
}
_INT32_MIN, _INT32_MAX = _INT_RANGES[FD.CPPTYPE_INT32]
_FLOAT_LIMITS = {FD.CPPTYPE_FLOAT: 3.4028234663852886e38, FD.CPPTYPE_DOUBLE: sys.float_info.max}
# infinity spelled out ("Infinity") is a float's value; "1e400", also read as infinity, is too large
_INFINITY_WORDS = {"inf", "infinity"}


class FallbackError(Exception):
    """A fast path gives up: the message at hand needs ``json_format``."""


# --- printing ---------------------------------------------------------------------------


def _value_to_json(value: Message) -> Any:
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "number_value":
        number = value.number_value
        if math.isinf(number) or math.isnan(number):
            raise FallbackError
        return number
    if kind == "struct_value":
        return _struct_to_json(value.struct_value)
    if kind == "list_value":
        return [_value_to_json(v) for v in value.list_value.values]
    return getattr(value, kind)


def _struct_to_json(struct: Message) -> dict[str, Any]:
    return {key: _value_to_json(item) for key, item in struct.fields.items()}


_FIRST_SECOND, _LAST_SECOND = -62135596800, 253402300799  # 0001-01-01 and 9999-12-31T23:59:59


@functools.lru_cache(maxsize=64)
def _second_to_json(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of a second since the epoch (the tasks of a reply share a few)."""
    return (_EPOCH + datetime.timedelta(seconds=seconds)).isoformat()


_EPOCH = datetime.datetime(1970, 1, 1)


def _timestamp_to_json(ts: Message) -> str:
    """``Timestamp.ToJsonString``, a third of its cost: the date and time of each second are
    formatted once, then only the fraction (0, 3, 6 or 9 digits, as protobuf chooses)."""
    seconds, nanos = ts.seconds, ts.nanos  # type: ignore[attr-defined]
    if not (_FIRST_SECOND <= seconds <= _LAST_SECOND and 0 <= nanos < 1_000_000_000):
        return ts.ToJsonString()  # type: ignore[attr-defined]  # its error
    whole = _second_to_json(seconds)
    if nanos == 0:
        return whole + "Z"
    if nanos % 1_000_000 == 0:
        return f"{whole}.{nanos // 1_000_000:03d}Z"
    if nanos % 1000 == 0:
        return f"{whole}.{nanos // 1000:06d}Z"
    return f"{whole}.{nanos:09d}Z"


_WELL_KNOWN: dict[str, Callable[[Message], Any]] = {
    "google.protobuf.Timestamp": _timestamp_to_json,
    "google.protobuf.Struct": _struct_to_json,
    "google.protobuf.Value": _value_to_json,
    "google.protobuf.ListValue": lambda lv: [_value_to_json(v) for v in lv.values],
}


def _message_printer(descriptor: Descriptor) -> Callable[[Message], Any]:
    name = descriptor.full_name
    if name in _WELL_KNOWN:
        return _WELL_KNOWN[name]
    if name.startswith("google.protobuf."):
        raise FallbackError
    return _message_to_dict


def _scalar_printer(field: FieldDescriptor) -> Callable[[Any], Any]:
    cpp = field.cpp_type
    if cpp == FD.CPPTYPE_MESSAGE:
        return _message_printer(field.message_type)
    if cpp == FD.CPPTYPE_ENUM:
        if field.enum_type.full_name == "google.protobuf.NullValue":
            raise FallbackError
        names = {
            v.number: v.name for v in field.enum_type.values if not v.GetOptions().ListFields()
        }
        if len(names) != len(field.enum_type.values):
            raise FallbackError  # json_name options on enum values
        return lambda v: names[v] if v in names else _fallback_value()
    if field.type == FD.TYPE_BYTES:
        return lambda v: base64.b64encode(v).decode("ascii")
    if cpp in _INT64:
        return str
    if cpp in _FLOAT:
        raise FallbackError
    return _identity


def _identity(value: Any) -> Any:
    return value


def _fallback_value() -> Any:
    raise FallbackError


_PRINTERS: dict[FieldDescriptor, tuple[str, Callable[[Any], Any]]] = {}


def _field_printer(field: FieldDescriptor) -> tuple[str, Callable[[Any], Any]]:
    found = _PRINTERS.get(field)
    if found is None:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            found = (field.json_name, _map_printer(field))
        else:
            single = _scalar_printer(field)
            convert = (lambda vs, f=single: [f(v) for v in vs]) if field.is_repeated else single
            found = (field.json_name, convert)
        _PRINTERS[field] = found
    return found


def _map_printer(field: FieldDescriptor) -> Callable[[Any], Any]:
    key_field = field.message_type.fields_by_name["key"]
    if key_field.cpp_type != FD.CPPTYPE_STRING:
        raise FallbackError
    value = _scalar_printer(field.message_type.fields_by_name["value"])
    return lambda entries: {k: value(v) for k, v in entries.items()}


def _message_to_dict(message: Message) -> dict[str, Any]:
    out = {}
    for field, value in message.ListFields():
        json_name, convert = _field_printer(field)
        out[json_name] = convert(value)
    return out


def message_to_dict(message: Message) -> dict[str, Any]:
    """Same result as ``json_format.MessageToDict(message)``."""
    try:
        return _message_to_dict(message)
    except FallbackError:
        return json_format.MessageToDict(message)


# --- parsing ----------------------------------------------------------------------------


def fill_value(target: Message, value: Any) -> None:
    """Sets the ``google.protobuf.Value`` ``target`` from a JSON value; ``FallbackError`` for
    anything else."""
    if value is None:
        target.null_value = 0
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int | float):
        target.number_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, dict):
        fill_struct(target.struct_value, value)
    elif isinstance(value, list):
        target.list_value.SetInParent()
        for item in value:
            fill_value(target.list_value.values.add(), item)
    else:
        raise FallbackError


def fill_struct(target: Message, value: Any) -> None:
    """Sets the ``google.protobuf.Struct`` ``target`` from a JSON object; ``FallbackError`` for
    anything else."""
    if not isinstance(value, dict):
        raise FallbackError
    target.SetInParent()
    for key, item in value.items():
        fill_value(target.fields[key], item)


def _fill_timestamp(target: Message, value: Any) -> None:
    if not isinstance(value, str):
        raise FallbackError
    try:
        target.FromJsonString(value)
    except ValueError:
        raise FallbackError from None


_WELL_KNOWN_PARSERS: dict[str, Callable[[Message, Any], None]] = {
    "google.protobuf.Timestamp": _fill_timestamp,
    "google.protobuf.Struct": fill_struct,
    "google.protobuf.Value": fill_value,
}


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    """The Python value to assign for a JSON scalar, or ``FallbackError``."""
    cpp = field.cpp_type
    if cpp == FD.CPPTYPE_STRING:
        if not isinstance(value, str):
            raise FallbackError
        if field.type == FD.TYPE_BYTES:
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise FallbackError from None
        return value
    if cpp == FD.CPPTYPE_BOOL:
        if not isinstance(value, bool):
            raise FallbackError
        return value
    if cpp in _INT_RANGES:
        low, high = _INT_RANGES[cpp]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise FallbackError
        return value
    if cpp == FD.CPPTYPE_ENUM:
        if isinstance(value, str):
            found = field.enum_type.values_by_name.get(value)
            if found is None:
                raise FallbackError
            return found.number
        # the range first: protobuf's lookup raises ValueError or wraps beyond int32
        if (
            type(value) is int
            and _INT32_MIN <= value <= _INT32_MAX
            and value in field.enum_type.values_by_number
        ):
            return value
        raise FallbackError
    raise FallbackError  # floats and anything else


_FIELD_MAPS: dict[Descriptor, dict[str, FieldDescriptor]] = {}


def _fields_by_json_key(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    found = _FIELD_MAPS.get(descriptor)
    if found is None:
        found = {}
        for field in descriptor.fields:
            found[field.name] = field
            found[field.json_name] = field
        _FIELD_MAPS[descriptor] = found
    return found


def _fill_message(target: Message, data: Any) -> None:
    if not isinstance(data, dict):
        raise FallbackError
    descriptor = target.DESCRIPTOR
    fields = _fields_by_json_key(descriptor)
    oneofs_seen: set[str] = set()
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            if key.startswith("[") or key == "@type":
                raise FallbackError  # extensions and Any
            continue  # unknown fields are ignored
        if field.containing_oneof is not None:
            if field.containing_oneof.name in oneofs_seen:
                raise FallbackError  # json_format reports the conflict
            oneofs_seen.add(field.containing_oneof.name)
        _fill_field(target, field, value)
    target.SetInParent()  # present even when no field of it is (``{}``, unknown fields only)


def _fill_field(target: Message, field: FieldDescriptor, value: Any) -> None:
    message_type = field.message_type
    if message_type is not None and message_type.GetOptions().map_entry:
        raise FallbackError
    if value is None:
        if message_type is not None and message_type.full_name == "google.protobuf.Value":
            fill_value(getattr(target, field.name), None)
            return
        raise FallbackError  # null handling is json_format's
    if field.is_repeated:
        if not isinstance(value, list):
            raise FallbackError
        container = getattr(target, field.name)
        if message_type is not None:
            for item in value:
                _fill_submessage(container.add(), message_type, item)
        else:
            container.extend(_scalar(field, item) for item in value)
        return
    if message_type is not None:
        _fill_submessage(getattr(target, field.name), message_type, value)
    else:
        setattr(target, field.name, _scalar(field, value))


def _fill_submessage(target: Message, descriptor: Descriptor, value: Any) -> None:
    special = _WELL_KNOWN_PARSERS.get(descriptor.full_name)
    if special is not None:
        special(target, value)
    elif descriptor.full_name.startswith("google.protobuf."):
        raise FallbackError
    else:
        _fill_message(target, value)


def _enum_number(value: str | int | float) -> int | None:
    """The enum number ``json_format`` reads from a JSON value that is not a name
    (``"2"`` is 2), or None."""
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    if isinstance(value, float):
        return int(value) if value.is_integer() else None  # it would truncate 1.5 to 1
    return value


def _is_enum_value(field: FieldDescriptor, value: Any) -> bool:
    if isinstance(value, str) and value in field.enum_type.values_by_name:
        return True
    if not isinstance(value, str | int | float):
        return True  # not an enum's JSON type: json_format reports it
    number = _enum_number(value)
    return (
        number is not None and _INT32_MIN <= number <= _INT32_MAX
        and number in field.enum_type.values_by_number
    )


def _as_integer(value: Any) -> int | None:
    """The integer ``json_format`` reads from a JSON number or numeric string (``"1e3"``
    and ``1000.0`` are 1000), or None where it reads none and reports the value itself."""
    if type(value) is int:
        return value
    if isinstance(value, str):
        if " " in value:
            return None
        try:
            return int(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _int_out_of_range(field: FieldDescriptor, value: Any) -> bool:
    number = _as_integer(value)
    if number is None:
        return False
    low, high = _INT_RANGES[field.cpp_type]
    return not low <= number <= high


def _float_out_of_range(field: FieldDescriptor, value: Any) -> bool:
    """Whether a finite JSON number or numeric string is beyond ``field``'s largest value
    (protobuf would store infinity, or raise ``OverflowError`` for an integer)."""
    if isinstance(value, str):
        if value.strip().lstrip("+-").lower() in _INFINITY_WORDS:
            return False
        try:
            value = float(value)
        except ValueError:
            return False  # not a number: json_format reports it
    elif type(value) is int:
        try:
            value = float(value)
        except OverflowError:
            return True
    elif type(value) is not float or not math.isfinite(value):
        return False  # json_format reports NaN, Infinity and other types
    return abs(value) > _FLOAT_LIMITS[field.cpp_type]


def _range_error(field: FieldDescriptor, path: str, item: Any) -> json_format.ParseError:
    if field.cpp_type in _FLOAT_LIMITS:
        low, high = -_FLOAT_LIMITS[field.cpp_type], _FLOAT_LIMITS[field.cpp_type]
    else:
        low, high = _INT_RANGES[field.cpp_type]
    return json_format.ParseError(f"{path} must be between {low} and {high}, got {item}")


def _check_values(data: Any, descriptor: Descriptor, prefix: str = "") -> None:
    """``ParseError`` for the first enum value of ``data`` that ``descriptor`` does not know,
    or the first number its field cannot hold."""
    if not isinstance(data, dict):
        return
    fields = _fields_by_json_key(descriptor)
    for key, value in data.items():
        field = fields.get(key)
        if field is None or value is None:
            continue
        items = value if field.is_repeated and isinstance(value, list) else [value]
        path = prefix + field.json_name
        if field.enum_type is not None:
            for item in items:
                if not _is_enum_value(field, item):
                    valid = ", ".join(v.name for v in field.enum_type.values if v.number != 0)
                    raise json_format.ParseError(
                        f"invalid value {item!r} for {path}: expected one of {valid}"
                    )
        elif field.cpp_type in _INT_RANGES or field.cpp_type in _FLOAT_LIMITS:
            out_of_range = (
                _int_out_of_range if field.cpp_type in _INT_RANGES else _float_out_of_range
            )
            for item in items:
                if out_of_range(field, item):
                    raise _range_error(field, path, item)
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
            for i, item in enumerate(items):
                where = f"{path}[{i}]." if field.is_repeated else f"{path}."
                _check_values(item, field.message_type, where)


def parse_dict(data: Any, message: Message) -> Message:
    """Same result as ``json_format.ParseDict(data, message, ignore_unknown_fields=True)``
    for a fresh ``message``, but for unknown enum values and numbers out of their field's
    range; raises ``json_format.ParseError``."""
    try:
        _fill_message(message, data)
        return message
    except (FallbackError, OverflowError):
        message.Clear()
        _check_values(data, message.DESCRIPTOR)
        try:
            return json_format.ParseDict(data, message, ignore_unknown_fields=True)
        except OverflowError as exc:  # an integer beyond a double in a Struct (orjson reads none)
            raise json_format.ParseError(f"a number is out of range: {exc}") from None
