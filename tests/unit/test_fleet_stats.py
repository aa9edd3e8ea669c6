"""The fleet's numbers (``observability.fleet_stats``) without Redis: the replicas' rings
summed newest point to newest point, the answer as JSON, the sampler's hook that publishes,
a Redis that cannot be read leaving this replica alone, and failed writes said once. On a
real Redis and through running gateways: tests/integration/test_fleet_stats.py."""

from __future__ import annotations

import asyncio

import orjson
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from structlog.testing import capture_logs

from a2a_gateway.observability.fleet_stats import (
    FleetStats,
    fleet_answer,
    replica_digest,
    sum_newest_aligned,
)
from a2a_gateway.observability.stats import Reading, StatsSampler


def replica(name: str, seconds: int, endpoints: dict, streams: list[int]) -> dict:
    return {"replica": name, "intervalSeconds": 10.0, "seconds": [10.0] * seconds,
            "endpoints": endpoints, "openStreams": streams,
            "latencySeconds": {"p50": [None] * seconds, "window": {"requests": 0}}}


def endpoint(requests: list[int], errors: list[int], tasks: dict[str, list[int]]) -> dict:
    return {"requests": requests, "errors": errors, "tasks": tasks,
            "total": {"requests": sum(requests), "errors": sum(errors),
                      "tasks": {state: sum(counts) for state, counts in tasks.items()}}}


def test_columns_are_summed_from_their_newest_point_back():
    # b started two intervals after a: its points are a's last two
    assert sum_newest_aligned([[1, 2, 3, 4], [10, 20]], 4) == [1, 2, 13, 24]
    assert sum_newest_aligned([[5, 6]], 1) == [6]  # longer than the ring: its newest only
    assert sum_newest_aligned([[], [1]], 0) == []


def test_the_fleet_answer_sums_each_endpoints_counts_and_lists_who_answered():
    a = replica("a", 3, {
        "ep1": endpoint([1, 2, 3], [0, 1, 0], {"completed": [1, 1, 3]}),
        "ep2": endpoint([4, 0, 0], [0, 0, 0], {"failed": [4, 0, 0]}),
    }, [0, 1, 2])
    b = replica("b", 2, {
        "ep1": endpoint([10, 20], [5, 0], {"completed": [5, 20], "canceled": [0, 1]}),
    }, [3, 4])

    answer = orjson.loads(orjson.dumps(fleet_answer([b, a], available=True)))

    assert answer["scope"] == "fleet" and answer["fleetAvailable"] is True
    assert answer["answered"] == ["a", "b"]
    assert [r["replica"] for r in answer["replicas"]] == ["a", "b"]
    assert answer["replicas"][1] == b  # each replica's own series, as it published it
    ep1 = answer["summed"]["endpoints"]["ep1"]
    assert ep1["requests"] == [1, 12, 23] and ep1["errors"] == [0, 6, 0]
    assert ep1["tasks"] == {"canceled": [0, 0, 1], "completed": [1, 6, 23]}
    assert ep1["total"] == {"requests": 36, "errors": 6,
                            "tasks": {"canceled": 1, "completed": 30}}
    assert answer["summed"]["endpoints"]["ep2"]["total"]["tasks"] == {"failed": 4}
    assert answer["summed"]["endpoints"]["ep2"]["requests"] == [4, 0, 0]
    assert answer["summed"]["openStreams"] == [0, 4, 6]


def test_one_replica_alone_is_its_own_sum():
    a = replica("a", 2, {"ep1": endpoint([1, 2], [0, 1], {})}, [0, 1])
    answer = fleet_answer([a], available=False)
    assert answer["fleetAvailable"] is False and answer["answered"] == ["a"]
    assert answer["summed"]["endpoints"]["ep1"]["total"] == {
        "requests": 3, "errors": 1, "tasks": {}}


def fixed_reading(requests: float) -> Reading:
    return Reading({("ep1", True): requests}, {}, {}, 0.0)


def test_the_sampler_tells_its_listeners_of_each_sample_once_it_is_in_the_ring():
    counts = iter([0.0, 3.0, 5.0])
    sampler = StatsSampler(10, 60, read=lambda: fixed_reading(next(counts)))
    seen: list[int] = []
    sampler.sampled.append(lambda sample: seen.append(len(sampler.samples)))
    sampler.begin()
    first, second = sampler.sample(), sampler.sample()
    assert seen == [1, 2]
    assert first.requests == {("ep1", True): 3} and second.requests == {("ep1", True): 2}


class FakeRedis:
    """A client whose pipelines and reads fail with ``error`` (None: they go through)."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.writes = 0

    def pipeline(self, **options):
        return self

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        return False

    async def execute(self):
        if self.error is not None:
            raise self.error
        self.writes += 1

    async def zrangebyscore(self, *args):
        if self.error is not None:
            raise self.error
        return []

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None  # a command queued in the pipeline


def unreachable_redis() -> FakeRedis:
    return FakeRedis(RedisConnectionError("Error 111 connecting to 127.0.0.1:1."))


async def test_a_redis_that_cannot_be_read_leaves_this_replica_alone_and_says_so():
    counts = iter([0.0, 7.0])
    sampler = StatsSampler(0.2, 60, read=lambda: fixed_reading(next(counts)))
    sampler.begin()
    sampler.sample()
    fleet = FleetStats(unreachable_redis(), "p:", "replica one", sampler)
    answer = await asyncio.wait_for(fleet.fleet(), 5)
    assert answer["fleetAvailable"] is False
    assert answer["answered"] == ["replica one"]
    assert answer["summed"]["endpoints"]["ep1"]["total"]["requests"] == 7


def test_a_replica_id_reaches_keys_only_as_a_digest():
    digest = replica_digest("gw a/b")
    assert len(digest) == 32 and set(digest) <= set("0123456789abcdef")
    assert digest != replica_digest("gw a/c")


async def test_a_write_that_fails_after_one_went_through_is_said_once():
    """Failures from the start say nothing (the live path says Redis is away); the first
    failure after a write went through is one warning, the next ones none."""
    sampler = StatsSampler(0.01, 1, read=lambda: fixed_reading(0.0))
    redis = unreachable_redis()
    fleet = FleetStats(redis, "p:", "a", sampler)
    with capture_logs() as logs:
        async with sampler.running(), fleet.running():
            await asyncio.sleep(0.1)
            said_at_first = len(logs)
            redis.error = None
            await asyncio.sleep(0.1)
            assert redis.writes >= 2
            redis.error = ResponseError("NOPERM no permissions to run the 'set' command")
            await asyncio.sleep(0.2)
    assert said_at_first == 0
    said = [entry for entry in logs if entry["event"] == "fleet_stats_not_published"]
    assert [(e["log_level"], e["error"]) for e in said] == [
        ("warning", "NOPERM no permissions to run the 'set' command")]
