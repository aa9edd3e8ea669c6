"""``list_active_tasks``: an endpoint's non-terminal tasks across tenants and principals (the
event feed's snapshot), on every store."""

from __future__ import annotations

import uuid

import asyncpg
from a2a.types import Task, TaskState

from a2a_gateway.stores.base import NOT_TERMINAL_SQL, Context, Scope
from tests.stores.pg_support import fresh_database


def make_task(state: int, ts_s: int) -> Task:
    task = Task(id=str(uuid.uuid4()), context_id="ctx")
    task.status.state = state
    task.status.timestamp.seconds = ts_s
    return task


async def test_active_tasks_of_one_endpoint_across_callers_newest_first(store):
    endpoint = f"ep-{uuid.uuid4().hex[:8]}"
    alice, bob = Scope("t1", endpoint, "alice"), Scope("t#2", endpoint, "bob%#x")
    working = make_task(TaskState.TASK_STATE_WORKING, 1_700_000_001)
    asking = make_task(TaskState.TASK_STATE_INPUT_REQUIRED, 1_700_000_003)
    done = make_task(TaskState.TASK_STATE_COMPLETED, 1_700_000_004)
    elsewhere = make_task(TaskState.TASK_STATE_WORKING, 1_700_000_005)
    await store.create_task(alice, working)
    await store.create_task(bob, asking)
    await store.create_task(alice, done)
    await store.create_task(Scope("t1", f"{endpoint}-other", "alice"), elsewhere)
    await store.put_context(alice, "ctx", Context())

    found = await store.list_active_tasks(endpoint, 10)
    assert [(scope, task.id) for scope, task in found] == [(bob, asking.id), (alice, working.id)]
    assert found[0][1].status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [t.id for _, t in await store.list_active_tasks(endpoint, 1)] == [asking.id]

    stored = await store.get_task(bob, asking.id)
    asking.status.state = TaskState.TASK_STATE_CANCELED
    await store.update_task(bob, asking, expected_version=stored.version)
    assert [t.id for _, t in await store.list_active_tasks(endpoint, 10)] == [working.id]
    assert await store.list_active_tasks("no-such-endpoint", 10) == []


async def test_postgres_reads_active_tasks_through_the_partial_index():
    async with fresh_database() as url:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("SET enable_seqscan = off")  # a tiny table would be scanned anyway
            plan = await conn.fetchval(
                "EXPLAIN (FORMAT JSON) SELECT tenant, principal, task FROM tasks"
                f" WHERE endpoint_id = $1 AND {NOT_TERMINAL_SQL}"
                " ORDER BY status_us DESC, id DESC LIMIT $2",
                "ep",
                10,
            )
        finally:
            await conn.close()
    assert "tasks_active_by_endpoint" in plan
