"""The store contract for quotas, on every store: a key's limits round-trip and change; a
window counter adds only below its limit, even with many writers at once, and gives back;
concurrency slots are taken only while fewer live ones are held, a slot whose lease ran out
no longer counts, and renewed or released slots behave so."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from a2a_gateway.stores.base import ApiKey, Endpoint, Scope, TaskQuery

T0 = 1_800_000_000.0


def _key(key_id: str, limits: dict | None = None) -> ApiKey:
    return ApiKey(
        id=key_id, endpoint_id="ep-q", tenant="default", principal="p", name="",
        key_hash="0" * 64, created_at=datetime(2026, 12, 5, tzinfo=UTC), limits=limits or {},
    )


async def test_a_keys_limits_round_trip_change_and_clear(store):
    limits = {"tasks_per_minute": 3, "cost_per_day": 1.5}
    await store.create_api_key(_key("00000000000000a1", limits))
    await store.create_api_key(_key("00000000000000a2"))
    assert (await store.get_api_key("00000000000000a1")).limits == {
        "tasks_per_minute": 3, "cost_per_day": 1.5,
    }
    assert (await store.get_api_key("00000000000000a2")).limits == {}

    assert await store.set_api_key_limits("00000000000000a2", {"concurrent_tasks": 2})
    assert (await store.get_api_key("00000000000000a2")).limits == {"concurrent_tasks": 2}
    assert [k.limits for k in await store.list_api_keys("ep-q")] == [
        {"tasks_per_minute": 3, "cost_per_day": 1.5}, {"concurrent_tasks": 2},
    ]
    assert await store.set_api_key_limits("00000000000000a1", {})
    assert (await store.get_api_key("00000000000000a1")).limits == {}
    assert not await store.set_api_key_limits("00000000000000ff", {"tasks_per_day": 1})
    assert await store.get_api_key("00000000000000ff") is None


async def test_a_window_counter_adds_only_below_its_limit_and_gives_back(store):
    counter = "key:a1|tasks_per_minute|1800000000"
    assert [await store.count_quota(counter, 2, T0 + 60) for _ in range(3)] == [True, True, False]
    await store.uncount_quota(counter)
    assert await store.count_quota(counter, 2, T0 + 60)
    assert not await store.count_quota(counter, 2, T0 + 60)
    # another window, another subject: counted apart
    assert await store.count_quota("key:a1|tasks_per_minute|1800000060", 2, T0 + 120)
    assert await store.count_quota("key:a2|tasks_per_minute|1800000000", 1, T0 + 60)
    # giving back more than was counted never goes below zero
    for _ in range(4):
        await store.uncount_quota("key:a2|tasks_per_minute|1800000000")
    assert await store.count_quota("key:a2|tasks_per_minute|1800000000", 1, T0 + 60)
    assert not await store.count_quota("key:a2|tasks_per_minute|1800000000", 1, T0 + 60)
    await store.uncount_quota("never-counted")


async def test_concurrent_counts_admit_exactly_the_limit(store):
    counter = "endpoint:ep-q|tasks_per_hour|1800000000"
    admitted = await asyncio.gather(*(store.count_quota(counter, 7, T0 + 3600) for _ in range(20)))
    assert sum(admitted) == 7


async def test_slots_are_taken_while_fewer_live_ones_are_held(store):
    subject = "key:a1"
    assert await store.take_quota_slot(subject, "s1", 2, T0, T0 + 30)
    assert await store.take_quota_slot(subject, "s2", 2, T0, T0 + 30)
    assert not await store.take_quota_slot(subject, "s3", 2, T0, T0 + 30)
    assert await store.take_quota_slot("key:other", "s1", 1, T0, T0 + 30)  # subjects apart

    await store.release_quota_slots(subject, ["s1"])
    await store.release_quota_slots(subject, ["s1", "never-taken"])  # idempotent
    assert await store.take_quota_slot(subject, "s3", 2, T0, T0 + 30)
    assert not await store.take_quota_slot(subject, "s4", 2, T0 + 10, T0 + 40)

    # s2 is renewed, s3 is not: once s3's lease ran out (its replica stopped) it counts no more
    await store.renew_quota_slots(subject, ["s2", "gone"], T0 + 100)
    assert not await store.take_quota_slot(subject, "s4", 2, T0 + 30, T0 + 60)
    assert await store.take_quota_slot(subject, "s4", 2, T0 + 31, T0 + 61)
    assert not await store.take_quota_slot(subject, "s5", 2, T0 + 31, T0 + 61)


async def test_concurrent_slot_takes_admit_exactly_the_limit(store):
    taken = await asyncio.gather(
        *(store.take_quota_slot("endpoint:ep-q", f"s{i}", 3, T0, T0 + 30) for i in range(12))
    )
    assert sum(taken) == 3


async def test_pruning_drops_ended_windows_and_slots_and_keeps_the_rest(store):
    await store.create_endpoint(Endpoint(id="ep-q", name="q"))
    assert await store.count_quota("key:a1|tasks_per_minute|1", 1, T0 + 60)
    assert await store.count_quota("key:a1|tasks_per_minute|2", 1, T0 + 120)
    assert await store.take_quota_slot("key:a1", "old", 5, T0, T0 + 30)
    assert await store.take_quota_slot("key:a1", "new", 5, T0, T0 + 300)
    await store.prune_quotas(T0 + 90)
    assert not await store.count_quota("key:a1|tasks_per_minute|2", 1, T0 + 120)
    assert not await store.take_quota_slot("key:a1", "x", 1, T0 + 90, T0 + 120)
    # quota records are not tasks, endpoints or health
    assert [e.id for e in await store.list_endpoints()] == ["ep-q"]
    assert (await store.list_tasks(Scope("default", "ep-q", "p"), TaskQuery())).tasks == []
    assert await store.list_backend_health() == {}
