"""The token bucket of each caller: burst, refill, separate callers, bounded memory."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from a2a_gateway.auth import rate_limit
from a2a_gateway.auth.rate_limit import RateLimit, RateLimiter, endpoint_rate_limit
from a2a_gateway.errors import RateLimitedError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_caller_gets_its_burst_then_one_request_per_refill():
    clock = Clock()
    limiter = RateLimiter(clock)
    limit = RateLimit(per_second=0.5, burst=3)
    for _ in range(3):
        limiter.admit("ep", "alice", limit)
    with pytest.raises(RateLimitedError) as refused:
        limiter.admit("ep", "alice", limit)
    assert refused.value.retry_after == 2 and refused.value.headers() == {"Retry-After": "2"}
    assert "0.5 requests per second" in refused.value.message
    limiter.admit("ep", "bob", limit)  # another caller has its own bucket
    limiter.admit("other-ep", "alice", limit)  # and so has the same caller elsewhere
    clock.now += 2.0
    limiter.admit("ep", "alice", limit)
    with pytest.raises(RateLimitedError):
        limiter.admit("ep", "alice", limit)
    clock.now += 60
    for _ in range(3):  # refilled up to the burst, not beyond
        limiter.admit("ep", "alice", limit)
    with pytest.raises(RateLimitedError):
        limiter.admit("ep", "alice", limit)


def test_buckets_are_bounded(monkeypatch):
    monkeypatch.setattr(rate_limit, "MAX_BUCKETS", 10)
    limiter = RateLimiter(Clock())
    limit = RateLimit(per_second=1, burst=1)
    for i in range(50):
        limiter.admit("ep", f"caller-{i}", limit)
    assert len(limiter._buckets) == 10


def test_row_limit_wins_over_the_gateway_default_and_zero_means_none():
    assert endpoint_rate_limit({}, 0, 0) is None
    assert endpoint_rate_limit({}, 5, 0) == RateLimit(per_second=5)
    assert endpoint_rate_limit({"rate_limit": {"per_second": 1, "burst": 4}}, 5, 0).capacity == 4
    assert endpoint_rate_limit({"rate_limit": {"per_second": 0}}, 5, 0) is None
    with pytest.raises(ValidationError):
        endpoint_rate_limit({"rate_limit": {"per_second": -1}}, 0, 0)
    with pytest.raises(ValidationError):
        endpoint_rate_limit({"rate_limit": {"rps": 3}}, 0, 0)
