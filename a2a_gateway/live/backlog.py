"""A subscriber's backlog: the events published for one subscriber that it has not taken
yet, in order, bounded by bytes.

A producer may run far ahead of a slow client. Consecutive chunks of one artifact are
merged while they wait: an ``append: true`` chunk adds its parts to the artifact, so one
chunk holding the parts of all of them, with the id and generation of the last, stands for
all of them (a client that keeps parts and one that joins their text both build the same
artifact; one that tracks generations sees a gap, as the 1.1 draft allows, with no text lost).
A flood of text deltas therefore costs its parts, not an event per delta. What no merge
can shrink (a flood of status events, or more text than the budget) makes ``put``
return False: the owner then ``restart``s the backlog, and its consumer starts over from
a fresh snapshot.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from a2a.types import TaskArtifactUpdateEvent

from a2a_gateway.events import copy_event
from a2a_gateway.generation import generation_of, set_generation

END = object()
"""Taken when the subscription ended: nothing follows."""
RESTART = object()
"""Taken when the subscriber fell behind by more than its budget: what it missed is gone."""


def mergeable(event: Any) -> bool:
    """Whether ``event`` is an artifact chunk of nothing but parts (no metadata, description
    or extensions, which appending could not carry over unchanged)."""
    if type(event) is not TaskArtifactUpdateEvent or event.HasField("metadata"):
        return False
    artifact = event.artifact
    return not (artifact.HasField("metadata") or artifact.extensions or artifact.description)


def _parts_size(event: TaskArtifactUpdateEvent) -> int:
    parts = event.artifact.parts
    if len(parts) == 1:  # a text delta
        return parts[0].ByteSize() + 3
    return sum(part.ByteSize() + 3 for part in parts)


class _Chunks:
    """Consecutive chunks of one artifact, waiting to be taken as one."""

    __slots__ = ("event_id", "event", "merged", "size", "artifact_id", "name", "ended", "last")

    def __init__(self, event_id: str, first: TaskArtifactUpdateEvent, size: int) -> None:
        self.event_id = event_id
        self.event = first
        self.merged = False
        """Whether ``event`` is this backlog's own copy (the published one is shared)."""
        self.size = size
        self.artifact_id, self.name = first.artifact.artifact_id, first.artifact.name
        self.ended = first.last_chunk
        """The last chunk taken in was a ``last_chunk``: nothing appends to it any more."""
        self.last = first
        """The last chunk merged in: the merged one carries its generation."""

    def takes(self, event: TaskArtifactUpdateEvent) -> bool:
        if self.ended or not event.append:
            return False
        artifact = event.artifact
        return artifact.artifact_id == self.artifact_id and artifact.name == self.name

    def add(self, event_id: str, event: TaskArtifactUpdateEvent) -> int:
        """Merge the next chunk (its parts, its ``last_chunk``); the bytes it adds."""
        if not self.merged:  # the copy keeps the first chunk's append flag: replace or append
            self.event, self.merged = copy_event(self.event), True
        self.event_id, self.last = event_id, event
        self.event.artifact.parts.extend(event.artifact.parts)
        if event.last_chunk:
            self.event.last_chunk = self.ended = True
        added = _parts_size(event)
        self.size += added
        return added

    def item(self) -> tuple[str, TaskArtifactUpdateEvent]:
        if self.merged:
            generation = generation_of(self.last)
            if generation:
                set_generation(self.event, generation)
        return self.event_id, self.event


class Backlog:
    """``put`` events, ``await take()`` them as ``(event_id, event)`` (or ``END``/``RESTART``)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        """Serialized sizes of the waiting events; a merged chunk counts the parts it adds."""
        self._items: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put(self, event_id: str, event: Any, size: int, *, merge: bool = True) -> bool:
        """Add an event (``size``: its serialized bytes), merged into the chunk before it
        when it can be (and ``merge``); False when the backlog is over its budget (the
        event is kept: the owner decides)."""
        if merge and mergeable(event):
            tail = self._items[-1] if self._items else None
            if type(tail) is _Chunks and tail.takes(event):
                self.bytes += tail.add(event_id, event)
                return self.bytes <= self.max_bytes
            self._append(_Chunks(event_id, event, size), size)
        else:
            self._append((event_id, event, size), size)
        return self.bytes <= self.max_bytes

    def end(self) -> None:
        self._append(END, 0)

    def restart(self) -> None:
        """Drop everything waiting; the consumer next takes ``RESTART``."""
        self._items.clear()
        self.bytes = 0
        self._append(RESTART, 0)

    def _append(self, item: Any, size: int) -> None:
        self._items.append(item)
        self.bytes += size
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def take_nowait(self) -> Any:
        """The next item, or None when nothing waits."""
        if not self._items:
            return None
        item = self._items.popleft()
        if type(item) is _Chunks:
            self.bytes -= item.size
            return item.item()
        if type(item) is tuple:
            event_id, event, size = item
            self.bytes -= size
            return event_id, event
        return item

    async def take(self) -> Any:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self.take_nowait()
