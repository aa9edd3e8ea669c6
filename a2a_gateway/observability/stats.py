"""Numbers at a glance: the last hour of the gateway's own metrics, as series for the console.

``StatsSampler`` reads the prometheus metrics of ``observability.metrics`` in process every
``interval`` seconds and keeps what changed since the reading before (one ``Sample``) in a
ring of ``window`` seconds: A2A requests and errors per endpoint, tasks ended per endpoint
and final state, the latency histogram's buckets, and the open streams (SSE and gRPC server
streams). A counter lower than at the last reading was reset: its whole value is the change
(as Prometheus' ``rate`` takes it). ``series()`` is the JSON of ``GET /admin/api/stats``
(docs/console.md). Numbers are this replica's.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog
from aiohttp import web
from prometheus_client.metrics import MetricWrapperBase

from a2a_gateway.observability.metrics import LATENCY, OUTCOMES, SSE_STREAMS, TASKS_ENDED

log = structlog.get_logger(__name__)

NOT_A2A = "other"
"""The ``a2a_method`` label of requests that are no A2A call (cards, admin API, console, feed)."""

QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Reading:
    """The metrics' values at one moment (counters since the process started)."""

    requests: dict[tuple[str, bool], float]
    """(endpoint id, ok) → A2A requests."""
    tasks: dict[tuple[str, str], float]
    """(endpoint id, final state) → tasks ended."""
    latency: dict[float, float]
    """Upper bound → A2A requests that took at most that long (cumulative, as ``le``)."""
    open_streams: float


@dataclass(frozen=True, slots=True)
class Sample:
    """What changed between two readings."""

    at: float
    """Epoch seconds of the later reading."""
    seconds: float
    requests: dict[tuple[str, bool], int]
    tasks: dict[tuple[str, str], int]
    latency: dict[float, int]
    open_streams: int


def _values(metric: MetricWrapperBase, suffix: str) -> Iterable[tuple[Mapping[str, str], float]]:
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith(suffix):
                yield sample.labels, sample.value


def read_metrics() -> Reading:
    """The gateway's metrics now (this process's registry, not ``/metrics``)."""
    requests: dict[tuple[str, bool], float] = {}
    for labels, value in _values(OUTCOMES, "_total"):
        if labels["a2a_method"] != NOT_A2A and labels["endpoint"]:
            key = (labels["endpoint"], labels["outcome"] == "ok")
            requests[key] = requests.get(key, 0.0) + value
    tasks = {
        (labels["endpoint"], labels["state"]): value
        for labels, value in _values(TASKS_ENDED, "_total")
    }
    latency: dict[float, float] = {}
    for labels, value in _values(LATENCY, "_bucket"):
        if labels["a2a_method"] != NOT_A2A:
            bound = float(labels["le"])
            latency[bound] = latency.get(bound, 0.0) + value
    streams = next((value for _, value in _values(SSE_STREAMS, "")), 0.0)
    return Reading(requests, tasks, latency, streams)


def _deltas(now: Mapping[K, float], before: Mapping[K, float]) -> dict[K, int]:
    """Per key: the increase, or the whole value of a counter that was reset; zeros left out."""
    changed = {}
    for key, value in now.items():
        was = before.get(key, 0.0)
        delta = value - was if value >= was else value
        if delta:
            changed[key] = round(delta)
    return changed


def _latency_deltas(now: Mapping[float, float], before: Mapping[float, float]) -> dict[float, int]:
    """Bucket increases; a histogram with fewer observations than before was reset."""
    if now.get(math.inf, 0.0) < before.get(math.inf, 0.0):
        before = {}
    return {bound: round(max(0.0, value - before.get(bound, 0.0))) for bound, value in now.items()}


def quantile(q: float, buckets: Mapping[float, int]) -> float | None:
    """The ``q`` quantile of the observations in cumulative ``buckets``, interpolated within
    its bucket (as PromQL's ``histogram_quantile``); None without observations."""
    bounds = sorted(buckets)
    total = buckets.get(math.inf, 0)
    if not bounds or total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank and count > below:
            if math.isinf(bound):
                return lower  # beyond the last finite bound: that bound is all that is known
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


@contextlib.asynccontextmanager
async def running_task(loop: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    """``loop`` runs as a task while the context is open; cancelled at its end."""
    task = asyncio.create_task(loop, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class StatsSampler:
    def __init__(
        self, interval: float, window: float, *, open_streams: Callable[[], int] = lambda: 0,
        read: Callable[[], Reading] = read_metrics, clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval = interval
        self.window = window
        self.samples: deque[Sample] = deque(maxlen=max(1, math.ceil(window / interval)))
        self._open_streams = open_streams
        self._read = read
        self._clock = clock
        self._last: Reading | None = None
        self._last_at = 0.0
        self.sampled: list[Callable[[Sample], None]] = []
        """Called with each new sample once it is in the ring (``FleetStats`` publishes then)."""

    def _reading(self) -> Reading:
        SSE_STREAMS.set(self._open_streams())  # /metrics sets it too, when scraped
        return self._read()

    def begin(self) -> None:
        """The reading the first sample counts from."""
        self._last, self._last_at = self._reading(), self._clock()

    def sample(self) -> Sample:
        """What changed since the last reading, kept in the ring."""
        if self._last is None:
            self.begin()
        before, since = self._last, self._last_at
        assert before is not None
        now, at = self._reading(), self._clock()
        sample = Sample(
            at,
            max(0.0, at - since),
            _deltas(now.requests, before.requests),
            _deltas(now.tasks, before.tasks),
            _latency_deltas(now.latency, before.latency),
            round(now.open_streams),
        )
        self._last, self._last_at = now, at
        self.samples.append(sample)
        for listener in self.sampled:
            listener(sample)
        return sample

    async def run(self) -> None:
        self.begin()
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.sample()
            except Exception:
                log.exception("stats_sample_failed")

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        return running_task(self.run(), "stats-sampler")

    def series(self) -> dict[str, Any]:
        """The samples as columns, oldest first (``GET /admin/api/stats``)."""
        samples = list(self.samples)
        return {
            "intervalSeconds": self.interval, "windowSeconds": self.window,
            "at": [datetime.fromtimestamp(s.at, UTC).isoformat() for s in samples],
            "seconds": [round(s.seconds, 3) for s in samples],
            "endpoints": _endpoint_series(samples),
            "latencySeconds": _latency_series(samples),
            "openStreams": [s.open_streams for s in samples],
        }


def _endpoint_series(samples: list[Sample]) -> dict[str, Any]:
    """Per endpoint seen in the window: requests, errors and tasks by final state per sample,
    and their totals."""
    endpoints = sorted(
        {e for s in samples for e, _ in s.requests} | {e for s in samples for e, _ in s.tasks}
    )
    states: dict[str, set[str]] = {e: set() for e in endpoints}
    for s in samples:
        for e, state in s.tasks:
            states[e].add(state)
    series = {}
    for e in endpoints:
        requests = [s.requests.get((e, True), 0) + s.requests.get((e, False), 0) for s in samples]
        errors = [s.requests.get((e, False), 0) for s in samples]
        tasks = {
            state: [s.tasks.get((e, state), 0) for s in samples] for state in sorted(states[e])
        }
        series[e] = {"requests": requests, "errors": errors, "tasks": tasks,
                     "total": {"requests": sum(requests), "errors": sum(errors),
                               "tasks": {state: sum(counts) for state, counts in tasks.items()}}}
    return series


def _latency_series(samples: list[Sample]) -> dict[str, Any]:
    """p50/p95/p99 per sample (null: no A2A request in it) and over the whole window."""
    window: dict[float, int] = {}
    for s in samples:
        for bound, count in s.latency.items():
            window[bound] = window.get(bound, 0) + count
    series: dict[str, Any] = {
        name: [quantile(q, s.latency) for s in samples] for name, q in QUANTILES.items()
    }
    series["requests"] = [s.latency.get(math.inf, 0) for s in samples]
    series["window"] = {**{name: quantile(q, window) for name, q in QUANTILES.items()},
                        "requests": window.get(math.inf, 0)}
    return series


STATS = web.AppKey("stats", StatsSampler)
