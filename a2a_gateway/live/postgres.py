"""The live path across replicas, on PostgreSQL LISTEN/NOTIFY.

``PostgresLiveHub`` behaves like ``LiveHub`` inside a replica and adds:

* **Interest, not broadcast.** A replica following a task it does not run
  (``follow``: a ``SubscribeToTask`` or follow-up message that landed on the "wrong"
  replica) announces it on the shared channel ``a2a_live_watch``: ``watch`` (asking
  for a snapshot) as each follower arrives, ``unwatch`` when the last local
  subscriber of that task leaves, and a refresh of all its watched task ids every
  ``refresh_seconds`` (so a replica that takes a task over, or whose listener
  reconnected, learns who is watching). ``subscribe`` (a stream of a run on this
  replica) never announces anything. Only the replica
  running the task acts on it: it remembers the watcher (forgotten after
  ``3 * refresh_seconds`` without a refresh) and from then on forwards that task's
  events to the watcher's own channel. A task nobody watches from elsewhere costs
  one dict lookup per event; nothing is sent.
* **Replica channels.** Each replica LISTENs on ``a2a_live_<digest of its id>``, on
  one dedicated connection outside the pool; events for watched tasks and control
  commands (``send_control``: e.g. ``cancel`` → ``LocalRuns.handle_control``) arrive
  there; a command for every replica (``tell_all``: ``released`` by a replica that
  stops) goes on the shared channel. When the connection is lost it is re-opened
  with back-off and every watch is announced again; meanwhile followers keep polling the
  store, so a lost listener makes them slower, never stuck.
* **Snapshot.** On a new watch (or a re-announcement after a reconnect) the owner
  first sends the text streamed so far (``append: false``), then the live deltas,
  in order — what a local ``SubscribeToTask`` gets. A follower that asked for it takes
  nothing before it, and one that did not ignores it: an earlier follower has that text
  already, and a client that concatenates chunks would show it twice. A snapshot this
  replica did not ask for (its owner took the task over, or had forgotten the watch, and
  what it streamed meanwhile never came) goes to every follower. The owner says whether a
  snapshot was asked for, however late it comes; from an owner of an earlier version
  (during a rolling upgrade), one that comes more than a refresh after this replica last
  asked counts as unasked.
* **Payloads** (``live.postgres_wire``) stay under PostgreSQL's 8000-byte limit: a
  larger text delta is split, a larger final artifact or status update becomes a
  pointer. The receiving replica reads the task from the store once the owner's
  write has landed and delivers the stored event; later events of that task wait
  behind it. A larger status update goes without its message unless the store
  holds that exact status.
* **Event ids.** Events forwarded from another replica reach the local followers with
  ids outside every replay log: a client that reconnects with one starts from a
  snapshot (only the replica running a task logs its events for replay).
* **Order.** One sender task sends the outbox in order; a batch is one statement,
  hence one transaction, and PostgreSQL delivers a transaction's notifications in
  order.
* **Endpoint changes.** Every change of an endpoint row is NOTIFYed on
  ``a2a_endpoint_changed`` by the database itself (a trigger, migration 0009), whoever made
  it — this gateway, another replica, the CLI. Each replica then has its registry re-read
  that row at its next request (``endpoint_changed``), so a disabled endpoint answers 404
  everywhere at once; after a lost connection every row is re-read.
* **Bounded.** The outbox holds at most ``max_pending`` messages (beyond that
  events are dropped and counted: followers still get durable changes from the
  store); a failed send drops its batch; every loop sleeps or waits with a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import deque
from typing import Any

import structlog

from a2a_gateway.live.background import Background, stored_at_least
from a2a_gateway.live.feed_relay import FeedRelay
from a2a_gateway.live.hub import LiveEvent, LiveHub, Subscription
from a2a_gateway.live.postgres_wire import (
    CONTROL,
    EVENT,
    SNAPSHOT_END,
    STATUS,
    UNWATCH,
    WATCH,
    WATCH_CHANNEL,
    LiveWire,
    control_payload,
    decode_event,
    is_pointer,
    parse,
    pointer_target,
    replica_channel,
    stored_event,
)
from a2a_gateway.stores.base import StoreUnavailableError

log = structlog.get_logger(__name__)

_BATCH = 256
FEED_CHANNEL = "a2a_live_feed"
"""Where the replicas relay their operator feed events (``live.feed_relay``)."""
ENDPOINT_CHANNEL = "a2a_endpoint_changed"
"""Where the database announces a changed endpoint row, its id as payload (migration 0009)."""


def uses_postgres(store: Any) -> bool:
    """True when ``store`` is a ``PostgresStore`` (without importing asyncpg for other stores)."""
    module = sys.modules.get("a2a_gateway.stores.postgres")
    return module is not None and isinstance(store, module.PostgresStore)


class PostgresLiveHub(LiveHub):
    """``LiveHub`` plus LISTEN/NOTIFY between the replicas sharing one PostgreSQL store.

    ``serve(local)`` before ``start()``; ``aclose()`` before the store closes.
    """

    def __init__(
        self,
        store: Any,
        replica_id: str,
        *,
        refresh_seconds: float = 2.0,
        keepalive_seconds: float = 5.0,
        max_pending: int = 50_000,
        fetch_wait_seconds: float = 10.0,
    ) -> None:
        super().__init__()
        self._store = store
        self.replica_id = replica_id
        self.channel = replica_channel(replica_id)
        self._refresh = refresh_seconds
        self._keepalive = keepalive_seconds
        self._max_pending = max_pending
        self._fetch_wait = fetch_wait_seconds
        # owner side: task id → {watcher channel: monotonic expiry}
        self._watchers: dict[str, dict[str, float]] = {}
        # watcher side: tasks run elsewhere that this replica follows
        self._interest: set[str] = set()
        # followers that asked for a snapshot and have not had it yet
        self._awaiting: dict[str, set[Subscription]] = {}
        # when this replica last asked for a snapshot of each task (monotonic seconds)
        self._asked: dict[str, float] = {}
        # tasks whose events wait for a store read (an oversized event's pointer)
        self._held: dict[str, list[dict[str, Any]]] = {}
        self._outbox: deque[tuple[str, str]] = deque()
        self._wake = asyncio.Event()
        self._wire = LiveWire()
        self._listening = asyncio.Event()
        self._listener: Any = None
        self._closing = False
        self.stats = {"sent": 0, "received": 0, "dropped": 0, "send_failures": 0, "connects": 0}
        self._background = Background(self.stats)
        self.feed_relay = FeedRelay(
            self.feed,
            store,
            replica_id,
            lambda payload: self._enqueue(FEED_CHANNEL, payload),
            fetch_wait_seconds=fetch_wait_seconds,
            refresh_seconds=refresh_seconds,
        )

    # lifecycle -----------------------------------------------------------------
    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is up."""
        return self._listening.is_set()

    async def start(self, wait_seconds: float = 5.0) -> None:
        """Start listening, sending and refreshing; waits (bounded) for the first LISTEN."""
        self._background.start(**{"live-listen": self._listen_loop(),
                                  "live-send": self._send_loop(),
                                  "live-refresh": self._refresh_loop()})
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_seconds):
                await self._listening.wait()
        if not self.listening:
            log.warning(
                "live_listener_not_ready", detail="followers poll the store until it connects"
            )

    async def aclose(self) -> None:
        self._closing = True
        await self._background.stop(last=self._flush)
        await self._close_listener()
        await self.feed_relay.aclose()

    # LiveHub --------------------------------------------------------------------
    def follow(self, task_id: str) -> Subscription:
        """Subscribe, and ask the replica running ``task_id`` (unless it is this one)
        to forward its events here, starting with a snapshot."""
        if not self._runs_elsewhere(task_id):
            return self.subscribe(task_id)
        sub = self._add(task_id, self.unlogged_id())  # forwarded events are not logged here
        if not self._closing:
            # a new follower starts from a snapshot of the text so far (only it gets that)
            self._interest.add(task_id)
            self._awaiting.setdefault(task_id, set()).add(sub)
            self._ask_snapshot([task_id])
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        super().unsubscribe(sub)
        task_id = sub.task_id
        awaiting = self._awaiting.get(task_id)
        if awaiting is not None:
            awaiting.discard(sub)
            if not awaiting:
                del self._awaiting[task_id]
        if task_id in self._interest and not self._subscribers.get(task_id):
            self._interest.discard(task_id)
            self._asked.pop(task_id, None)
            self._announce(UNWATCH, [task_id])

    def has_listeners(self, task_id: str) -> bool:
        """Local subscribers, a live replay log or watchers on other replicas: otherwise
        the run need not build the task's live events at all."""
        return super().has_listeners(task_id) or task_id in self._watchers

    def publish(self, task_id: str, event: LiveEvent, generation: int = 0) -> str:
        event_id = super().publish(task_id, event, generation)
        watchers = self._watchers.get(task_id)
        if watchers:
            payloads = self._encode(task_id, event)
            for channel in watchers:
                for payload in payloads:
                    self._enqueue(channel, payload)
        return event_id

    def end(self, task_id: str) -> None:
        super().end(task_id)
        self._watchers.pop(task_id, None)
        self._awaiting.pop(task_id, None)
        self._asked.pop(task_id, None)
        if task_id in self._interest:
            self._interest.discard(task_id)
            self._announce(UNWATCH, [task_id])

    async def send_control(self, replica_id: str, command: str, task_id: str) -> None:
        """NOTIFY ``replica_id`` (at once, not through the outbox); if that fails the owner
        still notices through the store at its next lease check."""
        payload = control_payload(self.replica_id, command, task_id)
        try:
            await self._store.notify([(replica_channel(replica_id), payload)])
        except Exception as exc:
            log.warning("live_control_not_sent", command=command, task_id=task_id, error=str(exc))

    # encoding -------------------------------------------------------------------
    def _encode(self, task_id: str, event: LiveEvent) -> list[str]:
        """Payloads (each under the NOTIFY limit) that carry ``event`` to a watcher."""
        payloads = self._wire.event(task_id, event, self._run(task_id))
        if not payloads:
            log.warning("live_event_too_large", task_id=task_id, bytes=event.ByteSize())
        return payloads

    # outbox -------------------------------------------------------------------------
    async def tell_all(self, command: str) -> None:
        """NOTIFY every replica on the shared channel (at once; a replica that misses it
        acts at its next lease check)."""
        try:
            await self._store.notify(
                [(WATCH_CHANNEL, control_payload(self.replica_id, command, ""))]
            )
        except Exception as exc:
            log.warning("live_control_not_sent", command=command, error=str(exc))

    def _enqueue(self, channel: str, payload: str) -> None:
        if len(self._outbox) >= self._max_pending or self._closing:
            self.stats["dropped"] += 1
            self._background.warn("live_outbox_full", pending=len(self._outbox))
            return
        self._outbox.append((channel, payload))
        self._wake.set()

    async def _flush(self) -> None:
        while self._outbox:
            batch = [self._outbox.popleft() for _ in range(min(_BATCH, len(self._outbox)))]
            for attempt in (1, 2):
                try:
                    await self._store.notify(batch)
                    self.stats["sent"] += len(batch)
                    break
                except StoreUnavailableError as exc:
                    # a pooled connection the server dropped (restart, terminated
                    # backend) fails once and is replaced: one retry
                    if attempt == 2:
                        self._send_failed(batch, exc)
                except Exception as exc:
                    self._send_failed(batch, exc)
                    break

    def _send_failed(self, batch: list[tuple[str, str]], exc: Exception) -> None:
        self.stats["send_failures"] += len(batch)
        self._background.warn("live_notify_failed", error=str(exc), dropped=len(batch))

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._flush()

    # interest ------------------------------------------------------------------------
    def _runs_elsewhere(self, task_id: str) -> bool:
        return self._local is not None and self._run(task_id) is None

    def _announce(self, kind: str, task_ids: list[str], *, snap: bool = False) -> None:
        """Broadcast ``watch``/``unwatch`` for ``task_ids``."""
        for payload in self._wire.interest(kind, self.replica_id, task_ids, snap=snap):
            self._enqueue(WATCH_CHANNEL, payload)

    def _ask_snapshot(self, task_ids: list[str]) -> None:
        """``watch`` asking the owners of ``task_ids`` for a snapshot."""
        now = time.monotonic()
        for task_id in task_ids:
            self._asked[task_id] = now
        self._announce(WATCH, task_ids, snap=True)

    def _asked_lately(self, task_id: str) -> bool:
        """Whether a snapshot of ``task_id`` may still answer this replica's last request
        (asked again at a refresh, the second answer can come after the first)."""
        return time.monotonic() - self._asked.get(task_id, -self._refresh) < self._refresh

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh)
            try:
                self._refresh_once()
            except Exception:
                log.exception("live_refresh_failed")

    def _refresh_once(self) -> None:
        self.feed_relay.refresh(self.listening)
        remote = [t for t in self._interest if self._runs_elsewhere(t)]
        if remote and self.listening:
            # a snapshot request the owner missed (its listener was down too) is asked again:
            # until a snapshot comes, its followers take none of the owner's events
            unanswered = [t for t in remote if self._awaiting.get(t)]
            if unanswered:
                self._ask_snapshot(unanswered)
            answered = [t for t in remote if not self._awaiting.get(t)]
            if answered:
                self._announce(WATCH, answered)
        now = time.monotonic()
        for task_id in list(self._watchers):
            if self._run(task_id) is None:
                del self._watchers[task_id]
                continue
            watchers = self._watchers[task_id]
            for channel, expiry in list(watchers.items()):
                if expiry < now:
                    del watchers[channel]
            if not watchers:
                del self._watchers[task_id]

    def _on_watch(self, message: dict[str, Any]) -> None:
        if self._local is None:
            return
        channel = replica_channel(str(message.get("r")))
        expiry = time.monotonic() + 3 * self._refresh
        for task_id in message.get("ids") or ():
            if self._run(task_id) is None:
                continue
            watchers = self._watchers.setdefault(task_id, {})
            new = channel not in watchers
            watchers[channel] = expiry
            asked = bool(message.get("s"))
            if new or asked:
                self._send_snapshot(task_id, channel, asked=asked)

    def _on_unwatch(self, message: dict[str, Any]) -> None:
        channel = replica_channel(str(message.get("r")))
        for task_id in message.get("ids") or ():
            watchers = self._watchers.get(task_id)
            if watchers is not None:
                watchers.pop(channel, None)
                if not watchers:
                    del self._watchers[task_id]

    def _send_snapshot(self, task_id: str, channel: str, *, asked: bool) -> None:
        event = self._local.text_so_far(task_id) if self._local is not None else None
        for payload in self._wire.snapshot(task_id, event, asked=asked):  # even with no text
            self._enqueue(channel, payload)

    # receiving ------------------------------------------------------------------------
    async def _listen_loop(self) -> None:
        backoff = 0.2
        while not self._closing:
            try:
                await self._listen_once()
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._background.warn("live_listener_lost", error=str(exc) or type(exc).__name__)
            finally:
                self._listening.clear()
                await self._close_listener()
            if self._closing:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _listen_once(self) -> None:
        """LISTEN until the connection is lost (a keepalive query catches half-open ones)."""
        conn = await self._store.connect_listener()
        self._listener = conn
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        await conn.add_listener(self.channel, self._on_notify)
        await conn.add_listener(WATCH_CHANNEL, self._on_notify)
        await conn.add_listener(FEED_CHANNEL, self._on_feed_notify)
        await conn.add_listener(ENDPOINT_CHANNEL, self._on_endpoint_changed)
        self._listening.set()
        self.feed_relay.connected()
        if self.stats["connects"]:
            self.feed.start_over()  # feed events may have been missed while not listening
            self.endpoint_changed(None)  # so may endpoint changes
        if self.stats["connects"] or self._interest:
            # events may have been missed: ask the owners again, with a snapshot
            remote = [t for t in self._interest if self._runs_elsewhere(t)]
            for task_id in remote:  # every follower starts again from the snapshot
                self._awaiting[task_id] = set(self._subscribers.get(task_id, ()))
            if remote:
                self._ask_snapshot(remote)
        self.stats["connects"] += 1
        while not lost.is_set() and not conn.is_closed():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._keepalive):
                    await lost.wait()
                break
            await conn.fetchval("SELECT 1", timeout=self._keepalive)

    async def _close_listener(self) -> None:
        conn, self._listener = self._listener, None
        if conn is None or conn.is_closed():
            return
        try:
            async with asyncio.timeout(2.0):
                await conn.close()
        except Exception:
            conn.terminate()

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        parsed = parse(payload)
        if parsed is None:
            return
        message, kind = parsed
        self.stats["received"] += 1
        try:
            if kind == WATCH:
                if message.get("r") != self.replica_id:
                    self._on_watch(message)
            elif kind == UNWATCH:
                if message.get("r") != self.replica_id:
                    self._on_unwatch(message)
            elif kind == CONTROL:
                self._on_control(message)
            elif isinstance(message.get("t"), str):
                self._deliver(message)
        except Exception:
            log.exception("live_message_failed", kind=kind)

    def _on_feed_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        self.feed_relay.on_message(payload)

    def _on_endpoint_changed(self, _conn: Any, _pid: int, _channel: str, endpoint_id: str) -> None:
        try:
            self.endpoint_changed(endpoint_id)
        except Exception:
            log.exception("live_endpoint_change_failed")

    def _on_control(self, message: dict[str, Any]) -> None:
        if self._local is None:
            return
        self._background.spawn(
            self._local.handle_control(str(message.get("c")), str(message.get("t")))
        )

    def _deliver(self, message: dict[str, Any]) -> None:
        task_id = message["t"]
        held = self._held.get(task_id)
        if held is not None:
            held.append(message)
            return
        if is_pointer(message):
            self._held[task_id] = []
            self._background.spawn(self._resolve(task_id, message))
            return
        if message.get("k") == EVENT:
            event = decode_event(message)
            if event is not None:
                self._to_followers(task_id, event, message.get("n"), message.get("x"))
        elif message.get("k") == SNAPSHOT_END:  # a snapshot with nothing in it
            self._awaiting.pop(task_id, None)

    async def _resolve(self, task_id: str, message: dict[str, Any]) -> None:
        """Deliver an oversized event from the store, then what arrived behind it."""
        event: LiveEvent | None = decode_event(message) if message.get("k") == EVENT else None
        try:
            found = await self._from_store(task_id, message)
            if found is not None:
                event = found
        except Exception as exc:
            self._background.warn("live_fetch_failed", task_id=task_id, error=str(exc))
        finally:
            held = self._held.pop(task_id, [])
            if event is not None:
                self._to_followers(task_id, event, message.get("n"), message.get("x"))
            for later in held:
                self._deliver(later)

    def _to_followers(self, task_id: str, event: LiveEvent, snapshot: Any, asked: Any) -> None:
        """Hand a forwarded event to the local followers it is for: part of a snapshot
        (``snapshot`` 1, or 2 for its last event), to those waiting for one; else to the
        others. A snapshot this replica did not ask for goes to every follower: its sender
        took this replica for a new watcher (it took the task over, or had forgotten the
        watch), so what the task streamed since its last forwarded event never came here.
        ``asked``: what the sender says of it (``x``); a sender of an earlier version says
        nothing (None), and it is judged by when this replica last asked."""
        awaiting = self._awaiting.get(task_id, set())
        if asked is None:
            asked = bool(awaiting) or self._asked_lately(task_id)
        if snapshot and not asked:
            subs = list(self._subscribers.get(task_id, ()))
        else:
            subs = [
                s for s in self._subscribers.get(task_id, ()) if (s in awaiting) == bool(snapshot)
            ]
        if snapshot == 2:
            self._awaiting.pop(task_id, None)
        size = event.ByteSize()
        for sub in subs:
            sub._put(self.unlogged_id(), event, size)

    async def _from_store(self, task_id: str, message: dict[str, Any]) -> LiveEvent | None:
        scope, version = pointer_target(message)
        wait = 0.0 if message["f"] == STATUS else self._fetch_wait  # a status never waits
        stored = await stored_at_least(self._store, scope, task_id, version, wait)
        return stored_event(message, stored.task) if stored is not None else None
