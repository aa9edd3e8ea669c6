"""A2A 1.1 task generations (spec ``dev-1.1``, § 3.2.7): the fields, their wire forms and the
error of a failed precondition.

A task's ``generation`` starts at 1 and rises by exactly 1 with every event the task emits:
a state change, an artifact added or updated (each streamed text chunk), and — the
gateway's reading where the draft is silent — a status update in the same state (a progress
note), since the draft also forbids two events with one generation. Each status and artifact
update event carries the generation it produced.

The a2a-sdk's protobuf types are 1.0 and lack these fields, so the gateway carries each one
as that field's wire encoding under its 1.1 number (``Task.generation`` = 7,
``TaskStatusUpdateEvent.generation`` = 5, ``TaskArtifactUpdateEvent.generation`` = 7): an
unknown field to protobuf, kept through copies, the stores' serialized tasks and the live
hubs' relays, left out of every JSON the SDK's or the gateway's printers write. Transports
add it to what a 1.1 client reads (``A2A-Version: 1.1``) and remove it from what a 1.0 gRPC
client reads. When the SDK gains the fields, these functions become attribute accesses.
"""

from __future__ import annotations

from typing import Any

from a2a.types import (
    GetTaskRequest,
    SendMessageRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    A2A_ERROR_MAPPING,
    A2A_ERROR_REASONS,
    A2A_REASON_TO_ERROR,
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    ErrorMapping,
    InvalidParamsError,
)
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

V11 = "1.1"
"""The protocol version whose clients read generations."""

_FIELD_NUMBER: dict[type[Message], int] = {
    Task: 7,
    TaskStatusUpdateEvent: 5,
    TaskArtifactUpdateEvent: 7,
}


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:  # a stream's chunks up to 16,383
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = [bytes([n]) for n in range(0x80)]
_TAGS = {kind: _varint(number << 3) for kind, number in _FIELD_NUMBER.items()}
"""Each field's key on the wire: its number, wire type 0 (a varint)."""

MAX_GENERATION = 2**53 - 1
"""Above every generation a task can reach, and the largest integer every JSON client reads
exactly: a client value above it is refused, not waited for."""


def generation_of(message: Message) -> int:
    """The generation ``message`` carries (0: none, as a 1.0 server would say)."""
    number = _FIELD_NUMBER.get(type(message))
    if number is None:
        return 0
    found = 0
    for field in UnknownFieldSet(message):
        if field.field_number == number and field.wire_type == 0:
            found = field.data  # the last occurrence wins, as for any protobuf scalar
    return found


def set_generation(message: Message, generation: int) -> None:
    """Make ``message`` carry ``generation``. It drops every other unknown field of the
    message and of its sub-messages (the gateway keeps none)."""
    message.DiscardUnknownFields()
    stamp_generation(message, generation)


def stamp_generation(message: Message, generation: int) -> None:
    """``set_generation`` for a message that carries none yet (one just built): a third
    cheaper, which counts on a stream's every chunk."""
    message.MergeFromString(_TAGS[type(message)] + _varint(generation))


def without_generation(message: Message) -> Message:
    """``message`` (a Task, an update event, or a ``StreamResponse`` / ``SendMessageResponse``
    holding one) as a 1.0 client reads it: a copy without the 1.1 field, or itself when it
    carries none."""
    held = _held(message)
    if held is None or not generation_of(held):
        return message
    out = type(message)()
    out.CopyFrom(message)
    out.DiscardUnknownFields()
    return out


def _held(message: Message) -> Message | None:
    if type(message) in _FIELD_NUMBER:
        return message
    oneof = message.DESCRIPTOR.oneofs_by_name.get("payload")
    which = message.WhichOneof("payload") if oneof is not None else None
    return getattr(message, which) if which else None


def add_generation(out: dict[str, Any], message: Message) -> dict[str, Any]:
    """``out``, the JSON of ``message`` (a Task or an update event), with its generation."""
    generation = generation_of(message)
    if generation:
        out["generation"] = generation
    return out


def with_generation(out: dict[str, Any], message: Any) -> dict[str, Any]:
    """``out``, the JSON of ``message`` (a Task or an update event) or of the
    ``StreamResponse`` / ``SendMessageResponse`` made of it, with ``message``'s generation
    (a JSON number, which every protobuf JSON parser also takes for an int64)."""
    key = _JSON_KEY.get(type(message))
    if key is None:
        return out
    inner = out.get(key)
    add_generation(inner if isinstance(inner, dict) else out, message)
    return out


_JSON_KEY = {Task: "task", TaskStatusUpdateEvent: "statusUpdate",
             TaskArtifactUpdateEvent: "artifactUpdate"}


def client_generation(value: Any, field: str) -> int | None:
    """A generation a client sent (``currentGeneration``, ``ifGenerationMatch``): a
    non-negative integer, as a JSON number or (protobuf JSON's int64 form) a string; None
    when absent; ``InvalidParamsError`` naming ``field`` otherwise."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParamsError(f"invalid params: {field} must be a non-negative integer")
    if not 0 <= value <= MAX_GENERATION:
        raise InvalidParamsError(
            f"invalid params: {field} must be between 0 and {MAX_GENERATION}"
        )
    return value


class TaskGenerationMismatchError(A2AError):
    """``ifGenerationMatch`` differs from the task's generation: nothing was written."""

    message = "Task generation mismatch"

    @classmethod
    def of(cls, task_id: str, expected: int, current: int) -> TaskGenerationMismatchError:
        return cls(
            f"Task generation mismatch: expected {expected} but current generation is {current}",
            {"taskId": task_id, "expectedGeneration": str(expected),
             "currentGeneration": str(current)},
        )


# The 1.1 error in the a2a-sdk's tables, which every transport of the gateway reads.
JSON_RPC_ERROR_CODE_MAP[TaskGenerationMismatchError] = -32010
A2A_ERROR_MAPPING[TaskGenerationMismatchError] = ErrorMapping(
    409, "ABORTED", "TASK_GENERATION_MISMATCH"
)
A2A_ERROR_REASONS[TaskGenerationMismatchError] = "TASK_GENERATION_MISMATCH"
A2A_REASON_TO_ERROR["TASK_GENERATION_MISMATCH"] = TaskGenerationMismatchError


# what a client asks with, carried from the transport to the request handler --------------
CURRENT_GENERATION = "current_generation"
"""``ServerCallContext.state`` key: GetTask's ``currentGeneration`` (a long-poll)."""
IF_GENERATION_MATCH = "if_generation_match"
"""``ServerCallContext.state`` key: SendMessage's ``configuration.ifGenerationMatch``."""
READS_GENERATIONS = "reads_generations"
"""``ServerCallContext.state`` key: the client speaks 1.1, so its responses carry them."""


def take_json_params(params: dict[str, Any], state: dict[str, Any]) -> None:
    """Move the 1.1 fields of JSON ``params`` (a GetTask's or a SendMessage's, which the
    1.0 parser would refuse as unknown) into ``state``, checked (``_taken``)."""
    if "currentGeneration" in params:
        _taken(state, CURRENT_GENERATION, params.pop("currentGeneration"), "currentGeneration")
    configuration = params.get("configuration")
    if isinstance(configuration, dict) and "ifGenerationMatch" in configuration:
        _taken(state, IF_GENERATION_MATCH, configuration.pop("ifGenerationMatch"),
               "configuration.ifGenerationMatch")


def _taken(state: dict[str, Any], key: str, value: Any, field: str) -> None:
    """A 1.1 client's bad value is invalid params; a 1.0 client's is an unknown field's, so
    ignored (a good one works for it too, as the draft's own 1.0 example has it)."""
    try:
        state[key] = client_generation(value, field)
    except InvalidParamsError:
        if state.get(READS_GENERATIONS):
            raise


def take_grpc_params(request: Message, state: dict[str, Any]) -> None:
    """The same for a gRPC request, whose 1.1 fields arrive as unknown fields:
    ``GetTaskRequest.current_generation`` (4), ``SendMessageConfiguration.if_generation_match``
    (5)."""
    if isinstance(request, GetTaskRequest):
        found = _unknown_varint(request, 4)
        if found is not None:
            _taken(state, CURRENT_GENERATION, found, "current_generation")
    elif isinstance(request, SendMessageRequest) and request.HasField("configuration"):
        found = _unknown_varint(request.configuration, 5)
        if found is not None:
            _taken(state, IF_GENERATION_MATCH, found, "configuration.if_generation_match")


def _unknown_varint(message: Message, number: int) -> int | None:
    found = None
    for field in UnknownFieldSet(message):
        if field.field_number == number and field.wire_type == 0:
            found = field.data
    if found is not None and found >= 2**63:  # int64 on the wire: a negative value
        found -= 2**64
    return found
