"""Prometheus metrics of the gateway (served at ``/metrics``). Labels come from bounded sets."""

from __future__ import annotations

import functools

from a2a.types import TaskState
from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("a2a_gateway_requests_total", "HTTP requests", ["a2a_method", "status"])
LATENCY = Histogram(
    "a2a_gateway_request_seconds", "Time to the response (stream start for SSE)", ["a2a_method"]
)
TASKS_STARTED = Counter("a2a_gateway_tasks_started_total", "Tasks created by this replica")
TASKS_ENDED = Counter(
    "a2a_gateway_tasks_ended_total",
    "Tasks this replica ended, by endpoint and final state",
    ["endpoint", "state"],
)
RATE_LIMIT_FALLBACKS = Counter(
    "a2a_gateway_rate_limit_fallbacks_total",
    "Rate-limit checks counted on this replica alone because Redis could not be reached",
)
QUOTA_REFUSALS = Counter(
    "a2a_gateway_quota_refusals_total",
    "New tasks refused by a quota, by limit name and by whose limit it is (key or endpoint)",
    ["limit", "subject"],
)
MESSAGES = Counter("a2a_gateway_message_replies_total", "Message-mode answers (no task)")
RUNNING = Gauge("a2a_gateway_running_tasks", "Task runs driven by this replica right now")
OUTCOMES = Counter(
    "a2a_gateway_request_outcomes_total",
    "Requests by A2A method, endpoint and outcome (ok or the A2A error's name)",
    ["a2a_method", "endpoint", "outcome"],
)
SSE_STREAMS = Gauge("a2a_gateway_open_sse_streams",
                    "Streams open on this replica right now: SSE responses and gRPC server streams")
STORE_LATENCY = Histogram("a2a_gateway_store_call_seconds", "Time of one store call", ["operation"])
HANDED_OVER = Counter(
    "a2a_gateway_tasks_handed_over_total",
    "Runs this replica handed over on shutdown (leases released)",
)
TASK_TOKENS = Counter(
    "a2a_gateway_task_tokens_total",
    "Tokens the backends reported for the tasks this replica ended, by endpoint, final state"
    " and direction (input or output); never by caller, to bound the labels",
    ["endpoint", "state", "direction"],
)
PUSH_DELIVERIES = Counter(
    "a2a_gateway_push_deliveries_total", "Push notification attempts by outcome", ["outcome"]
)


@functools.cache
def request_counter(method: str, status: int) -> Counter:
    return REQUESTS.labels(method, str(status))


@functools.cache
def latency_histogram(method: str) -> Histogram:
    return LATENCY.labels(method)


@functools.cache
def outcome_counter(method: str, endpoint: str, outcome: str) -> Counter:
    return OUTCOMES.labels(method, endpoint, outcome)


@functools.cache
def _ended(endpoint_id: str, state: int) -> Counter:
    return TASKS_ENDED.labels(
        endpoint_id, TaskState.Name(state).removeprefix("TASK_STATE_").lower()
    )


def task_ended(endpoint_id: str, state: int, tokens: tuple[int, int] = (0, 0)) -> None:
    """Count an ended task, and the (input, output) tokens its backend reported."""
    _ended(endpoint_id, state).inc()
    if tokens[0] or tokens[1]:
        name = TaskState.Name(state).removeprefix("TASK_STATE_").lower()
        TASK_TOKENS.labels(endpoint_id, name, "input").inc(tokens[0])
        TASK_TOKENS.labels(endpoint_id, name, "output").inc(tokens[1])
