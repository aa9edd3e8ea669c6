"""Rate limits per caller: a token bucket for each (endpoint, principal).

An endpoint's limit is its row's ``rate_limit`` (``{"per_second": 5, "burst": 20}``) or the
gateway's ``rate_limit_per_second`` / ``rate_limit_burst``; 0 requests per second means no
limit. Anonymous callers are told apart by their TCP peer address.

``RateLimiter`` counts in this process: N replicas behind a balancer admit up to N times the
limit. Its buckets are bounded in number (the least recently seen are forgotten), so a flood
of callers cannot grow memory. ``FleetRateLimiter`` keeps the buckets in Redis, taken by one
script call per request (atomic: no read-modify-write race between replicas, the clock is
Redis's), so the whole fleet admits the limit once; while Redis cannot be reached it counts
in this process, says so in the log and in ``a2a_gateway_rate_limit_fallbacks_total``.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field

from a2a_gateway.errors import RateLimitedError
from a2a_gateway.observability.metrics import RATE_LIMIT_FALLBACKS

log = structlog.get_logger(__name__)

MAX_BUCKETS = 100_000
REDIS_RETRY_SECONDS = 1.0
"""How long the fleet limiter counts alone after Redis failed before it asks Redis again."""


class RateLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    per_second: float = Field(ge=0)
    """Requests a caller may make per second on average; 0: no limit."""
    burst: int = Field(default=0, ge=0)
    """Requests a caller may make at once; 0: one second's worth (at least 1)."""

    @property
    def capacity(self) -> float:
        return float(self.burst) if self.burst else max(self.per_second, 1.0)


def endpoint_rate_limit(
    metadata: dict[str, Any], per_second: float, burst: int
) -> RateLimit | None:
    """The row's ``rate_limit`` or the gateway default; None when unlimited.
    ``pydantic.ValidationError`` for a malformed row value."""
    value = metadata.get("rate_limit")
    if value is None:
        limit = RateLimit(per_second=per_second, burst=burst)
    else:
        limit = RateLimit.model_validate(value)
    return limit if limit.per_second > 0 else None


class RateLimiter:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()
        """(endpoint id, caller) → (tokens left, when they were counted)."""

    def admit(self, endpoint_id: str, caller: str, limit: RateLimit) -> None:
        """Take one token from the caller's bucket, or raise ``RateLimitedError``."""
        now = self._clock()
        key = (endpoint_id, caller)
        tokens, counted = self._buckets.pop(key, (limit.capacity, now))
        tokens = min(limit.capacity, tokens + (now - counted) * limit.per_second)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            raise _refused(limit, tokens)
        self._buckets[key] = (tokens - 1, now)
        if len(self._buckets) > MAX_BUCKETS:
            self._buckets.popitem(last=False)


def _refused(limit: RateLimit, tokens: float) -> RateLimitedError:
    wait = math.ceil((1 - tokens) / limit.per_second)
    return RateLimitedError(
        f"rate limit of {limit.per_second:g} requests per second (burst {limit.capacity:g}) "
        f"exceeded; retry in {wait} s",
        retry_after=wait,
    )


# KEYS[1]: the bucket; ARGV: requests per second, capacity. Returns {admitted, tokens left}.
_TAKE_TOKEN = """
local rate, capacity = tonumber(ARGV[1]), tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(bucket[1]) or capacity
local at = tonumber(bucket[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * rate)
local admitted = 0
if tokens >= 1 then
  tokens = tokens - 1
  admitted = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 1)
return {admitted, tostring(tokens)}
"""


class FleetRateLimiter:
    """Buckets in Redis, shared by every replica; ``RateLimiter`` while Redis is away."""

    def __init__(self, redis: Any, prefix: str, fallback: RateLimiter | None = None) -> None:
        self._take_token = redis.register_script(_TAKE_TOKEN)
        self._prefix = prefix
        self._fallback = fallback or RateLimiter()
        self._last_warning = 0.0
        self._redis_retry_at = 0.0
        """After a failure, requests count here alone until then (no connect wait each)."""

    def _key(self, endpoint_id: str, caller: str) -> str:
        # callers are names clients chose: only their digest reaches a key
        name = hashlib.blake2b(f"{endpoint_id}\0{caller}".encode(), digest_size=16).hexdigest()
        return f"{self._prefix}rate:{name}"

    async def admit(self, endpoint_id: str, caller: str, limit: RateLimit) -> None:
        """Take one token from the caller's bucket, or raise ``RateLimitedError``."""
        if time.monotonic() < self._redis_retry_at:
            RATE_LIMIT_FALLBACKS.inc()
            self._fallback.admit(endpoint_id, caller, limit)
            return
        try:
            admitted, tokens = await self._take_token(
                keys=[self._key(endpoint_id, caller)], args=[limit.per_second, limit.capacity]
            )
        except Exception as exc:
            self._redis_retry_at = time.monotonic() + REDIS_RETRY_SECONDS
            self._warn(exc)
            self._fallback.admit(endpoint_id, caller, limit)
            return
        if not int(admitted):
            raise _refused(limit, float(tokens))

    def _warn(self, exc: Exception) -> None:
        RATE_LIMIT_FALLBACKS.inc()
        now = time.monotonic()
        if now - self._last_warning >= 5.0:
            self._last_warning = now
            log.warning("rate_limit_counts_per_replica", reason="redis unreachable",
                        error=str(exc) or type(exc).__name__)
