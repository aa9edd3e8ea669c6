"""The endpoint event feed across replicas relays only what some replica watches
(``live.feed_relay``): on PostgreSQL, NOTIFYs on ``a2a_live_feed`` counted by a listener of the
test's own; a watcher on B of tasks run on A (two real replica processes, linked by NOTIFY on
PostgreSQL or by Redis on DynamoDB) gets every lifecycle event after its snapshot, per endpoint
and for every endpoint; the relaying stops within a bound after the last watcher left."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import orjson
import pytest
from a2a.types import CancelTaskRequest

from a2a_gateway.live.postgres import FEED_CHANNEL
from tests.integration.test_event_feed import (
    AS_OPERATOR,
    CANCELED,
    DONE,
    INPUT,
    OPERATOR_KEY,
    WORKING,
    FeedReader,
    feed_url,
    streamed_task,
)
from tests.replicas.cluster import replica_set
from tests.stores.pg_support import admin_dsn, fresh_database
from tests.support.harness import running_gateway
from tests.support.messages import send_request
from tests.support.redis_support import redis_url
from tests.support.waiting import eventually

REFRESH = 2.0  # the live hub's refresh_seconds (its default)


@pytest.fixture
def postgres() -> str:
    return admin_dsn()


class FeedNotifies:
    """Every feed event NOTIFYed on ``a2a_live_feed`` of one database (announcements of
    watches left out), by endpoint."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        message = orjson.loads(payload)
        if "e" in message:
            self.events.append(message["e"]["endpointId"])
        elif "sc" in message:
            self.events.append(message["sc"][1])

    def of(self, endpoint_id: str) -> int:
        return self.events.count(endpoint_id)


@contextlib.asynccontextmanager
async def listening(url: str) -> AsyncIterator[FeedNotifies]:
    conn = await asyncpg.connect(url)
    notifies = FeedNotifies()
    await conn.add_listener(FEED_CHANNEL, notifies.on_notify)
    try:
        yield notifies
    finally:
        await conn.close()


async def test_no_notify_for_an_endpoint_nobody_watches_and_relaying_stops_after_the_last_watcher(
    postgres,
):
    keep = 0.5
    options = {"operator_keys": [OPERATOR_KEY], "event_feed_replay_keep_seconds": keep}
    async with fresh_database() as url, running_gateway(url, replica_id="a", **options) as a, \
            running_gateway(url, replica_id="b", **options) as b:
        async with listening(url) as notifies:
            watched = await a.add_endpoint(settings={"delay": 0})
            unwatched = await a.add_endpoint(settings={"delay": 0})
            relay = a.gateway.hub.feed_relay
            await eventually(
                lambda: relay.selective, timeout=60, what="A heard every replica's watches"
            )
            await streamed_task(a, watched, "nobody watches yet")
            await streamed_task(a, unwatched, "nobody watches")
            await asyncio.sleep(0.5)
            assert notifies.events == [] and relay.stats["sent"] == 0

            async with FeedReader(feed_url(b, watched), AS_OPERATOR) as feed:
                await eventually(lambda: feed.events, what="the snapshot on B")
                task_id = await streamed_task(a, watched, "B watches")
                events = await feed.until_state(task_id, DONE)
                assert [(e["kind"], e["state"]) for e in events] == [
                    ("status", WORKING), ("artifact", WORKING), ("status", DONE)]
                await streamed_task(a, unwatched, "still nobody")
                await asyncio.sleep(0.5)
                assert notifies.of(watched) == 3 and notifies.of(unwatched) == 0
            left = time.monotonic()

            async def relayed_after_a_task() -> int:
                before = notifies.of(watched)
                await streamed_task(a, watched, "after the watcher left")
                await asyncio.sleep(0.2)
                return notifies.of(watched) - before

            await eventually(relayed_after_a_task, until=lambda n: n == 0, timeout=60, interval=0.2,
                             what="A no longer relaying the endpoint")
            # the log's keep time, B's next announcement, A's reading it (room for a busy machine)
            assert time.monotonic() - left < keep + REFRESH + 5
            assert notifies.of(unwatched) == 0


LINKS = [
    pytest.param("postgres", False, id="postgres-notify", marks=pytest.mark.postgres),
    pytest.param("dynamodb", True, id="dynamodb-redis",
                 marks=[pytest.mark.dynamodb, pytest.mark.redis]),
]


@pytest.mark.parametrize(("store", "through_redis"), LINKS)
async def test_a_watcher_on_b_gets_every_lifecycle_event_of_tasks_run_on_a(
    store: str, through_redis: bool, tmp_path: Path
):
    if store == "postgres":
        admin_dsn()  # skips without PostgreSQL, fails in CI
    env = {"A2A_GATEWAY_OPERATOR_KEYS": OPERATOR_KEY}
    async with replica_set(
        tmp_path, ["a", "b"], lease_seconds=30, remote_poll_seconds=30, extra_env=env,
        store=store, redis_url=redis_url() if through_redis else None,
    ) as cluster:
        endpoint_id = await cluster.add_endpoint("handlers.echo:EchoHandler", delay=0)
        other = await cluster.add_endpoint("handlers.echo:EchoHandler", name="other", delay=0)
        a, b = cluster["a"], cluster["b"]
        async with cluster.client("a", endpoint_id, streaming=False) as client:
            waiting = [e async for e in client.send_message(send_request("wait ?input"))][-1].task
            # both replicas past their start-up period, in which they relay everything: A
            # learns of B's watch from B's announcement alone
            await asyncio.sleep(1.5 * REFRESH + 1)
            async with FeedReader(f"{b.base_url}/{endpoint_id}/events", AS_OPERATOR) as feed:
                await eventually(lambda: feed.events, interval=0.005, what="the snapshot on B")
                assert [t["taskId"] for t in feed.events[0]["tasks"]] == [waiting.id]
                # at once: relayed because the watch was acknowledged, not after a refresh
                await client.cancel_task(CancelTaskRequest(id=waiting.id))
                await feed.until_state(waiting.id, CANCELED)

            async with FeedReader(f"{b.base_url}/{endpoint_id}/events", AS_OPERATOR) as feed, \
                    FeedReader(f"{b.base_url}/events", AS_OPERATOR) as everything:
                await eventually(
                    lambda: feed.events and everything.events, interval=0.005, what="the snapshots"
                )
                asked = [e async for e in client.send_message(send_request("ask ?input"))][-1].task
                streamed = []
                for text in ("one", "two", "three"):
                    async with cluster.client("a", endpoint_id) as streaming:
                        streamed.append(
                            [e async for e in streaming.send_message(send_request(text))][0].task.id
                        )
                async with cluster.client("a", other) as streaming:
                    elsewhere = [e async for e in streaming.send_message(send_request("other"))][
                        0
                    ].task.id
                for reader in (feed, everything):
                    await reader.until_state(asked.id, INPUT)
                    assert reader.states(asked.id) == [WORKING, INPUT]
                    for task_id in streamed:
                        events = await reader.until_state(task_id, DONE)
                        assert [(e["kind"], e["state"]) for e in events] == [
                            ("status", WORKING), ("artifact", WORKING), ("status", DONE)]
                await everything.until_state(elsewhere, DONE)
                assert [e["kind"] for e in everything.of_task(elsewhere)] == [
                    "status",
                    "artifact",
                    "status",
                ]
                assert feed.of_task(elsewhere) == []
        assert a.proc.poll() is None and b.proc.poll() is None
