"""A stream event's JSON (``stream_response_dict``) is json_format's JSON of its StreamResponse,
for the text chunks built directly and for every shape that takes the generic path."""

import orjson
import pytest
from a2a.types import (
    Artifact,
    Message,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.types.a2a_pb2 import ROLE_AGENT, TASK_STATE_WORKING
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict

from a2a_gateway.transport.stream_json import _text_chunk, stream_response_dict


def _chunk(
    *parts: Part, append: bool = True, last_chunk: bool = False, **artifact: object
) -> TaskArtifactUpdateEvent:
    event = TaskArtifactUpdateEvent(
        task_id="t-1", context_id="c-1", append=append, last_chunk=last_chunk
    )
    event.artifact.CopyFrom(Artifact(artifact_id="a-1", name="response", **artifact))
    event.artifact.parts.extend(parts)
    return event


def _with(event: TaskArtifactUpdateEvent, change) -> TaskArtifactUpdateEvent:
    change(event)
    return event


EVENTS = {
    "one text part": _chunk(Part(text="Hello")),
    "many text parts": _chunk(*(Part(text=f" w{i}") for i in range(30))),
    "first chunk (replaces)": _chunk(Part(text="Hi"), append=False),
    "last chunk": _chunk(Part(text="end"), last_chunk=True),
    "empty text": _chunk(Part(text="")),
    "unicode and escapes": _chunk(Part(text='é "q" \\ \n\t \u2028 😀 \x00')),
    "no parts": _chunk(),
    "no ids": TaskArtifactUpdateEvent(artifact=Artifact(parts=[Part(text="x")])),
    "no artifact": TaskArtifactUpdateEvent(task_id="t-1", context_id="c-1", append=True),
    "empty artifact set": _with(
        TaskArtifactUpdateEvent(task_id="t-1"), lambda e: e.artifact.SetInParent()
    ),
    "empty part": _chunk(Part()),
    "part with media type": _chunk(Part(text="x", media_type="text/markdown")),
    "part with filename": _chunk(Part(text="x", filename="a.txt")),
    "part with metadata": _with(
        _chunk(Part(text="x")), lambda e: e.artifact.parts[0].metadata.update({"k": 1})
    ),
    "data part": _with(
        _chunk(Part(text="x"), Part()),
        lambda e: e.artifact.parts[1].data.struct_value.update({"k": [1, "v"]}),
    ),
    "raw part": _chunk(Part(raw=b"\x00\x01", media_type="application/octet-stream")),
    "url part": _chunk(Part(url="https://example.com/f")),
    "event metadata": _with(_chunk(Part(text="x")), lambda e: e.metadata.update({"k": "v"})),
    "artifact metadata": _with(
        _chunk(Part(text="x")), lambda e: e.artifact.metadata.update({"k": "v"})
    ),
    "artifact description": _chunk(Part(text="x"), description="d"),
    "artifact extensions": _chunk(Part(text="x"), extensions=["urn:x"]),
    "status event": _with(
        TaskStatusUpdateEvent(task_id="t-1", context_id="c-1"),
        lambda e: e.status.CopyFrom(TaskStatus(state=TASK_STATE_WORKING)),
    ),
    "task": Task(id="t-1", context_id="c-1", status=TaskStatus(state=TASK_STATE_WORKING)),
    "message": Message(message_id="m-1", role=ROLE_AGENT, parts=[Part(text="hi")]),
}


@pytest.mark.parametrize("name", EVENTS)
def test_equals_json_format_of_the_stream_response_byte_for_byte(name):
    event = EVENTS[name]
    expected = MessageToDict(to_stream_response(event))

    got = stream_response_dict(event)

    assert got == expected
    assert orjson.dumps(got) == orjson.dumps(expected)  # same keys in the same order


BUILT_DIRECTLY = {
    "one text part",
    "many text parts",
    "first chunk (replaces)",
    "last chunk",
    "empty text",
    "unicode and escapes",
    "no parts",
    "no ids",
    "no artifact",
    "empty artifact set",
}


def test_text_chunks_are_built_directly_and_anything_else_is_not():
    chunks = {name for name, event in EVENTS.items()
              if isinstance(event, TaskArtifactUpdateEvent) and _text_chunk(event) is not None}

    assert chunks == BUILT_DIRECTLY
