"""``GET /admin/api/stats?scope=fleet``: the numbers of every replica sharing a Redis.

On a real Redis (``A2A_TEST_REDIS_URL``): two ``a2a-gateway demo`` processes (each its own
metrics, as replicas have) with one key prefix of the test's own and a point every 0.2 s,
each sent its own number of requests: asked on either, the fleet lists both replicas with
their own counts and the sum; Redis keys hold the replica ids only as digests; a replica
that stopped leaves the fleet within three intervals. In process: without Redis, and with a
Redis that cannot be reached, the fleet is this replica alone with ``fleetAvailable: false``;
a bad ``scope`` is 400.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from a2a_gateway.cli import DEMO_ENDPOINT_ID
from a2a_gateway.live.redis import open_redis
from a2a_gateway.observability.fleet_stats import replica_digest
from tests.support.cli_process import serving
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import send_body
from tests.support.waiting import eventually

OPERATOR_KEY = "fleet-" + uuid.uuid4().hex
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}
INTERVAL = 0.2


async def stats(http: httpx.AsyncClient, base: str, query: str = "") -> dict[str, Any]:
    answer = await http.get(f"{base}/admin/api/stats{query}", headers=AS_OPERATOR)
    assert answer.status_code == 200, answer.text
    return answer.json()


async def send_some(http: httpx.AsyncClient, url: str, count: int) -> None:
    for n in range(count):
        answer = await http.post(url, json=send_body(f"count me {n}"),
                                 headers={"A2A-Version": "1.0"})
        assert answer.status_code == 200 and "result" in answer.json(), answer.text


def requests_of(series: dict[str, Any], endpoint_id: str) -> int:
    return series["endpoints"].get(endpoint_id, {"total": {"requests": 0}})["total"]["requests"]


@contextlib.asynccontextmanager
async def demo_replica(name: str, redis_url: str, prefix: str) -> AsyncIterator[str]:
    """``a2a-gateway demo`` as replica ``name`` on the shared Redis; its base URL."""
    async with serving(
        "demo", "--store", "memory://",
        A2A_GATEWAY_REPLICA_ID=name, A2A_GATEWAY_REDIS_URL=redis_url,
        A2A_GATEWAY_REDIS_PREFIX=prefix, A2A_GATEWAY_STATS_INTERVAL_SECONDS=str(INTERVAL),
        A2A_GATEWAY_OPERATOR_KEYS=OPERATOR_KEY,
    ) as listening:
        yield listening[1]


@pytest.mark.redis
async def test_the_fleet_lists_every_replica_with_its_own_counts_and_their_sum():
    url, prefix = require_env("A2A_TEST_REDIS_URL"), f"t{uuid.uuid4().hex[:8]}:"
    redis = open_redis(url)
    sent = {"alpha-replica": 2, "beta-replica": 3}
    try:
        async with httpx.AsyncClient(timeout=30) as http, \
                demo_replica("alpha-replica", url, prefix) as alpha, \
                contextlib.AsyncExitStack() as beta_running:
            beta = await beta_running.enter_async_context(
                demo_replica("beta-replica", url, prefix)
            )
            bases = {"alpha-replica": alpha, "beta-replica": beta}
            for name, count in sent.items():
                await send_some(http, f"{bases[name]}/{DEMO_ENDPOINT_ID}/a2a", count)

            assert (await stats(http, alpha))["fleetAvailable"] is True
            for base in bases.values():  # asked on either replica, the same fleet
                fleet = await eventually(
                    lambda base=base: stats(http, base, "?scope=fleet"),
                    until=lambda f: {r["replica"]: requests_of(r, DEMO_ENDPOINT_ID)
                                     for r in f["replicas"]} == sent,
                    timeout=15, what="both replicas with their own counts",
                )
                assert fleet["scope"] == "fleet" and fleet["fleetAvailable"] is True
                assert fleet["answered"] == ["alpha-replica", "beta-replica"]
                summed = fleet["summed"]["endpoints"][DEMO_ENDPOINT_ID]
                assert summed["total"]["requests"] == 5
                assert summed["total"]["tasks"] == {"completed": 5}
                assert sum(summed["requests"]) == 5  # the points add up to the total

            keys = sorted(k.decode() for k in await redis.keys(f"{prefix}stats:*"))
            assert keys == sorted([f"{prefix}stats:replicas",
                                   *(f"{prefix}stats:{replica_digest(n)}" for n in sent)])
            assert 0 < await redis.pttl(f"{prefix}stats:{replica_digest('beta-replica')}") <= 600

            await beta_running.aclose()  # beta stops: it leaves the fleet
            stopped = time.monotonic()
            await eventually(lambda: stats(http, alpha, "?scope=fleet"),
                             until=lambda f: f["answered"] == ["alpha-replica"],
                             timeout=10, what="the fleet without the stopped replica")
            assert time.monotonic() - stopped < 3 * INTERVAL + 2
    finally:
        leftover = await redis.keys(f"{prefix}*")
        if leftover:
            await redis.delete(*leftover)
        await redis.aclose()


async def fleet_of_one(gw: RunningGateway, endpoint_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as http:
        await send_some(http, gw.jsonrpc_url(endpoint_id), 2)
        await eventually(lambda: stats(http, gw.base_url),
                         until=lambda s: requests_of(s, endpoint_id) == 2,
                         what="the requests sampled")
        return await stats(http, gw.base_url, "?scope=fleet")


async def test_without_redis_the_fleet_is_this_replica_alone():
    async with running_gateway(stats_interval_seconds=INTERVAL, operator_keys=OPERATOR_KEY,
                               replica_id="lonely") as gw:
        endpoint_id = await gw.add_endpoint()
        fleet = await fleet_of_one(gw, endpoint_id)
        assert fleet["fleetAvailable"] is False and fleet["answered"] == ["lonely"]
        assert fleet["summed"]["endpoints"][endpoint_id]["total"]["requests"] == 2
        async with httpx.AsyncClient(timeout=30) as http:
            default = await stats(http, gw.base_url)
            assert default["replica"] == "lonely" and default["fleetAvailable"] is False
            assert (await stats(http, gw.base_url, "?scope=replica")).keys() == default.keys()
            bad = await http.get(f"{gw.base_url}/admin/api/stats?scope=all",
                                 headers=AS_OPERATOR)
            assert bad.status_code == 400
            assert bad.json()["error"]["message"] == "scope must be replica or fleet, not all"
            anonymous = await http.get(f"{gw.base_url}/admin/api/stats?scope=fleet")
            assert anonymous.status_code == 401


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_a_redis_that_cannot_be_reached_leaves_this_replica_alone_and_says_so():
    async with running_gateway(stats_interval_seconds=INTERVAL, operator_keys=OPERATOR_KEY,
                               replica_id="cut-off",
                               redis_url=f"redis://127.0.0.1:{closed_port()}/0") as gw:
        endpoint_id = await gw.add_endpoint()
        async with httpx.AsyncClient(timeout=30) as http:
            assert (await stats(http, gw.base_url))["fleetAvailable"] is True  # configured
        started = time.monotonic()
        fleet = await fleet_of_one(gw, endpoint_id)
        assert time.monotonic() - started < 10
        assert fleet["fleetAvailable"] is False and fleet["answered"] == ["cut-off"]
        assert fleet["summed"]["endpoints"][endpoint_id]["total"]["requests"] == 2
