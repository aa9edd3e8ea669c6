"""DynamoDB store behaviour beyond the contract suite: paging over the indexes, page-token
tampering, racing conditional writes, TTL-expired items, migrations, error mapping.

Tests that need moto use ``A2A_TEST_DYNAMODB_ENDPOINT`` (see ``dynamo_support.py``).
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from a2a.types import Task, TaskState
from aiohttp import web

from a2a_gateway.stores.base import (
    ApiKey,
    ConflictError,
    InvalidPageTokenError,
    PushDelivery,
    Scope,
    StoreUnavailableError,
    TaskQuery,
)
from a2a_gateway.stores.dynamodb import (
    DynamoDBSettings,
    DynamoDBStore,
    MissingTableError,
    create_tables,
    scope_key,
    table_definitions,
)
from a2a_gateway.stores.page_token import encode_page_token
from tests.stores import dynamo_support as support

pytestmark = pytest.mark.dynamodb

SCOPE = Scope("t1", "ep-1", "anonymous")
WORKING, COMPLETED = TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED
TEMPLATE = Path(__file__).parents[2] / "deploy" / "dynamodb" / "template.yaml"


def make_task(state: int = WORKING, context_id: str = "ctx", ts_s: int = 1_700_000_000) -> Task:
    task = Task(id=str(uuid.uuid4()), context_id=context_id)
    task.status.state = state
    task.status.timestamp.seconds = ts_s
    return task


@pytest.fixture
async def dynamo(request):
    async with support.open_test_store(request) as store:
        yield store


async def list_all(store: DynamoDBStore, query: TaskQuery) -> tuple[list[str], list[int]]:
    """Follow next_page_token to the end; return the ids and each page's total_size."""
    ids, totals, token = [], [], ""
    for _ in range(100):
        page = await store.list_tasks(
            SCOPE,
            TaskQuery(query.context_id, query.state, query.status_after_us, query.page_size, token),
        )
        ids += [t.id for t in page.tasks]
        totals.append(page.total_size)
        token = page.next_page_token
        if not token:
            return ids, totals
    raise AssertionError("pagination did not end")


# -- paging -----------------------------------------------------------------------------------


async def test_pagination_across_pages_on_every_index(dynamo):
    tasks = []
    for i in range(23):
        state = COMPLETED if i % 3 == 0 else WORKING
        task = make_task(state, context_id=f"ctx-{i % 2}", ts_s=1_700_000_000 + i // 2)
        await dynamo.create_task(SCOPE, task)
        tasks.append(task)
    await dynamo.create_task(Scope("t2", "ep-1"), make_task(ts_s=1_800_000_000))

    def expected(pred) -> list[str]:
        chosen = [t for t in tasks if pred(t)]
        chosen.sort(key=lambda t: (t.status.timestamp.seconds, t.id), reverse=True)
        return [t.id for t in chosen]

    cases = [
        (TaskQuery(page_size=4), lambda t: True),
        (TaskQuery(context_id="ctx-1", page_size=3), lambda t: t.context_id == "ctx-1"),
        (TaskQuery(state=COMPLETED, page_size=2), lambda t: t.status.state == COMPLETED),
        (
            TaskQuery(context_id="ctx-0", state=COMPLETED, page_size=1),
            lambda t: t.context_id == "ctx-0" and t.status.state == COMPLETED,
        ),
        (
            TaskQuery(status_after_us=1_700_000_006 * 1_000_000, page_size=5),
            lambda t: t.status.timestamp.seconds >= 1_700_000_006,
        ),
    ]
    for query, pred in cases:
        ids, totals = await list_all(dynamo, query)
        want = expected(pred)
        assert ids == want, query
        assert set(totals) == {len(want)}, query


async def test_last_page_exactly_full_has_no_token(dynamo):
    for i in range(4):
        await dynamo.create_task(SCOPE, make_task(ts_s=1_700_000_000 + i))
    page1 = await dynamo.list_tasks(SCOPE, TaskQuery(page_size=2))
    page2 = await dynamo.list_tasks(SCOPE, TaskQuery(page_size=2, page_token=page1.next_page_token))
    assert len(page2.tasks) == 2 and page2.next_page_token == ""


async def test_forged_page_tokens_are_rejected(dynamo):
    for i in range(3):
        await dynamo.create_task(SCOPE, make_task(ts_s=1_700_000_000 + i))
    page = await dynamo.list_tasks(SCOPE, TaskQuery(page_size=1))
    token = page.next_page_token
    forgeries = [
        # a character in the middle (the last one may only carry padding bits)
        token[:10] + ("A" if token[10] != "A" else "B") + token[11:],
        token[1:],
        encode_page_token(1_700_000_002_000_000, "some-task", key=b"guessed-key"),
        "x" * 40,
        "%%%",
    ]
    for forged in forgeries:
        with pytest.raises(InvalidPageTokenError):
            await dynamo.list_tasks(SCOPE, TaskQuery(page_size=1, page_token=forged))

    # a replica configured with another key rejects this store's tokens
    url = support.store_url(support.moto_endpoint(), dynamo._settings.table_prefix)
    other = await DynamoDBStore.open(url, page_token_key="another-key", **support.CREDENTIALS)
    try:
        with pytest.raises(InvalidPageTokenError):
            await other.list_tasks(SCOPE, TaskQuery(page_size=1, page_token=token))
    finally:
        await other.aclose()


# -- conditional writes -------------------------------------------------------------------------


async def test_racing_updates_from_two_replicas_have_one_winner(dynamo):
    url = support.store_url(support.moto_endpoint(), dynamo._settings.table_prefix)
    replica_b = await DynamoDBStore.open(url, **support.CREDENTIALS)
    try:
        for _ in range(3):
            task = make_task()
            await dynamo.create_task(SCOPE, task)

            async def write(store: DynamoDBStore, state: int) -> bool:
                copy = Task()
                copy.CopyFrom(task)
                copy.status.state = state
                try:
                    await store.update_task(SCOPE, copy, expected_version=1)
                    return True
                except ConflictError:
                    return False

            writers = [
                write(dynamo if i % 2 else replica_b, COMPLETED if i % 3 else WORKING)
                for i in range(24)
            ]
            results = await asyncio.gather(*writers)
            assert results.count(True) == 1
            assert (await dynamo.get_task(SCOPE, task.id)).version == 2
    finally:
        await replica_b.aclose()


async def test_racing_updates_from_threads_have_one_winner(dynamo):
    task = make_task()
    await dynamo.create_task(SCOPE, task)
    wins: list[bool] = []
    barrier = threading.Barrier(12)

    def writer() -> None:
        async def attempt() -> bool:
            copy = Task()
            copy.CopyFrom(task)
            copy.status.state = COMPLETED
            try:
                await dynamo.update_task(SCOPE, copy, expected_version=1)
                return True
            except ConflictError:
                return False

        barrier.wait()
        wins.append(asyncio.run(attempt()))

    threads = [threading.Thread(target=writer) for _ in range(12)]
    await asyncio.to_thread(lambda: [t.start() for t in threads] and [t.join() for t in threads])
    assert len(wins) == 12 and wins.count(True) == 1


async def test_terminal_task_cannot_be_reopened_even_with_its_current_version(dynamo):
    task = make_task()
    await dynamo.create_task(SCOPE, task)
    task.status.state = COMPLETED
    assert await dynamo.update_task(SCOPE, task, expected_version=1) == 2
    task.status.state = WORKING
    with pytest.raises(ConflictError):
        await dynamo.update_task(SCOPE, task, expected_version=2)
    assert (await dynamo.get_task(SCOPE, task.id)).task.status.state == COMPLETED


async def test_two_replicas_claim_each_expired_task_once(dynamo):
    url = support.store_url(support.moto_endpoint(), dynamo._settings.table_prefix)
    replica_b = await DynamoDBStore.open(url, **support.CREDENTIALS)
    try:
        dead = [make_task() for _ in range(12)]
        for task in dead:
            await dynamo.create_task(SCOPE, task, owner="lost", lease_until=5.0)
        claims = await asyncio.gather(
            dynamo.claim_expired_tasks("a", now=10.0, lease_until=100.0),
            replica_b.claim_expired_tasks("b", now=10.0, lease_until=100.0),
        )
        ids_a = {c.stored.task.id for c in claims[0]}
        ids_b = {c.stored.task.id for c in claims[1]}
        assert not ids_a & ids_b and ids_a | ids_b == {t.id for t in dead}
        for claim in claims[0] + claims[1]:
            stored = await dynamo.get_task(SCOPE, claim.stored.task.id)
            assert stored.owner == claim.stored.owner and stored.version == 2
    finally:
        await replica_b.aclose()


async def test_renew_touches_only_own_live_tasks(dynamo):
    mine, theirs, finished = make_task(), make_task(), make_task()
    await dynamo.create_task(SCOPE, mine, owner="a", lease_until=10.0)
    await dynamo.create_task(SCOPE, theirs, owner="b", lease_until=10.0)
    await dynamo.create_task(SCOPE, finished, owner="a", lease_until=10.0)
    finished.status.state = COMPLETED
    await dynamo.update_task(SCOPE, finished, expected_version=1, owner="a", lease_until=10.0)
    await dynamo.renew_leases("a", [mine.id, theirs.id, finished.id], 50.0)
    assert (await dynamo.get_task(SCOPE, mine.id)).lease_until == 50.0
    assert (await dynamo.get_task(SCOPE, theirs.id)).lease_until == 10.0
    assert (await dynamo.get_task(SCOPE, finished.id)).lease_until is None
    claimed = await dynamo.claim_expired_tasks("c", now=20.0, lease_until=90.0)
    assert [c.stored.task.id for c in claimed] == [theirs.id]


async def test_separator_in_scope_names_cannot_alias_another_scope(dynamo):
    a = Scope("x#E#y", "z", "p")
    b = Scope("x", "y#E#z", "p")
    assert scope_key(a) != scope_key(b)
    task = make_task()
    await dynamo.create_task(a, task)
    assert await dynamo.get_task(b, task.id) is None
    assert (await dynamo.list_tasks(b, TaskQuery())).tasks == []


# -- TTL ------------------------------------------------------------------------------------------


async def expire(store: DynamoDBStore, scope: Scope, task_id: str, at: float) -> None:
    """Sets the task's TTL attribute into the past directly (moto never deletes expired
    items)."""
    await asyncio.to_thread(
        store._client.update_item,
        TableName=store._settings.tasks_table,
        Key={"pk": {"S": scope_key(scope)}, "sk": {"S": f"TASK#{task_id}"}},
        UpdateExpression="SET #e = :e",
        ExpressionAttributeNames={"#e": "expires_at"},
        ExpressionAttributeValues={":e": {"N": str(int(at))}},
    )


async def test_terminal_tasks_get_a_ttl_and_expired_items_are_invisible(request):
    async with support.open_test_store(request, ttl_days=2) as store:
        live, done, gone = make_task(), make_task(), make_task(ts_s=1_700_000_100)
        for task in (live, done, gone):
            await store.create_task(SCOPE, task)
        for task in (done, gone):
            task.status.state = COMPLETED
            await store.update_task(SCOPE, task, expected_version=1)

        raw = await asyncio.to_thread(
            store._client.get_item,
            TableName=store._settings.tasks_table,
            Key={"pk": {"S": scope_key(SCOPE)}, "sk": {"S": f"TASK#{done.id}"}},
        )
        ttl = int(raw["Item"]["expires_at"]["N"])
        assert abs(ttl - (time.time() + 2 * 86400)) < 60

        await expire(store, SCOPE, gone.id, time.time() - 1)
        assert await store.get_task(SCOPE, gone.id) is None
        page = await store.list_tasks(SCOPE, TaskQuery())
        assert {t.id for t in page.tasks} == {live.id, done.id} and page.total_size == 2
        by_state = await store.list_tasks(SCOPE, TaskQuery(state=COMPLETED))
        assert [t.id for t in by_state.tasks] == [done.id] and by_state.total_size == 1
        ids, _ = await list_all(store, TaskQuery(page_size=1))
        assert sorted(ids) == sorted([live.id, done.id])
        # an expired item that DynamoDB has not deleted yet may be replaced by a new task
        assert await store.create_task(SCOPE, gone) == 1
        with pytest.raises(ConflictError):
            await store.create_task(SCOPE, done)


async def test_without_ttl_days_terminal_tasks_are_kept(dynamo):
    task = make_task(state=COMPLETED)
    await dynamo.create_task(SCOPE, task)
    raw = await asyncio.to_thread(
        dynamo._client.get_item,
        TableName=dynamo._settings.tasks_table,
        Key={"pk": {"S": scope_key(SCOPE)}, "sk": {"S": f"TASK#{task.id}"}},
    )
    assert "expires_at" not in raw["Item"]


# -- schema -------------------------------------------------------------------------------------


async def test_create_tables_is_idempotent_and_adds_missing_indexes():
    endpoint = support.moto_endpoint()
    url = support.store_url(endpoint, support.unique_prefix())
    settings = DynamoDBSettings.from_url(url)
    try:
        first = await create_tables(url, **support.CREDENTIALS)
        assert first == [
            settings.endpoints_table,
            settings.tasks_table,
            settings.api_keys_table,
            settings.push_deliveries_table,
            f"{settings.tasks_table} ttl:expires_at",
        ]
        assert await create_tables(url, **support.CREDENTIALS) == []
    finally:
        await support.drop_tables(url)

    # a tasks table from an older release, without the lease indexes
    from a2a_gateway.stores.dynamodb import _client

    older = dict(table_definitions(settings)[1])
    older["GlobalSecondaryIndexes"] = older["GlobalSecondaryIndexes"][:3]
    used = {"pk", "sk", "status_key", "ctx_pk", "state_pk"}
    older["AttributeDefinitions"] = [
        a for a in older["AttributeDefinitions"] if a["AttributeName"] in used
    ]
    client = _client(settings, support.CREDENTIALS)
    try:
        await asyncio.to_thread(lambda: client.create_table(**older))
        added = await create_tables(url, **support.CREDENTIALS)
        assert f"{settings.tasks_table}:by_owner" in added
        assert f"{settings.tasks_table}:by_lease" in added
        assert await create_tables(url, **support.CREDENTIALS) == []
    finally:
        client.close()
        await support.drop_tables(url)


async def test_tables_from_before_api_keys_are_refused_until_migrate_adds_the_table(request):
    async with support.open_test_store(request) as store:
        await store.check_schema()
        from a2a_gateway.stores.dynamodb import _client

        settings = store._settings
        client = _client(settings, support.CREDENTIALS)
        try:
            await asyncio.to_thread(client.delete_table, TableName=settings.api_keys_table)
        finally:
            client.close()
        missing = rf"{settings.api_keys_table} does not exist: run `a2a-gateway migrate`"
        with pytest.raises(MissingTableError, match=missing):
            await store.check_schema()
        url = support.store_url(support.moto_endpoint(), settings.table_prefix)
        assert await create_tables(url, **support.CREDENTIALS) == [settings.api_keys_table]
        await store.check_schema()
        assert await store.list_api_keys() == []


def test_deploy_template_matches_table_definitions():
    resources = yaml.safe_load(TEMPLATE.read_text())["Resources"]
    tables = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::DynamoDB::Table"]
    definitions = table_definitions(DynamoDBSettings(table_prefix="${TablePrefix}"))
    assert len(tables) == len(definitions)
    for table, definition in zip(tables, definitions, strict=True):
        assert table["TableName"] == {"Fn::Sub": definition["TableName"]}
        for field in ("BillingMode", "KeySchema", "AttributeDefinitions"):
            assert table[field] == definition[field], field
        indexes = definition.get("GlobalSecondaryIndexes", [])
        assert table.get("GlobalSecondaryIndexes", []) == indexes
    assert resources["TasksTable"]["Properties"]["TimeToLiveSpecification"] == {
        "AttributeName": "expires_at",
        "Enabled": True,
    }


# -- expressions --------------------------------------------------------------------------------

_EXPRESSIONS = (
    "KeyConditionExpression",
    "FilterExpression",
    "ConditionExpression",
    "UpdateExpression",
    "ProjectionExpression",
)


async def test_every_expression_placeholder_sent_is_used(request):
    """Real DynamoDB rejects unused ExpressionAttributeNames/Values; moto accepts them."""
    unused: list[str] = []

    def check(params, **_):
        text = " ".join(params.get(k, "") for k in _EXPRESSIONS)
        names = params.get("ExpressionAttributeNames", {})
        for placeholder in [*names, *params.get("ExpressionAttributeValues", {})]:
            if not re.search(re.escape(placeholder) + r"(?![A-Za-z0-9_])", text):
                unused.append(f"{placeholder} in {sorted(params)}")

    async with support.open_test_store(request, ttl_days=1) as store:
        store._client.meta.events.register("provide-client-params.dynamodb.*", check)
        task = make_task()
        await store.create_task(SCOPE, task, owner="a", lease_until=1.0, run_ref="r")
        await store.renew_leases("a", [task.id], 2.0)
        await store.claim_expired_tasks("b", now=3.0, lease_until=4.0)
        task.status.state = COMPLETED
        await store.update_task(SCOPE, task, expected_version=2, run_state={"x": 1})
        await store.get_task(SCOPE, task.id)
        for query in (
            TaskQuery(page_size=1),
            TaskQuery(context_id="ctx", state=COMPLETED, status_after_us=1),
            TaskQuery(state=WORKING),
        ):
            await store.list_tasks(SCOPE, query)
        await store.list_push_configs(SCOPE, task.id)
        key = ApiKey(
            id="0123456789abcdef", endpoint_id="ep-1", tenant="t1", principal="ci", name="",
            key_hash="ab" * 32, created_at=datetime.now(UTC),
        )
        await store.create_api_key(key)
        await store.get_api_key(key.id)
        await store.list_api_keys()
        await store.list_api_keys("ep-1")
        await store.revoke_api_key(key.id, datetime.now(UTC))
        await store.revoke_api_key("fedcba9876543210", datetime.now(UTC))
        delivery = PushDelivery(
            id="d-1", scope=SCOPE, task_id=task.id, config_id="c", body=b"{}", due_at=1.0,
            attempts=1, owner="a",
        )
        await store.add_push_deliveries([delivery])
        await store.retry_push_delivery(delivery.id, "a", 1, due_at=2.0)
        await store.claim_push_deliveries("b", now=3.0, claim_until=4.0)
        await store.delete_push_delivery(delivery.id)
        await store.check_schema()
        await store.ping()
    assert unused == []


# -- errors and settings (no moto needed) --------------------------------------------------------


async def test_throttling_is_retried_then_reported_as_unavailable():
    calls = 0

    async def throttled(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        error = "com.amazonaws.dynamodb.v20120810#ThrottlingException"
        body = {"__type": error, "message": "slow down"}
        return web.json_response(body, status=400, content_type="application/x-amz-json-1.0")

    app = web.Application()
    app.router.add_post("/", throttled)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    url = support.store_url(f"http://127.0.0.1:{port}", "x-", max_attempts=2)
    store = await DynamoDBStore.open(url, **support.CREDENTIALS)
    try:
        with pytest.raises(StoreUnavailableError, match="ThrottlingException"):
            await store.get_task(SCOPE, "t")
        assert calls == 2
    finally:
        await store.aclose()
        await runner.cleanup()


async def test_unreachable_endpoint_is_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = support.store_url(f"http://127.0.0.1:{port}", "x-", max_attempts=2, connect_timeout=1)
    store = await DynamoDBStore.open(url, **support.CREDENTIALS)
    try:
        with pytest.raises(StoreUnavailableError):
            await store.ping()
    finally:
        await store.aclose()


def test_url_options_are_parsed_and_typos_rejected():
    settings = DynamoDBSettings.from_url(
        "dynamodb://?region=eu-central-1&table_prefix=prod-&ttl_days=30&pool_size=8"
        "&retry_mode=adaptive&endpoint_url=http%3A%2F%2F127.0.0.1%3A5000"
    )
    assert settings.region == "eu-central-1" and settings.tasks_table == "prod-tasks"
    assert settings.ttl_days == 30.0 and settings.pool_size == 8
    assert settings.retry_mode == "adaptive" and settings.endpoint_url == "http://127.0.0.1:5000"
    with pytest.raises(ValueError, match="ttl_day"):
        DynamoDBSettings.from_url("dynamodb://?ttl_day=3")
    with pytest.raises(ValueError, match="retry_mode"):
        DynamoDBSettings.from_url("dynamodb://?retry_mode=sometimes")
