"""Group commit of task creations on the PostgreSQL store (``stores.postgres_batches``):
concurrent creations share statements, each caller is answered only after its row is
committed, and a failing row fails only its own caller.

Statements are counted in the rows themselves: rows inserted by one statement share its
transaction id (``xmin``).
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest
from a2a.types import Task
from a2a.types.a2a_pb2 import TASK_STATE_COMPLETED

from a2a_gateway.stores import open_store
from a2a_gateway.stores.base import ConflictError, Scope, StoreError
from a2a_gateway.stores.postgres import PostgresStore
from tests.stores import pg_support

SCOPE = Scope("default", "ep-1", "alice")
CREATIONS = 50


def _task(task_id: str | None = None, context_id: str | None = None) -> Task:
    task = Task(id=task_id or str(uuid.uuid4()), context_id=context_id or str(uuid.uuid4()))
    task.status.state = TASK_STATE_COMPLETED
    task.status.timestamp.GetCurrentTime()
    return task


@pytest.fixture
async def pg():
    async with pg_support.fresh_database() as url:
        store = await open_store(url)
        assert isinstance(store, PostgresStore)
        conn = await asyncpg.create_pool(url, min_size=1, max_size=4)  # not the store's
        try:
            yield store, conn
        finally:
            await conn.close()
            await store.aclose()


async def _transactions(conn: asyncpg.Pool, ids: list[str]) -> int:
    return await conn.fetchval(
        "SELECT count(DISTINCT xmin::text) FROM tasks WHERE id = ANY($1)", ids
    )


async def test_concurrent_creations_share_statements_and_each_is_committed_when_answered(pg):
    store, conn = pg
    tasks = [_task() for _ in range(CREATIONS)]
    seen_when_answered: list[bool] = []

    async def create(task: Task) -> None:
        assert await store.create_task(SCOPE, task, run_state={"n": 1}) == 1
        # another connection sees the row as soon as its caller is answered: it is committed
        seen_when_answered.append(
            await conn.fetchval("SELECT 1 FROM tasks WHERE id = $1", task.id) == 1
        )

    await asyncio.gather(*(create(t) for t in tasks))
    ids = [t.id for t in tasks]
    assert all(seen_when_answered) and len(seen_when_answered) == CREATIONS
    assert await conn.fetchval("SELECT count(*) FROM tasks WHERE id = ANY($1)", ids) == CREATIONS
    assert await _transactions(conn, ids) <= CREATIONS // 5
    stored = await store.get_task(SCOPE, tasks[7].id)
    assert (
        stored is not None
        and stored.task == tasks[7]
        and stored.version == 1
        and stored.run_state == {"n": 1}
    )


async def test_an_existing_id_fails_only_its_own_caller(pg):
    store, conn = pg
    taken = _task()
    await store.create_task(SCOPE, taken)
    others = [_task() for _ in range(10)]
    same_twice = _task()
    outcomes = await asyncio.gather(
        *(store.create_task(SCOPE, t) for t in others[:5]),
        store.create_task(SCOPE, _task(taken.id)),
        store.create_task(SCOPE, same_twice),
        store.create_task(SCOPE, _task(same_twice.id)),
        *(store.create_task(SCOPE, t) for t in others[5:]),
        return_exceptions=True,
    )
    conflicts = [o for o in outcomes if isinstance(o, ConflictError)]
    assert len(conflicts) == 2, outcomes  # the existing id, and the second of the same id
    assert outcomes.count(1) == len(outcomes) - 2
    assert await _transactions(conn, [t.id for t in others]) < len(others)
    assert await conn.fetchval("SELECT count(*) FROM tasks WHERE id = ANY($1)",
                               [t.id for t in others] + [same_twice.id]) == 11
    assert (await store.get_task(SCOPE, taken.id)).task == taken  # type: ignore[union-attr]


async def test_a_row_the_server_refuses_fails_only_its_own_caller(pg):
    store, conn = pg
    others = [_task() for _ in range(10)]
    refused = _task(context_id="nul\x00inside")  # text columns cannot hold NUL
    outcomes = await asyncio.gather(
        *(store.create_task(SCOPE, t) for t in others[:5]),
        store.create_task(SCOPE, refused),
        *(store.create_task(SCOPE, t) for t in others[5:]),
        return_exceptions=True,
    )
    assert isinstance(outcomes[5], StoreError) and not isinstance(outcomes[5], ConflictError), (
        outcomes
    )
    assert outcomes[:5] + outcomes[6:] == [1] * 10
    assert (
        await conn.fetchval("SELECT count(*) FROM tasks WHERE id = ANY($1)", [t.id for t in others])
        == 10
    )
    assert await store.get_task(SCOPE, refused.id) is None
