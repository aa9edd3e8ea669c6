"""The usage ledger's store contract (every store): a record is written with the task's
terminal write and summed by ``usage_summary`` over filters and groups."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from a2a.types import Task, TaskState

from a2a_gateway.stores.base import ConflictError, Scope, UsageQuery, UsageRecord

DAY1 = datetime(2026, 11, 30, 23, 0, tzinfo=UTC)
DAY2 = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
ALICE = Scope("t1", "ep-a", "alice")
BOB = Scope("t1", "ep-a", "bob")
ALICE_ON_B = Scope("t1", "ep-b", "alice")


def _task(state: int) -> Task:
    task = Task(id=str(uuid.uuid4()), context_id="ctx")
    task.status.state = state
    task.status.timestamp.seconds = 1_700_000_000
    return task


def _usage(ended: datetime, seconds: float = 2.0, **fields) -> UsageRecord:
    values = {"requests": 1, "bytes_in": 100, "bytes_out": 300, "input_tokens": 10,
              "output_tokens": 5, "key_id": "k1", "key_name": "ci"} | fields
    return UsageRecord(started_at=ended - timedelta(seconds=seconds), ended_at=ended, **values)


async def _ledger(store) -> None:
    """Five recorded tasks (two created ended, three ended by an update) and two without."""
    completed, failed = TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED
    await store.create_task(ALICE, _task(completed), usage=_usage(
        DAY1, cost_micros=1500, currency="USD"))
    await store.create_task(BOB, _task(failed), usage=_usage(DAY1, seconds=1.0, input_tokens=0,
                                                             output_tokens=0, key_id=""))
    for scope, ended, extra in (
        (ALICE, DAY2, {"requests": 2, "cost_micros": 2500, "currency": "USD"}),
        (ALICE_ON_B, DAY2, {"cost_micros": 7, "currency": "EUR"}),
        (BOB, DAY2 + timedelta(hours=1), {}),
    ):
        task = _task(TaskState.TASK_STATE_WORKING)
        await store.create_task(scope, task)
        task.status.state = completed
        await store.update_task(scope, task, expected_version=1, usage=_usage(ended, **extra))
    await store.create_task(ALICE, _task(TaskState.TASK_STATE_WORKING))  # running: no record
    await store.create_task(ALICE, _task(completed))  # ended without a record


async def test_usage_summary_totals_groups_and_filters(store):
    await _ledger(store)
    [total] = await store.usage_summary(UsageQuery())
    assert (total.tasks, total.requests, total.input_tokens, total.output_tokens) == (5, 6, 40, 20)
    assert total.outcomes == {"completed": 4, "failed": 1}
    assert (total.bytes_in, total.bytes_out) == (500, 1500)
    assert total.duration_seconds == pytest.approx(9.0)
    assert total.cost_micros == {"USD": 4000, "EUR": 7}
    assert (total.endpoint_id, total.principal, total.day) == (None, None, None)

    by_endpoint = await store.usage_summary(UsageQuery(group_by=("endpoint",)))
    assert [(t.endpoint_id, t.tasks) for t in by_endpoint] == [("ep-a", 4), ("ep-b", 1)]

    by_day_principal = await store.usage_summary(UsageQuery(group_by=("day", "principal")))
    assert [(t.day, t.principal, t.tasks, t.input_tokens) for t in by_day_principal] == [
        ("2026-11-30", "alice", 1, 10), ("2026-11-30", "bob", 1, 0),
        ("2026-12-01", "alice", 2, 20), ("2026-12-01", "bob", 1, 10),
    ]

    [alice] = await store.usage_summary(UsageQuery(principal="alice", start=DAY2))
    assert (alice.tasks, alice.input_tokens, alice.cost_micros) == (2, 20, {"USD": 2500, "EUR": 7})
    [ep_a] = await store.usage_summary(UsageQuery(endpoint_id="ep-a", end=DAY2))
    assert (ep_a.tasks, ep_a.outcomes) == (2, {"completed": 1, "failed": 1})
    # start is inclusive, end exclusive
    [at] = await store.usage_summary(UsageQuery(start=DAY2, end=DAY2 + timedelta(microseconds=1)))
    assert at.tasks == 2
    assert await store.usage_summary(UsageQuery(start=DAY2, end=DAY2)) == []
    # a partial day, then a whole one (PostgreSQL sums the whole days apart)
    [both] = await store.usage_summary(UsageQuery(
        start=DAY1 - timedelta(hours=1), end=datetime(2026, 12, 2, tzinfo=UTC)))
    assert (both.tasks, both.requests, both.cost_micros) == (5, 6, {"USD": 4000, "EUR": 7})
    [whole] = await store.usage_summary(UsageQuery(
        start=datetime(2026, 12, 1, tzinfo=UTC), end=datetime(2026, 12, 2, tzinfo=UTC),
        group_by=("day",)))
    assert (whole.day, whole.tasks, whole.duration_seconds) == ("2026-12-01", 3, 6.0)
    assert await store.usage_summary(UsageQuery(endpoint_id="nope")) == []
    [keyed] = await store.usage_summary(UsageQuery(key_id="k1", tenant="t1"))
    assert keyed.tasks == 4
    assert await store.usage_summary(UsageQuery(tenant="t2")) == []


async def test_usage_lands_only_with_the_write_that_wins(store):
    task = _task(TaskState.TASK_STATE_WORKING)
    await store.create_task(ALICE, task)
    task.status.state = TaskState.TASK_STATE_CANCELED
    ended = datetime.now(UTC)
    writes = [
        store.update_task(ALICE, task, expected_version=1, usage=_usage(ended)) for _ in range(3)
    ]
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    assert sum(not isinstance(o, Exception) for o in outcomes) == 1
    assert all(isinstance(o, ConflictError) for o in outcomes if isinstance(o, Exception))
    with pytest.raises(ConflictError):  # terminal: never reopened, nothing counted twice
        await store.update_task(ALICE, task, expected_version=2, usage=_usage(ended))
    [total] = await store.usage_summary(UsageQuery(start=ended - timedelta(days=1)))
    assert (total.tasks, total.outcomes) == (1, {"canceled": 1})
