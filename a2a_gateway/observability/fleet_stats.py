"""Numbers at a glance for the whole fleet: every replica's ring, shared through Redis.

After each sample of its ``StatsSampler`` a replica writes its ``series()`` (with its id) to
``<prefix>stats:<digest of its id>``, expiring after ``STALE_INTERVALS`` intervals, and
notes itself in the sorted set ``<prefix>stats:replicas`` (score: the write's epoch seconds;
members older than those intervals are pruned with each write). ``fleet()`` reads the
replicas seen within them, with one ZRANGEBYSCORE and one MGET, and is the JSON of
``GET /admin/api/stats?scope=fleet`` (docs/console.md): each replica's series, who answered,
and the per-endpoint counts summed. This replica's own series is always the current one;
when Redis cannot be read it is the only one, and ``fleetAvailable`` is false.

Replica ids reach keys only as digests. The client is redis-py's asyncio client the app
opened (``live.redis.open_redis``), taken as it is: observability imports nothing above it.
Replicas' clocks are taken to agree within an interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import structlog
from aiohttp import web

from a2a_gateway.observability.stats import StatsSampler, running_task

log = structlog.get_logger(__name__)

STALE_INTERVALS = 3
"""A replica that has not written for this many intervals is no longer in the fleet."""
READ_SECONDS = 2.0
"""Longest wait for Redis when the fleet is asked for (then: this replica alone)."""
WARN_EVERY_SECONDS = 5.0


def replica_digest(replica_id: str) -> str:
    return hashlib.blake2b(replica_id.encode(), digest_size=16).hexdigest()


class FleetStats:
    """The replica's ring, published to Redis after each sample, and the fleet's rings read
    back from it."""

    def __init__(
        self, redis: Any, prefix: str, replica_id: str, sampler: StatsSampler,
        *, clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self.replica_id = replica_id
        self._sampler = sampler
        self._clock = clock
        self._members_key = f"{prefix}stats:replicas"
        self._due = asyncio.Event()
        self._due.set()  # the replica is in the fleet from its start, before its first sample
        self._last_warning = 0.0
        self._publishing = False
        """Whether the last write went through (a failure after one is worth a line)."""
        sampler.sampled.append(lambda _sample: self._due.set())

    @property
    def max_age_seconds(self) -> float:
        return STALE_INTERVALS * self._sampler.interval

    def _key(self, digest: str) -> str:
        return f"{self._prefix}stats:{digest}"

    def local(self) -> dict[str, Any]:
        """The replica's own entry: its id and its series now."""
        return {"replica": self.replica_id, **self._sampler.series()}

    async def publish(self) -> None:
        """Writes this replica's entry and notes it in the fleet (one round trip)."""
        now, digest = self._clock(), replica_digest(self.replica_id)
        expiry_ms = max(1, math.ceil(self.max_age_seconds * 1000))
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(self._key(digest), orjson.dumps(self.local()), px=expiry_ms)
            pipe.zadd(self._members_key, {digest: now})
            pipe.zremrangebyscore(self._members_key, "-inf", f"({now - self.max_age_seconds}")
            pipe.pexpire(self._members_key, expiry_ms)  # gone with the last replica
            await pipe.execute()

    async def run(self) -> None:
        while True:
            await self._due.wait()
            self._due.clear()
            try:
                await self.publish()
                self._publishing = True
            except Exception as exc:
                if self._publishing:  # one line per outage; the live hub says Redis is away
                    self._publishing = False
                    self._warn("fleet_stats_not_published", exc)

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        return running_task(self.run(), "fleet-stats-writer")

    async def fleet(self) -> dict[str, Any]:
        """Every replica seen lately, this one with its current series (``?scope=fleet``)."""
        local = self.local()
        try:
            async with asyncio.timeout(READ_SECONDS):
                entries = await self._read()
        except Exception as exc:
            self._warn("fleet_stats_not_read", exc)
            return fleet_answer([local], available=False)
        others = [e for e in entries if e["replica"] != self.replica_id]
        return fleet_answer([local, *others], available=True)

    async def _read(self) -> list[dict[str, Any]]:
        since = self._clock() - self.max_age_seconds
        members = await self._redis.zrangebyscore(self._members_key, since, "+inf")
        if not members:
            return []
        values = await self._redis.mget([self._key(_text(m)) for m in members])
        return [entry for entry in map(_entry, values) if entry is not None]

    def _warn(self, event: str, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY_SECONDS:
            self._last_warning = now
            log.warning(event, error=str(exc) or type(exc).__name__)


def _text(member: bytes | str) -> str:
    return member.decode() if isinstance(member, bytes) else member


def _entry(value: bytes | str | None) -> dict[str, Any] | None:
    """A replica's entry as written by ``publish``; None for an expired or unreadable one."""
    if value is None:
        return None
    try:
        entry = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    usable = (
        isinstance(entry, dict) and isinstance(entry.get("replica"), str)
        and isinstance(entry.get("endpoints"), dict) and isinstance(entry.get("seconds"), list)
        and isinstance(entry.get("openStreams"), list)
    )
    return entry if usable else None


def fleet_answer(replicas: list[dict[str, Any]], *, available: bool) -> dict[str, Any]:
    """The JSON of ``?scope=fleet``: the replicas by id, and their counts summed."""
    ordered = sorted(replicas, key=lambda entry: entry["replica"])
    length = max((len(entry["seconds"]) for entry in ordered), default=0)
    return {
        "scope": "fleet",
        "fleetAvailable": available,
        "answered": [entry["replica"] for entry in ordered],
        "replicas": ordered,
        "summed": {
            "endpoints": sum_endpoints(ordered, length),
            "openStreams": sum_newest_aligned((e["openStreams"] for e in ordered), length),
        },
    }


def sum_newest_aligned(columns: Iterable[list[int]], length: int) -> list[int]:
    """Columns summed point by point from their newest point back, ``length`` points long:
    replicas sample at the same interval, not at the same instants, and some started later."""
    summed = [0] * length
    for column in columns:
        newest = column[-length:] if length else []
        offset = length - len(newest)
        for index, value in enumerate(newest):
            summed[offset + index] += value
    return summed


def sum_endpoints(replicas: list[dict[str, Any]], length: int) -> dict[str, Any]:
    """The replicas' ``endpoints`` as one: per endpoint, requests, errors and tasks by final
    state summed per point (newest aligned) and their totals over each replica's window."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for entry in replicas:
        for endpoint_id, series in entry["endpoints"].items():
            seen.setdefault(endpoint_id, []).append(series)
    return {endpoint_id: _sum_endpoint(seen[endpoint_id], length) for endpoint_id in sorted(seen)}


def _sum_endpoint(parts: list[dict[str, Any]], length: int) -> dict[str, Any]:
    states = sorted({state for part in parts for state in part["tasks"]})
    tasks = {
        state: sum_newest_aligned((p["tasks"][state] for p in parts if state in p["tasks"]), length)
        for state in states
    }
    totals = [part["total"] for part in parts]
    return {
        "requests": sum_newest_aligned((p["requests"] for p in parts), length),
        "errors": sum_newest_aligned((p["errors"] for p in parts), length),
        "tasks": tasks,
        "total": {
            "requests": sum(t["requests"] for t in totals),
            "errors": sum(t["errors"] for t in totals),
            "tasks": {state: sum(t["tasks"].get(state, 0) for t in totals) for state in states},
        },
    }


FLEET_STATS = web.AppKey("fleet_stats", FleetStats)
