"""A2A tasks as MCP tool results: artifacts → content blocks, input requests → elicitation
schemas, and the answer of an elicitation → the follow-up A2A message."""

from __future__ import annotations

import base64
from typing import Any

import mcp_types as types
import orjson
from a2a.types import Message, Part, Role, Task, TaskState
from google.protobuf.json_format import MessageToDict

from a2a_gateway.events import new_id

FAILED_STATES = frozenset({
    TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_CANCELED,
})
ASKING_STATES = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
ANSWER = "answer"
"""The one field of an elicitation asked without a schema of the agent's."""


def ids(task: Task) -> dict[str, str]:
    return {"taskId": task.id, "contextId": task.context_id}


def message_text(message: Message) -> str:
    return "".join(part.text for part in message.parts if part.WhichOneof("content") == "text")


def message_data(message: Message) -> dict[str, Any]:
    """The first data part of ``message`` that is an object (empty: none)."""
    for part in message.parts:
        if part.WhichOneof("content") == "data":
            value = MessageToDict(part.data)
            if isinstance(value, dict):
                return value
    return {}


def user_message(
    text: str | None, data: dict[str, Any] | None, task_id: str = "", context_id: str = ""
) -> Message:
    """A user message of ``text`` or of one data part."""
    message = Message(message_id=new_id(), role=Role.ROLE_USER, task_id=task_id,
                      context_id=context_id)
    if data is not None:
        part = Part(media_type="application/json")
        part.data.struct_value.update(data)
        message.parts.append(part)
    else:
        message.parts.append(Part(text=text or ""))
    return message


def _file_block(part: Part) -> types.ContentBlock:
    media_type = part.media_type or "application/octet-stream"
    if part.WhichOneof("content") == "url":
        return types.ResourceLink(
            name=part.filename or part.url, uri=part.url, mime_type=media_type
        )
    blob = base64.b64encode(part.raw).decode()
    if media_type.startswith("image/"):
        return types.ImageContent(data=blob, mime_type=media_type)
    if media_type.startswith("audio/"):
        return types.AudioContent(data=blob, mime_type=media_type)
    uri = f"a2a-artifact:{part.filename or 'file'}"
    if media_type.startswith("text/"):
        try:
            text = part.raw.decode()
        except UnicodeDecodeError:
            pass
        else:
            return types.EmbeddedResource(resource=types.TextResourceContents(
                uri=uri, mime_type=media_type, text=text))
    return types.EmbeddedResource(resource=types.BlobResourceContents(
        uri=uri, mime_type=media_type, blob=blob))


def _blocks(parts: list[Part]) -> tuple[list[types.ContentBlock], list[Any]]:
    """The content blocks of ``parts`` and the values of their data parts."""
    blocks: list[types.ContentBlock] = []
    data: list[Any] = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            blocks.append(types.TextContent(text=part.text))
        elif kind == "data":
            value = MessageToDict(part.data)
            data.append(value)
            blocks.append(types.TextContent(text=orjson.dumps(value).decode()))
        elif kind in ("raw", "url"):
            blocks.append(_file_block(part))
    return blocks, data


def completed_result(task: Task) -> types.CallToolResult:
    """The final artifacts of ``task`` (its status message when it has none)."""
    parts = [part for artifact in task.artifacts for part in artifact.parts]
    if not parts and task.status.HasField("message"):
        parts = list(task.status.message.parts)
    blocks, data = _blocks(parts)
    structured = data[0] if len(data) == 1 and isinstance(data[0], dict) else None
    return types.CallToolResult(
        content=blocks or [types.TextContent(text="")], structured_content=structured,
        _meta=ids(task),
    )


def failed_result(task: Task) -> types.CallToolResult:
    state = TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower()
    reason = message_text(task.status.message) if task.status.HasField("message") else ""
    return error_result(f"the task ended {state}: {reason or 'no reason given'}", task)


def error_result(text: str, task: Task | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)], is_error=True,
        _meta=ids(task) if task is not None else None,
    )


def question(task: Task) -> str:
    message = task.status.message
    return (message_text(message) if task.status.HasField("message") else "") or (
        "The agent needs more input."
    )


def asked_result(task: Task, tool: str) -> types.CallToolResult:
    """What is asked and how to answer, for a client that cannot be elicited."""
    asked = question(task)
    data = message_data(task.status.message) if task.status.HasField("message") else {}
    how = (f"To answer, call the tool {tool!r} again with the answer as 'message' and "
           f"taskId {task.id!r} (contextId {task.context_id!r}).")
    return types.CallToolResult(
        content=[types.TextContent(text=f"{asked}\n\n{how}")],
        structured_content={**ids(task), "state": "input-required", "question": asked,
                            **({"request": data} if data else {})},
        _meta=ids(task),
    )


def elicitation_schema(task: Task) -> tuple[dict[str, Any], bool]:
    """The schema asked for, and whether the answer goes back as a data part (the agent's own
    flat object schema) rather than as text (one ``answer`` field)."""
    data = message_data(task.status.message) if task.status.HasField("message") else {}
    own = data.get("schema")
    if isinstance(own, dict) and own.get("type") == "object" and isinstance(
        own.get("properties"), dict
    ):
        return own, True
    answer: dict[str, Any] = {"type": "string", "title": "Answer"}
    choices = data.get("choices")
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        answer["enum"] = choices
    return {"type": "object", "properties": {ANSWER: answer}, "required": [ANSWER]}, False


def schema_problem(schema: dict[str, Any], content: dict[str, Any] | None) -> str | None:
    """Why ``content`` does not match ``schema`` (None: it does)."""
    import jsonschema

    try:
        jsonschema.validate(content if content is not None else {}, schema)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path)
        return f"{where + ': ' if where else ''}{exc.message}"
    return None
