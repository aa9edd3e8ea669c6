"""The fast ProtoJSON converters agree with protobuf's json_format, results and errors alike."""

from __future__ import annotations

import copy
import itertools
import math
import struct
from dataclasses import dataclass
from typing import Any

import pytest
from a2a.types import (
    AgentCard,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
)
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import given, settings
from hypothesis import strategies as st

from a2a_gateway.protojson import message_to_dict, parse_dict
from tests.support.examples import examples

MESSAGE = {
    "messageId": "m1",
    "contextId": "c1",
    "taskId": "t1",
    "role": "ROLE_USER",
    "parts": [
        {"text": "hello", "metadata": {"a": 1, "b": [True, None, "x", {"n": 2.5}]}},
        {
            "data": {"choice": "once", "nested": {"list": [1, 2, {"k": None}]}},
            "mediaType": "application/json",
        },
        {"raw": "aGVsbG8=", "filename": "f.txt", "mediaType": "text/plain"},
        {"url": "https://example.com/x", "filename": "x"},
        {"data": [1, "two", None]},
        {"data": "just a string"},
    ],
    "metadata": {"k": "v"},
    "extensions": ["urn:x"],
    "referenceTaskIds": ["t0"],
}

TASK = {
    "id": "t1",
    "contextId": "c1",
    "status": {
        "state": "TASK_STATE_WORKING",
        "timestamp": "2026-11-30T08:41:13.240547Z",
        "message": {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": "working"}]},
    },
    "artifacts": [
        {
            "artifactId": "a1",
            "name": "response",
            "parts": [{"text": "hi"}],
            "metadata": {"usage": {"input_tokens": 3}},
        }
    ],
    "history": [MESSAGE],
    "metadata": {},
}

PARSE_CASES = [
    (SendMessageRequest, {"message": MESSAGE}),
    (
        SendMessageRequest,
        {
            "message": MESSAGE,
            "configuration": {
                "historyLength": 3,
                "returnImmediately": True,
                "acceptedOutputModes": ["text/plain"],
                "taskPushNotificationConfig": {
                    "url": "https://h",
                    "authentication": {"scheme": "Bearer", "credentials": "c"},
                },
            },
        },
    ),
    (
        SendMessageRequest,
        {
            "message": {"message_id": "snake", "role": 1, "parts": [{"text": ""}]},
            "unknownField": {"x": 1},
        },
    ),
    (SendMessageRequest, {}),
    (SendMessageRequest, {"message": {}}),
    (SendMessageRequest, {"message": {"onlyUnknownFields": 1}}),  # the message is present
    (
        ListTasksRequest,
        {
            "contextId": "c",
            "status": "TASK_STATE_COMPLETED",
            "pageSize": 10,
            "statusTimestampAfter": "2026-01-01T00:00:00Z",
            "includeArtifacts": False,
        },
    ),
    (ListTasksRequest, {"pageSize": "10"}),
    (Task, TASK),
    (TaskPushNotificationConfig, {"taskId": "t", "id": "c", "url": "https://x", "token": "tok"}),
]

BAD_CASES = [
    (SendMessageRequest, {"message": {"parts": "not a list"}}),
    (SendMessageRequest, {"message": {"parts": [{"text": "a", "url": "b"}]}}),
    (SendMessageRequest, {"message": {"parts": [{"raw": "%%%"}]}}),
    (SendMessageRequest, {"message": {"messageId": 5}}),
    (SendMessageRequest, {"configuration": {"historyLength": "x"}}),
    (SendMessageRequest, {"configuration": {"historyLength": 1.5}}),
    (ListTasksRequest, {"statusTimestampAfter": "yesterday"}),
    (SendMessageRequest, {"message": None}),
    (SendMessageRequest, []),
]


@pytest.mark.parametrize(("model", "data"), PARSE_CASES)
def test_parse_matches_json_format(model, data):
    expected = json_format.ParseDict(copy.deepcopy(data), model(), ignore_unknown_fields=True)
    assert parse_dict(copy.deepcopy(data), model()) == expected


def outcome(parse, model, data):
    try:
        return "ok", parse(copy.deepcopy(data), model())
    except json_format.ParseError as exc:
        return "error", str(exc)


@pytest.mark.parametrize(("model", "data"), BAD_CASES)
def test_odd_input_has_the_json_format_outcome(model, data):
    expected = outcome(
        lambda d, m: json_format.ParseDict(d, m, ignore_unknown_fields=True), model, data
    )
    assert outcome(parse_dict, model, data) == expected


@pytest.mark.parametrize("data", [
    {"message": {"role": "ROLE_NOPE"}},
    {"message": {"role": 9}},
    {"message": {"taskId": None, "role": "user"}},  # a null makes the fast path fall back
    # json_format would take these as ROLE_USER (a number beyond int32 wraps, 1.5 is truncated)
    {"message": {"role": 9007199254740993}},
    {"message": {"role": "9007199254740993"}},
    {"message": {"role": 1.5}},
    {"message": {"role": 2**32}},  # json_format: ROLE_UNSPECIFIED
])
def test_unknown_enum_value_is_an_error_naming_the_valid_ones(data):
    # json_format (ignore_unknown_fields) would drop it, and the role would seem missing
    with pytest.raises(
        json_format.ParseError, match=r"for message\.role: expected one of ROLE_USER, ROLE_AGENT"
    ):
        parse_dict(copy.deepcopy(data), SendMessageRequest())


@pytest.mark.parametrize(
    ("model", "data"),
    [
        c
        for c in PARSE_CASES
        if c[0] is not ListTasksRequest
        or "pageSize" not in c[1]
        or isinstance(c[1]["pageSize"], int)
    ],
)
def test_print_matches_json_format(model, data):
    message = json_format.ParseDict(copy.deepcopy(data), model(), ignore_unknown_fields=True)
    assert message_to_dict(message) == json_format.MessageToDict(message)


def test_print_stream_responses_list_responses_and_cards():
    task = json_format.ParseDict(TASK, Task())
    for message in (
        StreamResponse(task=task),
        StreamResponse(status_update={"task_id": "t", "context_id": "c", "status": task.status}),
        StreamResponse(
            artifact_update={
                "task_id": "t",
                "artifact": task.artifacts[0],
                "append": True,
                "last_chunk": False,
            }
        ),
        ListTasksResponse(tasks=[task, task], next_page_token="n", page_size=2, total_size=9),
        AgentCard(
            name="a",
            version="1",
            capabilities={"streaming": True, "extensions": [{"uri": "u", "required": True}]},
            supported_interfaces=[
                {"url": "http://x", "protocol_binding": "JSONRPC", "protocol_version": "1.0"}
            ],
        ),
    ):
        assert message_to_dict(message) == json_format.MessageToDict(message)


@pytest.mark.parametrize(
    "seconds", [-62135596800, -1, 0, 59, 86399, 951782400, 1796150847, 253402300799]
)
@pytest.mark.parametrize("nanos", [0, 1, 999, 1000, 120_000, 240_547_000, 5_000_000, 999_999_999])
def test_timestamps_print_as_protobuf_prints_them(seconds, nanos):
    task = Task(id="t")
    task.status.timestamp.seconds, task.status.timestamp.nanos = seconds, nanos
    assert message_to_dict(task) == json_format.MessageToDict(task)
    assert message_to_dict(task)["status"]["timestamp"] == task.status.timestamp.ToJsonString()


@pytest.mark.parametrize(
    ("seconds", "nanos"), [(-62135596801, 0), (253402300800, 0), (0, -1), (0, 1_000_000_000)]
)
def test_a_timestamp_out_of_range_is_protobufs_error(seconds, nanos):
    task = Task(id="t")
    task.status.timestamp.seconds, task.status.timestamp.nanos = seconds, nanos
    with pytest.raises(ValueError) as ours:
        message_to_dict(task)
    with pytest.raises(ValueError) as theirs:
        task.status.timestamp.ToJsonString()
    assert str(ours.value) == str(theirs.value)


# --- numbers a field cannot hold -------------------------------------------------------------

FDP = descriptor_pb2.FieldDescriptorProto
NUMERIC_KINDS = ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
                 "sfixed32", "sfixed64", "float", "double", "enum")


def message_with_every_numeric_kind() -> type:
    """A proto3 message with a field and a repeated field of each numeric kind: the A2A
    types have only int32, int64 and enums, the parser is written for all of them."""
    file = descriptor_pb2.FileDescriptorProto(
        name="numbers_test.proto", package="numbers_test", syntax="proto3"
    )
    color = file.enum_type.add(name="Color")
    for number, name in enumerate(("COLOR_UNSPECIFIED", "COLOR_RED", "COLOR_BLUE")):
        color.value.add(name=name, number=number)
    numbers = file.message_type.add(name="Numbers")
    for number, (kind, repeated) in enumerate(
        itertools.product(NUMERIC_KINDS, (False, True)), start=1
    ):
        field = numbers.field.add(
            name=f"many_{kind}" if repeated else kind,
            number=number,
            type=getattr(FDP, f"TYPE_{kind.upper()}"),
            label=FDP.LABEL_REPEATED if repeated else FDP.LABEL_OPTIONAL,
        )
        if kind == "enum":
            field.type_name = ".numbers_test.Color"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("numbers_test.Numbers"))


Numbers = message_with_every_numeric_kind()


@dataclass(frozen=True)
class Target:
    """A numeric field of ``model`` at the JSON path ``path`` (dotted JSON names)."""

    model: type
    path: str

    @property
    def field(self) -> FieldDescriptor:
        descriptor: Descriptor = self.model.DESCRIPTOR
        *parents, last = self.path.split(".")
        for name in parents:
            descriptor = next(f for f in descriptor.fields if f.json_name == name).message_type
        return next(f for f in descriptor.fields if f.json_name == last)

    def data(self, value: Any) -> dict[str, Any]:
        """A JSON object that sets the field to ``value`` (a list of it when repeated)."""
        data: Any = [value] if self.field.is_repeated else value
        for name in reversed(self.path.split(".")):
            data = {name: data}
        return data

    def __repr__(self) -> str:
        return f"{self.model.__name__}.{self.path}"


TARGETS = [
    Target(Numbers, Numbers.DESCRIPTOR.fields_by_name[name].json_name)
    for name in (f"{prefix}{kind}" for kind in NUMERIC_KINDS for prefix in ("", "many_"))
] + [
    Target(SendMessageRequest, "message.role"),
    Target(SendMessageRequest, "configuration.historyLength"),
    Target(ListTasksRequest, "status"),
    Target(ListTasksRequest, "pageSize"),
    Target(GetTaskRequest, "historyLength"),
    Target(Task, "status.state"),
]

# the ranges as the protobuf language guide states them, by declared type
T = FieldDescriptor
INT_RANGES = {
    **dict.fromkeys((T.TYPE_INT32, T.TYPE_SINT32, T.TYPE_SFIXED32), (-(2**31), 2**31 - 1)),
    **dict.fromkeys((T.TYPE_UINT32, T.TYPE_FIXED32), (0, 2**32 - 1)),
    **dict.fromkeys((T.TYPE_INT64, T.TYPE_SINT64, T.TYPE_SFIXED64), (-(2**63), 2**63 - 1)),
    **dict.fromkeys((T.TYPE_UINT64, T.TYPE_FIXED64), (0, 2**64 - 1)),
}
FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]
PROTOJSON_WORDS = ("NaN", "Infinity", "-Infinity")  # the strings ProtoJSON allows a float or double


def exact_number(value: int | float | str) -> int | float:
    """What a JSON number or numeric string stands for: an integer literal exactly, anything
    else (a fraction, an exponent) as the double nearest to it; NaN for a word."""
    if isinstance(value, str):
        if value in PROTOJSON_WORDS or not value.lstrip("-")[:1].isdigit():
            return math.nan
        try:
            return int(value)
        except ValueError:
            return float(value)
    return value


def integer(value: int | float | str) -> int | None:
    """The integer a JSON number or numeric string stands for, None if it is not one."""
    number = exact_number(value)
    if isinstance(number, int):
        return number
    return int(number) if number.is_integer() else None


def fits(field: FieldDescriptor, value: int | float | str) -> bool:
    """Whether ProtoJSON lets ``value`` set ``field``, stated without either parser."""
    if field.type in INT_RANGES:
        low, high = INT_RANGES[field.type]
        return (number := integer(value)) is not None and low <= number <= high
    if field.type == T.TYPE_ENUM:
        if isinstance(value, str) and value in field.enum_type.values_by_name:
            return True
        if isinstance(value, str) and not value.lstrip("-").isdigit():
            return False  # a number in a string must be an integer literal
        return integer(value) in {v.number for v in field.enum_type.values}
    if value in PROTOJSON_WORDS:
        return True
    try:
        number = float(exact_number(value))  # a JSON number cannot be NaN or infinite
    except OverflowError:
        return False
    return math.isfinite(number) and abs(number) <= (
        FLOAT32_MAX if field.type == T.TYPE_FLOAT else math.inf
    )


def near(bound: int) -> st.SearchStrategy[int]:
    return st.integers(-2, 2).map(lambda delta: bound + delta)


BOUNDS = [0, 1, 2**31, 2**32, 2**53, 2**63, 2**64, 2**128, 2**1024]
integers = st.one_of(
    st.sampled_from(BOUNDS).flatmap(near), st.sampled_from(BOUNDS).flatmap(near).map(lambda n: -n),
    st.integers(-3, 5), st.integers(),
)
floats = st.one_of(
    integers.filter(lambda n: abs(n) < 2**1000).map(float), st.floats(),
    st.sampled_from([1.5, -0.5, 1e-50, FLOAT32_MAX, 3.4028235e38, 1e39, 1.7976931348623157e308]),
)
json_numbers = st.one_of(integers, floats)
# a number as a JSON string: its decimal or shortest float form, or a ProtoJSON word
numeric_strings = st.one_of(
    integers.map(str), floats.filter(math.isfinite).map(repr), st.sampled_from(PROTOJSON_WORDS),
    st.sampled_from(["1e39", "-1e39", "1e400", "1e3", "2147483648.0"]),
)


def parsed(parse: Any, target: Target, value: Any) -> tuple[str, Any]:
    """("ok", the message's bytes) or ("error", ParseError's text); NaN makes messages unequal."""
    try:
        message = parse(target.data(value), target.model())
    except json_format.ParseError as exc:
        return "error", str(exc)
    return "ok", message.SerializeToString(deterministic=True)


def json_format_parse(data: Any, message: Any) -> Any:
    try:
        return json_format.ParseDict(data, message, ignore_unknown_fields=True)
    except (ValueError, OverflowError) as exc:  # what it lets out (ParseError is a ValueError)
        if isinstance(exc, json_format.ParseError):
            raise
        raise json_format.ParseError(f"json_format let out {exc!r}") from None


def check(target: Target, value: Any) -> bool:
    """A number that fits ``target`` is taken as json_format takes it; one that does not is a
    ParseError naming the field (nothing else may leave ``parse_dict``). Whether it fit."""
    ours = parsed(parse_dict, target, value)
    if fits(target.field, value):
        assert ours[0] == "ok", (value, ours)
        assert ours == parsed(json_format_parse, target, value), value
        return True
    assert ours[0] == "error", value
    assert target.field.json_name in ours[1], (value, ours)
    return False


EDGES: list[Any] = [
    *(n for bound in (2**31, 2**32, 2**63, 2**64) for n in (bound - 1, bound, -bound, -bound - 1)),
    -1,
    0,
    1,
    2**53 + 1,
    2**128,
    2**1024,
    1.0,
    1.5,
    1e19,
    1e39,
    1e300,
    FLOAT32_MAX,
    math.nan,
    math.inf,
]
EDGES += [str(n) for n in EDGES if isinstance(n, int)] + [
    "1.5",
    "1e3",
    "1e39",
    "-1e39",
    "1e400",
    *PROTOJSON_WORDS,
    "COLOR_RED",
    "ROLE_USER",
    "TASK_STATE_WORKING",
]


@pytest.mark.parametrize("target", TARGETS, ids=repr)
def test_the_edges_of_each_kind_as_numbers_and_strings(target):
    taken = {(type(v) is str, check(target, v)) for v in EDGES}
    assert taken == {(False, True), (False, False), (True, True), (True, False)}  # each case is met


@pytest.mark.parametrize("target", TARGETS, ids=repr)
@settings(max_examples=examples(100), derandomize=True, database=None, deadline=None)
@given(value=st.one_of(json_numbers, numeric_strings))
def test_a_number_that_fits_is_json_formats_and_one_that_does_not_is_an_error_naming_the_field(
    target, value
):
    check(target, value)


def test_every_numeric_kind_is_a_target():
    kinds = {t.field.type for t in TARGETS}
    assert kinds >= {*INT_RANGES, T.TYPE_FLOAT, T.TYPE_DOUBLE, T.TYPE_ENUM}
    assert {t.field.is_repeated for t in TARGETS} == {True, False}


@pytest.mark.parametrize("where", ["metadata", "parts"])
def test_an_integer_beyond_a_double_in_a_struct_is_a_parse_error(where):
    # orjson reads no such number; a caller passing Python data may
    message = (
        {"metadata": {"n": 10**400}} if where == "metadata" else {"parts": [{"data": [10**400]}]}
    )
    with pytest.raises(json_format.ParseError, match="out of range"):
        parse_dict({"message": message}, SendMessageRequest())
