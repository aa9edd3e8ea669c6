"""Quotas: a new task is admitted against its key's and its endpoint's limits before any work
starts, or refused with ``QuotaExceededError`` having taken nothing.

Counted once for the fleet. Task-count windows (per minute, hour, day; fixed windows aligned to
UTC) are counters in the store, each added to by one conditional write that refuses at the
limit (``Store.count_quota``), or in Redis when one is configured (one script call, the same
rule). Concurrency is a slot per running task (``Store.take_quota_slot``) with a lease this
replica renews with its task leases (``renew``); the slot is released when the task's run ends,
and a stopped replica's slots stop counting when their lease runs out. Token and money budgets
are the usage ledger's sums since the day's or month's start (``Store.usage_summary``, cached
``budget_cache_seconds`` per replica): checked at the start, counted when tasks end, so a
running task is never cut and the last admitted task may pass the budget.

If one limit refuses after others counted, those are given back; so are the counts of a task
that then fails to start. Follow-up messages to an existing task are not new tasks: they count
nothing and are not refused.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from a2a_gateway.errors import QuotaExceededError
from a2a_gateway.governance.limits import BUDGETS, WINDOW_SECONDS
from a2a_gateway.observability.metrics import QUOTA_REFUSALS
from a2a_gateway.stores.base import ApiKey, Store, UsageQuery

log = structlog.get_logger(__name__)

BUDGET_CACHE_SECONDS = 5.0
MAX_BUDGET_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class Subject:
    """Who a set of limits binds: one key, or one endpoint's callers together."""

    kind: str
    """``key`` or ``endpoint``."""
    id: str
    limits: dict[str, int | float]

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.id}"


@dataclass(slots=True)
class Admission:
    """What one admitted task took: window counts and concurrency slots."""

    counters: list[str] = field(default_factory=list)
    slots: list[tuple[str, str]] = field(default_factory=list)
    """(subject, slot id)."""


NOTHING_TAKEN = Admission()


class Quotas:
    """Admits new tasks against the limits of their key and endpoint (see the module)."""

    def __init__(
        self, store: Store, *, lease_seconds: float, redis: Any = None, prefix: str = "",
        budget_cache_seconds: float = BUDGET_CACHE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._lease_seconds = lease_seconds
        self._windows = RedisWindows(redis, prefix, store) if redis is not None else store
        self._budget_cache_seconds = budget_cache_seconds
        self._budgets: dict[tuple[str, str, float], tuple[float, float]] = {}
        """(subject, limit, window start) → (read at, amount used)."""
        self.clock = clock
        """Epoch seconds (tests move it to the next window)."""
        self._held: dict[str, set[str]] = {}
        """Slots of this replica's running tasks, by subject: renewed with the task leases."""
        self._to_release: dict[str, list[str]] = {}
        self._releasing: asyncio.Task[None] | None = None

    async def admit(
        self, endpoint_id: str, endpoint_limits: dict[str, int | float], key: ApiKey | None
    ) -> Admission:
        """Take what a new task counts against, or raise ``QuotaExceededError`` (having taken
        nothing)."""
        subjects = [Subject("endpoint", endpoint_id, endpoint_limits)] if endpoint_limits else []
        if key is not None and key.limits:
            subjects.insert(0, Subject("key", key.id, key.limits))
        if not subjects:
            return NOTHING_TAKEN
        now = self.clock()
        admission = Admission()
        try:
            for subject in subjects:
                await self._check_budgets(subject, now)
            for subject in subjects:
                await self._count_windows(subject, now, admission)
            for subject in subjects:
                await self._take_slot(subject, now, admission)
        except BaseException:
            await self.give_back(admission)
            raise
        return admission

    async def give_back(self, admission: Admission) -> None:
        """Undo an admission whose task did not start."""
        for counter in admission.counters:
            await self._windows.uncount_quota(counter)
        for subject, slot_id in admission.slots:
            self._held.get(subject, set()).discard(slot_id)
            await self._store.release_quota_slots(subject, [slot_id])
        admission.counters.clear()
        admission.slots.clear()

    def hold_until(self, admission: Admission, run: Any) -> None:
        """Keep the admission's slots until the task's ``run`` (``TaskRun``) stops driving its
        handler; None: the run is not on this replica (dispatch mode), so they are released
        now. Releases are written in batches, one store call per subject for those ready."""
        if not admission.slots:
            return
        for subject, slot_id in admission.slots:
            self._held.setdefault(subject, set()).add(slot_id)
        slots = list(admission.slots)
        if run is None:
            self._release(slots)
        else:
            run.add_done_callback(lambda _: self._release(slots))

    async def renew(self) -> None:
        """Extend the leases of this replica's slots and prune ended windows and slots (once
        per lease interval, with the task leases)."""
        now = self.clock()
        for subject, slot_ids in list(self._held.items()):
            await self._store.renew_quota_slots(
                subject, sorted(slot_ids), now + self._lease_seconds
            )
        await self._store.prune_quotas(now)

    async def aclose(self) -> None:
        """Write the releases due; slots of runs still going lapse with their lease (the runs
        are handed over to other replicas, which do not count them again)."""
        if self._releasing is not None:
            await asyncio.gather(self._releasing, return_exceptions=True)

    # steps ----------------------------------------------------------------------------------
    async def _count_windows(self, subject: Subject, now: float, admission: Admission) -> None:
        for name, seconds in WINDOW_SECONDS.items():
            limit = subject.limits.get(name)
            if limit is None:
                continue
            start = now - now % seconds
            counter = f"{subject.name}|{name}|{int(start)}"
            if not await self._windows.count_quota(counter, int(limit), start + seconds):
                raise _refused(subject, name, limit, now, start + seconds)
            admission.counters.append(counter)

    async def _take_slot(self, subject: Subject, now: float, admission: Admission) -> None:
        limit = subject.limits.get("concurrent_tasks")
        if limit is None:
            return
        slot_id = uuid.uuid4().hex
        if not await self._store.take_quota_slot(
            subject.name, slot_id, int(limit), now, now + self._lease_seconds
        ):
            raise _refused(subject, "concurrent_tasks", limit, now, None)
        admission.slots.append((subject.name, slot_id))

    async def _check_budgets(self, subject: Subject, now: float) -> None:
        for name in BUDGETS:
            limit = subject.limits.get(name)
            if limit is None:
                continue
            start, end = _day(now) if name.endswith("_day") else _month(now)
            if await self._used(subject, name, start, now) >= limit:
                raise _refused(subject, name, limit, now, end)

    async def _used(self, subject: Subject, name: str, start: float, now: float) -> float:
        cached = self._budgets.get((subject.name, name, start))
        if cached is not None and now - cached[0] < self._budget_cache_seconds:
            return cached[1]
        since = datetime.fromtimestamp(start, UTC)
        query = (UsageQuery(key_id=subject.id, start=since) if subject.kind == "key"
                 else UsageQuery(endpoint_id=subject.id, start=since))
        totals = await self._store.usage_summary(query)
        if name == "tokens_per_day":
            used = float(sum(t.input_tokens + t.output_tokens for t in totals))
        else:
            used = sum(sum(t.cost_micros.values()) for t in totals) / 1_000_000
        if len(self._budgets) >= MAX_BUDGET_ENTRIES:
            self._budgets.clear()
        self._budgets[(subject.name, name, start)] = (now, used)
        return used

    def _release(self, slots: list[tuple[str, str]]) -> None:
        for subject, slot_id in slots:
            self._to_release.setdefault(subject, []).append(slot_id)
        if self._releasing is None:
            self._releasing = asyncio.get_running_loop().create_task(self._write_releases())

    async def _write_releases(self) -> None:
        try:
            while self._to_release:
                due, self._to_release = self._to_release, {}
                for subject, slot_ids in due.items():
                    held = self._held.get(subject, set())
                    held.difference_update(slot_ids)
                    if not held:
                        self._held.pop(subject, None)
                    try:
                        await self._store.release_quota_slots(subject, slot_ids)
                    except Exception:  # a lapsed lease frees them anyway
                        log.warning("quota_slots_not_released", slots=len(slot_ids))
        finally:
            self._releasing = None


def _refused(
    subject: Subject, name: str, limit: float, now: float, resets_at: float | None
) -> QuotaExceededError:
    QUOTA_REFUSALS.labels(name, subject.kind).inc()
    who = f"key {subject.id}" if subject.kind == "key" else f"endpoint {subject.id}"
    text = f"quota {name} of {limit:g} for {who} reached"
    if resets_at is None:
        return QuotaExceededError(f"{text}; a slot frees when one of its tasks ends", limit=name)
    at = datetime.fromtimestamp(resets_at, UTC).isoformat().replace("+00:00", "Z")
    wait = max(1, math.ceil(resets_at - now))
    return QuotaExceededError(f"{text}; it resets at {at} (in {wait} s)", limit=name,
                              retry_after=wait)


def _day(now: float) -> tuple[float, float]:
    start = now - now % 86400
    return start, start + 86400


def _month(now: float) -> tuple[float, float]:
    day = datetime.fromtimestamp(now, UTC)
    start = datetime(day.year, day.month, 1, tzinfo=UTC)
    end = datetime(day.year + day.month // 12, day.month % 12 + 1, 1, tzinfo=UTC)
    return start.timestamp(), end.timestamp()


# KEYS[1]: the counter; ARGV: limit, expiry (epoch seconds). Returns 1 if counted.
_COUNT = """
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
if count >= tonumber(ARGV[1]) then return 0 end
redis.call('INCR', KEYS[1])
redis.call('EXPIREAT', KEYS[1], ARGV[2])
return 1
"""
_UNCOUNT = """
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 1
"""


class RedisWindows:
    """Window counters in Redis (one script call each, atomic for the fleet); the store's
    counters while Redis cannot be reached (said in the log)."""

    def __init__(self, redis: Any, prefix: str, store: Store) -> None:
        self._count = redis.register_script(_COUNT)
        self._uncount = redis.register_script(_UNCOUNT)
        self._prefix = prefix
        self._store = store

    async def count_quota(self, counter: str, limit: int, expires_at: float) -> bool:
        try:
            return bool(await self._count(keys=[self._prefix + "quota:" + counter],
                                          args=[limit, math.ceil(expires_at) + 1]))
        except Exception as exc:
            log.warning("quota_counts_in_store", reason="redis unreachable",
                        error=str(exc) or type(exc).__name__)
            return await self._store.count_quota(counter, limit, expires_at)

    async def uncount_quota(self, counter: str) -> None:
        try:
            await self._uncount(keys=[self._prefix + "quota:" + counter])
        except Exception:
            await self._store.uncount_quota(counter)
