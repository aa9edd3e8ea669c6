"""Concurrency slots between two ``Quotas`` (two replicas) on one store: a slot whose replica
renews it keeps counting past its first lease; a slot whose replica stopped renewing (it
crashed) stops counting once its lease ran out; a run's end releases its slot."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from a2a_gateway.errors import QuotaExceededError
from a2a_gateway.governance.quotas import Quotas
from a2a_gateway.stores.base import ApiKey
from a2a_gateway.stores.memory import MemoryStore

LEASE = 30.0
KEY = ApiKey(id="00000000000000c1", endpoint_id="ep", tenant="default", principal="p", name="",
             key_hash="", created_at=datetime(2026, 12, 5, tzinfo=UTC),
             limits={"concurrent_tasks": 1})


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Run:
    """What ``Quotas.hold_until`` needs of a ``TaskRun``: a callback when it stops."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Run], None]] = []

    def add_done_callback(self, callback: Callable[[Run], None]) -> None:
        self._callbacks.append(callback)

    def end(self) -> None:
        for callback in self._callbacks:
            callback(self)


async def test_a_renewed_slot_holds_a_lapsed_one_frees_and_an_ended_run_releases():
    store, clock = MemoryStore(), Clock()
    a, b = (Quotas(store, lease_seconds=LEASE, clock=clock) for _ in range(2))
    run = Run()
    a.hold_until(await a.admit("ep", {}, KEY), run)
    with pytest.raises(QuotaExceededError) as refused:
        await b.admit("ep", {}, KEY)
    assert refused.value.http_status == 403 and refused.value.limit == "concurrent_tasks"

    for _ in range(3):  # A renews with its task leases: the slot outlives its first lease
        clock.now += LEASE * 0.9
        await a.renew()
    with pytest.raises(QuotaExceededError):
        await b.admit("ep", {}, KEY)

    run.end()  # released (in a batch, just after)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    crashed = Run()
    b.hold_until(await b.admit("ep", {}, KEY), crashed)
    # B stops renewing (it crashed): its slot counts until its lease ends, then no more
    clock.now += LEASE - 1
    with pytest.raises(QuotaExceededError):
        await a.admit("ep", {}, KEY)
    clock.now += 2
    assert (await a.admit("ep", {}, KEY)).slots
    await a.aclose()
    await b.aclose()
