"""What a task used: the usage record a run writes with its task's terminal write, the
backend's token counts in one shape, and an endpoint's price (its ``cost`` setting).

The record is built from the task as the run holds it at its end: requests are the caller's
messages in the history, bytes their serialized size in and the artifacts' and the agent's
messages' size out; tokens come from the ``usage`` the handler put on its ``Completed``
event (each bridge passes its backend's own counts, in its backend's names).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from a2a.types import Task
from a2a.types.a2a_pb2 import ROLE_USER

from a2a_gateway.stores.base import UsageRecord

COST_KEY = "cost"
"""The endpoint-row metadata key of the price (``Price.of``)."""

_INPUT_NAMES = ("prompt_tokens", "input_tokens", "promptTokenCount", "prompt_token_count")
"""Input token counts as backends name them: OpenAI chat; Responses, Anthropic, Hermes, Agno,
LangChain's usage_metadata; Gemini/ADK (camelCase and snake_case)."""
_OUTPUT_NAMES = (
    "completion_tokens", "output_tokens", "candidatesTokenCount", "candidates_token_count",
)
_PRICE_FIELDS = ("per_task", "per_1k_input_tokens", "per_1k_output_tokens")
_MAX_PRICE = 1_000_000.0
"""A price above this (per task or per 1k tokens) is taken for a typo."""


def token_counts(usage: Any) -> tuple[int, int]:
    """(input, output) tokens of a backend's ``usage`` object (0 for what it does not say)."""
    if not isinstance(usage, Mapping):
        return 0, 0
    return _first_count(usage, _INPUT_NAMES), _first_count(usage, _OUTPUT_NAMES)


def _first_count(usage: Mapping[str, Any], names: tuple[str, ...]) -> int:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return 0


@dataclass(frozen=True, slots=True)
class Price:
    """An endpoint's price: per task and per thousand input/output tokens, in ``currency``."""

    currency: str
    per_task: float = 0.0
    per_1k_input_tokens: float = 0.0
    per_1k_output_tokens: float = 0.0

    @classmethod
    def of(cls, metadata: Mapping[str, Any]) -> Price | None:
        """The price in an endpoint row's metadata (None without one, or an invalid one:
        the registry refuses those when the endpoint is written)."""
        value = metadata.get(COST_KEY)
        if value is None:
            return None
        try:  # a run reads it at each task's end: the same few settings, checked once
            return _price_of(tuple(sorted(value.items())))
        except (AttributeError, TypeError):  # not an object, or unhashable values: invalid
            return None

    def micros(self, input_tokens: int, output_tokens: int) -> int:
        """The cost of one task in millionths of ``currency``, rounded to the nearest."""
        total = (
            self.per_task
            + self.per_1k_input_tokens * input_tokens / 1000
            + self.per_1k_output_tokens * output_tokens / 1000
        )
        return round(total * 1_000_000)


@functools.lru_cache(maxsize=256)
def _price_of(items: tuple[tuple[str, Any], ...]) -> Price | None:
    value = dict(items)
    if check_cost(value) is not None:
        return None
    return Price(value["currency"], *(float(value.get(name, 0)) for name in _PRICE_FIELDS))


def check_cost(value: Any) -> str | None:
    """What is wrong with a ``cost`` setting (None: nothing), naming the field."""
    if not isinstance(value, Mapping):
        return "cost must be an object"
    unknown = sorted(set(value) - {"currency", *_PRICE_FIELDS})
    if unknown:
        return f"cost.{unknown[0]} is not a price field (currency, {', '.join(_PRICE_FIELDS)})"
    currency = value.get("currency")
    if not (isinstance(currency, str) and len(currency) == 3 and currency.isascii()
            and currency.isalpha() and currency.isupper()):
        return "cost.currency must be a three-letter ISO 4217 code such as USD"
    for name in _PRICE_FIELDS:
        price = value.get(name, 0)
        if (
            isinstance(price, bool) or not isinstance(price, int | float)
            or not math.isfinite(price) or not 0 <= price <= _MAX_PRICE
        ):
            return f"cost.{name} must be a number from 0 to {_MAX_PRICE:g}"
    return None


@dataclass(slots=True)
class UsageStart:
    """What a run knows of its task's usage before the end: kept in the task's run state
    (``RUN_STATE_KEY``), so a task answered later or on another replica keeps it."""

    started_at: float
    """Epoch seconds."""
    key_id: str = ""
    key_name: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"started_at": self.started_at, "key_id": self.key_id, "key_name": self.key_name}

    @classmethod
    def of_json(cls, value: Any, default_start: float) -> UsageStart:
        if not isinstance(value, Mapping):
            return cls(default_start)
        return cls(
            float(value.get("started_at", default_start)),
            str(value.get("key_id", "")),
            str(value.get("key_name", "")),
        )


RUN_STATE_KEY = "usage"
"""The run-state key of a task's ``UsageStart``."""


def ending_now(
    task: Task, run_state: Mapping[str, Any], tokens: tuple[int, int],
    endpoint_metadata: Mapping[str, Any],
) -> UsageRecord:
    """The record of ``task`` ending now: started as its ``run_state`` says, priced by its
    endpoint's ``cost`` setting."""
    now = time.time()
    start = UsageStart.of_json(run_state.get(RUN_STATE_KEY), now)
    return usage_record(task, start, now, tokens, Price.of(endpoint_metadata))


def usage_record(
    task: Task, start: UsageStart, ended_at: float, tokens: tuple[int, int], price: Price | None
) -> UsageRecord:
    """The record of ``task`` ending at ``ended_at`` (epoch seconds)."""
    requests = bytes_in = bytes_out = 0
    for message in task.history:
        if message.role == ROLE_USER:
            requests += 1
            bytes_in += message.ByteSize()
        else:
            bytes_out += message.ByteSize()
    bytes_out += sum(artifact.ByteSize() for artifact in task.artifacts)
    if task.status.HasField("message"):
        bytes_out += task.status.message.ByteSize()
    input_tokens, output_tokens = tokens
    return UsageRecord(
        started_at=datetime.fromtimestamp(min(start.started_at, ended_at), UTC),
        ended_at=datetime.fromtimestamp(ended_at, UTC),
        key_id=start.key_id,
        key_name=start.key_name,
        requests=max(requests, 1),
        bytes_in=bytes_in,
        bytes_out=bytes_out,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_micros=price.micros(input_tokens, output_tokens) if price else 0,
        currency=price.currency if price else "",
    )
