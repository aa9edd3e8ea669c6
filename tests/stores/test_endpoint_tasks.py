"""``list_endpoint_tasks``: an endpoint's tasks of any state across tenants and principals (the
operators' task list), filtered by state and context, keyset paginated, on every store."""

from __future__ import annotations

import sqlite3
import uuid

import asyncpg
import pytest
from a2a.types import Task, TaskPushNotificationConfig, TaskState

from a2a_gateway.stores import open_store
from a2a_gateway.stores.base import InvalidPageTokenError, Scope, TaskQuery
from tests.stores.pg_support import fresh_database

WORKING, COMPLETED, FAILED = (TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED,
                              TaskState.TASK_STATE_FAILED)


def make_task(state: int, ts_s: int, context_id: str = "ctx", task_id: str | None = None) -> Task:
    task = Task(id=task_id or str(uuid.uuid4()), context_id=context_id)
    task.status.state = state
    task.status.timestamp.seconds = ts_s
    return task


async def all_pages(store, endpoint_id: str, page_size: int, **filters) -> list[list[str]]:
    pages, token = [], ""
    while True:
        page = await store.list_endpoint_tasks(
            endpoint_id, page_size=page_size, page_token=token, **filters
        )
        pages.append([task.id for _, task in page.tasks])
        token = page.next_page_token
        if not token:
            return pages
        assert len(pages) < 50, "the pages never end"


async def test_every_callers_tasks_of_any_state_newest_first_with_their_scopes(store):
    endpoint = f"ep-{uuid.uuid4().hex[:8]}"
    alice, bob = Scope("t1", endpoint, "alice"), Scope("t#2", endpoint, "bob%#x")
    done = make_task(COMPLETED, 1_700_000_004, "c1")
    running = make_task(WORKING, 1_700_000_003, "c2")
    failed = make_task(FAILED, 1_700_000_002, "c1")
    await store.create_task(alice, done)
    await store.create_task(bob, running)
    await store.create_task(alice, failed)
    await store.create_task(
        Scope("t1", f"{endpoint}-other", "alice"), make_task(COMPLETED, 1_700_000_009)
    )
    await store.put_push_config(alice, _push_config(done.id))  # other item kinds are not tasks

    page = await store.list_endpoint_tasks(endpoint)
    assert [(scope, task.id) for scope, task in page.tasks] == [(alice, done.id), (bob, running.id),
                                                              (alice, failed.id)]
    assert page.next_page_token == ""
    assert page.tasks[0][1] == done  # the whole task, as stored
    assert (await store.list_endpoint_tasks("no-such-endpoint")).tasks == []

    by_state = await store.list_endpoint_tasks(endpoint, states=frozenset({COMPLETED, FAILED}))
    assert [task.id for _, task in by_state.tasks] == [done.id, failed.id]
    by_context = await store.list_endpoint_tasks(endpoint, context_id="c1")
    assert [task.id for _, task in by_context.tasks] == [done.id, failed.id]
    both = await store.list_endpoint_tasks(endpoint, states=frozenset({FAILED}), context_id="c1")
    assert [task.id for _, task in both.tasks] == [failed.id]
    assert (
        await store.list_endpoint_tasks(endpoint, states=frozenset({WORKING}), context_id="c1")
    ).tasks == []

    # a task that ends moves with its new status time and state
    stored = await store.get_task(bob, running.id)
    running.status.state = COMPLETED
    running.status.timestamp.seconds = 1_700_000_005
    await store.update_task(bob, running, expected_version=stored.version)
    completed = await store.list_endpoint_tasks(endpoint, states=frozenset({COMPLETED}))
    assert [task.id for _, task in completed.tasks] == [running.id, done.id]
    assert completed.tasks[0][1].status.state == COMPLETED


async def test_pages_follow_the_keyset_ties_broken_by_task_id(store):
    endpoint = f"ep-{uuid.uuid4().hex[:8]}"
    expected = []
    for i in range(7):
        scope = Scope("t", endpoint, f"p{i % 3}")
        task = make_task(
            COMPLETED if i % 2 else WORKING, 1_700_000_000 + i // 2, task_id=f"task-{i:02d}"
        )
        await store.create_task(scope, task)
        expected.append((1_700_000_000 + i // 2, task.id))
    newest_first = [task_id for _, task_id in sorted(expected, reverse=True)]

    pages = await all_pages(store, endpoint, 3)
    assert [task_id for page in pages for task_id in page] == newest_first
    assert all(len(page) <= 3 for page in pages) and len(pages) >= 3
    assert [
        i
        for page in await all_pages(store, endpoint, 2, states=frozenset({COMPLETED}))
        for i in page
    ] == [i for i in newest_first if int(i[-2:]) % 2]
    one_page = await store.list_endpoint_tasks(endpoint, page_size=7)
    assert len(one_page.tasks) == 7 and one_page.next_page_token == ""


async def test_a_rare_state_is_found_behind_many_others(store):
    endpoint = f"ep-{uuid.uuid4().hex[:8]}"
    failed = make_task(FAILED, 1_600_000_000)
    await store.create_task(Scope("t", endpoint, "p"), failed)
    for i in range(30):
        await store.create_task(Scope("t", endpoint, "p"), make_task(COMPLETED, 1_700_000_000 + i))
    pages = await all_pages(store, endpoint, 1, states=frozenset({FAILED}))
    assert [task_id for page in pages for task_id in page] == [failed.id]


async def test_a_page_token_that_was_altered_or_made_up_is_refused(store):
    endpoint = f"ep-{uuid.uuid4().hex[:8]}"
    for i in range(3):
        await store.create_task(Scope("t", endpoint, "p"), make_task(WORKING, 1_700_000_000 + i))
    token = (await store.list_endpoint_tasks(endpoint, page_size=1)).next_page_token
    assert token
    for bad in (token[:-2] + ("AA" if not token.endswith("AA") else "BB"), "not-a-token", "e30"):
        with pytest.raises(InvalidPageTokenError):
            await store.list_endpoint_tasks(endpoint, page_token=bad)


def _push_config(task_id: str) -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(task_id=task_id, id="cfg", url="https://example.com/hook")


async def test_postgres_lists_an_endpoints_tasks_through_its_index():
    async with fresh_database() as url:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("SET enable_seqscan = off")  # a tiny table would be scanned anyway
            plan = await conn.fetchval(
                "EXPLAIN (FORMAT JSON) SELECT tenant, principal, task FROM tasks"
                " WHERE endpoint_id = $1 AND (status_us, id) < ($2, $3)"
                " ORDER BY status_us DESC, id DESC LIMIT $4",
                "ep",
                5,
                "x",
                10,
            )
        finally:
            await conn.close()
    assert "tasks_by_endpoint" in plan and '"Sort"' not in plan


async def test_sqlite_lists_an_endpoints_tasks_through_its_index(tmp_path):
    path = tmp_path / "store.db"
    store = await open_store(f"sqlite:///{path}")
    await store.aclose()
    conn = sqlite3.connect(path)
    try:
        plan = " ".join(
            str(row)
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT tenant, principal, task FROM tasks WHERE endpoint_id = ?"
                " AND (status_us < ? OR (status_us = ? AND id < ?))"
                " ORDER BY status_us DESC, id DESC LIMIT ?",
                ("ep", 5, 5, "x", 10),
            )
        )
    finally:
        conn.close()
    assert "tasks_by_endpoint" in plan and "TEMP B-TREE" not in plan


async def test_a_lookup_with_a_nul_finds_nothing_on_every_store(store):
    """PostgreSQL text cannot hold NUL, so no stored task has one: a caller's or an operator's
    lookup with one is "no such task", not a store error."""
    endpoint = f"ep-{uuid.uuid4().hex[:8]}"
    scope = Scope("t1", endpoint, "alice")
    task = make_task(COMPLETED, 1_700_000_001, "ctx")
    await store.create_task(scope, task)
    assert await store.get_task(scope, f"{task.id}\x00") is None
    assert await store.get_task(Scope("t1\x00", endpoint, "alice"), task.id) is None
    assert (await store.list_endpoint_tasks(endpoint, context_id="ctx\x00")).tasks == []
    assert (await store.list_tasks(Scope("t1", endpoint, "alice\x00"), TaskQuery())).tasks == []
    assert (await store.list_tasks(scope, TaskQuery(context_id="\x00"))).total_size == 0
    assert [t.id for _, t in (await store.list_endpoint_tasks(endpoint)).tasks] == [task.id]
