"""The store contract: every store implementation must pass this suite unchanged."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from a2a.types import (
    AuthenticationInfo,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)

from a2a_gateway.stores.base import (
    ApiKey,
    ConflictError,
    Context,
    Endpoint,
    InvalidPageTokenError,
    PushDelivery,
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


def make_key(endpoint_id: str = "ep-1", created_at: datetime | None = None, **fields) -> ApiKey:
    key = ApiKey(
        id=secrets.token_hex(8),
        endpoint_id=endpoint_id,
        tenant="t1",
        principal=f"caller-{secrets.token_hex(2)}",
        name="",
        key_hash=secrets.token_hex(32),
        created_at=created_at or datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC),
    )
    return replace(key, **fields)


async def test_api_key_round_trips_every_field_to_the_microsecond(store):
    key = make_key(
        name="ci runner",
        created_at=datetime(2026, 3, 1, 12, 0, 0, 1, tzinfo=UTC),
        expires_at=datetime(2027, 3, 1, 0, 0, 0, 999999, tzinfo=UTC),
        revoked_at=datetime(2026, 6, 1, 8, 30, 0, tzinfo=UTC),
    )
    await store.create_api_key(key)
    got = await store.get_api_key(key.id)
    assert got == key
    times = (got.created_at, got.expires_at, got.revoked_at)
    assert all(t.utcoffset() == timedelta(0) for t in times)
    plain = make_key()
    await store.create_api_key(plain)
    got = await store.get_api_key(plain.id)
    assert got == plain and got.expires_at is None and got.revoked_at is None


async def test_api_key_times_in_another_zone_come_back_as_the_same_instant_in_utc(store):
    cet = timezone(timedelta(hours=1))
    key = make_key(created_at=datetime(2026, 3, 1, 13, 0, 0, 500, tzinfo=cet))
    await store.create_api_key(key)
    got = await store.get_api_key(key.id)
    assert got.created_at == datetime(2026, 3, 1, 12, 0, 0, 500, tzinfo=UTC)
    assert got.created_at.utcoffset() == timedelta(0)


async def test_api_key_ids_are_unique_and_unknown_ids_are_none(store):
    key = make_key()
    await store.create_api_key(key)
    with pytest.raises(ConflictError):
        await store.create_api_key(replace(make_key(endpoint_id="ep-2"), id=key.id))
    assert (await store.get_api_key(key.id)).endpoint_id == "ep-1"
    assert await store.get_api_key(secrets.token_hex(8)) is None
    for presented in ("", "x" * 3000, "é" * 1100, "a\x00b", "a\udcff"):
        assert await store.get_api_key(presented) is None
        assert await store.revoke_api_key(presented, datetime.now(UTC)) is False


async def test_api_keys_list_in_creation_order_and_filter_by_endpoint(store):
    base = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    # created out of order, two with the same time (the id breaks the tie), a revoked one
    third = make_key("ep-1", base + timedelta(microseconds=2))
    first = make_key("ep-2", base)
    second = make_key("ep-1", base + timedelta(microseconds=1), revoked_at=base)
    tied = sorted([make_key("ep-1", base + timedelta(seconds=5)) for _ in range(2)],
                  key=lambda k: k.id)
    for key in (third, tied[1], first, tied[0], second):
        await store.create_api_key(key)
    assert await store.list_api_keys() == [first, second, third, *tied]
    assert await store.list_api_keys("ep-1") == [second, third, *tied]
    assert await store.list_api_keys("ep-2") == [first]
    assert await store.list_api_keys("ep-3") == []


async def test_revoking_an_api_key_keeps_the_first_time(store):
    key = make_key(expires_at=datetime(2027, 1, 1, tzinfo=UTC))
    other = make_key()
    await store.create_api_key(key)
    await store.create_api_key(other)
    first = datetime(2026, 4, 1, 9, 0, 0, 654321, tzinfo=UTC)
    assert await store.revoke_api_key(key.id, first) is True
    assert await store.revoke_api_key(key.id, first + timedelta(days=1)) is True
    got = await store.get_api_key(key.id)
    assert got.revoked_at == first and got.expires_at == key.expires_at
    assert got.key_hash == key.key_hash
    assert (await store.get_api_key(other.id)).revoked_at is None
    listed = {k.id: k.revoked_at for k in await store.list_api_keys()}
    assert listed == {key.id: first, other.id: None}
    assert await store.revoke_api_key(secrets.token_hex(8), first) is False


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
        task = make_task(
            state=state, context_id="ctx-a" if i < 4 else "ctx-b", ts_s=1_700_000_000 + i
        )
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


# -- push delivery outbox -------------------------------------------------------------------------


def make_delivery(
    due_at: float, *, attempts: int = 0, owner: str | None = None, **fields
) -> PushDelivery:
    delivery = PushDelivery(
        id=str(uuid.uuid4()), scope=SCOPE, task_id=str(uuid.uuid4()), config_id="cfg",
        body=b'{"statusUpdate":{"taskId":"t"}}\x00\xff', due_at=due_at, attempts=attempts,
        owner=owner,
    )
    return replace(delivery, **fields)


async def test_push_deliveries_are_claimed_when_due_each_claim_an_attempt(store):
    sent_now = make_delivery(2000.0, attempts=1, owner="gw-a")  # added claimed, until 2000
    waiting = make_delivery(1000.0, scope=OTHER_PRINCIPAL, config_id="c2")
    later = make_delivery(5000.0)
    await store.add_push_deliveries([sent_now, waiting, later])
    assert await store.claim_push_deliveries("gw-b", now=999.0, claim_until=1100.0) == []

    claimed = await store.claim_push_deliveries("gw-b", now=1500.0, claim_until=1600.0)
    assert claimed == [replace(waiting, owner="gw-b", attempts=1, due_at=1600.0)]
    assert await store.claim_push_deliveries("gw-c", now=1599.0, claim_until=1700.0) == []

    # gw-a stopped mid-attempt: once its claim ends, another replica takes the delivery
    claimed = await store.claim_push_deliveries("gw-c", now=2500.0, claim_until=2600.0)
    assert sorted(claimed, key=lambda d: d.id) == sorted([
        replace(sent_now, owner="gw-c", attempts=2, due_at=2600.0),
        replace(waiting, owner="gw-c", attempts=2, due_at=2600.0),
    ], key=lambda d: d.id)


async def test_claims_take_the_earliest_due_up_to_the_limit(store):
    deliveries = [make_delivery(float(100 + i)) for i in range(5)]
    await store.add_push_deliveries(list(reversed(deliveries)))
    first = await store.claim_push_deliveries("gw-a", now=1000.0, claim_until=2000.0, limit=2)
    assert {d.id for d in first} == {d.id for d in deliveries[:2]}
    rest = await store.claim_push_deliveries("gw-b", now=1000.0, claim_until=2000.0, limit=10)
    assert {d.id for d in rest} == {d.id for d in deliveries[2:]}


async def test_a_retry_releases_the_delivery_only_for_the_claim_that_holds_it(store):
    delivery = make_delivery(2000.0, attempts=1, owner="gw-a")
    await store.add_push_deliveries([delivery])
    await store.retry_push_delivery(delivery.id, "gw-b", 1, due_at=10.0)  # not gw-b's
    await store.retry_push_delivery(delivery.id, "gw-a", 2, due_at=10.0)  # not this attempt
    assert await store.claim_push_deliveries("gw-b", now=1000.0, claim_until=3000.0) == []

    await store.retry_push_delivery(delivery.id, "gw-a", 1, due_at=1500.0)
    assert await store.claim_push_deliveries("gw-b", now=1499.0, claim_until=3000.0) == []
    (claimed,) = await store.claim_push_deliveries("gw-b", now=1500.0, claim_until=3000.0)
    assert (claimed.owner, claimed.attempts, claimed.due_at) == ("gw-b", 2, 3000.0)
    await store.retry_push_delivery(delivery.id, "gw-a", 1, due_at=0.0)  # gw-a's claim is over
    assert await store.claim_push_deliveries("gw-a", now=2999.0, claim_until=4000.0) == []


async def test_a_delivered_push_is_deleted_idempotently_and_ids_are_unique(store):
    delivery, other = make_delivery(10.0), make_delivery(10.0)
    await store.add_push_deliveries([delivery, other])
    with pytest.raises(ConflictError):
        await store.add_push_deliveries([replace(delivery, config_id="again")])
    await store.delete_push_delivery(delivery.id)
    await store.delete_push_delivery(delivery.id)
    await store.delete_push_delivery("never-added")
    left = await store.claim_push_deliveries("gw", now=20.0, claim_until=30.0)
    assert [d.id for d in left] == [other.id]


async def test_concurrent_claims_never_take_the_same_delivery_twice(store):
    deliveries = [make_delivery(float(i)) for i in range(20)]
    await store.add_push_deliveries(deliveries)
    rounds = await asyncio.gather(*(
        store.claim_push_deliveries(f"gw-{n}", now=100.0, claim_until=200.0, limit=7)
        for n in range(4)
    ))
    claimed = [d.id for batch in rounds for d in batch]
    assert len(claimed) == len(set(claimed))
    # a claim may skip rows another one holds at that moment; nothing is lost
    rest = await store.claim_push_deliveries("gw-last", now=100.0, claim_until=200.0)
    assert sorted(claimed + [d.id for d in rest]) == sorted(d.id for d in deliveries)
