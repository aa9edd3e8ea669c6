"""The live path across replicas, on Redis (or Valkey): streams for events, pub/sub for control.

``RedisLiveHub`` behaves like ``LiveHub`` inside a replica and adds, on any store:

* **Interest, not broadcast.** A task's events go to Redis only while another replica
  follows it: the replica running it appends them to the follower replica's inbox, a
  stream ``<prefix>inbox:{<digest of the replica id>}`` that only that replica reads (one
  blocking ``XREAD`` of one key, however many tasks it follows). A task followed nowhere
  else costs Redis nothing, however many clients stream it here. An entry holds the records
  of one write for that replica (``pack_records``: one ``XADD`` carries every event of a
  batch); a record names its task and holds an event with the id the owner gave it, and a
  kind: ``e`` an event, ``s`` a snapshot for one new follower, ``r`` a replayed event for
  one reconnect, ``m`` a miss, ``x`` the end. An inbox is capped at ``inbox_max_entries``
  entries and expires an hour after its last renewal (a replica that stopped).
* **Followers** (``follow``: a task that runs on another replica) ask on the shared channel
  for a snapshot (``watch`` with a nonce). The owner appends the text so far for that nonce
  to the follower's inbox, in order with the events, so the follower takes nothing before
  its snapshot and everything after it: no gap, nothing twice. Watches are repeated every
  ``refresh_seconds`` (an owner forgets a watcher after three missed refreshes); a snapshot
  that did not come (the task was queued for a worker, or between owners) is asked for again,
  soon at first, then every refresh. An owner that learns of a watcher from its refresh (it
  took the task over after its owner was lost, or the watch had lapsed) sends a snapshot
  without a nonce: the watcher's live followers missed what it streamed meanwhile, and take it.
* **Event ids valid everywhere.** A follower hands out the owner's ids (a watched task has a
  replay log on its owner). A client that reconnects with ``Last-Event-ID`` on another
  replica (``reconnect``) is answered from the log that gave the id: asked with a nonce
  (``replay``), its replica appends the events after the id (``r``), then, while the task
  runs, an ``s`` from which the reconnect follows live; the replica running the task says
  ``m`` when its log does not hold the id, and without an answer within
  ``REPLAY_WAIT_SECONDS`` the client starts from a snapshot (the log's replica stopped). The
  request names the task, so an id never replays another task's events.
* **Control** (``send_control``: e.g. ``cancel``) goes to the owner's channel
  ``<prefix>control:<digest of its id>``; ``tell_all`` (``released``) to the shared one.
* **Push deliveries** (``push_due``, ``next_push_check``): the due times of deliveries (a
  retry, a claim that a stopped replica would leave) go to ``<prefix>push:due``; each
  replica's push loop sleeps until the earliest, woken on ``<prefix>push`` when one is
  noted, instead of polling the store every ``push_poll_seconds``.
* **Operators' feed and endpoint changes.** The feed relay (``live.feed_relay``) speaks on
  ``<prefix>feed``; a replica that changed an endpoint row says so on ``<prefix>endpoints``
  (``announce_endpoint_change``) and every other replica re-reads that row at its next
  request. After a lost connection, the feed starts over and every row is re-read.
* **Faults.** A failed write drops its batch (counted, one warning per 5 s); the reader
  and the pub/sub listener reconnect with back-off. While Redis is away ``listening`` is
  False and followers go on from the store, as on one replica; on return, every follower
  asks for a new snapshot. The outbox is bounded (``max_pending``).

Replica ids reach Redis keys only as digests; nothing a client sends is used in a key.
Every command names one key (a cluster could hold them), but the client is a plain one:
connect to a primary (an ElastiCache replication group, a Sentinel-managed primary's
address), not to a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import math
import struct
import time
import uuid
from collections import deque
from typing import Any

import structlog
from a2a.types import Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

from a2a_gateway.live.background import Background
from a2a_gateway.live.feed_relay import FeedRelay
from a2a_gateway.live.hub import LiveEvent, LiveHub, Subscription

log = structlog.get_logger(__name__)

_BATCH = 512
_RECORDS_PER_ENTRY = 64
"""An inbox entry holds the records of one write for one replica, at most this many (so the
entry cap bounds an inbox's memory too)."""
PUSH_SAFETY_POLL_SECONDS = 300
"""With Redis a replica looks for due push deliveries when one falls due, and at least this
often (a due time lost with a restarted Redis)."""
REPLAY_WAIT_SECONDS = 1.0
"""How long a reconnect on another replica waits for the owner's replay; then a snapshot."""
_ASK_FIRST_SECONDS = 0.1
"""A follower whose snapshot did not come asks again after this, then twice as long each time."""
_READ_COUNT = 1024
INBOX_TTL_SECONDS = 3600
"""An inbox outlives its last expiry renewal this long (its replica stopped)."""
_RENEW_TTL_SECONDS = 60.0
"""An inbox's expiry is renewed at most this often (not with every entry)."""

_EVENT_TYPES: dict[bytes, type[LiveEvent]] = {
    b"T": Task,
    b"S": TaskStatusUpdateEvent,
    b"A": TaskArtifactUpdateEvent,
}
_TYPE_TAGS = {cls: tag for tag, cls in _EVENT_TYPES.items()}


BLOCK_SECONDS = 5.0
"""Longest wait of the stream reader's blocking read (a new follower wakes it at once)."""


def open_redis(url: str, ca_file: str = "") -> Any:
    """A client of the Redis at ``url`` (None for an empty URL); it connects on first use,
    so a Redis that is down does not stop startup. ``ca_file``: the PEM certificates that
    sign a ``rediss://`` server's certificate when the system's do not (a private CA).
    redis-py is imported only here."""
    if not url:
        return None
    from redis.asyncio import BlockingConnectionPool, Redis

    tls = {"ssl_ca_certs": ca_file} if ca_file and url.startswith("rediss://") else {}
    pool = BlockingConnectionPool.from_url(
        url,
        **tls,
        max_connections=64,
        timeout=2.0,  # a request waits this long for a free connection
        socket_connect_timeout=2.0,
        socket_timeout=BLOCK_SECONDS + 5.0,  # longer than a blocking stream read
        health_check_interval=30,
    )
    return Redis.from_pool(pool)  # closed with the client


async def announce_endpoint_change(redis: Any, prefix: str, sender: str,
                                   endpoint_id: str) -> None:
    """Tell the replicas on ``redis`` that ``sender`` (a replica, or the CLI) changed
    ``endpoint_id``'s row: they re-read it at their next request. Never raises."""
    message = json.dumps({"r": sender, "e": endpoint_id})
    try:
        await redis.publish(f"{prefix}endpoints", message)
    except Exception as exc:
        log.warning("endpoint_change_not_announced", endpoint_id=endpoint_id,
                    error=str(exc) or type(exc).__name__)


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@functools.lru_cache(maxsize=1024)
def inbox_key(prefix: str, replica_id: str) -> str:
    return f"{prefix}inbox:{{{digest(replica_id)}}}"


_SLOTS = (b"t", b"k", b"n", b"i", b"e", b"end")
_RECORD_HEADER = struct.Struct(f">{len(_SLOTS)}I")


def pack_records(records: list[dict[bytes, bytes]]) -> bytes:
    """Records (a task, a kind, a nonce, an event id, an event, an end mark) in one value:
    the lengths of the slots, then the slots, record after record."""
    parts = []
    for record in records:
        values = [record.get(slot, b"") for slot in _SLOTS]
        parts.append(_RECORD_HEADER.pack(*map(len, values)))
        parts.extend(values)
    return b"".join(parts)


def unpack_records(data: bytes) -> list[dict[bytes, bytes]]:
    """The records of ``pack_records`` (empty slots left out); none of a malformed value."""
    records, offset = [], 0
    try:
        while offset < len(data):
            lengths = _RECORD_HEADER.unpack_from(data, offset)
            offset += _RECORD_HEADER.size
            record = {}
            for slot, length in zip(_SLOTS, lengths, strict=True):
                if length:
                    record[slot] = data[offset:offset + length]
                offset += length
            records.append(record)
    except struct.error:
        return []
    return records if offset == len(data) else []


def encode_event(event: LiveEvent) -> bytes:
    return _TYPE_TAGS[type(event)] + event.SerializeToString()


def decode_event(data: bytes) -> LiveEvent | None:
    cls = _EVENT_TYPES.get(data[:1])
    if cls is None:
        return None
    event = cls()
    event.ParseFromString(data[1:])
    return event


class RemoteSubscription(Subscription):
    """A subscription fed from this replica's inbox: the task's events, and while it waits
    for the owner's answer to ``nonce`` only that answer."""

    def __init__(self, hub: LiveHub, task_id: str, max_bytes: int, position: str,
                 nonce: str | None, *, resumed: bool = False) -> None:
        super().__init__(hub, task_id, max_bytes, position)
        self.nonce = nonce
        self.resumed = resumed
        """A reconnect after an event id: it takes the events replayed for its nonce, never
        a snapshot (the client holds the text up to that id)."""


class RedisLiveHub(LiveHub):
    """``LiveHub`` plus Redis between the replicas; ``serve(local)`` before ``start()``."""

    def __init__(
        self,
        redis: Any,
        store: Any,
        replica_id: str,
        *,
        prefix: str = "a2a:",
        refresh_seconds: float = 2.0,
        block_seconds: float = BLOCK_SECONDS,
        max_pending: int = 50_000,
        inbox_max_entries: int = 10_000,
    ) -> None:
        super().__init__()
        self._redis = redis
        self.replica_id = replica_id
        self._prefix = prefix
        self._refresh = refresh_seconds
        self._block_ms = int(block_seconds * 1000)
        self._max_pending = max_pending
        self._shared_channel = f"{prefix}replicas"
        self._feed_channel = f"{prefix}feed"
        self._endpoint_channel = f"{prefix}endpoints"  # as announce_endpoint_change
        self._push_channel = f"{prefix}push"
        self._push_due_key = f"{prefix}push:due"
        self._push_wake = asyncio.Event()
        self._own_channel = self._control_channel(replica_id)
        self._inbox = inbox_key(prefix, replica_id)
        self._inbox_cursor: Any = "0-0"
        self._inbox_max_entries = inbox_max_entries
        # owner side: task id → {watching replica: monotonic expiry}
        self._watchers: dict[str, dict[str, float]] = {}
        # follower side: the tasks run elsewhere that this replica follows
        self._interest: set[str] = set()
        # tasks with a follower still waiting for its snapshot → (next ask, interval)
        self._unanswered: dict[str, tuple[float, float]] = {}
        # reconnects waiting for the owner's replay: nonce → found (True) or a miss (False)
        self._answers: dict[str, asyncio.Future[bool]] = {}
        self._outbox: deque[tuple[str, dict[bytes, bytes]]] = deque()
        self._publishes: deque[tuple[str, str]] = deque()  # (channel, message), in order
        self._renewed: dict[str, float] = {}  # inbox key → when its expiry was last set
        self._wake_sender = asyncio.Event()
        self._reading = False
        self._subscribed = False
        self._ever_subscribed = False
        self._closing = False
        self.stats = {"sent": 0, "published": 0, "received": 0, "dropped": 0,
                      "send_failures": 0, "connects": 0}
        """``sent``: inbox records written; ``published``: feed messages."""
        self._background = Background(self.stats)
        self.feed_relay = FeedRelay(self.feed, store, replica_id, self._publish_feed,
                                    refresh_seconds=refresh_seconds)

    # keys ----------------------------------------------------------------------------
    def _control_channel(self, replica_id: str) -> str:
        return f"{self._prefix}control:{digest(replica_id)}"

    # lifecycle -----------------------------------------------------------------------
    @property
    def listening(self) -> bool:
        """True while both the stream reader and the control listener are connected."""
        return self._reading and self._subscribed

    async def start(self, wait_seconds: float = 2.0) -> None:
        """Start reading, listening, sending and refreshing; waits (bounded) until
        connected, and says in one line when Redis cannot be reached."""
        self._background.start(**{"live-redis-read": self._read_loop(),
                                  "live-redis-listen": self._listen_loop(),
                                  "live-redis-send": self._send_loop(),
                                  "live-redis-refresh": self._refresh_loop()})
        deadline = time.monotonic() + wait_seconds
        while not self.listening and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if not self.listening:
            log.warning("live_redis_unreachable",
                        detail="followers poll the store until Redis answers")

    async def aclose(self) -> None:
        self._closing = True
        await self._background.stop(last=self._flush)
        await self.feed_relay.aclose()

    # LiveHub: owner side -----------------------------------------------------------------
    def has_listeners(self, task_id: str) -> bool:
        return super().has_listeners(task_id) or task_id in self._watchers

    def publish(self, task_id: str, event: LiveEvent, generation: int = 0) -> str:
        event_id = super().publish(task_id, event, generation)
        watchers = self._watchers.get(task_id)
        if watchers:
            fields = {b"k": b"e", b"i": event_id.encode(), b"e": encode_event(event)}
            for replica in watchers:
                self._send_to(replica, task_id, fields)
        return event_id

    def end(self, task_id: str) -> None:
        super().end(task_id)
        for replica in self._watchers.pop(task_id, ()):
            self._send_to(replica, task_id, {b"k": b"x"})

    def _on_watch(self, replica: str, task_ids: list[str], nonce: str | None) -> None:
        expiry = time.monotonic() + 3 * self._refresh
        for task_id in task_ids:
            if not isinstance(task_id, str) or self._run(task_id) is None:
                continue
            watchers = self._watchers.setdefault(task_id, {})
            new = replica not in watchers
            watchers[replica] = expiry
            self._open_log(task_id)  # the ids the follower hands out can then be resumed
            if nonce:
                self._send_snapshot(replica, task_id, nonce)
            elif new:  # a refresh from a watcher unknown here: the task moved here, or the
                self._send_snapshot(replica, task_id, None)  # watch lapsed; events were missed

    def _send_snapshot(self, replica: str, task_id: str, nonce: str | None) -> None:
        """The text so far for one new follower (``nonce``), in order with the events around
        it; without a nonce, for every follower of a replica that missed events."""
        fields = {b"k": b"s", b"i": self.position(task_id).encode()}
        if nonce is not None:
            fields[b"n"] = nonce.encode()
        chunk = self._local.text_so_far(task_id) if self._local is not None else None
        if chunk is not None:
            fields[b"e"] = encode_event(chunk)
        self._send_to(replica, task_id, fields)

    def _on_replay(self, replica: str, task_ids: list[str], nonce: str, after: str) -> None:
        """Another replica's client reconnects with ``after``, an id of this replica's log:
        append the events since (then, while the task runs here, mirror it for that
        replica). The replica running the task says when its log does not hold ``after`` (an
        id of an earlier run, or none at all); others say nothing then."""
        for task_id in task_ids:
            if not isinstance(task_id, str):
                continue
            log_, runs_here = self._logs.get(task_id), self._run(task_id) is not None
            missed = log_.after(after) if log_ is not None else None
            if missed is None or (log_ is not None and log_.ended and not missed):
                if runs_here or missed is not None:
                    self._send_to(replica, task_id, {b"k": b"m", b"n": nonce.encode()})
                continue
            assert log_ is not None
            if not log_.ended:
                self._watchers.setdefault(task_id, {})[replica] = (
                    time.monotonic() + 3 * self._refresh)
            for n, (event_id, event, _) in enumerate(missed, 1):
                fields = {b"k": b"r", b"n": nonce.encode(), b"i": event_id.encode(),
                          b"e": encode_event(event)}
                if log_.ended and n == len(missed):
                    fields[b"end"] = b"1"
                self._send_to(replica, task_id, fields)
            if not log_.ended:
                self._send_to(replica, task_id, {b"k": b"s", b"n": nonce.encode(),
                                                 b"i": self.position(task_id).encode()})

    def _on_unwatch(self, replica: str, task_ids: list[str]) -> None:
        for task_id in task_ids:
            watchers = self._watchers.get(task_id) if isinstance(task_id, str) else None
            if watchers is not None:
                watchers.pop(replica, None)
                if not watchers:
                    del self._watchers[task_id]

    # LiveHub: follower side ------------------------------------------------------------
    def _runs_elsewhere(self, task_id: str) -> bool:
        return self._local is not None and self._run(task_id) is None

    def follow(self, task_id: str) -> Subscription:
        """Events of a task run on another replica: from a snapshot its owner appends to
        this replica's inbox, then the events after it."""
        if not self._runs_elsewhere(task_id):
            return self.subscribe(task_id)
        sub = RemoteSubscription(self, task_id, self._subscriber_max_bytes, self.unlogged_id(),
                                 nonce=uuid.uuid4().hex)
        self._subscribers.setdefault(task_id, []).append(sub)
        self._interest.add(task_id)
        if not self._closing:
            self._background.spawn(self._ask(task_id, [sub.nonce]))  # type: ignore[list-item]
            self._unanswered[task_id] = (time.monotonic() + _ASK_FIRST_SECONDS, _ASK_FIRST_SECONDS)
        return sub

    async def _ask(self, task_id: str, nonces: list[str]) -> None:
        """Ask the task's owner for a snapshot for each of ``nonces``."""
        try:
            for nonce in nonces:
                await self._broadcast({"k": "watch", "t": [task_id], "n": nonce})
        except Exception as exc:
            self._warn_connected("live_redis_follow_failed", task_id=task_id, error=str(exc))

    async def reconnect(self, task_id: str, last_event_id: str) -> Subscription | None:
        """The events after ``last_event_id``: from this replica's log; for a task run
        elsewhere, from the log of the replica that gave out the id, which appends what
        followed it to this replica's inbox (then the live events); None when no replica
        answers within ``REPLAY_WAIT_SECONDS``."""
        local = self.resume(task_id, last_event_id)
        if local is not None or not self._runs_elsewhere(task_id) or self._closing:
            return local
        nonce = uuid.uuid4().hex
        sub = RemoteSubscription(self, task_id, self._subscriber_max_bytes, last_event_id,
                                 nonce=nonce, resumed=True)
        answered = self._answers[nonce] = asyncio.get_running_loop().create_future()
        self._subscribers.setdefault(task_id, []).append(sub)
        self._interest.add(task_id)
        found = False
        try:
            await self._broadcast({"k": "replay", "t": [task_id], "n": nonce,
                                   "a": last_event_id})
            async with asyncio.timeout(REPLAY_WAIT_SECONDS):
                found = await answered
        except Exception as exc:
            if not isinstance(exc, TimeoutError):
                self._warn_connected("live_redis_replay_failed", task_id=task_id, error=str(exc))
        finally:
            self._answers.pop(nonce, None)
        if not found:
            sub.close()
            return None
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        super().unsubscribe(sub)
        task_id = sub.task_id
        if task_id in self._interest and not self._remote_subs(task_id):
            self._stop_following(task_id)
            self._background.spawn(self._broadcast({"k": "unwatch", "t": [task_id]}))

    def _remote_subs(self, task_id: str) -> list[RemoteSubscription]:
        return [s for s in self._subscribers.get(task_id, ())
                if isinstance(s, RemoteSubscription)]

    def _stop_following(self, task_id: str) -> None:
        self._interest.discard(task_id)

    # reading the streams --------------------------------------------------------------
    async def _read_loop(self) -> None:
        backoff = 0.2
        while not self._closing:
            try:
                await self._read_once()
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._reading:  # one line per outage, none while never connected
                    self._lost_streams()
                    log.warning("live_redis_lost", error=str(exc) or type(exc).__name__,
                                detail="followers poll the store until Redis answers")
                self._reading = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _read_once(self) -> None:
        if not self._reading:
            if self._inbox_cursor == "0-0":  # first connect: what is already there is old
                last = await self._redis.xrevrange(self._inbox, count=1)
                self._inbox_cursor = last[0][0] if last else "0-0"
            if self.stats["connects"]:
                self._ask_again()
                log.info("live_redis_back")
            self.stats["connects"] += 1
            self._reading = True
        result = await self._redis.xread({self._inbox: self._inbox_cursor}, count=_READ_COUNT,
                                         block=self._block_ms)
        for _, entries in result or ():
            for _, fields in entries:
                for record in unpack_records(fields.get(b"r", b"")):
                    self.stats["received"] += 1
                    task_id = record.get(b"t", b"").decode()
                    if task_id in self._interest:
                        self._on_entry(task_id, record)
            self._inbox_cursor = entries[-1][0]

    def _on_entry(self, task_id: str, fields: dict[bytes, bytes]) -> None:
        kind, nonce = fields.get(b"k"), fields.get(b"n")
        if kind == b"x":
            self._end_remote(task_id, self._remote_subs(task_id))
            self._stop_following(task_id)
            return
        if nonce is not None:
            self._answer(nonce.decode(), found=kind != b"m")
        event = decode_event(fields[b"e"]) if b"e" in fields else None
        event_id = fields.get(b"i", b"").decode() or self.unlogged_id()
        for sub in self._remote_subs(task_id):
            waiting = sub.nonce is not None and sub.nonce.encode() == nonce
            if kind == b"s" and waiting:  # the snapshot (or the end of a replay): live now
                sub.nonce = None
                if event is not None and not sub.resumed:
                    sub._put(event_id, event, event.ByteSize())
            elif kind == b"r" and waiting and event is not None:
                sub._put(event_id, event, event.ByteSize())
                if fields.get(b"end"):
                    self._end_remote(task_id, [sub])
            elif kind == b"e" and sub.nonce is None and event is not None:
                sub._put(event_id, event, event.ByteSize())
            elif kind == b"s" and nonce is None and sub.nonce is None and event is not None:
                sub._put(event_id, event, event.ByteSize())  # a snapshot for a missed stretch

    def _answer(self, nonce: str, *, found: bool) -> None:
        answered = self._answers.get(nonce)
        if answered is not None and not answered.done():
            answered.set_result(found)

    def _end_remote(self, task_id: str, subs: list[RemoteSubscription]) -> None:
        remaining = self._subscribers.get(task_id, [])
        for sub in subs:
            if sub in remaining:
                remaining.remove(sub)
            sub._end()
        if not remaining:
            self._subscribers.pop(task_id, None)

    def _lost_streams(self) -> None:
        """Entries may be gone (a restarted Redis): every follower asks for a new snapshot
        once connected again (until then the store carries it); a reconnected client's
        stream ends, so that it reconnects again (the store has what it missed)."""
        for task_id in list(self._interest):
            subs = self._remote_subs(task_id)
            self._end_remote(task_id, [s for s in subs if s.resumed])
            for sub in subs:
                if not sub.resumed:
                    sub.nonce = uuid.uuid4().hex

    def _ask_again(self) -> None:
        for task_id in list(self._interest):
            self._background.spawn(self._ask(task_id, self._unanswered_nonces(task_id)))

    def _unanswered_nonces(self, task_id: str) -> list[str]:
        """The nonces of the task's followers still waiting for a snapshot."""
        return [s.nonce for s in self._remote_subs(task_id) if s.nonce and not s.resumed]

    # control ----------------------------------------------------------------------------
    async def send_control(self, replica_id: str, command: str, task_id: str) -> None:
        """Publish to ``replica_id``'s channel; if that fails the owner still notices
        through the store at its next lease check."""
        message = json.dumps({"k": "control", "r": self.replica_id, "c": command, "t": task_id})
        try:
            await self._redis.publish(self._control_channel(replica_id), message)
        except Exception as exc:
            log.warning("live_control_not_sent", command=command, task_id=task_id,
                        error=str(exc))

    async def tell_all(self, command: str) -> None:
        try:
            await self._broadcast({"k": "control", "c": command, "t": ""})
        except Exception as exc:
            log.warning("live_control_not_sent", command=command, error=str(exc))

    async def _broadcast(self, message: dict[str, Any]) -> None:
        message["r"] = self.replica_id
        await self._redis.publish(self._shared_channel, json.dumps(message))

    async def _listen_loop(self) -> None:
        backoff = 0.2
        while not self._closing:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._own_channel, self._shared_channel,
                                       self._feed_channel, self._endpoint_channel,
                                       self._push_channel)
                self._on_subscribed()
                backoff = 0.2
                async for message in pubsub.listen():
                    self._on_pubsub(message.get("channel"), message.get("data"))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._subscribed and self._reading:  # the reader says it when both go
                    log.warning("live_redis_listener_lost", error=str(exc) or type(exc).__name__)
            finally:
                self._subscribed = False
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            if not self._closing:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _on_subscribed(self) -> None:
        if self._ever_subscribed:
            self.feed.start_over()  # feed events may have been missed meanwhile
            self.endpoint_changed(None)  # so may endpoint changes
        self._ever_subscribed = self._subscribed = True
        self.feed_relay.connected()

    def _on_pubsub(self, channel: Any, data: Any) -> None:
        channel = channel.decode() if isinstance(channel, bytes) else channel
        try:
            if channel == self._feed_channel:
                self.feed_relay.on_message(data)
            elif channel == self._push_channel:
                self._push_wake.set()
            elif channel == self._endpoint_channel:
                self._on_endpoint_changed(data)
            else:
                self._on_message(data)
        except Exception:
            log.exception("live_message_failed", channel=channel)

    def _on_endpoint_changed(self, data: Any) -> None:
        message = json.loads(data)
        if message.get("r") != self.replica_id and isinstance(message.get("e"), str):
            self.endpoint_changed(message["e"])

    async def announce_endpoint_change(self, endpoint_id: str) -> None:
        """Tell every other replica that this one changed ``endpoint_id``'s row."""
        await announce_endpoint_change(self._redis, self._prefix, self.replica_id, endpoint_id)

    def _on_message(self, data: Any) -> None:
        try:
            message = json.loads(data)
        except (TypeError, ValueError):
            return
        if not isinstance(message, dict) or message.get("r") == self.replica_id:
            return
        kind, replica = message.get("k"), str(message.get("r"))
        task_ids = message.get("t") if isinstance(message.get("t"), list) else []
        if kind == "watch":
            nonce = message.get("n")
            self._on_watch(replica, task_ids, nonce if isinstance(nonce, str) else None)
        elif kind == "unwatch":
            self._on_unwatch(replica, task_ids)
        elif kind == "replay" and isinstance(message.get("n"), str):
            self._on_replay(replica, task_ids, message["n"], str(message.get("a")))
        elif kind == "control" and self._local is not None:
            command, task_id = str(message.get("c")), str(message.get("t"))
            self._background.spawn(self._local.handle_control(command, task_id))

    # push deliveries --------------------------------------------------------------------
    def push_due(self, when: float) -> None:
        """Note ``when`` in the fleet's due times and wake the replicas waiting."""
        self._background.spawn(self._note_push_due(when))

    async def _note_push_due(self, when: float) -> None:
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.zadd(self._push_due_key, {f"{when:.3f}": when})
            pipe.expire(self._push_due_key, PUSH_SAFETY_POLL_SECONDS * 2)
            pipe.publish(self._push_channel, b"")
            await pipe.execute()
        except Exception as exc:
            self._warn_connected("live_redis_push_due_failed", error=str(exc))

    async def next_push_check(self, poll_seconds: float) -> None:
        """Wait until the earliest due time the replicas noted (woken when one notes an
        earlier one), at most ``PUSH_SAFETY_POLL_SECONDS``; poll every ``poll_seconds``
        while Redis is away."""
        if not self.listening:
            await asyncio.sleep(poll_seconds)
            return
        self._push_wake.clear()
        try:
            first = await self._redis.zrange(self._push_due_key, 0, 0, withscores=True)
            wait = first[0][1] - time.time() if first else PUSH_SAFETY_POLL_SECONDS
            if wait <= 0:  # due now: this replica looks (all that are due, as room allows)
                await self._redis.zremrangebyscore(self._push_due_key, "-inf", time.time())
                return
        except Exception:
            await asyncio.sleep(poll_seconds)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(wait, PUSH_SAFETY_POLL_SECONDS)):
                await self._push_wake.wait()

    # refreshing -------------------------------------------------------------------------
    async def _refresh_loop(self) -> None:
        refreshed = time.monotonic()
        while True:
            await asyncio.sleep(_ASK_FIRST_SECONDS)
            try:
                await self._ask_unanswered()
                if time.monotonic() - refreshed >= self._refresh:
                    refreshed = time.monotonic()
                    await self._refresh_once()
            except Exception as exc:
                self._warn_connected("live_redis_refresh_failed", error=str(exc))

    async def _ask_unanswered(self) -> None:
        """Ask again for the snapshots no owner answered yet (the task was not running when
        asked: queued for a worker, or between owners), sooner at first, then each refresh."""
        now = time.monotonic()
        for task_id, (due, interval) in list(self._unanswered.items()):
            nonces = self._unanswered_nonces(task_id)
            if not nonces:
                del self._unanswered[task_id]
            elif now >= due and self._subscribed:
                interval = min(interval * 2, self._refresh)
                self._unanswered[task_id] = (now + interval, interval)
                for nonce in nonces:
                    await self._broadcast({"k": "watch", "t": [task_id], "n": nonce})

    async def _refresh_once(self) -> None:
        self.feed_relay.refresh(self._subscribed)
        now = time.monotonic()
        for task_id in list(self._watchers):
            watchers = self._watchers[task_id]
            for replica, expiry in list(watchers.items()):
                if expiry < now or self._run(task_id) is None:
                    del watchers[replica]
            if not watchers:
                del self._watchers[task_id]
        remote = [t for t in self._interest if self._runs_elsewhere(t)]
        if remote and self._subscribed:
            await self._broadcast({"k": "watch", "t": remote})

    # writing ------------------------------------------------------------------------------
    def _send_to(self, replica: str, task_id: str, fields: dict[bytes, bytes]) -> None:
        """Queue an entry about ``task_id`` for ``replica``'s inbox (sent in order)."""
        if len(self._outbox) >= self._max_pending or self._closing:
            self.stats["dropped"] += 1
            self._background.warn("live_outbox_full", pending=len(self._outbox))
            return
        self._outbox.append((inbox_key(self._prefix, replica), {b"t": task_id.encode(), **fields}))
        self._wake_sender.set()

    def _publish_feed(self, payload: str) -> None:
        if len(self._publishes) >= self._max_pending or self._closing:
            self.stats["dropped"] += 1
            self._background.warn("live_outbox_full", pending=len(self._publishes))
            return
        self._publishes.append((self._feed_channel, payload))
        self._wake_sender.set()

    async def _send_loop(self) -> None:
        while True:
            await self._wake_sender.wait()
            self._wake_sender.clear()
            await self._flush()

    async def _flush(self) -> None:
        """Append the outbox in order, a batch per round trip, each key's expiry renewed;
        publish the feed's messages in order."""
        while self._outbox or self._publishes:
            batch = [self._outbox.popleft() for _ in range(min(_BATCH, len(self._outbox)))]
            published = [self._publishes.popleft()
                         for _ in range(min(_BATCH, len(self._publishes)))]
            pipe = self._redis.pipeline(transaction=False)
            for channel, message in published:
                pipe.publish(channel, message)
            by_inbox: dict[str, list[dict[bytes, bytes]]] = {}
            for key, fields in batch:
                by_inbox.setdefault(key, []).append(fields)
            for key, records in by_inbox.items():
                for start in range(0, len(records), _RECORDS_PER_ENTRY):
                    packed = pack_records(records[start:start + _RECORDS_PER_ENTRY])
                    pipe.xadd(key, {b"r": packed}, maxlen=self._inbox_max_entries,
                              approximate=True)
            for key in self._expiries_due(batch):
                pipe.expire(key, INBOX_TTL_SECONDS)
            try:
                await pipe.execute()
                self.stats["sent"] += len(batch)
                self.stats["published"] += len(published)
            except Exception as exc:
                self.stats["send_failures"] += len(batch) + len(published)
                if self.listening:  # while Redis is away, its one line said so already
                    self._background.warn("live_redis_write_failed",
                                          error=str(exc) or type(exc).__name__,
                                          dropped=len(batch) + len(published))

    def _expiries_due(self, batch: list[tuple[str, dict[bytes, bytes]]]) -> list[str]:
        """The inboxes of ``batch`` whose expiry is to be renewed: at most once a minute."""
        now, due = time.monotonic(), []
        for key, _ in batch:
            if now - self._renewed.get(key, -math.inf) >= _RENEW_TTL_SECONDS:
                due.append(key)
                self._renewed[key] = now
        return due

    # helpers --------------------------------------------------------------------------------
    def _warn_connected(self, event: str, **fields: Any) -> None:
        """A warning, unless Redis is away: its outage has one line of its own."""
        if self.listening:
            self._background.warn(event, **fields)
