"""The stats sampler (``observability.stats``): deltas between readings, counter resets, the
ring's bound, percentiles from histogram buckets, and readings of the real metrics."""

from __future__ import annotations

import math
import uuid

import pytest
from a2a.types import TaskState

from a2a_gateway.observability.metrics import latency_histogram, outcome_counter, task_ended
from a2a_gateway.observability.stats import Reading, StatsSampler, quantile, read_metrics

INF = math.inf


class Readings:
    """Hands the sampler the readings a test sets, and a clock that moves 10 s a reading."""

    def __init__(self) -> None:
        self.now = Reading({}, {}, {}, 0)
        self.clock = 1_800_000_000.0

    def read(self) -> Reading:
        self.clock += 10
        return self.now

    def set(self, requests=None, tasks=None, latency=None, streams=0) -> None:
        self.now = Reading(requests or {}, tasks or {}, latency or {}, streams)


def sampler(readings: Readings, window: float = 3600) -> StatsSampler:
    made = StatsSampler(10, window, read=readings.read, clock=lambda: readings.clock)
    made.begin()
    return made


def test_a_sample_holds_what_changed_since_the_reading_before():
    readings = Readings()
    readings.set(
        {("e1", True): 5, ("e1", False): 1}, {("e1", "completed"): 4}, {0.1: 3, 1.0: 6, INF: 6}, 2
    )
    stats = sampler(readings)
    readings.set(
        {("e1", True): 8, ("e1", False): 1, ("e2", True): 1},
        {("e1", "completed"): 6, ("e1", "failed"): 1},
        {0.1: 5, 1.0: 9, INF: 10},
        3,
    )
    sample = stats.sample()
    assert sample.requests == {("e1", True): 3, ("e2", True): 1}  # unchanged series left out
    assert sample.tasks == {("e1", "completed"): 2, ("e1", "failed"): 1}
    assert sample.latency == {0.1: 2, 1.0: 3, INF: 4} and sample.open_streams == 3
    assert sample.seconds == 10
    series = stats.series()
    assert series["endpoints"]["e1"] == {
        "requests": [3],
        "errors": [0],
        "tasks": {"completed": [2], "failed": [1]},
        "total": {"requests": 3, "errors": 0, "tasks": {"completed": 2, "failed": 1}},
    }
    assert series["endpoints"]["e2"]["requests"] == [1]
    assert series["latencySeconds"]["requests"] == [4] and series["openStreams"] == [3]
    assert series["at"] == ["2027-01-15T08:00:20+00:00"] and series["seconds"] == [10]


def test_a_counter_lower_than_before_was_reset_and_counts_whole():
    readings = Readings()
    readings.set({("e1", True): 50}, {("e1", "completed"): 40}, {1.0: 30, INF: 30})
    stats = sampler(readings)
    readings.set({("e1", True): 7}, {("e1", "completed"): 2}, {1.0: 4, INF: 5})
    sample = stats.sample()
    assert sample.requests == {("e1", True): 7} and sample.tasks == {("e1", "completed"): 2}
    assert sample.latency == {1.0: 4, INF: 5}
    readings.set({("e1", True): 9}, {("e1", "completed"): 2}, {1.0: 4, INF: 6})
    assert stats.sample().requests == {("e1", True): 2}  # counted from the reset value on


def test_the_ring_keeps_one_window_of_samples():
    readings = Readings()
    stats = sampler(readings, window=60)  # 6 samples of 10 s
    for n in range(1, 10):
        readings.set({("e1", True): n})
        stats.sample()
    series = stats.series()
    assert len(stats.samples) == 6 and len(series["at"]) == 6
    assert series["endpoints"]["e1"]["requests"] == [1] * 6
    assert series["at"][0] == "2027-01-15T08:00:50+00:00"  # the oldest three are gone


def test_percentiles_interpolate_within_buckets_and_are_null_without_requests():
    buckets = {0.1: 50, 0.5: 90, 1.0: 100, INF: 100}
    assert quantile(0.5, buckets) == pytest.approx(0.1)
    assert quantile(0.95, buckets) == pytest.approx(0.75)
    assert quantile(0.25, buckets) == pytest.approx(0.05)
    assert quantile(0.99, {0.1: 1, 1.0: 1, INF: 10}) == 1.0  # in +Inf: the last finite bound
    assert quantile(0.5, {0.1: 0, INF: 0}) is None and quantile(0.5, {}) is None
    readings = Readings()
    stats = sampler(readings)
    readings.set(latency={0.1: 50, 0.5: 90, 1.0: 100, INF: 100})
    stats.sample()
    stats.sample()  # nothing new: no latency in that interval
    latency = stats.series()["latencySeconds"]
    assert latency["p95"] == [pytest.approx(0.75), None] and latency["requests"] == [100, 0]
    assert latency["window"]["p50"] == pytest.approx(0.1) and latency["window"]["requests"] == 100


def test_the_real_metrics_are_read_in_process():
    endpoint = str(uuid.uuid4())
    before = read_metrics()
    outcome_counter("SendMessage", endpoint, "ok").inc(2)
    outcome_counter("GetTask", endpoint, "TaskNotFoundError").inc()
    outcome_counter("other", endpoint, "ok").inc()  # a card or admin call: no A2A request
    task_ended(endpoint, TaskState.TASK_STATE_FAILED)
    latency_histogram("SendMessage").observe(0.003)
    latency_histogram("other").observe(100)
    now = read_metrics()
    assert now.requests[(endpoint, True)] == 2 and now.requests[(endpoint, False)] == 1
    assert now.tasks[(endpoint, "failed")] == 1
    assert now.latency[INF] - before.latency.get(INF, 0) == 1
    assert now.latency[0.005] - before.latency.get(0.005, 0) == 1
