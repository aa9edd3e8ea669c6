"""Task generations across replicas (real gateway processes, ``tests/replicas/cluster.py``):
a follower on B reads the same generations under the same SSE ids as the stream on A, and a
long-poll on B is woken by a change made on A through the live path — PostgreSQL
LISTEN/NOTIFY, or Redis on PostgreSQL and on DynamoDB. The stores are polled every 30 s,
so within the tests' bounds only the hub can wake a call."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse

from tests.replicas.cluster import replica_set
from tests.replicas.scenarios import ECHO
from tests.stores.pg_support import admin_dsn
from tests.support.messages import rpc, wire_message
from tests.support.redis_support import redis_url

V11 = {"A2A-Version": "1.1"}
SLOW_POLL = 30.0

FLEETS = [
    pytest.param(("postgres", False), id="postgres-notify", marks=pytest.mark.postgres),
    pytest.param(("postgres", True), id="postgres+redis",
                 marks=[pytest.mark.postgres, pytest.mark.redis]),
    pytest.param(("dynamodb", True), id="dynamodb+redis",
                 marks=[pytest.mark.dynamodb, pytest.mark.redis]),
]


@pytest.fixture(params=FLEETS)
def fleet_kind(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    store, with_redis = request.param
    if store == "postgres":
        admin_dsn()  # skips without the server
    return store, redis_url() if with_redis else None


async def call(http: httpx.AsyncClient, url: str, method: str,
               params: dict[str, Any]) -> dict[str, Any]:
    response = await http.post(url, json=rpc(method, params, str(uuid.uuid4())), headers=V11)
    return response.json()


async def events(http: httpx.AsyncClient, url: str, body: dict[str, Any],
                 limit: int | None = None) -> list[tuple[str, int]]:
    """(SSE id, generation) of the events of a stream, up to ``limit``."""
    out: list[tuple[str, int]] = []
    async with aconnect_sse(http, "POST", url, json=body, headers=V11) as source:
        async for sse in source.aiter_sse():
            (body_,) = orjson.loads(sse.data)["result"].values()
            out.append((sse.id, body_["generation"]))
            if limit is not None and len(out) >= limit:
                break
    return out


async def test_a_follower_on_b_reads_a_s_generations_and_a_long_poll_on_b_wakes(
    fleet_kind, tmp_path
):
    store, redis = fleet_kind
    words = " ".join(f"w{i}" for i in range(60))
    async with replica_set(tmp_path, ["a", "b"], lease_seconds=60, remote_poll_seconds=SLOW_POLL,
                           store=store, redis_url=redis) as rs, \
            httpx.AsyncClient(timeout=30) as http:
        ep = await rs.add_endpoint(ECHO, delay=0.03)
        on_a, on_b = f"{rs['a'].base_url}/{ep}/a2a", f"{rs['b'].base_url}/{ep}/a2a"

        stream_a = asyncio.create_task(events(
            http, on_a, rpc("SendStreamingMessage", {"message": wire_message(words)})))
        await asyncio.sleep(0.5)
        listed = await call(http, on_a, "ListTasks", {})
        (task,) = listed["result"]["tasks"]
        followed_b = await events(http, on_b, rpc("SubscribeToTask", {"id": task["id"]}))
        streamed_a = await stream_a

        generations_a = [g for _, g in streamed_a]
        generations_b = [g for _, g in followed_b]
        assert generations_a == list(range(1, len(generations_a) + 1))
        assert all(b > a for a, b in zip(generations_b, generations_b[1:], strict=False))
        assert set(generations_b) <= set(generations_a)
        assert len(generations_b) >= 20, "B's follower saw too few of A's events live"
        if redis:  # Redis relays the owner's ids too (PostgreSQL's relay gives ids of its own)
            seen_a = dict(streamed_a)
            assert all(seen_a[i] == g for i, g in followed_b if i in seen_a)
            assert sum(i in seen_a for i, _ in followed_b) >= 20
        final = await call(http, on_b, "GetTask", {"id": task["id"]})
        assert final["result"]["generation"] == streamed_a[-1][1] == followed_b[-1][1]

        # a long-poll on B of a task that waits for input, woken when the answer given on A
        # starts a run there (a slow one: one word a second)
        asked = await call(http, on_a, "SendMessage", {"message": wire_message("?input now")})
        question = asked["result"]["task"]
        poll = asyncio.create_task(call(http, on_b, "GetTask", {
            "id": question["id"], "currentGeneration": question["generation"]}))
        await asyncio.sleep(1.0)
        assert not poll.done()
        await call(http, on_a, "SendMessage", {
            "message": wire_message("go on ?slow", taskId=question["id"]),
            "configuration": {"returnImmediately": True}})
        answered = time.monotonic()
        woken = (await asyncio.wait_for(poll, 10))["result"]
        assert time.monotonic() - answered < 5, "woken by the store's 30 s poll, not the hub"
        assert woken["generation"] > question["generation"]
        assert woken["status"]["state"] == "TASK_STATE_WORKING"

        # and a long-poll on B at the generation it got is woken by A's next event
        again = asyncio.create_task(call(http, on_b, "GetTask", {
            "id": question["id"], "currentGeneration": woken["generation"]}))
        nxt = (await asyncio.wait_for(again, 10))["result"]
        assert nxt["generation"] > woken["generation"]
        await call(http, on_a, "CancelTask", {"id": question["id"]})
