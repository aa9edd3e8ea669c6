"""``FleetRateLimiter`` on a real Redis: three replicas' limiters share one bucket per caller,
and a limiter whose Redis cannot be reached counts alone instead of failing requests.
The same through three ``serve`` processes is in test_redis_replicas.py.

Needs ``A2A_TEST_REDIS_URL`` (.ci/services/08-redis.sh); skipped without it, except in CI.
"""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest
from prometheus_client import REGISTRY

from a2a_gateway.auth.rate_limit import FleetRateLimiter, RateLimit
from a2a_gateway.errors import RateLimitedError
from a2a_gateway.live.redis import open_redis
from tests.support.harness import require_env

pytestmark = pytest.mark.redis

LIMIT = RateLimit(per_second=5, burst=10)


async def offer(limiter: FleetRateLimiter, caller: str) -> RateLimitedError | None:
    try:
        await limiter.admit("ep", caller, LIMIT)
    except RateLimitedError as exc:
        return exc
    return None


async def test_three_replicas_admit_the_burst_once_not_three_times():
    url, prefix = require_env("A2A_TEST_REDIS_URL"), f"t{uuid.uuid4().hex[:8]}:"
    clients = [open_redis(url) for _ in range(3)]
    try:
        limiters = [FleetRateLimiter(client, prefix) for client in clients]
        # 3 × the burst at once, spread over the replicas
        outcomes = await asyncio.gather(*(offer(limiters[n % 3], "alice") for n in range(30)))
        admitted = sum(outcome is None for outcome in outcomes)
        assert LIMIT.burst <= admitted <= LIMIT.burst + 1  # + what refilled meanwhile
        refused = [outcome for outcome in outcomes if outcome is not None]
        assert all(exc.retry_after >= 1 for exc in refused)
        assert await offer(limiters[0], "bob") is None  # another caller has its own bucket
        await asyncio.sleep(1 / LIMIT.per_second + 0.05)
        assert await offer(limiters[1], "alice") is None  # refilled at the configured rate
        # the key holds a digest of the caller, never the caller's own text
        keys = [k.decode() for k in await clients[0].keys(f"{prefix}*")]
        assert keys and not any("alice" in k or "bob" in k for k in keys)
    finally:
        for client in clients:
            await client.aclose()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_unreachable_redis_counts_on_this_replica_and_says_so():
    client = open_redis(f"redis://127.0.0.1:{closed_port()}/0")
    before = REGISTRY.get_sample_value("a2a_gateway_rate_limit_fallbacks_total") or 0.0
    try:
        limiter = FleetRateLimiter(client, "t:")
        outcomes = [await offer(limiter, "carol") for _ in range(LIMIT.burst + 3)]
    finally:
        await client.aclose()
    assert outcomes[: LIMIT.burst] == [None] * LIMIT.burst  # served, not failed
    assert all(isinstance(outcome, RateLimitedError) for outcome in outcomes[LIMIT.burst:])
    after = REGISTRY.get_sample_value("a2a_gateway_rate_limit_fallbacks_total")
    assert after == before + LIMIT.burst + 3


async def test_after_a_failure_redis_is_asked_again_a_second_later():
    """Between tries no request waits for Redis; the next one after the pause uses it."""
    client = open_redis(require_env("A2A_TEST_REDIS_URL"))
    calls = []
    try:
        limiter = FleetRateLimiter(client, f"t{uuid.uuid4().hex[:8]}:")
        real = limiter._take_token

        async def failing(**kwargs):
            calls.append(kwargs)
            raise ConnectionError("down")

        limiter._take_token = failing
        assert await offer(limiter, "dave") is None and len(calls) == 1
        assert await offer(limiter, "dave") is None and len(calls) == 1  # not asked again yet
        limiter._take_token = real
        limiter._redis_retry_at = 0.0  # the pause is over
        assert await offer(limiter, "dave") is None
        assert await client.keys(f"{limiter._prefix}rate:*")  # counted in Redis again
    finally:
        await client.aclose()


async def test_a_redis_that_lost_its_scripts_gets_the_script_again():
    client = open_redis(require_env("A2A_TEST_REDIS_URL"))
    try:
        limiter = FleetRateLimiter(client, f"t{uuid.uuid4().hex[:8]}:")
        assert await offer(limiter, "erin") is None
        await client.script_flush()  # as after a restart or a failover
        before = REGISTRY.get_sample_value("a2a_gateway_rate_limit_fallbacks_total") or 0.0
        assert await offer(limiter, "erin") is None
        # counted in Redis, not on this replica alone
        assert REGISTRY.get_sample_value("a2a_gateway_rate_limit_fallbacks_total") == before
    finally:
        await client.aclose()
