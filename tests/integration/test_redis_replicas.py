"""Several gateway replicas linked through Redis, on DynamoDB and on PostgreSQL.

Real gateway processes (``python -m a2a_gateway serve``, ``tests/replicas/cluster.py``) on a
fresh store, every replica given ``A2A_GATEWAY_REDIS_URL`` and a key prefix of the test's own,
talked to with the a2a-sdk client (raw SSE for ``Last-Event-ID``):

* stream on A, subscribe on B: B gets the live chunks, rebuilds exactly the stored answer;
* cancel on C stops the run on A at once;
* a stream dropped on A resumes on B with ``Last-Event-ID``: nothing lost, nothing twice;
* a task waiting for input on A is answered on B, and A follows the answer live;
* in process: an answer sent to B for a run still open on A joins A's history, and of two
  answers given at once (on A and B) exactly one is taken (``tests/replicas/answered_elsewhere``);
* a rate limit is the fleet's: three replicas together admit it once, not three times;
* so is a quota: two replicas admit an endpoint's task window once (counted in Redis) and a
  concurrency slot held on A refuses on B;
* faults: Redis killed with SIGKILL mid-stream and started again; Redis unreachable at start.

Stores poll for remote changes every 30 s and leases last 60 s, so within the tests' bounds
only Redis can carry a live chunk or a cancel from one replica to another (the fault test
that needs the store's path polls it faster). Needs ``A2A_TEST_REDIS_URL`` (and
``A2A_TEST_REDIS_SERVER`` for the fault tests), ``A2A_TEST_POSTGRES_DSN`` for PostgreSQL;
DynamoDB runs on ``A2A_TEST_DYNAMODB_ENDPOINT`` or on a moto server the run starts itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

import httpx
import pytest
from a2a.types import (
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)

from tests.replicas.answered_elsewhere import (
    answer_on_b_joins_the_owners_history,
    answers_on_the_owner_and_on_b_at_once_one_wins,
    serve_asks_twice,
    two_answers_at_one_generation_one_wins,
)
from tests.replicas.cluster import ReplicaSet, free_port, replica_set
from tests.replicas.fake_backend import FakeBackend
from tests.replicas.scenarios import (
    ECHO,
    artifact_updates,
    cancel_on_c_stops_the_run_on_a_at_once,
    following,
    is_live_chunk,
    kill_9_of_the_owner_another_replica_completes,
    quotas_are_counted_once_for_the_fleet,
    stored_text,
    subscribe_on_b_gets_live_chunks_and_the_whole_answer,
)
from tests.stores.pg_support import admin_dsn
from tests.stores.store_urls import fresh_store_url
from tests.support.harness import running_gateway
from tests.support.messages import rpc, send_body, send_request, wire_message
from tests.support.redis_support import own_redis, redis_url
from tests.support.streams import final_state, read_sse, rebuild, sse_final_state, sse_text
from tests.support.waiting import eventually

pytestmark = pytest.mark.redis

COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
LEASE = 60.0
"""Leases far beyond the tests' bounds: an owner's lease check cannot be what stops a run."""
SLOW_POLL = 30.0
"""Store polling far beyond the tests' bounds: only Redis delivers in time."""
V10 = {"A2A-Version": "1.0"}

STORES = [
    pytest.param("dynamodb", id="dynamodb+redis", marks=pytest.mark.dynamodb),
    pytest.param("postgres", id="postgres+redis", marks=pytest.mark.postgres),
]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    """The store kind of the replicas (PostgreSQL skips without its server)."""
    if request.param == "postgres":
        admin_dsn()
    return request.param


@pytest.fixture
def redis() -> str:
    return redis_url()


def fleet(
    tmp_path: Path, store: str, redis: str, names: list[str], *,
    remote_poll_seconds: float = SLOW_POLL,
) -> contextlib.AbstractAsyncContextManager[ReplicaSet]:
    return replica_set(tmp_path, names, lease_seconds=LEASE,
                       remote_poll_seconds=remote_poll_seconds, store=store, redis_url=redis)


# what a client holds -----------------------------------------------------------------------


# raw SSE, for Last-Event-ID ----------------------------------------------------------------


# live path across replicas -----------------------------------------------------------------


async def test_stream_on_a_subscribe_on_b_gets_live_chunks_and_the_whole_answer(
    store, redis, tmp_path
):
    async with fleet(tmp_path, store, redis, ["a", "b"]) as rs:
        await subscribe_on_b_gets_live_chunks_and_the_whole_answer(rs)


async def test_cancel_on_c_stops_the_run_on_a_at_once(store, redis, tmp_path):
    async with fleet(tmp_path, store, redis, ["a", "b", "c"]) as rs:
        await cancel_on_c_stops_the_run_on_a_at_once(rs)


async def test_kill_9_of_the_owner_another_replica_completes_with_full_output(
    store, redis, tmp_path
):
    async with FakeBackend() as backend, replica_set(
        tmp_path, ["a", "b", "c"], lease_seconds=2, remote_poll_seconds=0.3, store=store,
        redis_url=redis,
    ) as rs:
        await kill_9_of_the_owner_another_replica_completes(rs, backend)


async def test_last_event_id_resumes_on_another_replica_nothing_lost_nothing_twice(
    store, redis, tmp_path
):
    words = " ".join(f"w{i}" for i in range(40))
    async with fleet(tmp_path, store, redis, ["a", "b"]) as rs, \
            httpx.AsyncClient(timeout=30) as http:
        ep = await rs.add_endpoint(ECHO, delay=0.05)
        send = rpc("SendStreamingMessage", {"message": wire_message(words)}, rid=str(uuid.uuid4()))
        head = await read_sse(http, "POST", f"{rs['a'].base_url}/{ep}/a2a", send, V10, limit=6)
        task_id = head[0].body["id"]
        # a follower on A shows the run going on while the client is away
        async with rs.client("a", ep) as on_a:
            watched: list[StreamResponse] = []
            async with following(on_a.subscribe(SubscribeToTaskRequest(id=task_id)), watched):
                await eventually(lambda: len(artifact_updates(watched)) >= 5, timeout=10,
                                 what="chunks published while the client is away")
        subscribe = rpc("SubscribeToTask", {"id": task_id}, rid=str(uuid.uuid4()))
        tail = await read_sse(http, "POST", f"{rs['b'].base_url}/{ep}/a2a", subscribe, V10,
                              last_event_id=head[-1].id)
        stored = await stored_text(rs, "b", ep, task_id)
    ids = [e.id for e in head + tail]
    assert all(ids) and len(set(ids)) == len(ids), f"an event id seen twice: {ids}"
    assert tail[0].kind != "task", "B did not know A's event id: it answered with a snapshot"
    assert len([e for e in tail if e.kind == "artifactUpdate"]) >= 5
    assert stored == f"echo: {words}"
    assert sse_text(head + tail) == stored, "events lost or repeated across the reconnect"
    assert sse_final_state(tail) == "TASK_STATE_COMPLETED"


async def test_a_task_asking_for_input_on_a_is_answered_on_b_and_followed_on_a(
    store, redis, tmp_path
):
    answer = " ".join(f"a{i}" for i in range(30))
    async with fleet(tmp_path, store, redis, ["a", "b"]) as rs:
        ep = await rs.add_endpoint(ECHO, delay=0.05)
        async with rs.client("a", ep, streaming=False) as blocking_a:
            asked = [e async for e in blocking_a.send_message(send_request("please ?input"))]
        question = asked[-1].task
        assert question.status.state == INPUT_REQUIRED, question.status
        async with rs.client("b", ep) as on_b, rs.client("a", ep) as on_a:
            stream = on_b.send_message(
                send_request(answer, task_id=question.id, context_id=question.context_id)
            )
            first = await anext(stream)
            assert first.task.id == question.id
            remote: list[StreamResponse] = []
            async with following(on_a.subscribe(SubscribeToTaskRequest(id=question.id)),
                                 remote) as follower:
                local = [e async for e in stream]
                async with asyncio.timeout(10):
                    await follower
        stored = await stored_text(rs, "a", ep, question.id)
    assert stored == f"echo: {answer}"
    assert final_state(local) == COMPLETED and rebuild(local) == stored
    assert final_state(remote) == COMPLETED and rebuild(remote) == stored
    assert len([e for e in remote if is_live_chunk(e)]) >= 3, (
        "A got the answer's chunks only at the end")


async def test_an_answer_sent_to_b_joins_the_owners_history_and_of_two_at_once_one_wins(
    store, redis, tmp_path, monkeypatch
):
    # in process (the handler's backend is a class both replicas share); B's follow may start
    # after the owner's first events (the backend goes on at resume): those come from the
    # store, so it is polled every second here
    serve_asks_twice(monkeypatch)
    shared = {"redis_url": redis, "redis_prefix": f"t{uuid.uuid4().hex[:8]}:",
              "lease_seconds": LEASE, "remote_poll_seconds": 1}
    async with fresh_store_url(store, tmp_path, monkeypatch) as url, \
            running_gateway(url, replica_id="a", **shared) as a, \
            running_gateway(url, replica_id="b", **shared) as b:
        await answer_on_b_joins_the_owners_history(a, b)
        await two_answers_at_one_generation_one_wins(a, b)
        await answers_on_the_owner_and_on_b_at_once_one_wins(a, b)


# a rate limit of the fleet -----------------------------------------------------------------


async def test_three_replicas_admit_the_rate_limit_once_not_three_times(store, redis, tmp_path):
    per_second, burst = 5, 5
    async with fleet(tmp_path, store, redis, ["a", "b", "c"]) as rs, \
            httpx.AsyncClient(timeout=30) as http:
        ep = await rs.add_endpoint(ECHO, delay=0,
                                   rate_limit={"per_second": per_second, "burst": burst})
        urls = [f"{rs[name].base_url}/{ep}/a2a" for name in ("a", "b", "c")] * burst
        started = time.monotonic()
        answers = await asyncio.gather(*(
            http.post(url, json=send_body(f"call {i}", rid=i), headers=V10)
            for i, url in enumerate(urls)
        ))
        took = time.monotonic() - started
    admitted = [a for a in answers if a.status_code == 200]
    limited = [a for a in answers if a.status_code != 200]
    # the fleet's bucket: its burst, and what refilled while the calls came (about 0.2 s here);
    # each replica counting alone admits its own burst: all 15
    figures = f"{len(admitted)} of {len(urls)} admitted in {took:.2f}s"
    assert burst <= len(admitted) <= burst + per_second * took + 1, figures
    assert len(admitted) < len(urls), figures
    assert all(a.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
               for a in admitted)
    for answer in limited:
        assert answer.status_code == 429, answer.text
        assert int(answer.headers["Retry-After"]) >= 1
        error = answer.json()["error"]
        assert error["code"] == -32600 and "rate limit" in error["message"]


@pytest.mark.parametrize(  # PostgreSQL's own counting is test_postgres_replicas'
    "store", [pytest.param("dynamodb", id="dynamodb+redis", marks=pytest.mark.dynamodb)]
)
async def test_quotas_are_counted_once_for_two_replicas_in_redis(store, redis, tmp_path):
    async with fleet(tmp_path, store, redis, ["a", "b"]) as rs:
        await quotas_are_counted_once_for_the_fleet(rs)
        # the windows were counted in Redis, under the fleet's prefix
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(redis)
        try:
            assert [key async for key in client.scan_iter(f"{rs.redis_prefix}quota:*")]
        finally:
            await client.aclose()


# faults ------------------------------------------------------------------------------------


@pytest.mark.dynamodb
async def test_redis_killed_mid_stream_the_task_completes_and_a_follower_finishes(tmp_path):
    redis_url()  # the fault tests run where the Redis service does
    words = " ".join(f"part{i}" for i in range(40))  # about 4 s
    async with own_redis(tmp_path) as server, replica_set(
        tmp_path, ["a", "b"], lease_seconds=LEASE, remote_poll_seconds=0.3,
        store="dynamodb", redis_url=server.url,
    ) as rs:
        ep = await rs.add_endpoint(ECHO, delay=0.1)
        async with rs.client("a", ep) as on_a, rs.client("b", ep) as on_b:
            stream = on_a.send_message(send_request(words))
            first = await anext(stream)
            task_id = first.task.id
            local: list[StreamResponse] = [first]
            remote: list[StreamResponse] = []
            async with following(on_b.subscribe(SubscribeToTaskRequest(id=task_id)),
                                 remote) as follower, following(stream, local) as owner:
                await eventually(lambda: len(artifact_updates(remote)) >= 2, timeout=10,
                                 what="live chunks on B")
                server.kill()
                await asyncio.sleep(0.5)  # Redis is down while the run goes on
                await server.start()
                try:
                    async with asyncio.timeout(20):
                        await follower
                    async with asyncio.timeout(5):
                        await owner
                except TimeoutError:
                    raise AssertionError(
                        f"a stream did not end after Redis came back\n{rs.logs()}"
                    ) from None
        stored = await stored_text(rs, "b", ep, task_id)
    assert stored == f"echo: {words}"
    assert final_state(remote) == COMPLETED
    assert rebuild(remote) == stored, "B's text differs from the stored answer"
    assert final_state(local) == COMPLETED and rebuild(local) == stored


@pytest.mark.postgres
async def test_a_gateway_with_redis_unreachable_starts_says_so_once_and_serves(tmp_path):
    redis_url()  # the fault tests run where the Redis service does
    admin_dsn()
    password = uuid.uuid4().hex
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    nowhere = f"redis://gateway:{password}@{address}/0"
    async with replica_set(
        tmp_path, ["a"], lease_seconds=LEASE, remote_poll_seconds=SLOW_POLL, redis_url=nowhere
    ) as rs:
        ep = await rs.add_endpoint(ECHO, delay=0)
        async with rs.client("a", ep, streaming=False) as on_a:
            for n in range(3):
                answer = [e async for e in on_a.send_message(send_request(f"hello {n}"))]
                assert answer[-1].task.status.state == COMPLETED
                assert answer[-1].task.artifacts[0].parts[0].text == f"echo: hello {n}"
        await asyncio.sleep(1.0)  # a while in which it must not go on saying so
        log = rs["a"].log_tail(100_000)
    said = [line for line in log.splitlines() if "redis" in line.lower() or address in line]
    assert len(said) == 1, f"expected one line about Redis, got {len(said)}:\n{log[-3000:]}"
    assert password not in log
