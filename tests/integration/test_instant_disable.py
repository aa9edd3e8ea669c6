"""Disabling an endpoint takes effect at once, although every replica caches endpoint rows for
``endpoint_cache_seconds`` (an hour here, so only the new path can pass).

* one gateway (memory, SQLite): the admin API's change drops the entry of its own registry,
  so the very next card request and call answer 404, and enabling brings them back;
* two gateway processes on one PostgreSQL database: the database announces every change of an
  endpoint row (a trigger NOTIFYs ``a2a_endpoint_changed``), so a disable on replica A — or by
  the CLI — makes the card and calls 404 on replica B, and enabling on B brings them back on A.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg
import httpx
import pytest

from a2a_gateway.live.postgres import ENDPOINT_CHANNEL
from tests.replicas.cluster import cli, replica_set
from tests.stores.pg_support import admin_dsn, fresh_database
from tests.stores.store_urls import fresh_store_url
from tests.support.harness import running_gateway
from tests.support.messages import send_body
from tests.support.waiting import eventually

OPERATOR_KEY = "op-" + uuid.uuid4().hex
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}
AN_HOUR = 3600


def card(base_url: str, endpoint_id: str) -> str:
    return f"{base_url}/{endpoint_id}/.well-known/agent-card.json"


async def call_status(http: httpx.AsyncClient, base_url: str, endpoint_id: str) -> int:
    """The HTTP status of one SendMessage (JSON-RPC) to the endpoint."""
    return (await http.post(f"{base_url}/{endpoint_id}/a2a", json=send_body("hello"),
                            headers={"A2A-Version": "1.0"})).status_code


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_one_gateway_serves_a_disabled_endpoint_no_more_from_the_next_request(
    kind, tmp_path, monkeypatch
):
    async with (
        fresh_store_url(kind, tmp_path, monkeypatch) as url,
        running_gateway(url, operator_keys=[OPERATOR_KEY], endpoint_cache_seconds=AN_HOUR) as gw,
    ):
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        async with httpx.AsyncClient(timeout=30) as http:
            assert (await http.get(card(gw.base_url, endpoint_id))).status_code == 200
            assert await call_status(http, gw.base_url, endpoint_id) == 200
            admin = f"{gw.base_url}/admin/api/endpoints/{endpoint_id}"
            assert (await http.post(f"{admin}/disable", headers=AS_OPERATOR)).status_code == 200
            assert (await http.get(card(gw.base_url, endpoint_id))).status_code == 404
            assert await call_status(http, gw.base_url, endpoint_id) == 404
            assert (await http.post(f"{admin}/enable", headers=AS_OPERATOR)).status_code == 200
            assert (await http.get(card(gw.base_url, endpoint_id))).status_code == 200
            assert await call_status(http, gw.base_url, endpoint_id) == 200


async def test_a_disable_on_one_replica_is_404_on_the_other_at_once(tmp_path):
    admin_dsn()  # skips without PostgreSQL (fails under CI)
    env = {
        "A2A_GATEWAY_ENDPOINT_CACHE_SECONDS": str(AN_HOUR),
        "A2A_GATEWAY_OPERATOR_KEYS": OPERATOR_KEY,
    }
    async with replica_set(
        tmp_path, ["a", "b"], lease_seconds=30, remote_poll_seconds=30, extra_env=env
    ) as rs:
        endpoint_id = await rs.add_endpoint("handlers.echo:EchoHandler", delay=0)
        a, b = rs["a"].base_url, rs["b"].base_url
        async with httpx.AsyncClient(timeout=30) as http:

            async def card_status(base_url: str) -> int:
                return (await http.get(card(base_url, endpoint_id))).status_code

            for base_url in (a, b):  # each replica now holds the row for an hour
                assert await card_status(base_url) == 200
                assert await call_status(http, base_url, endpoint_id) == 200

            disabled = await http.post(
                f"{a}/admin/api/endpoints/{endpoint_id}/disable", headers=AS_OPERATOR
            )
            assert disabled.status_code == 200 and disabled.json()["enabled"] is False
            assert await card_status(a) == 404
            started = time.monotonic()
            await eventually(lambda: card_status(b), until=lambda status: status == 404, timeout=10,
                             what="the card 404 on the other replica")
            seen_after = time.monotonic() - started
            assert await call_status(http, b, endpoint_id) == 404

            enabled = await http.post(
                f"{b}/admin/api/endpoints/{endpoint_id}/enable", headers=AS_OPERATOR
            )
            assert enabled.status_code == 200 and enabled.json()["enabled"] is True
            assert await card_status(b) == 200
            await eventually(lambda: card_status(a), until=lambda status: status == 200, timeout=10,
                             what="the card back on the first replica")
            assert await call_status(http, a, endpoint_id) == 200

            await cli("endpoints", "disable", endpoint_id, "--store", rs.store_url, env=rs.env)
            for base_url in (a, b):
                await eventually(
                    lambda base_url=base_url: card_status(base_url),
                    until=lambda s: s == 404,
                    timeout=10,
                    what="the card 404 after the CLI's disable",
                )
    print(f"card 404 on the other replica {seen_after * 1000:.0f} ms after the disable answered")


async def test_postgres_announces_every_change_of_an_endpoint_row():
    admin_dsn()
    async with fresh_database() as url:
        listener, writer = await asyncpg.connect(url), await asyncpg.connect(url)
        heard: asyncio.Queue[str] = asyncio.Queue()
        try:
            await listener.add_listener(ENDPOINT_CHANNEL, lambda *args: heard.put_nowait(args[3]))
            await writer.execute("INSERT INTO endpoints (id, tenant, name, created_at, updated_at)"
                                 " VALUES ('ep-1', 'default', 'one', now(), now())")
            async with writer.transaction():
                await writer.execute("UPDATE endpoints SET enabled = false WHERE id = 'ep-1'")
                await asyncio.sleep(0.2)
                assert heard.qsize() == 1  # the update is told once it commits, not before
            await writer.execute("DELETE FROM endpoints WHERE id = 'ep-1'")
            async with asyncio.timeout(10):
                assert [await heard.get() for _ in range(3)] == ["ep-1", "ep-1", "ep-1"]
        finally:
            await listener.close()
            await writer.close()
