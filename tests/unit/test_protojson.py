"""The fast ProtoJSON converters agree with protobuf's json_format, results and errors alike."""

from __future__ import annotations

import copy

import pytest
from a2a.types import (
    AgentCard,
    ListTasksRequest,
    ListTasksResponse,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
)
from google.protobuf import json_format

from a2a_gateway.protojson import message_to_dict, parse_dict

MESSAGE = {
    "messageId": "m1", "contextId": "c1", "taskId": "t1", "role": "ROLE_USER",
    "parts": [
        {"text": "hello", "metadata": {"a": 1, "b": [True, None, "x", {"n": 2.5}]}},
        {"data": {"choice": "once", "nested": {"list": [1, 2, {"k": None}]}}, "mediaType": "application/json"},
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
    "id": "t1", "contextId": "c1",
    "status": {"state": "TASK_STATE_WORKING", "timestamp": "2026-11-30T08:41:13.240547Z",
               "message": {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": "working"}]}},
    "artifacts": [{"artifactId": "a1", "name": "response", "parts": [{"text": "hi"}], "metadata": {"usage": {"input_tokens": 3}}}],
    "history": [MESSAGE],
    "metadata": {},
}

PARSE_CASES = [
    (SendMessageRequest, {"message": MESSAGE}),
    (SendMessageRequest, {"message": MESSAGE, "configuration": {"historyLength": 3, "returnImmediately": True,
                          "acceptedOutputModes": ["text/plain"],
                          "taskPushNotificationConfig": {"url": "https://h", "authentication": {"scheme": "Bearer", "credentials": "c"}}}}),
    (SendMessageRequest, {"message": {"message_id": "snake", "role": 1, "parts": [{"text": ""}]}, "unknownField": {"x": 1}}),
    (SendMessageRequest, {}),
    (SendMessageRequest, {"message": {}}),
    (ListTasksRequest, {"contextId": "c", "status": "TASK_STATE_COMPLETED", "pageSize": 10,
                        "statusTimestampAfter": "2026-01-01T00:00:00Z", "includeArtifacts": False}),
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
    expected = outcome(lambda d, m: json_format.ParseDict(d, m, ignore_unknown_fields=True), model, data)
    assert outcome(parse_dict, model, data) == expected


@pytest.mark.parametrize("data", [
    {"message": {"role": "ROLE_NOPE"}},
    {"message": {"role": 9}},
    {"message": {"taskId": None, "role": "user"}},  # a null makes the fast path fall back
])
def test_unknown_enum_value_is_an_error_naming_the_valid_ones(data):
    # json_format (ignore_unknown_fields) would drop it, and the role would seem missing
    with pytest.raises(json_format.ParseError, match=r"for message\.role: expected one of ROLE_USER, ROLE_AGENT"):
        parse_dict(copy.deepcopy(data), SendMessageRequest())


@pytest.mark.parametrize(("model", "data"), [c for c in PARSE_CASES if c[0] is not ListTasksRequest or "pageSize" not in c[1] or isinstance(c[1]["pageSize"], int)])
def test_print_matches_json_format(model, data):
    message = json_format.ParseDict(copy.deepcopy(data), model(), ignore_unknown_fields=True)
    assert message_to_dict(message) == json_format.MessageToDict(message)


def test_print_stream_responses_list_responses_and_cards():
    task = json_format.ParseDict(TASK, Task())
    for message in (
        StreamResponse(task=task),
        StreamResponse(status_update={"task_id": "t", "context_id": "c", "status": task.status}),
        StreamResponse(artifact_update={"task_id": "t", "artifact": task.artifacts[0], "append": True, "last_chunk": False}),
        ListTasksResponse(tasks=[task, task], next_page_token="n", page_size=2, total_size=9),
        AgentCard(name="a", version="1", capabilities={"streaming": True, "extensions": [{"uri": "u", "required": True}]},
                  supported_interfaces=[{"url": "http://x", "protocol_binding": "JSONRPC", "protocol_version": "1.0"}]),
    ):
        assert message_to_dict(message) == json_format.MessageToDict(message)


@pytest.mark.parametrize("seconds", [-62135596800, -1, 0, 59, 86399, 951782400, 1796150847, 253402300799])
@pytest.mark.parametrize("nanos", [0, 1, 999, 1000, 120_000, 240_547_000, 5_000_000, 999_999_999])
def test_timestamps_print_as_protobuf_prints_them(seconds, nanos):
    task = Task(id="t")
    task.status.timestamp.seconds, task.status.timestamp.nanos = seconds, nanos
    assert message_to_dict(task) == json_format.MessageToDict(task)
    assert message_to_dict(task)["status"]["timestamp"] == task.status.timestamp.ToJsonString()


@pytest.mark.parametrize(("seconds", "nanos"), [(-62135596801, 0), (253402300800, 0), (0, -1), (0, 1_000_000_000)])
def test_a_timestamp_out_of_range_is_protobufs_error(seconds, nanos):
    task = Task(id="t")
    task.status.timestamp.seconds, task.status.timestamp.nanos = seconds, nanos
    with pytest.raises(ValueError) as ours:
        message_to_dict(task)
    with pytest.raises(ValueError) as theirs:
        task.status.timestamp.ToJsonString()
    assert str(ours.value) == str(theirs.value)
