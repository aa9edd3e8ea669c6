"""Property-based fuzzing of a running gateway on an endpoint that needs an API key:
thousands of generated JSON-RPC and REST requests (bodies, paths, headers, encodings,
credentials). No reply is a 5xx, every reply is a well-formed JSON-RPC envelope echoing
the id or an AIP-193 error, and no task exists but the valid key's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.examples import examples
from tests.support.fuzz_requests import Target, cases, gateway_thread, send, stray_tasks

CASES = examples(3000)


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    with gateway_thread(long_poll_seconds=0.2) as running:  # a long-poll waits, but briefly
        yield running


def test_generated_requests_get_well_formed_4xx_or_results(target: Target) -> None:
    statuses: Counter[str] = Counter()
    with httpx.Client(timeout=30) as client:

        @settings(max_examples=CASES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(st.data())
        def each_case(data: st.DataObject) -> None:
            case = data.draw(cases(target.endpoint_id, target.key))
            found = send(client, target, case)
            statuses[case.credential] += 1
            assert found == [], (case, found)

        each_case()
    assert stray_tasks(target) == []
    # the cases reach the agent with the valid key and are refused without one
    assert target.store.created, "no generated request created a task"
    assert statuses["none"] > CASES // 10 and statuses["wrong"] > CASES // 10
