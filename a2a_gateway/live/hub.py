"""The live path: per-task fan-out of events to the SSE clients of that task.

Text deltas, progress notes and state changes of a running task are published
here as a2a protobuf events; every subscriber (the SendStreamingMessage caller,
SubscribeToTask callers) gets them in publication order. Nothing here is stored:
a late subscriber gets its starting point (the Task and the text so far) from the
run itself, then follows the hub. This implementation is in-process; a
cross-replica hub (PostgreSQL LISTEN/NOTIFY) implements the same methods, and
``follow`` (a task run elsewhere) is where it differs from ``subscribe``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from a2a.types import Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

LiveEvent = Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent


class SubscriberOverflowError(Exception):
    """A subscriber fell too far behind and was dropped."""


_END = object()
_OVERFLOW = object()


class Subscription:
    """Events of one task for one subscriber; iterate it, close it when done."""

    def __init__(self, hub: LiveHub, task_id: str, max_backlog: int) -> None:
        self.task_id = task_id
        self._hub = hub
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._max_backlog = max_backlog

    def _put(self, item: object) -> None:
        if self._queue.qsize() >= self._max_backlog:
            self._queue.put_nowait(_OVERFLOW)
            self._hub.unsubscribe(self)
            return
        self._queue.put_nowait(item)

    async def __aiter__(self) -> AsyncIterator[LiveEvent]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if item is _OVERFLOW:
                raise SubscriberOverflowError("subscriber fell behind the task's events")
            yield item  # type: ignore[misc]

    def close(self) -> None:
        self._hub.unsubscribe(self)


class LiveHub:
    def __init__(self, max_backlog: int = 10_000) -> None:
        self._subscribers: dict[str, list[Subscription]] = {}
        self._max_backlog = max_backlog

    def subscribe(self, task_id: str) -> Subscription:
        """Events of ``task_id``, a task whose run is on this replica (or is starting here)."""
        sub = Subscription(self, task_id, self._max_backlog)
        self._subscribers.setdefault(task_id, []).append(sub)
        return sub

    def follow(self, task_id: str) -> Subscription:
        """Events of ``task_id``, a task run on another replica (or on none right now).
        A hub spanning replicas asks the task's owner for them; in-process there is no
        other replica, so this is ``subscribe``."""
        return self.subscribe(task_id)

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subscribers.get(sub.task_id)
        if subs and sub in subs:
            subs.remove(sub)
            if not subs:
                del self._subscribers[sub.task_id]

    def publish(self, task_id: str, event: LiveEvent) -> None:
        for sub in list(self._subscribers.get(task_id, ())):
            sub._put(event)

    def end(self, task_id: str) -> None:
        """The task will publish nothing more: end every subscription."""
        for sub in self._subscribers.pop(task_id, []):
            sub._queue.put_nowait(_END)

    def subscriber_count(self, task_id: str) -> int:
        return len(self._subscribers.get(task_id, ()))

    def has_listeners(self, task_id: str) -> bool:
        """Whether anyone would receive events of ``task_id`` (so they are worth building);
        a hub spanning replicas also counts its remote listeners."""
        return task_id in self._subscribers

    # lifecycle: nothing to do in-process; a hub spanning replicas connects here
    listening = True
    """False while a cross-replica hub cannot receive (followers then poll the store)."""

    def attach(self, engine: object) -> None:
        """The engine that receives control commands from other replicas."""

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def send_control(self, replica_id: str, command: str, task_id: str) -> None:
        """Tell replica ``replica_id`` about ``task_id`` (e.g. ``cancel``). In-process there is
        no other replica: the owner notices through the store at its next lease check."""
