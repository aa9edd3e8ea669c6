"""Push notifications are delivered at least once through the store's outbox: retried after
5xx with backoff, given up after the limit, sent by the next gateway after a restart (SQLite,
PostgreSQL) or by another replica once the sender's claim ran out, each POST with its
``Authorization`` and one delivery id per notification, the same on every attempt."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import pytest
from a2a.types import TaskPushNotificationConfig
from structlog.testing import capture_logs

from a2a_gateway.stores.base import PushDelivery, Scope, Store
from tests.stores.store_urls import fresh_store_url
from tests.support.harness import require_env, running_gateway
from tests.support.messages import rpc, send_body
from tests.support.waiting import eventually
from tests.support.webhooks import DELIVERY_ID, webhook_receiver

V10 = {"A2A-Version": "1.0"}
FAST = {"push_retry_base_seconds": 0.1, "push_retry_max_seconds": 0.2, "push_poll_seconds": 0.1}
AUTH = {"scheme": "Bearer", "credentials": "receiver-secret"}


@pytest.fixture
async def hooks():
    async with webhook_receiver() as receiver:
        yield receiver


async def pending(store: Store) -> list[PushDelivery]:
    """What the outbox still holds (claims them: for the end of a test)."""
    return await store.claim_push_deliveries("inspector", time.time() + 1e6, time.time() + 2e6)


async def settle(seconds: float = 0.6) -> None:
    """Longer than a few poll intervals: lets anything still due be sent, before a test
    asserts that nothing more was (a bounded wait for something that must not happen)."""
    await asyncio.sleep(seconds)


async def test_retried_after_500s_with_one_id_then_delivered(hooks):
    hooks.statuses["/hook"] = [500, 502, 503]
    async with running_gateway(**FAST) as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        push = {"id": "c1", "url": hooks.url("/hook"), "authentication": AUTH}
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("hi", push=push), headers=V10)
        task_id = r.json()["result"]["task"]["id"]
        await hooks.wait_for("/hook", count=5)  # WORKING and COMPLETED, 3 failures between
        await settle()
        assert await pending(gw.store) == []
    posts = hooks.posts_to("/hook")
    assert len(posts) == 5
    assert {h["Authorization"] for h, _ in posts} == {"Bearer receiver-secret"}
    assert {b["statusUpdate"]["taskId"] for _, b in posts} == {task_id}
    ids = [h[DELIVERY_ID] for h, _ in posts]
    assert len(set(ids)) == 2  # two notifications, each its own id on every attempt
    for delivery_id in set(ids):
        bodies = [b for h, b in posts if h[DELIVERY_ID] == delivery_id]
        assert bodies == bodies[:1] * len(bodies)
    assert sorted(hooks.delivered_ids()) == sorted(set(ids))  # each answered 2xx once


async def test_given_up_after_the_attempt_limit_and_logged(hooks):
    hooks.statuses["/down"] = [500] * 50
    async with running_gateway(push_max_attempts=3, **FAST) as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        push = {"id": "c1", "url": hooks.url("/down"), "token": "t"}
        with capture_logs() as logs:
            await http.post(gw.jsonrpc_url(ep), json=send_body("hi", push=push), headers=V10)
            await hooks.wait_for("/down", count=6)
            await settle()
        assert await pending(gw.store) == []
    assert len(hooks.posts) == 6  # two notifications × three attempts, and not one more
    gave_up = [e for e in logs if e["event"] == "push_gave_up"]
    assert len(gave_up) == 2 and {e["attempt"] for e in gave_up} == {3}
    assert {e["reason"] for e in gave_up} == {"HTTP 500"}


async def test_a_receiver_rejecting_with_4xx_is_not_retried(hooks):
    hooks.statuses["/gone"] = [410, 410]
    async with running_gateway(**FAST) as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        await http.post(gw.jsonrpc_url(ep), json=send_body("hi", push={"url": hooks.url("/gone")}),
                        headers=V10)
        await hooks.wait_for("/gone", count=2)
        await settle()
        assert await pending(gw.store) == []
    assert hooks.answered == [410, 410]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_pending_delivery_is_sent_by_the_next_gateway_after_a_restart(
    kind, hooks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    hooks.statuses["/hook"] = [500, 500]
    # the first gateway waits long before its retry: it is stopped with the retry pending
    slow_retry = {"push_retry_base_seconds": 30.0, "push_retry_max_seconds": 30.0}
    async with fresh_store_url(kind, tmp_path, monkeypatch) as url:
        async with running_gateway(url, **slow_retry) as first, httpx.AsyncClient() as http:
            ep = await first.add_endpoint(settings={"delay": 0})
            push = {"id": "c1", "url": hooks.url("/hook"), "authentication": AUTH}
            r = await http.post(first.jsonrpc_url(ep), json=send_body("hi", push=push), headers=V10)
            task_id = r.json()["result"]["task"]["id"]
            await hooks.wait_for("/hook", count=2)  # WORKING and COMPLETED, both answered 500
        assert len(hooks.posts) == 2
        # due in about 15 to 30 s; the next gateway retries it then, as it is told to: make
        # it due now, as if that time had passed while no gateway ran
        async with running_gateway(url, **FAST) as second:
            for delivery in await pending(second.store):
                await second.store.retry_push_delivery(
                    delivery.id, "inspector", delivery.attempts, due_at=time.time()
                )
            await hooks.wait_for("/hook", count=4)
            await settle()
            assert await pending(second.store) == []
    posts = hooks.posts_to("/hook")
    assert len(posts) == 4 and hooks.answered == [500, 500, 204, 204]
    assert {h["Authorization"] for h, _ in posts} == {"Bearer receiver-secret"}
    first_ids = [h[DELIVERY_ID] for h, _ in posts[:2]]
    assert sorted(h[DELIVERY_ID] for h, _ in posts[2:]) == sorted(first_ids)  # same ids
    assert {b["statusUpdate"]["taskId"] for _, b in posts} == {task_id}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_gateway_stopped_mid_attempt_leaves_it_to_the_next(
    kind, hooks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Stopped while a POST is under way: the attempt is released at once, not lost."""
    hung, release = asyncio.Event(), asyncio.Event()
    held: list[str] = []

    async def hang_the_first(request):
        if not hung.is_set():
            hung.set()
            held.append(request.headers[DELIVERY_ID])
            await release.wait()  # until the first gateway is gone

    hooks.before = hang_the_first
    async with fresh_store_url(kind, tmp_path, monkeypatch) as url:
        stop_at_once = {**FAST, "push_stop_grace_seconds": 0.2}
        async with running_gateway(url, **stop_at_once) as first, httpx.AsyncClient() as http:
            ep = await first.add_endpoint(settings={"delay": 0})
            r = await http.post(first.jsonrpc_url(ep), headers=V10,
                                json=send_body("wait ?input", push={"url": hooks.url("/hook")}))
            assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            await asyncio.wait_for(hung.wait(), 30)
            await hooks.wait_for("/hook")  # the other notification, not held
        release.set()
        async with running_gateway(url, **FAST) as second:
            await hooks.wait_for("/hook", count=2)
            await settle()
            assert await pending(second.store) == []
    # the held POST was cut off by the stop and sent again by the next gateway, under the
    # same id; the other one was not sent twice
    ids = [h[DELIVERY_ID] for h, _ in hooks.posts_to("/hook")]
    assert len(ids) == len(set(ids)) == 2 and held[0] in ids


async def test_another_replica_sends_a_delivery_once_the_senders_claim_ran_out(hooks):
    async with running_gateway(**FAST) as gw:
        scope = Scope("default", "ep-x", "anonymous")
        config = TaskPushNotificationConfig(id="c1", task_id="task-1", url=hooks.url("/hook"),
                                            token="tok")
        await gw.store.put_push_config(scope, config)
        # recorded and claimed by a replica that then died, its claim ending in 0.5 s
        delivery = PushDelivery("d-1", scope, "task-1", "c1", b'{"statusUpdate":{}}',
                                due_at=time.time() + 0.5, attempts=1, owner="gw-dead")
        await gw.store.add_push_deliveries([delivery])
        await hooks.wait_for("/hook")
        await settle()
        assert await pending(gw.store) == []
    (headers, body), = hooks.posts_to("/hook")
    assert headers[DELIVERY_ID] == "d-1" and headers["X-A2A-Notification-Token"] == "tok"
    assert body == {"statusUpdate": {}}


async def test_a_deleted_config_stops_its_pending_deliveries(hooks):
    hooks.statuses["/hook"] = [500] * 10
    async with running_gateway(push_retry_base_seconds=1.0, push_poll_seconds=0.1) as gw, \
            httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("wait ?input", push={
            "id": "c1", "url": hooks.url("/hook")}), headers=V10)
        task_id = r.json()["result"]["task"]["id"]
        await hooks.wait_for("/hook", count=2)
        delete = rpc("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "c1"})
        assert "error" not in (await http.post(gw.jsonrpc_url(ep), json=delete, headers=V10)).json()
        await settle(2.5)  # past the retries' due times
        assert await pending(gw.store) == []
    assert len(hooks.posts) == 2


async def test_every_notification_arrives_through_failures_and_a_restart(
    hooks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Figures: 40 notifications (20 tasks × WORKING, COMPLETED), every third POST answered
    500, the gateway replaced halfway: none lost, each delivered once."""
    hooks.fail_every = 3
    tasks = 20
    async with fresh_store_url("sqlite", tmp_path, monkeypatch) as url:
        for half in range(2):
            async with running_gateway(url, **FAST) as gw, httpx.AsyncClient() as http:
                ep = await gw.add_endpoint(settings={"delay": 0}, endpoint_id=ENDPOINT) \
                    if half == 0 else ENDPOINT
                for i in range(tasks // 2):
                    push = {"id": "c", "url": hooks.url("/hook"), "authentication": AUTH}
                    await http.post(
                        gw.jsonrpc_url(ep), json=send_body(f"n{i}", push=push), headers=V10
                    )
                if half == 1:
                    await eventually(lambda: len(set(hooks.delivered_ids())) >= 2 * tasks,
                                     what=f"{2 * tasks} notifications delivered")
                    await settle()
                    assert await pending(gw.store) == []
    delivered = hooks.delivered_ids()
    ids = {h[DELIVERY_ID] for _, h, _ in hooks.posts}
    duplicates = len(delivered) - len(set(delivered))
    print(f"\npush figures: notifications={len(ids)} posts={len(hooks.posts)}"
          f" answered_500={hooks.answered.count(500)} delivered={len(set(delivered))}"
          f" duplicates={duplicates} lost={len(ids - set(delivered))}")
    assert len(ids) == 2 * tasks and set(delivered) == ids
    assert duplicates == 0
    assert {h["Authorization"] for _, h, _ in hooks.posts} == {"Bearer receiver-secret"}


ENDPOINT = "7f0c9a52-6d3e-4b8a-9c1f-2e5d8b7a4c60"


async def test_a_task_failed_as_gateway_lost_is_notified(hooks):
    from a2a.types import Task
    from a2a.types.a2a_pb2 import TASK_STATE_WORKING

    async with running_gateway(**FAST) as gw:
        ep = await gw.add_endpoint(settings={"delay": 0})
        scope = Scope("default", ep, "anonymous")
        task = Task(id=str(uuid.uuid4()), context_id="ctx")
        task.status.state = TASK_STATE_WORKING
        # a run of a replica that died: its lease is over, no handler can re-attach it
        await gw.store.create_task(scope, task, owner="gw-dead", lease_until=time.time() - 1)
        await gw.store.put_push_config(scope, TaskPushNotificationConfig(
            id="c1", task_id=task.id, url=hooks.url("/hook")))
        await gw.gateway.engine.recover_expired(gw.gateway.registry)
        await hooks.wait_for("/hook")
    ((_, body),) = hooks.posts_to("/hook")
    assert body["statusUpdate"]["status"]["state"] == "TASK_STATE_FAILED"
    assert body["statusUpdate"]["status"]["message"]["parts"][0]["text"] == "gateway instance lost"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_two_replicas_send_a_dead_replicas_deliveries_once(
    kind, hooks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    async with fresh_store_url(kind, tmp_path, monkeypatch) as url:
        async with running_gateway(url, replica_id="gw-a", **FAST) as a, \
                running_gateway(url, replica_id="gw-b", **FAST):
            scope = Scope("default", "ep-x", "anonymous")
            await a.store.put_push_config(scope, TaskPushNotificationConfig(
                id="c1", task_id="task-1", url=hooks.url("/hook")))
            claim_ends = time.time() + 0.5
            await a.store.add_push_deliveries([
                PushDelivery(f"d-{i}", scope, "task-1", "c1", b"{}", claim_ends, 1, "gw-dead")
                for i in range(20)
            ])
            await hooks.wait_for("/hook", count=20)
            await settle()
            assert await pending(a.store) == []
    ids = [h[DELIVERY_ID] for h, _ in hooks.posts_to("/hook")]
    assert sorted(ids) == sorted(f"d-{i}" for i in range(20))  # each once, none twice


# with replicas sharing Redis: due times instead of polling ------------------------------------


class CountingClaims:
    """Counts the store's ``claim_push_deliveries`` calls (each a poll of the outbox)."""

    def __init__(self, store: Store) -> None:
        self.calls = 0
        self._claim = store.claim_push_deliveries
        store.claim_push_deliveries = self  # type: ignore[method-assign]

    async def __call__(self, *args, **kwargs):
        self.calls += 1
        return await self._claim(*args, **kwargs)


@pytest.mark.redis
async def test_with_redis_an_idle_replica_does_not_poll_and_a_retry_is_sent_when_due(hooks):
    redis = {"redis_url": require_env("A2A_TEST_REDIS_URL"),
             "redis_prefix": f"t{uuid.uuid4().hex[:8]}:"}
    hooks.statuses["/hook"] = [503]
    async with running_gateway(**FAST, **redis) as gw, httpx.AsyncClient() as http:
        claims = CountingClaims(gw.store)
        await asyncio.sleep(1.0)  # idle: without Redis, ten polls of 0.1 s
        assert claims.calls <= 1
        ep = await gw.add_endpoint(settings={"delay": 0})
        push = {"id": "c1", "url": hooks.url("/hook"), "authentication": AUTH}
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("hi", push=push), headers=V10)
        assert "result" in r.json()
        await hooks.wait_for("/hook", count=3)  # WORKING failed once, then both delivered
        await settle()
        assert await pending(gw.store) == []
        assert claims.calls <= 6  # looked when the retry fell due, not every 0.1 s
    assert sorted(hooks.answered) == [204, 204, 503]


@pytest.mark.redis
async def test_with_redis_a_delivery_left_by_a_stopped_replica_is_sent_when_its_claim_ends(
    hooks,
):
    redis = {"redis_url": require_env("A2A_TEST_REDIS_URL"),
             "redis_prefix": f"t{uuid.uuid4().hex[:8]}:"}
    async with running_gateway(**FAST, **redis) as gw:
        scope = Scope("default", "ep-x", "anonymous")
        config = TaskPushNotificationConfig(id="c1", task_id="task-1", url=hooks.url("/hook"))
        await gw.store.put_push_config(scope, config)
        # recorded and claimed by a replica that then died; it noted the claim's end in Redis
        due = time.time() + 0.5
        await gw.store.add_push_deliveries([PushDelivery(
            "d-1", scope, "task-1", "c1", b'{"statusUpdate":{}}', due_at=due, attempts=1,
            owner="gw-dead")])
        gw.gateway.hub.push_due(due)
        await hooks.wait_for("/hook")
        assert time.time() - due < 2.0
    (headers, _), = hooks.posts_to("/hook")
    assert headers[DELIVERY_ID] == "d-1"
