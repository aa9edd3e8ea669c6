"""The store contract: every store implementation must pass this suite unchanged."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from a2a.types import (
    AuthenticationInfo,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)

from a2a_gateway.stores.base import (
    ConflictError,
    Context,
    Endpoint,
    InvalidPageTokenError,
    Scope,
    TaskQuery,
)

SCOPE = Scope("t1", "ep-1", "anonymous")
OTHER_TENANT = Scope("t2", "ep-1", "anonymous")
OTHER_PRINCIPAL = Scope("t1", "ep-1", "mallory")


def make_task(
    state: int = TaskState.TASK_STATE_WORKING, context_id: str = "ctx-1", ts_s: int = 1_700_000_000
) -> Task:
    task = Task(id=str(uuid.uuid4()), context_id=context_id)
    task.status.state = state
    task.status.timestamp.seconds = ts_s
    return task


async def test_endpoint_round_trip_and_update(store):
    ep = Endpoint(id=str(uuid.uuid4()), name="echo", tenant="t1", card={"version": "1"},
                  metadata={"module_name": "handlers.echo", "class_name": "EchoHandler"})
    await store.create_endpoint(ep)
    got = await store.get_endpoint(ep.id)
    assert got is not None and got.name == "echo" and got.metadata["class_name"] == "EchoHandler"
    got.enabled = False
    await store.update_endpoint(got)
    assert (await store.get_endpoint(ep.id)).enabled is False
    assert [e.id for e in await store.list_endpoints()] == [ep.id]
    with pytest.raises(ConflictError):
        await store.create_endpoint(ep)
    assert await store.get_endpoint(str(uuid.uuid4())) is None


async def test_task_create_get_is_scoped(store):
    task = make_task()
    assert await store.create_task(SCOPE, task, run_ref="run-1") == 1
    got = await store.get_task(SCOPE, task.id)
    assert got is not None and got.task == task and got.version == 1 and got.run_ref == "run-1"
    assert await store.get_task(OTHER_TENANT, task.id) is None
    assert await store.get_task(OTHER_PRINCIPAL, task.id) is None
    with pytest.raises(ConflictError):
        await store.create_task(SCOPE, task)


async def test_update_is_conditional_on_version(store):
    task = make_task()
    await store.create_task(SCOPE, task)
    task.status.state = TaskState.TASK_STATE_INPUT_REQUIRED
    assert await store.update_task(SCOPE, task, expected_version=1, run_state={"pending": 1}) == 2
    with pytest.raises(ConflictError):
        await store.update_task(SCOPE, task, expected_version=1)
    got = await store.get_task(SCOPE, task.id)
    assert got.version == 2 and got.run_state == {"pending": 1}
    assert got.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    with pytest.raises(ConflictError):
        await store.update_task(OTHER_TENANT, task, expected_version=2)


async def test_concurrent_writers_one_wins(store):
    task = make_task()
    await store.create_task(SCOPE, task)

    async def write(state: int) -> bool:
        copy = Task()
        copy.CopyFrom(task)
        copy.status.state = state
        try:
            await store.update_task(SCOPE, copy, expected_version=1)
            return True
        except ConflictError:
            return False

    results = await asyncio.gather(*(write(TaskState.TASK_STATE_COMPLETED) for _ in range(8)))
    assert results.count(True) == 1


async def test_update_of_a_running_task_sets_keeps_or_releases_its_lease(store):
    task = make_task()
    await store.create_task(SCOPE, task, owner="replica-a", lease_until=10.0)
    task.status.state = TaskState.TASK_STATE_INPUT_REQUIRED
    await store.update_task(SCOPE, task, expected_version=1, owner="replica-a", lease_until=20.0)
    got = await store.get_task(SCOPE, task.id)
    assert (got.owner, got.lease_until, got.version) == ("replica-a", 20.0, 2)
    assert got.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    await store.update_task(SCOPE, task, expected_version=2, owner="replica-b")
    got = await store.get_task(SCOPE, task.id)
    assert (got.owner, got.lease_until) == ("replica-b", None)
    await store.update_task(SCOPE, task, expected_version=3)
    got = await store.get_task(SCOPE, task.id)
    assert (got.owner, got.lease_until, got.version) == (None, None, 4)


async def test_terminal_task_is_never_reopened(store):
    task = make_task()
    await store.create_task(SCOPE, task, owner="replica-a", lease_until=10.0)
    task.status.state = TaskState.TASK_STATE_COMPLETED
    await store.update_task(SCOPE, task, expected_version=1, owner="replica-a", lease_until=20.0)
    got = await store.get_task(SCOPE, task.id)
    assert got.owner is None and got.lease_until is None
    task.status.state = TaskState.TASK_STATE_WORKING
    with pytest.raises(ConflictError):
        await store.update_task(SCOPE, task, expected_version=2)


async def test_list_tasks_order_filters_and_pages(store):
    created = []
    for i in range(7):
        state = TaskState.TASK_STATE_COMPLETED if i % 2 else TaskState.TASK_STATE_WORKING
        task = make_task(state=state, context_id="ctx-a" if i < 4 else "ctx-b", ts_s=1_700_000_000 + i)
        await store.create_task(SCOPE, task)
        created.append(task)
    await store.create_task(OTHER_TENANT, make_task(ts_s=1_800_000_000))
    newest_first = [t.id for t in reversed(created)]

    page1 = await store.list_tasks(SCOPE, TaskQuery(page_size=3))
    assert [t.id for t in page1.tasks] == newest_first[:3]
    assert page1.total_size == 7 and page1.next_page_token
    page2 = await store.list_tasks(SCOPE, TaskQuery(page_size=3, page_token=page1.next_page_token))
    page3 = await store.list_tasks(SCOPE, TaskQuery(page_size=3, page_token=page2.next_page_token))
    assert [t.id for t in page2.tasks + page3.tasks] == newest_first[3:]
    assert page3.next_page_token == ""

    by_ctx = await store.list_tasks(SCOPE, TaskQuery(context_id="ctx-a"))
    assert {t.id for t in by_ctx.tasks} == {t.id for t in created[:4]} and by_ctx.total_size == 4
    done = await store.list_tasks(SCOPE, TaskQuery(state=TaskState.TASK_STATE_COMPLETED))
    assert {t.id for t in done.tasks} == {created[i].id for i in (1, 3, 5)}
    recent = await store.list_tasks(SCOPE, TaskQuery(status_after_us=(1_700_000_005) * 1_000_000))
    assert [t.id for t in recent.tasks] == [created[6].id, created[5].id]
    assert (await store.list_tasks(OTHER_PRINCIPAL, TaskQuery())).tasks == []


async def test_list_tasks_with_equal_timestamps_pages_without_gaps(store):
    ids = set()
    for _ in range(5):
        task = make_task(ts_s=1_700_000_000)
        await store.create_task(SCOPE, task)
        ids.add(task.id)
    seen, token = [], ""
    for _ in range(5):
        page = await store.list_tasks(SCOPE, TaskQuery(page_size=2, page_token=token))
        seen += [t.id for t in page.tasks]
        token = page.next_page_token
        if not token:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 5


async def test_forged_page_token_is_rejected(store):
    await store.create_task(SCOPE, make_task())
    with pytest.raises(InvalidPageTokenError):
        await store.list_tasks(SCOPE, TaskQuery(page_token="not-a-token"))
    page = await store.list_tasks(SCOPE, TaskQuery(page_size=1))
    await store.create_task(SCOPE, make_task(ts_s=1))
    page = await store.list_tasks(SCOPE, TaskQuery(page_size=1))
    forged = page.next_page_token[:-2] + ("AA" if page.next_page_token[-2:] != "AA" else "BB")
    with pytest.raises(InvalidPageTokenError):
        await store.list_tasks(SCOPE, TaskQuery(page_token=forged))


async def test_push_configs_crud_scoped_and_idempotent_delete(store):
    cfg = TaskPushNotificationConfig(
        task_id="task-1", id="cfg-1", url="https://hooks.example/a", token="tok",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="secret"),
    )
    await store.put_push_config(SCOPE, cfg)
    await store.put_push_config(SCOPE, TaskPushNotificationConfig(task_id="task-1", id="cfg-2", url="https://hooks.example/b"))
    assert await store.get_push_config(SCOPE, "task-1", "cfg-1") == cfg
    assert [c.id for c in await store.list_push_configs(SCOPE, "task-1")] == ["cfg-1", "cfg-2"]
    assert await store.list_push_configs(OTHER_TENANT, "task-1") == []
    cfg.url = "https://hooks.example/changed"
    await store.put_push_config(SCOPE, cfg)
    assert (await store.get_push_config(SCOPE, "task-1", "cfg-1")).url.endswith("changed")
    await store.delete_push_config(SCOPE, "task-1", "cfg-1")
    await store.delete_push_config(SCOPE, "task-1", "cfg-1")
    assert await store.get_push_config(SCOPE, "task-1", "cfg-1") is None


async def test_context_round_trip_scoped(store):
    assert await store.get_context(SCOPE, "ctx") is None
    ctx = Context(turns=[{"role": "user", "text": "hi"}, {"role": "agent", "text": "hello"}],
                  session={"previous_response_id": "resp_1"})
    await store.put_context(SCOPE, "ctx", ctx)
    got = await store.get_context(SCOPE, "ctx")
    assert got.turns == ctx.turns and got.session == ctx.session
    assert await store.get_context(OTHER_PRINCIPAL, "ctx") is None


async def test_expired_leases_are_claimed_once(store):
    live, dead, done = make_task(), make_task(), make_task(state=TaskState.TASK_STATE_COMPLETED)
    await store.create_task(SCOPE, live, owner="a", lease_until=100.0)
    await store.create_task(SCOPE, dead, owner="b", lease_until=10.0, run_ref="run-dead")
    await store.create_task(SCOPE, done, owner=None)
    await store.renew_leases("a", [live.id], 200.0)
    claimed = await store.claim_expired_tasks("c", now=150.0, lease_until=300.0)
    assert [c.stored.task.id for c in claimed] == [dead.id]
    assert claimed[0].scope == SCOPE and claimed[0].stored.run_ref == "run-dead"
    assert await store.claim_expired_tasks("d", now=150.0, lease_until=300.0) == []
    got = await store.get_task(SCOPE, dead.id)
    assert got.owner == "c" and got.lease_until == 300.0
    # the claim bumped the version: the old owner's next write loses
    with pytest.raises(ConflictError):
        await store.update_task(SCOPE, dead, expected_version=1)


async def test_every_altered_page_token_is_rejected(store):
    for i in range(3):
        await store.create_task(SCOPE, make_task(ts_s=1_700_000_000 + i))
    token = (await store.list_tasks(SCOPE, TaskQuery(page_size=1))).next_page_token
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for position in (0, len(token) // 2, len(token) - 1):
        for replacement in alphabet:
            if replacement == token[position]:
                continue
            forged = token[:position] + replacement + token[position + 1 :]
            with pytest.raises(InvalidPageTokenError):
                await store.list_tasks(SCOPE, TaskQuery(page_token=forged))


async def test_page_tokens_are_signed_with_the_configured_key():
    from a2a_gateway.stores.memory import MemoryStore

    ours, theirs = MemoryStore(b"key-one"), MemoryStore(b"key-two")
    for store in (ours, theirs):
        for i in range(3):
            await store.create_task(SCOPE, make_task(ts_s=1_700_000_000 + i))
    token = (await ours.list_tasks(SCOPE, TaskQuery(page_size=1))).next_page_token
    assert len((await ours.list_tasks(SCOPE, TaskQuery(page_size=1, page_token=token))).tasks) == 1
    with pytest.raises(InvalidPageTokenError):
        await theirs.list_tasks(SCOPE, TaskQuery(page_token=token))
