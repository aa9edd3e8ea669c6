"""The live path: per-task fan-out of events to the SSE clients of that task, with a
short replay log per streamed task so a client that lost its connection can resume.

Text deltas, progress notes and state changes of a running task are published
here as a2a protobuf events; every subscriber (the SendStreamingMessage caller,
SubscribeToTask callers) gets them in publication order, each with an event id.
A late subscriber gets its starting point (the Task and the text so far) from the
run itself, then follows the hub.

**Replay log.** A task streamed on this replica (``subscribe``) gets a log of its
recent events, numbered in order; while the log lives every event of the task is
published (``has_listeners``), whether or not a client is connected, so
``resume(task_id, last_event_id)`` can hand a reconnecting client exactly the events
after the last one it saw, then the live ones. An event id is ``<log token>.<n>``;
the token is random per log, so an id from another replica, an earlier process or a
log since dropped is simply a miss (the caller then starts from a snapshot). A log
holds the events of one run only: when another run of the task publishes, a new log
starts. Logs are bounded (``ReplayLimits``): events per task, a byte budget over all
tasks (least recently active dropped first), and a keep time after the last event or
the last subscriber, so the final events of an ended task can still be fetched. An event's
number in the log is its generation, so the id a client holds ends with the generation of
the last event it got.

This implementation is in-process; a cross-replica hub (PostgreSQL LISTEN/NOTIFY)
implements the same methods, and ``follow`` (a task run elsewhere) is where it
differs from ``subscribe``. The hub knows the runs of this replica only through
``LocalRuns``, given to ``serve``.

**Slow subscribers.** Each subscriber's pending events wait in a ``Backlog`` bounded
by bytes (``subscriber_max_bytes``), where consecutive text chunks of one artifact are
merged into one; a subscriber that falls further behind than that loses what it had
pending and is told so (``SubscriberBehind``): its consumer starts it over from a
fresh snapshot (``catch_up``), exactly as a late subscriber starts. It is never an error.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from a2a.types import Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

from a2a_gateway.generation import generation_of
from a2a_gateway.live.backlog import END, RESTART, Backlog
from a2a_gateway.live.feed import EndpointFeed
from a2a_gateway.live.replay_log import ReplayLog
from a2a_gateway.stores.base import Scope

LiveEvent = Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent


class LocalRun(Protocol):
    """A task's run on this replica, as the hub sees it: where its task is stored."""

    @property
    def scope(self) -> Scope: ...

    @property
    def version(self) -> int | None: ...

    @property
    def generation(self) -> int:
        """The task's generation with every event the run published so far."""


class LocalRuns(Protocol):
    """What the hub needs of this replica's runs (``tasks.live_view`` adapts the engine)."""

    def run(self, task_id: str) -> LocalRun | None:
        """The run of ``task_id`` on this replica; None when it runs elsewhere or nowhere."""

    def text_so_far(self, task_id: str) -> TaskArtifactUpdateEvent | None:
        """The response text streamed so far, as one chunk (for a watcher that arrives late)."""

    async def handle_control(self, command: str, task_id: str) -> None:
        """A command (e.g. ``cancel``) from another replica about ``task_id``."""


@dataclass(frozen=True, slots=True)
class ReplayLimits:
    events: int = 1000
    """Events kept per task; 0 keeps none (a reconnect always starts from a snapshot)."""
    keep_seconds: float = 60.0
    """How long a log is kept after its last event or its last subscriber left."""
    max_bytes: int = 64 * 1024 * 1024
    """All logs together (serialized event sizes plus a little per task)."""


SUBSCRIBER_MAX_BYTES = 1024 * 1024
"""Default bytes of events one subscriber may have pending."""


class SubscriberBehind(Exception):
    """The subscriber fell further behind than its byte budget: the events it had pending
    are gone. Start it over from a snapshot taken together with ``catch_up()``."""




class Subscription:
    """Events of one task for one subscriber, as ``(event_id, event)``; iterate it, close
    it when done. ``position`` is the id of the point it starts at: a snapshot taken
    together with the subscription stands for everything up to there."""

    def __init__(self, hub: LiveHub, task_id: str, max_bytes: int, position: str) -> None:
        self.task_id = task_id
        self.position = position
        self._hub = hub
        self._backlog = Backlog(max_bytes)
        self._behind = False

    def _put(self, event_id: str, event: LiveEvent, size: int) -> None:
        if self._behind:
            return  # the snapshot it starts over from will hold this event
        if not self._backlog.put(event_id, event, size):
            self._behind = True
            self._backlog.restart()

    def _end(self) -> None:
        self._backlog.end()

    async def __aiter__(self) -> AsyncIterator[tuple[str, LiveEvent]]:
        """The events in order; ``SubscriberBehind`` when some were dropped (iterate again
        after ``catch_up``)."""
        while True:
            item = await self._backlog.take()
            if item is END:
                return
            if item is RESTART:
                raise SubscriberBehind(self.task_id)
            yield item
            del item  # while it waits for the next, an idle stream keeps no event it gave

    def catch_up(self) -> str:
        """After ``SubscriberBehind``: take events again from now on. Returns the new
        ``position``, the point a snapshot taken right now stands for."""
        self._behind = False
        self.position = self._hub.position(self.task_id)
        return self.position

    def close(self) -> None:
        self._hub.unsubscribe(self)


class _Log(ReplayLog[LiveEvent]):
    """The recent events of one run of one task, kept serialized: an event object costs
    about 1.5 KB of the protobuf runtime's memory, its bytes a tenth of that (and a log
    outlives its clients: a long answer whose client left is kept whole for its keep time)."""

    __slots__ = ("run", "ended")

    def __init__(self, run: object, now: float, start: int) -> None:
        super().__init__(now, start)
        self.run = run
        """The run whose events these are (None before the first run published)."""
        self.ended = False

    def _pack(self, event: LiveEvent) -> tuple[type[LiveEvent], bytes]:
        return type(event), event.SerializeToString()

    def _unpack(self, kept: tuple[type[LiveEvent], bytes]) -> LiveEvent:
        cls, data = kept
        return cls.FromString(data)


class LiveHub:
    def __init__(self) -> None:
        self._subscribers: dict[str, list[Subscription]] = {}
        self._subscriber_max_bytes = SUBSCRIBER_MAX_BYTES
        self._local: LocalRuns | None = None
        self._limits = ReplayLimits()
        self._logs: OrderedDict[str, _Log] = OrderedDict()  # least recently active first
        self._log_bytes = 0
        self._token = os.urandom(6).hex()
        self._loose = itertools.count(1)
        self.clock: Callable[[], float] = time.monotonic
        self.feed = EndpointFeed()
        """The endpoints' lifecycle events, for their operators (``live.feed``)."""
        self.endpoint_changed: Callable[[str | None], None] = lambda _endpoint_id: None
        """Told that another process changed an endpoint's row (None: any may have changed,
        notices were missed): the registry re-reads it (``EndpointRegistry.forget``)."""

    def serve(self, local: LocalRuns, limits: ReplayLimits | None = None,
              subscriber_max_bytes: int | None = None) -> None:
        """The runs of this replica (whose control commands this hub delivers), the
        bounds of the replay logs and of each subscriber's backlog; before ``start()``."""
        self._local = local
        if limits is not None:
            self._limits = limits
        if subscriber_max_bytes is not None:
            self._subscriber_max_bytes = subscriber_max_bytes

    def _run(self, task_id: str) -> LocalRun | None:
        return self._local.run(task_id) if self._local is not None else None

    # subscriptions ----------------------------------------------------------------
    def subscribe(self, task_id: str) -> Subscription:
        """Events of ``task_id``, a task whose run is on this replica (or is starting here);
        from now on the task's events are logged for a reconnect."""
        log = self._open_log(task_id)
        return self._add(task_id, log.id(log.last) if log is not None else self.unlogged_id())

    def follow(self, task_id: str) -> Subscription:
        """Events of ``task_id``, a task run on another replica (or on none right now).
        A hub spanning replicas asks the task's owner for them; in-process there is no
        other replica, so this is ``subscribe``."""
        return self.subscribe(task_id)

    def resume(self, task_id: str, last_event_id: str) -> Subscription | None:
        """The events of ``task_id`` after ``last_event_id``, then the live ones (none once
        the task ended here); None when the log does not hold all of them, or when the
        task ended and nothing followed that id."""
        self._sweep(self.clock())
        log = self._logs.get(task_id)
        if log is None or (
            not log.ended and (log.run is None or log.run is not self._run(task_id))
        ):
            return None  # no log, or its run is no longer the one here: other events may be missing
        missed = log.after(last_event_id)
        if missed is None or (log.ended and not missed):
            return None
        if log.ended:
            sub = Subscription(self, task_id, self._subscriber_max_bytes, last_event_id)
        else:
            sub = self._add(task_id, last_event_id)
        for event_id, event, size in missed:  # as they were logged, one id each
            sub._backlog.put(event_id, event, size, merge=False)
        if log.ended:
            sub._end()  # kept its time after the end, however often resumed
        else:
            self._touch(task_id, log)
        return sub

    async def reconnect(self, task_id: str, last_event_id: str) -> Subscription | None:
        """A client's reconnect with ``Last-Event-ID``: ``resume`` from this replica's log; a
        hub spanning replicas also looks in the task's shared log."""
        return self.resume(task_id, last_event_id)

    def _add(self, task_id: str, position: str) -> Subscription:
        sub = Subscription(self, task_id, self._subscriber_max_bytes, position)
        self._subscribers.setdefault(task_id, []).append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self._subscribers.get(sub.task_id)
        if subs and sub in subs:
            subs.remove(sub)
            if not subs:
                del self._subscribers[sub.task_id]
                log = self._logs.get(sub.task_id)
                if log is not None:
                    self._touch(sub.task_id, log)  # its keep time starts now

    # events -------------------------------------------------------------------------
    def publish(self, task_id: str, event: LiveEvent, generation: int = 0) -> str:
        """Hand ``event`` to the task's subscribers (and its log); the id it was given.
        ``generation``: the one ``event`` carries, when the caller knows it (else read)."""
        size = event.ByteSize()
        log = self._logs.get(task_id)
        if log is not None and not log.ended:
            run = self._run(task_id)
            generation = generation or generation_of(event)
            if log.run is not run and log.run is not None:
                log = self._new_log(task_id, run, generation - 1)
            log.run = run
            event_id = self._append(task_id, log, event, size, generation)
        else:
            event_id = self.unlogged_id()
        self._fan_out(task_id, event_id, event, size)
        return event_id

    def _fan_out(
        self, task_id: str, event_id: str, event: LiveEvent, size: int | None = None
    ) -> None:
        subs = self._subscribers.get(task_id)
        if subs:
            size = event.ByteSize() if size is None else size
            for sub in subs:
                sub._put(event_id, event, size)

    def position(self, task_id: str) -> str:
        """The id of the task's latest logged event (what a snapshot taken now stands for);
        without a log, an unlogged id."""
        log = self._logs.get(task_id)
        return log.id(log.last) if log is not None else self.unlogged_id()

    def unlogged_id(self) -> str:
        """An id for an event outside every log (a snapshot, an event read from the store):
        a reconnect with it is a miss."""
        return f"{self._token}-{next(self._loose)}"

    def end(self, task_id: str) -> None:
        """The task will publish nothing more: end every subscription (its log is kept)."""
        for sub in self._subscribers.pop(task_id, []):
            sub._end()
        log = self._logs.get(task_id)
        if log is not None and not log.ended:
            log.ended, log.run = True, None
            self._touch(task_id, log)

    def subscriber_count(self, task_id: str) -> int:
        return len(self._subscribers.get(task_id, ()))

    def has_listeners(self, task_id: str) -> bool:
        """Whether anyone would receive events of ``task_id`` (so they are worth building):
        a subscriber, or a live log a client may resume from; a hub spanning replicas also
        counts its remote listeners."""
        if task_id in self._subscribers:
            return True
        log = self._logs.get(task_id)
        return log is not None and not log.ended

    # logs ---------------------------------------------------------------------------
    def _open_log(self, task_id: str) -> _Log | None:
        """The task's live log, started if there is none (or only an ended one)."""
        if self._limits.events <= 0:
            return None
        log = self._logs.get(task_id)
        if log is None or log.ended:
            run = self._run(task_id)  # a snapshot taken now stands for its generation
            log = self._new_log(task_id, run, getattr(run, "generation", 0))
        self._touch(task_id, log)
        return log

    def _new_log(self, task_id: str, run: object, start: int) -> _Log:
        self._drop_log(task_id)
        log = _Log(run, self.clock(), max(start, 0))
        self._logs[task_id] = log
        self._log_bytes += log.size
        return log

    def _append(
        self, task_id: str, log: _Log, event: LiveEvent, size: int, generation: int
    ) -> str:
        event_id, grown = log.append(event, size, self._limits.events, generation)
        self._log_bytes += grown
        self._touch(task_id, log)
        return event_id

    def _touch(self, task_id: str, log: _Log) -> None:
        now = self.clock()
        log.touched = now
        self._logs.move_to_end(task_id)
        self._sweep(now)

    def _sweep(self, now: float) -> None:
        """Drop logs past their keep time (those with subscribers count as active) and,
        while over the byte budget, the least recently active ones."""
        keep = self._limits.keep_seconds
        for _ in range(len(self._logs)):
            task_id, log = next(iter(self._logs.items()))
            over_budget = self._log_bytes > self._limits.max_bytes
            if not over_budget and log.touched + keep > now:
                return
            if not over_budget and task_id in self._subscribers:
                log.touched = now
                self._logs.move_to_end(task_id)
                continue
            self._drop_log(task_id)

    def _drop_log(self, task_id: str) -> None:
        log = self._logs.pop(task_id, None)
        if log is not None:
            self._log_bytes -= log.size

    def drop_expired_logs(self) -> int:
        """Drop the logs past their keep time now (events and subscriptions sweep too, but a
        quiet hub has none); the number of logs left."""
        self._sweep(self.clock())
        return len(self._logs)

    def replay_stats(self) -> dict[str, Any]:
        """Logs held and their bytes (for tests and figures)."""
        return {"logs": len(self._logs), "bytes": self._log_bytes,
                "events": sum(len(log.events) for log in self._logs.values())}

    # lifecycle: nothing to do in-process; a hub spanning replicas connects here
    listening = True
    """False while a cross-replica hub cannot receive (followers then poll the store)."""

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def send_control(self, replica_id: str, command: str, task_id: str) -> None:
        """Tell replica ``replica_id`` about ``task_id`` (e.g. ``cancel``). In-process there is
        no other replica: the owner notices through the store at its next lease check."""

    def push_due(self, when: float) -> None:
        """A push delivery becomes due at ``when`` (epoch seconds), for whichever replica
        claims it; a hub spanning replicas tells them (in-process each replica polls)."""

    async def next_push_check(self, poll_seconds: float) -> None:
        """Wait until this replica should look in the store for due push deliveries: every
        ``poll_seconds`` here; a hub that knows when deliveries are due waits for that."""
        await asyncio.sleep(poll_seconds)

    async def announce_endpoint_change(self, endpoint_id: str) -> None:
        """Tell the other replicas that ``endpoint_id``'s row changed here (in-process there
        are none; on PostgreSQL the database itself announces every change)."""

    async def tell_all(self, command: str) -> None:
        """Tell every other replica ``command`` (e.g. ``released``: look for tasks to take
        over now). In-process there is no other replica."""
