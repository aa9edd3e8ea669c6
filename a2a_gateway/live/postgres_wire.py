"""The wire format of the cross-replica live path: the payloads of PostgreSQL NOTIFY.

Each payload is a small JSON object whose ``k`` says what it carries:

* ``e``, an event: task ``t``, sequence number ``q``, type ``y`` (``a`` artifact
  update, ``s`` status update, ``t`` task) and the serialized protobuf, base64, in ``b``.
* ``fa``, a pointer to a final artifact too large to send: task ``t``, ``q`` and
  artifact id ``a``.
* ``w`` / ``u``, watch / unwatch: replica ``r``, sequence ``q``, task ids ``ids``;
  ``s`` asks the owner for a snapshot of the text so far.
* ``c``, a control command ``c`` (e.g. ``cancel``) for task ``t`` from replica ``r``.
* ``n``, the end of a snapshot for task ``t`` that had no text to send. The events of a
  snapshot (the text so far, the owner's answer to a watch with ``s``) carry ``n``: 1,
  and the last of them 2, so that only the followers waiting for one get it. They also
  carry ``x``: 1 when the snapshot answers a watch with ``s``, 0 when the owner sent it
  unasked (to a replica it did not know was watching). A sender of an earlier version
  sends no ``x``, and a receiver of one ignores it.

Every payload stays under ``PAYLOAD_LIMIT`` (PostgreSQL refuses 8000 bytes and more).
A larger text delta is split into several deltas (UTF-8 safe; the first keeps the
original ``append``, the others append). A larger final artifact becomes an ``fa``
pointer; a larger status update goes without its message and with an ``fs`` pointer.
A pointer (``f``) names the task's scope ``sc`` and the store version ``v`` that
holds the full event, when the sender knows them; the receiver rebuilds the event
from the stored task (``stored_event``). Sequence numbers also keep PostgreSQL from
folding identical payloads of one transaction into one.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
from typing import Any

import orjson
from a2a.types import Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

from a2a_gateway.events import artifact_event, slim_status_event, status_event, with_text
from a2a_gateway.live.hub import LiveEvent, LocalRun
from a2a_gateway.stores.base import Scope

WATCH_CHANNEL = "a2a_live_watch"
PAYLOAD_LIMIT = 7900
"""Largest payload sent, in bytes (PostgreSQL's limit is < 8000 with default settings)."""
_ENVELOPE_ROOM = 200
"""Bytes kept for the JSON envelope around the base64 event."""
_RAW_LIMIT = (PAYLOAD_LIMIT - _ENVELOPE_ROOM) * 3 // 4
"""Largest serialized event that fits once base64-encoded."""
_TYPES: dict[str, type[Any]] = {"a": TaskArtifactUpdateEvent, "s": TaskStatusUpdateEvent, "t": Task}

# values of "k"
EVENT = "e"
WATCH = "w"
UNWATCH = "u"
CONTROL = "c"
SNAPSHOT_END = "n"
# values of "f" (a pointer)
FINAL_ARTIFACT = "fa"
STATUS = "fs"


def replica_channel(replica_id: str) -> str:
    """The channel a replica LISTENs on: a fixed-length identifier whatever the id holds."""
    return "a2a_live_" + hashlib.sha256(replica_id.encode()).hexdigest()[:32]


class LiveWire:
    """Builds one replica's payloads, numbering them from one sequence."""

    def __init__(self) -> None:
        self._seq = itertools.count(1)

    def event(self, task_id: str, event: LiveEvent, run: LocalRun | None = None) -> list[str]:
        """Payloads that carry ``event`` to a watcher. ``run``, the task's run on this
        replica (``scope``, ``version``) or None, locates an oversized event in the store."""
        size = event.ByteSize()
        if size <= _RAW_LIMIT:
            return [self._envelope(task_id, event)]
        text = _text_delta_text(event)
        if text is not None:
            return self._split_delta(task_id, event, text, size)  # type: ignore[arg-type]
        if isinstance(event, TaskStatusUpdateEvent):
            return [self._envelope(task_id, slim_status_event(event), _pointer(run, STATUS))]
        if isinstance(event, TaskArtifactUpdateEvent):
            pointer = {
                "k": FINAL_ARTIFACT,
                "t": task_id,
                "q": next(self._seq),
                "a": event.artifact.artifact_id,
            }
            pointer.update(_pointer(run, FINAL_ARTIFACT))
            return [orjson.dumps(pointer).decode()]
        return []

    def snapshot(self, task_id: str, event: LiveEvent | None, *, asked: bool) -> list[str]:
        """Payloads of a snapshot: ``event`` (the text so far, or None: nothing yet), each
        marked as part of one, the last as its end, and whether it was ``asked`` for."""
        payloads = self.event(task_id, event) if event is not None else []
        if not payloads:
            end = {"k": SNAPSHOT_END, "t": task_id, "n": 2, "x": int(asked)}
            return [orjson.dumps(end).decode()]
        marked = [orjson.loads(p) for p in payloads]
        for i, message in enumerate(marked):
            message["n"] = 2 if i == len(marked) - 1 else 1
            message["x"] = int(asked)
        return [orjson.dumps(m).decode() for m in marked]

    def interest(
        self, kind: str, replica_id: str, task_ids: list[str], *, snap: bool = False
    ) -> list[str]:
        """``watch``/``unwatch`` payloads for ``task_ids``, as many as it takes."""
        base = {"k": kind, "r": replica_id, "s": snap}
        room = PAYLOAD_LIMIT - len(orjson.dumps(base)) - 64
        payloads = []
        chunk: list[str] = []
        used = 0
        for task_id in task_ids:
            cost = len(task_id.encode()) + 4
            if chunk and used + cost > room:
                payloads.append(orjson.dumps({**base, "q": next(self._seq), "ids": chunk}).decode())
                chunk, used = [], 0
            chunk.append(task_id)
            used += cost
        if chunk:
            payloads.append(orjson.dumps({**base, "q": next(self._seq), "ids": chunk}).decode())
        return payloads

    def _envelope(self, task_id: str, event: LiveEvent, extra: dict[str, Any] | None = None) -> str:
        body = {
            "k": EVENT, "t": task_id, "q": next(self._seq), "y": _type_code(event),
            "b": base64.b64encode(event.SerializeToString()).decode(),
        }
        if extra:
            body.update(extra)
        return orjson.dumps(body).decode()

    def _split_delta(
        self, task_id: str, event: TaskArtifactUpdateEvent, text: str, size: int
    ) -> list[str]:
        room = _RAW_LIMIT - (size - len(text.encode())) - 16
        out = []
        for i, piece in enumerate(split_utf8(text, room)):
            out.append(
                self._envelope(
                    task_id, with_text(event, piece, append=event.append if i == 0 else True)
                )
            )
        return out


def control_payload(replica_id: str, command: str, task_id: str) -> str:
    """A control command for the replica running ``task_id``, from ``replica_id``."""
    return orjson.dumps({"k": CONTROL, "c": command, "t": task_id, "r": replica_id}).decode()


def parse(payload: str) -> tuple[dict[str, Any], Any] | None:
    """``(message, kind)`` of a received payload; None if it is not a JSON object."""
    try:
        message = orjson.loads(payload)
        return message, message.get("k")
    except (orjson.JSONDecodeError, AttributeError):
        return None


def decode_event(message: dict[str, Any]) -> Any:
    """The event an ``e`` message carries; None if it cannot be read."""
    cls = _TYPES.get(str(message.get("y")))
    blob = message.get("b")
    if cls is None or not isinstance(blob, str):
        return None
    try:
        return cls.FromString(base64.b64decode(blob))
    except Exception:
        return None


def is_pointer(message: dict[str, Any]) -> bool:
    """True if the full event must be read from the store (and the sender said where)."""
    return message.get("f") in (FINAL_ARTIFACT, STATUS) and "sc" in message


def pointer_target(message: dict[str, Any]) -> tuple[Scope, int]:
    """The scope of the pointed-to task and the store version that holds the event."""
    return Scope(*message["sc"]), int(message.get("v") or 0)


def stored_event(message: dict[str, Any], task: Task) -> LiveEvent | None:
    """The full event a pointer stands for, rebuilt from the stored ``task`` (at or past
    the pointer's version); None if the task does not hold it."""
    if message["f"] == FINAL_ARTIFACT:
        for artifact in task.artifacts:
            if artifact.artifact_id == message.get("a"):
                return artifact_event(task, artifact, last_chunk=True)
        return None
    slim = decode_event(message)
    if slim is not None and slim.status.timestamp == task.status.timestamp:
        return status_event(task)
    return None


def split_utf8(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-8 bytes, never cutting a character."""
    data = text.encode()
    pieces, start = [], 0
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and end > start and (data[end] & 0xC0) == 0x80:
            end -= 1  # a continuation byte: cut before the character it belongs to
        if end == start:  # limit smaller than one character (not with real limits)
            end = start + 1
            while end < len(data) and (data[end] & 0xC0) == 0x80:
                end += 1
        pieces.append(data[start:end].decode())
        start = end
    return pieces


def _pointer(run: LocalRun | None, kind: str) -> dict[str, Any]:
    """Where a watcher finds the full event: the task's scope and the store version
    that will hold it (a final artifact is published just before its write)."""
    if run is None or run.version is None:
        return {"f": kind}
    scope = run.scope
    version = run.version + 1 if kind == FINAL_ARTIFACT else run.version
    return {"f": kind, "sc": [scope.tenant, scope.endpoint_id, scope.principal], "v": version}


def _type_code(event: LiveEvent) -> str:
    if isinstance(event, TaskArtifactUpdateEvent):
        return "a"
    if isinstance(event, TaskStatusUpdateEvent):
        return "s"
    return "t"


def _text_delta_text(event: LiveEvent) -> str | None:
    """The text of an artifact update made of one text part and nothing else a split
    would lose; None for any other event."""
    if not isinstance(event, TaskArtifactUpdateEvent) or event.last_chunk or event.metadata:
        return None
    artifact = event.artifact
    if len(artifact.parts) != 1 or artifact.metadata or artifact.extensions:
        return None
    part = artifact.parts[0]
    if not part.HasField("text") or part.metadata:
        return None
    return part.text

