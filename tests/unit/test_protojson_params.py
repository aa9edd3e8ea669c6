"""The direct reader of SendMessage and GetTask params agrees with the general path and with
protobuf's json_format, on generated valid requests and on the same requests broken; its
REQUIRED-field check gives the walk's outcome; and which path each request takes."""

from __future__ import annotations

import base64
import copy
import math
import re
from collections import Counter
from typing import Any
from unittest import mock

import pytest
from a2a.types import GetTaskRequest, ListTasksRequest, SendMessageRequest
from a2a.utils.errors import InvalidParamsError
from google.api.field_behavior_pb2 import REQUIRED, field_behavior
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from a2a_gateway.protojson import parse_dict
from a2a_gateway.transport import params
from a2a_gateway.transport.params import parse_params, read_params
from a2a_gateway.transport.required_fields import validate_required_fields
from tests.support.examples import examples

INT32 = (-(2**31), 2**31 - 1)

# --- valid params ---------------------------------------------------------------------

# Values come from short lists, and each object's keys and values are one drawn integer: the
# reader copies strings and JSON values as they are, so the requests' shapes matter more than
# their contents, and a draw per key and character makes 10,000 examples take minutes.
TEXTS = ["", "a", "task-1", 'quote " back \\ slash / nl \n', "\u00e9\u4e2d\U0001f600", "\x00\x7f"]
JSON_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**53 + 1, -(2**63), 2**64 - 1, 0.5, -1e300, 5e-324, *TEXTS,
    [], [1, "two", None], [[{}]], {}, {"k": "v"}, {"n": {"m": [True, 1.5, None]}}, {"": []},
]
OBJECTS = [v for v in JSON_VALUES if isinstance(v, dict)] + [{"a": 1, "b": [None, {"c": "d"}]}]
LISTS_OF_TEXTS = [[], ["urn:a"], ["text/plain", "application/json", ""]]
INT32_VALUES = [0, 1, 7, *INT32]
RAWS = [base64.b64encode(b).decode() for b in (b"", b"a", b"ab", b"abc", b"\xfb\xff\xbf")]
URLS = ["https://example.com/a.png", "http://h/x", "file:///f", ""]
ROLES = ["ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED", 0, 1, 2]
AUTHENTICATIONS = [{}, {"scheme": "Bearer"}, {"scheme": "Basic", "credentials": "dXNlcg=="}]


def objects(
    required: dict[str, list[Any]], optional: dict[str, list[Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    """JSON objects with each ``required`` key and any of the ``optional`` ones, each key's
    value one of its list (every combination, drawn as one integer; 0 is the first values)."""
    choices = [(key, values, False) for key, values in required.items()]
    choices += [(key, values, True) for key, values in optional.items()]
    sizes = [len(values) + absent for _, values, absent in choices]

    def build(number: int) -> dict[str, Any]:
        built = {}
        for (key, values, absent), size in zip(choices, sizes, strict=True):
            number, index = divmod(number, size)
            if not (absent and index == 0):
                built[key] = copy.deepcopy(values[index - absent])  # the edits below change it
        return built

    return st.integers(0, math.prod(sizes) - 1).map(build)


PART_EXTRAS = {"metadata": OBJECTS, "filename": TEXTS, "mediaType": ["text/plain", "", "a/b"]}
parts = st.one_of(
    objects({"text": TEXTS}, PART_EXTRAS),
    objects({"raw": RAWS}, PART_EXTRAS),
    objects({"url": URLS}, PART_EXTRAS),
    objects({"data": JSON_VALUES}, PART_EXTRAS),
)
messages = st.tuples(
    objects(
        {"messageId": TEXTS, "role": ROLES},
        {
            "contextId": TEXTS, "taskId": TEXTS, "metadata": OBJECTS,
            "extensions": LISTS_OF_TEXTS, "referenceTaskIds": LISTS_OF_TEXTS,
        },
    ),
    st.lists(parts, min_size=1, max_size=4),
).map(lambda pair: {**pair[0], "parts": pair[1]})
push_configs = objects(
    {"url": URLS},
    {
        "id": TEXTS, "taskId": TEXTS, "token": TEXTS, "tenant": TEXTS,
        "authentication": AUTHENTICATIONS,
    },
)
configurations = st.tuples(
    objects(
        {},
        {
            "acceptedOutputModes": LISTS_OF_TEXTS, "historyLength": INT32_VALUES,
            "returnImmediately": [False, True],
        },
    ),
    st.one_of(st.just({}), push_configs.map(lambda c: {"taskPushNotificationConfig": c})),
).map(lambda pair: {**pair[0], **pair[1]})
send_params = st.tuples(
    messages,
    st.one_of(st.just({}), configurations.map(lambda c: {"configuration": c})),
    objects({}, {"metadata": OBJECTS, "tenant": TEXTS}),
).map(lambda parts: {"message": parts[0], **parts[1], **parts[2]})
get_params = objects({"id": TEXTS}, {"historyLength": INT32_VALUES, "tenant": TEXTS})

# --- the same, broken -------------------------------------------------------------------


def _keys_of(descriptor: Any, found: set[str]) -> set[str]:
    for field in descriptor.fields:
        found.update((field.name, field.json_name))
        if field.message_type is not None and not field.message_type.full_name.startswith(
            "google.protobuf."
        ):
            _keys_of(field.message_type, found)
    return found


# every field by both its names, an unknown one, an extension and Any's type key
KEYS = sorted(_keys_of(SendMessageRequest.DESCRIPTOR, set()) | {"unknownField", "[a.b]", "@type"})
ODD_VALUES = [
    None, True, False, 0, -1, 1, 2, 7, 1.5, 2.0, 2**31, -(2**31) - 1, 2**63, "", "x", "1", "1e3",
    "ROLE_USER", "ROLE_AGENT", "ROLE_BOGUS", "aGVsbG8=", "aGVsbG8", "aGVs bG8=", "%%%", "-_-_",
    [], [None], ["x"], [1], [{}], [{"text": "a"}], {}, {"text": "a"}, {"text": "a", "url": "b"},
]
EDIT_VALUES = ODD_VALUES + JSON_VALUES


def _objects(value: Any) -> list[Any]:
    """The request's messages in ``value``, ``value`` first (not the objects inside metadata
    or data: editing those changes the JSON, rarely the outcome)."""
    found = []
    if isinstance(value, dict):
        found.append(value)
        for key, item in value.items():
            if key not in ("metadata", "data"):
                found += _objects(item)
    elif isinstance(value, list):
        for item in value:
            found += _objects(item)
    return found


def edited(data: dict[str, Any], edits: list[int]) -> dict[str, Any]:
    """``data`` with an edit per number, in one of its messages: a field removed, or a field
    set (one it has, or any) to an odd value: of another type, out of range, a second oneof
    member, a field unknown or by its proto name (one number per edit keeps it quick)."""
    for number in edits:
        found = _objects(data)
        number, index = divmod(number, len(found))
        target = found[index]
        number, action = divmod(number, 3)
        keys = sorted(target) if target and action < 2 else sorted(target) + KEYS
        number, index = divmod(number, len(keys))
        if action == 0 and target:
            del target[keys[index]]
        else:
            target[keys[index]] = copy.deepcopy(EDIT_VALUES[number % len(EDIT_VALUES)])
    return data


def broken(valid: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    edits = st.lists(st.integers(0, 2**48), min_size=1, max_size=3)
    return st.tuples(valid, edits).map(lambda pair: edited(*pair))


requests = st.one_of(
    st.tuples(st.just(SendMessageRequest), send_params),
    st.tuples(st.just(GetTaskRequest), get_params),
    st.tuples(st.just(SendMessageRequest), broken(send_params)),
    st.tuples(st.just(GetTaskRequest), broken(get_params)),
)

# --- the comparison ---------------------------------------------------------------------


def outcome(parse: Any, model: type, data: Any) -> tuple[str, Any]:
    """("ok", the message), ("error", the ParseError's text) or ("missing", the
    InvalidParamsError's message and data)."""
    try:
        return "ok", parse(data, model())
    except json_format.ParseError as exc:
        return "error", str(exc)
    except InvalidParamsError as exc:
        return "missing", (exc.message, exc.data)


def checked_as_before(data: Any, message: Any) -> Any:
    """What JSON-RPC did before ``read_params``: the general parse, then every REQUIRED field."""
    parse_dict(data, message)
    validate_required_fields(message)
    return message


def json_format_parse(data: Any, message: Any) -> Any:
    try:
        return json_format.ParseDict(data, message, ignore_unknown_fields=True)
    except (ValueError, OverflowError) as exc:  # what it lets out (ParseError is a ValueError)
        if isinstance(exc, json_format.ParseError):
            raise
        raise json_format.ParseError(f"json_format let out {exc!r}") from None


# parse_dict's own errors, where json_format would store another value or let out a bare
# ValueError (protojson's docstring): an unknown enum value, a number its field cannot hold
STRICTER = re.compile(r"expected one of |must be between |a number is out of range")


def test_the_reader_agrees_with_the_general_path_and_with_json_format():
    general_calls: list[int] = []
    seen: Counter[tuple[str, str]] = Counter()  # (which path, which outcome)

    def general(data: Any, message: Any) -> Any:
        general_calls.append(1)
        return parse_dict(data, message)

    @settings(max_examples=examples(10_000), derandomize=True, database=None, deadline=None)
    @given(request=requests)
    def agrees(request: tuple[type, Any]) -> None:
        model, data = request
        general_calls.clear()
        ours = outcome(parse_params, model, data)
        seen["general" if general_calls else "direct", ours[0]] += 1
        assert ours == outcome(parse_dict, model, data)  # the same message or error text
        assert outcome(read_params, model, data) == outcome(checked_as_before, model, data)
        expected = outcome(json_format_parse, model, data)
        if ours != expected:
            assert ours[0] == "error" and STRICTER.search(ours[1]), (data, ours, expected)

    with mock.patch.object(params, "parse_dict", general):
        agrees()
    # the direct reader only ever succeeds; both paths and both outcomes are well exercised
    assert set(seen) == {("direct", "ok"), ("general", "ok"), ("general", "error")}, seen
    assert min(seen.values()) > examples(10_000) // 20, seen


# --- which path runs --------------------------------------------------------------------

DIRECT = [
    (SendMessageRequest, {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [
        {"text": "hello"}]}}),
    (SendMessageRequest, {
        "message": {
            "messageId": "m", "role": 2, "contextId": "c", "taskId": "t",
            "parts": [
                {"text": "a", "metadata": {"k": [1, None]}},
                {"raw": "aGVsbG8=", "filename": "f", "mediaType": "text/plain"},
                {"url": "https://x/y"}, {"data": {"n": 1.5}},
            ],
            "metadata": {"m": True}, "extensions": ["urn:e"], "referenceTaskIds": ["t0"],
            "someFutureField": 1,
        },
        "configuration": {
            "acceptedOutputModes": ["text/plain"], "historyLength": 0, "returnImmediately": True,
            "taskPushNotificationConfig": {"url": "https://h", "authentication": {"scheme": "B"}},
        },
        "metadata": {},
    }),
    (GetTaskRequest, {"id": "t", "historyLength": 10}),
    (GetTaskRequest, {}),
]
GENERAL = [
    (SendMessageRequest, {"message": {"message_id": "m"}}),  # a proto name
    (SendMessageRequest, {"message": {"taskId": None}}),
    (SendMessageRequest, {"message": {"parts": [{"raw": "aGVsbG8"}]}}),  # unpadded base64
    (SendMessageRequest, {"message": {"parts": [{"text": "a", "url": "b"}]}}),
    (SendMessageRequest, {"message": {"role": "user"}}),
    (SendMessageRequest, {"configuration": {"historyLength": "3"}}),
    (SendMessageRequest, {"configuration": {"historyLength": 2**31}}),
    (SendMessageRequest, {"[ext]": 1}),
    (GetTaskRequest, {"historyLength": 1.0}),
    (GetTaskRequest, []),
    (ListTasksRequest, {"pageSize": 10}),  # not a method the reader knows
]


@pytest.mark.parametrize(("model", "data"), DIRECT + GENERAL)
def test_plain_requests_of_the_hot_methods_are_read_directly_and_others_by_the_general_path(
    model, data
):
    with mock.patch.object(params, "parse_dict", wraps=params.parse_dict) as general:
        ours = outcome(parse_params, model, data)
    assert general.called == ((model, data) in GENERAL)
    assert ours == outcome(parse_dict, model, data)


def required_fields(descriptor: Any, prefix: str = "") -> set[str]:
    """The paths of the fields the A2A proto marks REQUIRED, in ``descriptor`` and below."""
    found = set()
    for field in descriptor.fields:
        if REQUIRED in field.GetOptions().Extensions[field_behavior]:
            found.add(prefix + field.name)
        if field.message_type is not None and not field.message_type.full_name.startswith(
            "google.protobuf."
        ):
            found |= required_fields(field.message_type, f"{prefix}{field.name}.")
    return found


def test_the_required_fields_read_params_checks_are_those_of_the_proto():
    # read_params checks these by hand (_send_message_has_required); a new one needs a line there
    assert required_fields(SendMessageRequest.DESCRIPTOR) == {
        "message", "message.message_id", "message.role", "message.parts",
        "configuration.task_push_notification_config.url",
        "configuration.task_push_notification_config.authentication.scheme",
    }
    assert required_fields(GetTaskRequest.DESCRIPTOR) == {"id"}


MISSING = [
    (SendMessageRequest, {}),
    (SendMessageRequest, {"message": {"role": "ROLE_USER", "parts": [{"text": "a"}]}}),
    (SendMessageRequest, {"message": {"messageId": "m", "parts": [{"text": "a"}]}}),
    (SendMessageRequest, {"message": {"messageId": "m", "role": 1, "parts": []}}),
    (SendMessageRequest, {
        "message": {"messageId": "m", "role": 1, "parts": [{}]},
        "configuration": {"taskPushNotificationConfig": {"authentication": {"scheme": "B"}}},
    }),
    (SendMessageRequest, {
        "message": {"messageId": "m", "role": 1, "parts": [{}]},
        "configuration": {"taskPushNotificationConfig": {"url": "u", "authentication": {}}},
    }),
    (GetTaskRequest, {"historyLength": 1}),
]


COMPLETE = [(model, data) for model, data in DIRECT if data]  # ({} lacks the task id)


@pytest.mark.parametrize(("model", "data"), COMPLETE + MISSING)
def test_the_required_field_walk_runs_only_when_a_field_may_be_missing(model, data):
    with mock.patch.object(
        params, "validate_required_fields", wraps=validate_required_fields
    ) as walk:
        ours = outcome(read_params, model, data)
    assert walk.called == ((model, data) in MISSING)
    assert ours == outcome(checked_as_before, model, data)
    assert ours[0] == ("missing" if walk.called else "ok")
