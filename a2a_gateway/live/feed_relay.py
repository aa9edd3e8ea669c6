"""The endpoint event feed across replicas, on a shared channel: PostgreSQL NOTIFY on
``a2a_live_feed`` (``live.postgres``) or Redis pub/sub on ``<prefix>feed`` (``live.redis``).

A replica sends the lifecycle events it announces (``live.feed``: a few per task, its state
changes and final artifact, never its text chunks) on the channel, for the endpoints another
replica watches. Every replica listens on it (through its live hub's connection) and delivers
the events of the endpoints it has subscribers or a replay log for.

**Watches.** Each replica announces on the same channel the feeds it watches (endpoint ids,
``""`` for every endpoint; ``{"r": <replica>, "w": [...]}``, the whole list each time, one
``""`` when the list would not fit a payload): every ``refresh_seconds``, and at once when a
feed gets its first client, asking every replica to acknowledge (``"n": <nonce>``; each
answers with its own list and ``"a": <nonce>``). A list not refreshed for ``3 *
refresh_seconds`` is forgotten. A replica sends everything until it has listened for ``1.5 *
refresh_seconds`` (it may not have heard every list yet: just started, or its listener
reconnected), then only what is watched elsewhere. A new feed client's snapshot is read once
every replica heard from lately has acknowledged and this replica has listened that long
(``watch``, at most ``3 * refresh_seconds``): every event announced after that reaches it,
the snapshot covers what came before. A feed stops being relayed one refresh after its last
client left and its replay log expired.

**Payload.** ``{"r": <replica>, "e": <the feed event's JSON>}`` when that fits PostgreSQL's
8000-byte limit (kept on Redis too: one wire format); otherwise a reference ``{"r", "sc":
scope, "t": task id, "k": "status" | "artifact", "a": artifact id, "v": version}``: the
receiver reads the task from the store once it holds that version (waiting up to
``fetch_wait_seconds``) and rebuilds the event from it. Received messages are handled one at
a time in arrival order (a reference waits for its read, the messages behind it wait too),
in a bounded inbox (beyond ``max_pending`` messages are dropped and counted, and the feed
starts over: its clients reconnect to a snapshot). When the LISTEN connection was lost
(events may have been missed meanwhile) the live hub makes the feed start over the same way
once it listens again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson
import structlog
from a2a.types import Task, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent

from a2a_gateway.events import artifact_event, status_event
from a2a_gateway.live.background import stored_at_least
from a2a_gateway.live.feed import (
    ARTIFACT,
    EVERY_ENDPOINT,
    STATUS,
    EndpointFeed,
    FeedEvent,
    FeedUpdate,
    envelope,
)
from a2a_gateway.live.postgres_wire import PAYLOAD_LIMIT
from a2a_gateway.stores.base import Scope

log = structlog.get_logger(__name__)

class FeedRelay:
    """Sends this replica's feed events to the others and delivers theirs to ``feed``."""

    def __init__(
        self,
        feed: EndpointFeed,
        store: Any,
        replica_id: str,
        send: Callable[[str], None],
        *,
        fetch_wait_seconds: float = 10.0,
        max_pending: int = 10_000,
        refresh_seconds: float = 2.0,
    ) -> None:
        self._feed = feed
        self._store = store
        self._replica_id = replica_id
        self._send = send
        """Puts a payload on the shared channel, in order (the hub's outbox)."""
        self._fetch_wait = fetch_wait_seconds
        self._max_pending = max_pending
        self._inbox: deque[dict[str, Any]] = deque()
        self._wake = asyncio.Event()
        self._consumer: asyncio.Task[None] | None = None
        self._refresh = refresh_seconds
        self._remote: dict[
            str, tuple[frozenset[str], float]
        ] = {}  # replica → (its watches, expiry)
        self._wanted_elsewhere: frozenset[str] = frozenset()
        self._listening_since: float | None = None
        self._selective = False  # every replica's watches known: send only those
        self._confirmed: set[str] = set()  # watched here, acknowledged everywhere
        self._pending: dict[
            str, tuple[set[str], asyncio.Event]
        ] = {}  # nonce → (replicas to ack, all did)
        self.stats = {"sent": 0, "references": 0, "received": 0, "dropped": 0, "announced": 0,
                      "unconfirmed": 0}
        feed.relay = self

    # watches ------------------------------------------------------------------------
    def wanted(self, endpoint_id: str) -> bool:
        if not self.selective:
            return True
        wanted = self._wanted_elsewhere
        return endpoint_id in wanted or EVERY_ENDPOINT in wanted

    @property
    def selective(self) -> bool:
        """True while only the feeds watched elsewhere are sent."""
        if not self._selective:
            self._selective = self._settled(time.monotonic())
        return self._selective

    def _settled(self, now: float) -> bool:
        """Listening long enough to have heard every replica's watches (each announces them
        every ``refresh_seconds``)."""
        return (
            self._listening_since is not None and now - self._listening_since >= 1.5 * self._refresh
        )

    def connected(self) -> None:
        """The listener (re)connected: watches may have been missed, send everything for now."""
        self._listening_since = time.monotonic()
        self._selective = False
        self._confirmed.clear()  # the others may have forgotten this replica's watches meanwhile
        self._announce(nonce=os.urandom(6).hex())

    def refresh(self, listening: bool) -> None:
        """Every ``refresh_seconds``: forget stale watches, announce this replica's."""
        now = time.monotonic()
        if not listening:
            self._listening_since = None
        self._selective = self._selective and listening
        self._recompute(now)
        if listening:
            self._announce()

    async def watch(self, key: str) -> None:
        if key in self._confirmed:
            return
        nonce = os.urandom(6).hex()
        now = time.monotonic()
        waiting = {replica for replica, (_, expiry) in self._remote.items() if expiry > now}
        done = asyncio.Event()
        self._pending[nonce] = (waiting, done)
        if not waiting:
            done.set()
        self._announce(nonce=nonce)
        try:
            async with asyncio.timeout(3 * self._refresh):
                await done.wait()
                while not self._settled(time.monotonic()):
                    await asyncio.sleep(0.05)
            self._confirmed.add(key)
        except TimeoutError:
            self.stats["unconfirmed"] += 1
            log.warning("live_feed_watch_unconfirmed", silent=sorted(waiting))
        finally:
            del self._pending[nonce]

    def _announce(self, *, nonce: str = "", ack: str = "") -> None:
        keys = self._feed.watched_keys()
        self._confirmed &= keys
        message: dict[str, Any] = {"r": self._replica_id, "w": sorted(keys)}
        if nonce:
            message["n"] = nonce
        if ack:
            message["a"] = ack
        payload = orjson.dumps(message)
        if len(payload) > PAYLOAD_LIMIT:  # too many to list: ask for all of them
            payload = orjson.dumps({**message, "w": [EVERY_ENDPOINT]})
        self.stats["announced"] += 1
        self._send(payload.decode())

    def _on_watches(self, message: dict[str, Any]) -> None:
        replica, keys = str(message.get("r")), message.get("w")
        if not isinstance(keys, list):
            return
        now = time.monotonic()
        self._remote[replica] = (
            frozenset(k for k in keys if isinstance(k, str)),
            now + 3 * self._refresh,
        )
        self._recompute(now)
        pending = self._pending.get(str(message.get("a")))
        if pending is not None:
            pending[0].discard(replica)
            if not pending[0]:
                pending[1].set()
        if message.get("n"):
            self._announce(ack=str(message["n"]))

    def _recompute(self, now: float) -> None:
        for replica, (_, expiry) in list(self._remote.items()):
            if expiry <= now:
                del self._remote[replica]
        self._wanted_elsewhere = frozenset().union(*(keys for keys, _ in self._remote.values()))

    # sending ------------------------------------------------------------------------
    def send(
        self, scope: Scope, task: Task, update: FeedUpdate, event: FeedEvent, version: int
    ) -> None:
        payload = orjson.dumps({"r": self._replica_id, "e": orjson.Fragment(event.data)})
        if len(payload) > PAYLOAD_LIMIT:
            kind = STATUS if isinstance(update, TaskStatusUpdateEvent) else ARTIFACT
            artifact_id = (
                update.artifact.artifact_id if isinstance(update, TaskArtifactUpdateEvent) else ""
            )
            payload = orjson.dumps(
                {
                    "r": self._replica_id,
                    "sc": list(scope.as_tuple()),
                    "t": task.id,
                    "k": kind,
                    "a": artifact_id,
                    "v": version,
                }
            )
            self.stats["references"] += 1
        self.stats["sent"] += 1
        self._send(payload.decode())

    # receiving ----------------------------------------------------------------------
    def on_message(self, payload: str | bytes) -> None:
        """A payload that arrived on the shared channel (this replica's own among them)."""
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if not isinstance(message, dict) or message.get("r") == self._replica_id:
            return
        if "w" in message:
            self._on_watches(message)
            return
        endpoint_id = _endpoint_of(message)
        if endpoint_id is None or not self._feed.watched(endpoint_id):
            return
        self.stats["received"] += 1
        if len(self._inbox) >= self._max_pending:
            self.stats["dropped"] += len(self._inbox) + 1
            self._inbox.clear()
            self._feed.start_over()  # its clients would miss events: they start from a snapshot
            return
        self._inbox.append(message)
        self._wake.set()
        if self._consumer is None or self._consumer.done():
            self._consumer = asyncio.create_task(self._consume(), name="live-feed-inbox")

    async def _consume(self) -> None:
        while True:
            while not self._inbox:
                self._wake.clear()
                await self._wake.wait()
            message = self._inbox.popleft()
            try:
                event = await self._event_of(message)
            except Exception as exc:
                log.warning("live_feed_message_failed", error=str(exc) or type(exc).__name__)
                continue
            if event is not None:
                self._feed.deliver(event)

    async def _event_of(self, message: dict[str, Any]) -> FeedEvent | None:
        body = message.get("e")
        if isinstance(body, dict):
            return FeedEvent(
                orjson.dumps(body),
                str(body.get("endpointId")),
                str(body.get("taskId")),
                str(body.get("contextId")),
                _state_number(body.get("state")),
            )
        return await self._from_store(message)

    async def _from_store(self, message: dict[str, Any]) -> FeedEvent | None:
        """The event a reference stands for, rebuilt from the stored task."""
        scope = Scope(*(str(part) for part in message["sc"]))
        task_id, version = str(message["t"]), int(message.get("v") or 0)
        stored = await stored_at_least(self._store, scope, task_id, version, self._fetch_wait)
        if stored is None:
            return None
        task = stored.task
        if message.get("k") == STATUS:
            return envelope(scope, task, status_event(task))
        for artifact in task.artifacts:
            if artifact.artifact_id == message.get("a"):
                return envelope(scope, task, artifact_event(task, artifact, last_chunk=True))
        return None

    async def aclose(self) -> None:
        if self._consumer is not None:
            self._consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._consumer


def _endpoint_of(message: dict[str, Any]) -> str | None:
    body = message.get("e")
    if isinstance(body, dict):
        value = body.get("endpointId")
    elif isinstance(message.get("sc"), list) and len(message["sc"]) == 3:
        value = message["sc"][1]
    else:
        return None
    return value if isinstance(value, str) else None


def _state_number(name: Any) -> int:
    try:
        return TaskState.Value(str(name))
    except ValueError:
        return 0
