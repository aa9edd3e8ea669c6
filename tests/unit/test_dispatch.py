"""Worker events: the task reference's payload, what is refused, and the settings check."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from a2a_gateway.settings import GatewaySettings
from a2a_gateway.tasks.dispatch import BadEventError, TaskRef, parse_event

REF = TaskRef("acme", "ep-1", "alice", "task-1")


def test_a_task_reference_round_trips_as_ids_only():
    payload = REF.to_payload()
    assert orjson.loads(payload) == {
        "a2a_gateway": "run_task", "tenant": "acme", "endpoint_id": "ep-1", "principal": "alice",
        "task_id": "task-1",
    }
    assert parse_event(payload) == REF


def test_a_sweep_event_parses_as_no_reference():
    assert parse_event(b'{"a2a_gateway": "sweep"}') is None


@pytest.mark.parametrize(("body", "reason"), [
    (b"not json", "not JSON"),
    (b"[1, 2]", "not a gateway event"),
    (b'{"a2a_gateway": "explode"}', "not a gateway event"),
    (b'{"version": "0", "detail-type": "Scheduled Event"}', "not a gateway event"),
    (b'{"a2a_gateway": "run_task", "tenant": "acme", "endpoint_id": "ep-1", "principal": "alice"}',
     "task_id"),
    (b'{"a2a_gateway": "run_task", "tenant": "", "endpoint_id": 7, "principal": "a", "task_id": "t"}',
     "tenant, endpoint_id"),
    (b'{"a2a_gateway": "run_task", "task_id": "' + b"x" * 300_000 + b'"}', "too large"),
])
def test_other_events_are_refused_with_the_reason(body: bytes, reason: str):
    with pytest.raises(BadEventError, match=reason):
        parse_event(body)


def test_lambda_dispatch_needs_the_worker_function():
    with pytest.raises(ValidationError, match="dispatch_function"):
        GatewaySettings(dispatch="lambda")
    assert GatewaySettings(dispatch="lambda", dispatch_function="worker").dispatch_function == "worker"
