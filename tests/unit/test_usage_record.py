"""The usage record's parts: the backends' token counts in one shape, prices and their checks,
and what a record counts of a task."""

from __future__ import annotations

import pytest
from a2a.types import Role, Task

from a2a_gateway.governance.usage import Price, UsageStart, check_cost, token_counts, usage_record


@pytest.mark.parametrize(("usage", "counts"), [
    ({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}, (10, 5)),  # OpenAI chat
    ({"input_tokens": 20, "output_tokens": 7, "input_tokens_details": {}}, (20, 7)),  # Hermes
    ({"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7}, (3, 4)),  # ADK
    ({"total_tokens": 3}, (0, 0)),
    ({"input_tokens": -1, "output_tokens": True}, (0, 0)),
    ({"input_tokens": "12"}, (0, 0)),
    ("nonsense", (0, 0)),
    (None, (0, 0)),
])
def test_token_counts_read_each_backends_names(usage, counts):
    assert token_counts(usage) == counts


def test_a_price_turns_tokens_into_exact_millionths():
    price = Price.of({"cost": {"currency": "USD", "per_task": 0.001, "per_1k_input_tokens": 0.5,
                               "per_1k_output_tokens": 1.5}})
    assert price is not None and price.micros(10, 3) == 10_500
    assert Price.of({}) is None and Price.of({"cost": {"currency": "usd"}}) is None


@pytest.mark.parametrize(("cost", "named"), [
    ([], "cost must be an object"),
    ({"per_task": 1}, "cost.currency"),
    ({"currency": "DOLLAR"}, "cost.currency"),
    ({"currency": "USD", "per_task": -0.1}, "cost.per_task"),
    ({"currency": "USD", "per_1k_input_tokens": float("nan")}, "cost.per_1k_input_tokens"),
    ({"currency": "USD", "per_1k_output_tokens": "1"}, "cost.per_1k_output_tokens"),
    ({"currency": "USD", "per_task": 1e12}, "cost.per_task"),
    ({"currency": "USD", "per_request": 1}, "cost.per_request"),
])
def test_a_malformed_cost_is_named(cost, named):
    problem = check_cost(cost)
    assert problem is not None and named in problem
    assert check_cost({"currency": "EUR", "per_task": 0}) is None


def test_a_record_counts_the_callers_messages_and_what_the_agent_sent_back():
    task = Task(id="t", context_id="c")
    for role, text in ((Role.ROLE_USER, "hi"), (Role.ROLE_AGENT, "which one?"),
                       (Role.ROLE_USER, "the first")):
        message = task.history.add(message_id=text, role=role)
        message.parts.add().text = text
    task.artifacts.add(artifact_id="a").parts.add().text = "the answer"
    start = UsageStart(100.0, "0123456789abcdef", "ci")
    record = usage_record(task, start, 102.5, (12, 4), Price("USD", per_task=0.01))
    assert (record.requests, record.key_id, record.key_name) == (2, "0123456789abcdef", "ci")
    assert record.bytes_in == task.history[0].ByteSize() + task.history[2].ByteSize()
    assert record.bytes_out == task.history[1].ByteSize() + task.artifacts[0].ByteSize()
    assert (record.ended_at - record.started_at).total_seconds() == 2.5
    assert (record.input_tokens, record.output_tokens, record.cost_micros) == (12, 4, 10_000)
    assert record.currency == "USD"
