"""The ProtoJSON of a stream event as the ``StreamResponse`` that carries it: what
``message_to_dict(to_stream_response(event))`` gives, with the text chunk built directly.

A streamed reply is mostly text chunks (an artifact update of text parts and nothing else);
wrapping each in a ``StreamResponse`` copies it, and the generic walk looks up a printer
per field and per part. Any other shape, or a chunk with anything beyond ids, name, text
parts, ``append`` and ``lastChunk``, takes the generic path. ``tests/unit/test_stream_json.py``
checks both agree, byte for byte once encoded.
"""

from __future__ import annotations

from typing import Any

from a2a.types import Part, TaskArtifactUpdateEvent
from a2a.utils.proto_utils import to_stream_response

from a2a_gateway.protojson import message_to_dict

_TEXT = Part.DESCRIPTOR.fields_by_name["text"]


def stream_response_dict(event: Any) -> dict[str, Any]:
    """``event`` (a Task, Message, status or artifact update) as its StreamResponse's JSON."""
    if type(event) is TaskArtifactUpdateEvent:
        chunk = _text_chunk(event)
        if chunk is not None:
            return {"artifactUpdate": chunk}
    return message_to_dict(to_stream_response(event))


def _text_chunk(event: TaskArtifactUpdateEvent) -> dict[str, Any] | None:
    """The JSON of an artifact update of plain text parts (fields in number order, unset
    ones left out, as ProtoJSON writes them); None for any other."""
    artifact = event.artifact
    if (
        event.HasField("metadata")
        or artifact.HasField("metadata")
        or artifact.extensions
        or artifact.description
    ):
        return None
    parts = []
    for part in artifact.parts:
        fields = part.ListFields()
        if len(fields) != 1 or fields[0][0] is not _TEXT:
            return None
        parts.append({"text": fields[0][1]})
    out: dict[str, Any] = {}
    if event.task_id:
        out["taskId"] = event.task_id
    if event.context_id:
        out["contextId"] = event.context_id
    if event.HasField("artifact"):
        body: dict[str, Any] = {}
        if artifact.artifact_id:
            body["artifactId"] = artifact.artifact_id
        if artifact.name:
            body["name"] = artifact.name
        if parts:
            body["parts"] = parts
        out["artifact"] = body
    if event.append:
        out["append"] = True
    if event.last_chunk:
        out["lastChunk"] = True
    return out
