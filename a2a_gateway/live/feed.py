"""The endpoint event feed: every lifecycle event of an endpoint's tasks, for its operators.

A task's run announces each state change (created WORKING, INPUT_REQUIRED or AUTH_REQUIRED,
WORKING again, terminal) and its final artifact here (``status``, ``artifact``); text and
artifact chunks and progress notes never come here. Each event becomes one ``FeedEvent``:
the A2A ``TaskStatusUpdateEvent`` or ``TaskArtifactUpdateEvent`` (built by ``a2a_gateway.events``)
inside a small envelope naming the endpoint, task, context, principal, state and time,
serialized once for every subscriber (docs/streams.md, "Endpoint event feed", is the wire
format).

**Replay log.** An endpoint watched on this replica gets a log of its recent events,
numbered in order, kept while it has subscribers and ``keep_seconds`` after the last one
left; ``resume(endpoint_id, last_event_id)`` hands a reconnecting client exactly the events
after its last one. Ids are ``<log token>.<n>`` with a random token per log, so an id from
another replica, an earlier process or a dropped log is a miss (the client then starts from
a snapshot of the endpoint's tasks read from the store). Logs are bounded by events per
endpoint and by bytes over all endpoints (least recently active dropped first).

**Every endpoint.** The gateway-wide feed (key ``EVERY_ENDPOINT``, for gateway operators)
gets every event too, with a log and ids of its own.

**Bounded clients.** A subscriber's backlog is bounded in bytes (``client_max_bytes``): one
that falls behind is dropped (its stream ends; it reconnects with its last id).

**Across replicas.** A ``FeedRelay`` (PostgreSQL: ``live.postgres`` wires one) carries the
local events of the endpoints watched on other replicas (``wanted``) to them, which deliver
them to their own subscribers; a new feed client waits (``watching``) until every replica
relays its endpoint's events before its snapshot is read; when the relay may have missed
some it calls ``start_over`` (every client then reconnects to a snapshot, never to a gap).
Without one (memory, SQLite, DynamoDB) the feed shows this process's tasks.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from a2a.types import Task, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent

from a2a_gateway.events import status_event
from a2a_gateway.live.replay_log import ReplayLog
from a2a_gateway.protojson import message_to_dict
from a2a_gateway.stores.base import TERMINAL_STATES, Scope

FeedUpdate = TaskStatusUpdateEvent | TaskArtifactUpdateEvent

_QUESTIONS = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})

EVERY_ENDPOINT = ""
"""The feed key of the gateway-wide feed (every endpoint's events, for gateway operators)."""

SNAPSHOT = "snapshot"
STATUS = "status"
ARTIFACT = "artifact"


@dataclass(frozen=True, slots=True)
class FeedLimits:
    events: int = 1000
    """Events kept per endpoint for a reconnect; 0 keeps none (a reconnect gets a snapshot)."""
    keep_seconds: float = 300.0
    """How long an endpoint's log is kept after its last subscriber left."""
    max_bytes: int = 16 * 1024 * 1024
    """All endpoint logs together; beyond it the least recently active are dropped."""
    client_max_bytes: int = 1024 * 1024
    """Backlog of one subscriber; a client that falls further behind is dropped."""


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One event as it goes on the wire (``data``), with what filters look at."""

    data: bytes
    endpoint_id: str
    task_id: str
    context_id: str
    state: int


@dataclass(frozen=True, slots=True)
class FeedFilter:
    """What a subscriber wants: tasks in ``states`` of ``context_id`` of ``endpoints`` (each
    empty: all)."""

    states: frozenset[int] = frozenset()
    context_id: str = ""
    endpoints: frozenset[str] = frozenset()

    def matches(self, context_id: str, state: int, endpoint_id: str = "") -> bool:
        return (
            (not self.states or state in self.states)
            and (not self.context_id or context_id == self.context_id)
            and (not self.endpoints or endpoint_id in self.endpoints)
        )


def state_name(state: int) -> str:
    return TaskState.Name(state)


def _timestamp(task: Task) -> str:
    return task.status.timestamp.ToJsonString() if task.status.HasField("timestamp") else ""


def envelope(
    scope: Scope, task: Task, update: FeedUpdate, at: TaskStatus | None = None
) -> FeedEvent:
    """``update`` of ``task`` in the feed's envelope (its state and time: ``at``, by default
    the task's status)."""
    kind, key = (
        (STATUS, "statusUpdate")
        if isinstance(update, TaskStatusUpdateEvent)
        else (ARTIFACT, "artifactUpdate")
    )
    status = task.status if at is None else at
    state = status.state
    timestamp = status.timestamp.ToJsonString() if status.HasField("timestamp") else ""
    body = {
        "kind": kind,
        "endpointId": scope.endpoint_id,
        "taskId": task.id,
        "contextId": task.context_id,
        "principal": scope.principal,
        "state": state_name(state),
        "timestamp": timestamp,
        key: message_to_dict(update),
    }
    return FeedEvent(orjson.dumps(body), scope.endpoint_id, task.id, task.context_id, state)


def snapshot_entry(scope: Scope, task: Task) -> dict[str, Any]:
    """One task of a snapshot: the envelope's fields and the Task without history or artifacts."""
    brief = Task(id=task.id, context_id=task.context_id)
    brief.status.CopyFrom(task.status)
    if task.metadata:
        brief.metadata.CopyFrom(task.metadata)
    return {
        "endpointId": scope.endpoint_id,
        "taskId": task.id,
        "contextId": task.context_id,
        "principal": scope.principal,
        "state": state_name(task.status.state),
        "timestamp": _timestamp(task),
        "task": message_to_dict(brief),
    }


def snapshot_event(endpoint_id: str, tasks: list[tuple[Scope, Task]], truncated: bool) -> bytes:
    """The snapshot that starts the feed of ``endpoint_id`` (``EVERY_ENDPOINT``: ``endpointId``
    is null)."""
    body = {
        "kind": SNAPSHOT,
        "endpointId": endpoint_id or None,
        "tasks": [snapshot_entry(s, t) for s, t in tasks],
        "truncated": truncated,
    }
    return orjson.dumps(body)


class FeedRelay(Protocol):
    """Carries local events to the feeds of the other replicas."""

    def send(
        self, scope: Scope, task: Task, update: FeedUpdate, event: FeedEvent, version: int
    ) -> None:
        """``event`` (``update`` of ``task``, whose store version is or will be ``version``)."""

    def wanted(self, endpoint_id: str) -> bool:
        """Whether another replica may watch ``endpoint_id`` (its events must be sent)."""

    async def watch(self, key: str) -> None:
        """Returns once every replica sends the events of ``key`` (an endpoint or
        ``EVERY_ENDPOINT``), watched here from now on (bounded)."""


class FeedOverflowError(Exception):
    """A subscriber fell too far behind the endpoint's events and was dropped."""


_END = object()
_OVERFLOW = object()
_DEDUP_TASKS = 100_000
"""Tasks whose last announced state the feed remembers (to drop repeats), at most."""
_UNSENT_ARTIFACTS = 10_000
"""Final artifacts nobody watched, kept until their task's end is announced, at most."""


class FeedSubscription:
    """Events of one endpoint for one subscriber, as ``(event_id, FeedEvent)``. ``position``
    is the id that stands for everything before the subscription."""

    def __init__(
        self, feed: EndpointFeed, endpoint_id: str, position: str, wanted: FeedFilter
    ) -> None:
        self.endpoint_id = endpoint_id
        self.position = position
        self.wanted = wanted
        self._feed = feed
        self._queue: deque[object] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()

    def _put(self, item: tuple[str, FeedEvent]) -> None:
        event = item[1]
        if not self.wanted.matches(event.context_id, event.state, event.endpoint_id):
            return
        if self._bytes and self._bytes + len(event.data) > self._feed.limits.client_max_bytes:
            # behind by more than the bound (one event alone, however large, always fits)
            self._queue.clear()
            self._bytes = 0
            self._push(_OVERFLOW)
            self._feed.unsubscribe(self)
            return
        self._bytes += len(event.data)
        self._push(item)

    def _push(self, item: object) -> None:
        self._queue.append(item)
        self._ready.set()

    @property
    def backlog_bytes(self) -> int:
        return self._bytes

    async def __aiter__(self) -> AsyncIterator[tuple[str, FeedEvent]]:
        while True:
            while not self._queue:
                self._ready.clear()
                await self._ready.wait()
            item = self._queue.popleft()
            if item is _END:
                return
            if item is _OVERFLOW:
                raise FeedOverflowError("the client fell behind the endpoint's events")
            self._bytes -= len(item[1].data)  # type: ignore[index]
            yield item  # type: ignore[misc]

    def close(self) -> None:
        self._feed.unsubscribe(self)


class EndpointFeed:
    def __init__(
        self, limits: FeedLimits | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits or FeedLimits()
        self.clock = clock
        self.relay: FeedRelay | None = None
        self.published = 0
        self._subscribers: dict[str, list[FeedSubscription]] = {}
        self._logs: OrderedDict[str, ReplayLog[FeedEvent]] = (
            OrderedDict()
        )  # least recently active first
        self._log_bytes = 0
        self._announced: OrderedDict[str, tuple[int, str]] = OrderedDict()
        """Task id → the state (and question's message id) last announced."""
        self._unsent: OrderedDict[str, tuple[TaskArtifactUpdateEvent, int, int, int, int]] = (
            OrderedDict()
        )
        """Task id → its final artifact (version; state and time then), announced while nobody
        watched: sent before the task's end if someone watches by then."""
        self._token = os.urandom(6).hex()
        self._loose = 0

    # what a run announces (tasks.run) ---------------------------------------------
    def status(self, scope: Scope, task: Task, version: int | None) -> None:
        """``task``'s status (its update built only when announced), when it is a
        change: a new state, or a new question (not a repeated WORKING, e.g. a progress note,
        nor the same question again, e.g. on a hand-over). ``version``: the task's store
        version, which holds this status."""
        state = task.status.state
        seen = (state, task.status.message.message_id if state in _QUESTIONS else "")
        if self._announced.get(task.id) == seen:
            return
        unsent = None
        if state in TERMINAL_STATES:
            self._announced.pop(task.id, None)
            unsent = self._unsent.pop(task.id, None) if self._unsent else None
        else:
            self._announced[task.id] = seen
            self._announced.move_to_end(task.id)
            if len(self._announced) > _DEDUP_TASKS:
                self._announced.popitem(last=False)
        if self._wanted(scope.endpoint_id):
            if unsent is not None:  # a watch began between the artifact and the end
                self._emit_unsent(scope, task, *unsent)
            self._emit(scope, task, status_event(task), version or 0)

    def artifact(
        self, scope: Scope, task: Task, update: TaskArtifactUpdateEvent, version: int | None
    ) -> None:
        """A final artifact (the whole of it, not a chunk); the task's next write (the
        terminal one, after ``version``) will hold it. Unwatched, it waits for that end: a
        snapshot read in between shows the task still working, so its watcher needs it."""
        if self._wanted(scope.endpoint_id):
            self._emit(scope, task, update, (version or 0) + 1)
            return
        status, stamp = task.status, task.status.timestamp
        self._unsent[task.id] = (
            update,
            (version or 0) + 1,
            status.state,
            stamp.seconds,
            stamp.nanos,
        )
        if len(self._unsent) > _UNSENT_ARTIFACTS:
            self._unsent.popitem(last=False)

    def _emit_unsent(
        self,
        scope: Scope,
        task: Task,
        update: TaskArtifactUpdateEvent,
        version: int,
        state: int,
        seconds: int,
        nanos: int,
    ) -> None:
        then = TaskStatus(state=state)  # the task's status when the artifact was announced
        if seconds or nanos:
            then.timestamp.seconds, then.timestamp.nanos = seconds, nanos
        self._emit(scope, task, update, version, envelope(scope, task, update, then))

    def _wanted(self, endpoint_id: str) -> bool:
        return self.watched(endpoint_id) or (
            self.relay is not None and self.relay.wanted(endpoint_id)
        )

    def _emit(
        self,
        scope: Scope,
        task: Task,
        update: FeedUpdate,
        version: int,
        event: FeedEvent | None = None,
    ) -> None:
        event = envelope(scope, task, update) if event is None else event
        self.published += 1
        self.deliver(event)
        if self.relay is not None and self.relay.wanted(scope.endpoint_id):
            self.relay.send(scope, task, update, event, version)

    # delivery ---------------------------------------------------------------------
    def deliver(self, event: FeedEvent) -> None:
        """Log ``event`` in its endpoint's feed and in the gateway-wide one (those watched here)
        and hand it to their subscribers."""
        for key in (event.endpoint_id, EVERY_ENDPOINT):
            log = self._logs.get(key)
            subs = self._subscribers.get(key)
            if log is None and not subs:
                continue
            event_id = self._append(key, log, event) if log is not None else self.unlogged_id()
            for sub in list(subs or ()):
                sub._put((event_id, event))

    def watched(self, endpoint_id: str) -> bool:
        """Whether events of ``endpoint_id`` are wanted here (a subscriber or a live log of its
        feed or of the gateway-wide one)."""
        return any(
            key in self._subscribers or key in self._logs for key in (endpoint_id, EVERY_ENDPOINT)
        )

    def watched_keys(self) -> set[str]:
        """The feeds (endpoint ids, ``EVERY_ENDPOINT``) with a subscriber or a live log here."""
        self._sweep(self.clock())
        return {*self._subscribers, *self._logs}

    async def watching(self, key: str) -> None:
        """Returns once the events of ``key``, subscribed to here, come from every replica."""
        if self.relay is not None:
            await self.relay.watch(key)

    def unlogged_id(self) -> str:
        """An id outside every log (a snapshot): a reconnect with it is a miss."""
        self._loose += 1
        return f"{self._token}-{self._loose}"

    # subscriptions ----------------------------------------------------------------
    def subscribe(self, endpoint_id: str, wanted: FeedFilter = FeedFilter()) -> FeedSubscription:
        """Events of ``endpoint_id`` (``EVERY_ENDPOINT``: of all) from now on; from now on they
        are logged for a reconnect."""
        self._sweep(self.clock())
        log = self._open_log(endpoint_id)
        position = log.id(log.last) if log is not None else self.unlogged_id()
        return self._add(FeedSubscription(self, endpoint_id, position, wanted))

    def resume(
        self, endpoint_id: str, last_event_id: str, wanted: FeedFilter = FeedFilter()
    ) -> FeedSubscription | None:
        """The events after ``last_event_id``, then the live ones; None when the log does not
        hold all of them."""
        self._sweep(self.clock())
        log = self._logs.get(endpoint_id)
        missed = log.after(last_event_id) if log is not None else None
        if missed is None:
            return None
        sub = self._add(FeedSubscription(self, endpoint_id, last_event_id, wanted))
        for event_id, event, _ in missed:
            sub._put((event_id, event))
        self._touch(endpoint_id, log)  # type: ignore[arg-type]
        return sub

    def _add(self, sub: FeedSubscription) -> FeedSubscription:
        self._subscribers.setdefault(sub.endpoint_id, []).append(sub)
        return sub

    def unsubscribe(self, sub: FeedSubscription) -> None:
        subs = self._subscribers.get(sub.endpoint_id)
        if subs and sub in subs:
            subs.remove(sub)
            if not subs:
                del self._subscribers[sub.endpoint_id]
                log = self._logs.get(sub.endpoint_id)
                if log is not None:
                    self._touch(sub.endpoint_id, log)  # its keep time starts now

    def subscriber_count(self, endpoint_id: str) -> int:
        return len(self._subscribers.get(endpoint_id, ()))

    def close_all(self) -> None:
        """End every subscription (the gateway stops)."""
        for subs in self._subscribers.values():
            for sub in subs:
                sub._push(_END)
        self._subscribers.clear()

    def start_over(self) -> None:
        """Events may have been missed (the relay lost its connection or dropped some): end
        every subscription and drop every log, so each client reconnects to a snapshot."""
        self.close_all()
        self._logs.clear()
        self._log_bytes = 0

    # logs ---------------------------------------------------------------------------
    def _open_log(self, endpoint_id: str) -> ReplayLog[FeedEvent] | None:
        if self.limits.events <= 0:
            return None
        log = self._logs.get(endpoint_id)
        if log is None:
            log = self._logs[endpoint_id] = ReplayLog(self.clock())
            self._log_bytes += log.size
        self._touch(endpoint_id, log)
        return log

    def _append(self, endpoint_id: str, log: ReplayLog[FeedEvent], event: FeedEvent) -> str:
        event_id, grown = log.append(event, len(event.data), self.limits.events)
        self._log_bytes += grown
        self._logs.move_to_end(
            endpoint_id
        )  # active, but its keep time runs from its last subscriber
        if self._log_bytes > self.limits.max_bytes:
            self._sweep(self.clock())
        return event_id

    def _touch(self, endpoint_id: str, log: ReplayLog[FeedEvent]) -> None:
        now = self.clock()
        log.touched = now
        self._logs.move_to_end(endpoint_id)
        self._sweep(now)

    def _sweep(self, now: float) -> None:
        """Drop the logs without subscribers past their keep time (events still coming in do
        not extend it: a relay sends an endpoint's events while its log lives) and, while
        over the byte budget, the least recently active ones."""
        for endpoint_id, log in list(self._logs.items()):
            if endpoint_id in self._subscribers:
                log.touched = now
            elif log.touched + self.limits.keep_seconds <= now:
                self._drop_log(endpoint_id)
        while self._log_bytes > self.limits.max_bytes and self._logs:
            self._drop_log(next(iter(self._logs)))

    def _drop_log(self, endpoint_id: str) -> None:
        self._log_bytes -= self._logs.pop(endpoint_id).size

    def log_stats(self) -> dict[str, int]:
        return {"logs": len(self._logs), "bytes": self._log_bytes,
                "events": sum(len(log.events) for log in self._logs.values())}

    async def aclose(self) -> None:
        self.close_all()
