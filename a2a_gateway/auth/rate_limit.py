"""Rate limits per caller: a token bucket for each (endpoint, principal), in this process.

An endpoint's limit is its row's ``rate_limit`` (``{"per_second": 5, "burst": 20}``) or the
gateway's ``rate_limit_per_second`` / ``rate_limit_burst``; 0 requests per second means no
limit. Anonymous callers are told apart by their TCP peer address. Each replica counts on its
own, so N replicas behind a balancer admit up to N times the limit. The buckets are bounded
in number (the least recently seen are forgotten), so a flood of callers cannot grow memory.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from a2a_gateway.errors import RateLimitedError

MAX_BUCKETS = 100_000


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
            wait = math.ceil((1 - tokens) / limit.per_second)
            raise RateLimitedError(
                f"rate limit of {limit.per_second:g} requests per second (burst {limit.capacity:g}) "
                f"exceeded; retry in {wait} s",
                retry_after=wait,
            )
        self._buckets[key] = (tokens - 1, now)
        if len(self._buckets) > MAX_BUCKETS:
            self._buckets.popitem(last=False)
