"""Quota limits: their names, their values, and reading them from operators' input.

A key's limits (``ApiKey.limits``) bind the key alone; an endpoint's (the row's ``limits``
metadata) bind all its callers together. Every limit is optional; a missing one is no limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_COUNT = 1_000_000_000
"""Largest task count a limit may name (more is no limit: leave it out)."""
MAX_TOKENS = 10**15
MAX_COST = 10**12

WINDOW_SECONDS = {
    "tasks_per_minute": 60,
    "tasks_per_hour": 3600,
    "tasks_per_day": 86400,
}
"""The task-count limits, each with its fixed window (aligned to UTC: a minute, hour or day
starts on the clock)."""
BUDGETS = ("tokens_per_day", "cost_per_day", "cost_per_month")
"""Limits on what finished tasks used, checked at a task's start and counted at its end."""


class Limits(BaseModel):
    """The limits of one key or endpoint. Values are strictly typed (no ``true`` for 1, no
    ``"5"`` for 5) and must be above 0."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    concurrent_tasks: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    """Tasks whose runs go on at the same time."""
    tasks_per_minute: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    tasks_per_hour: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    tasks_per_day: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    tokens_per_day: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    """Input and output tokens the backend reported, together."""
    cost_per_day: float | None = Field(default=None, gt=0, le=MAX_COST, allow_inf_nan=False)
    """Money, in the currency of the endpoint's ``cost`` price setting."""
    cost_per_month: float | None = Field(default=None, gt=0, le=MAX_COST, allow_inf_nan=False)

    def set(self) -> dict[str, int | float]:
        """The limits that are set, by name."""
        return self.model_dump(exclude_none=True)


LIMIT_NAMES = tuple(Limits.model_fields)
NO_LIMITS = Limits()


class LimitsError(ValueError):
    """Limits an operator gave are not valid; the message names the field, in one line."""


def parse_limits(value: Any, where: str = "limits") -> Limits:
    """``value`` (a mapping, as JSON gives it) as ``Limits``; ``LimitsError`` naming the field."""
    if value is None:
        return NO_LIMITS
    if not isinstance(value, Mapping):
        raise LimitsError(f"{where}: must be an object of limit names to numbers")
    try:
        return Limits.model_validate(dict(value))
    except ValidationError as exc:
        raise LimitsError(_first_problem(exc, where)) from None


def _first_problem(exc: ValidationError, where: str) -> str:
    error = exc.errors()[0]
    name = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"{where}.{name}: unknown limit (known: {', '.join(LIMIT_NAMES)})"
    return f"{where}.{name}: {error['msg'].lower()}"


def apply_assignments(current: Limits, assignments: Iterable[str]) -> Limits:
    """``current`` changed by ``NAME=VALUE`` assignments (``NAME=none`` removes a limit), as
    the CLI takes them; ``LimitsError`` naming the first bad one."""
    values: dict[str, Any] = current.set()
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name:
            raise LimitsError(f"limit {assignment!r}: expected NAME=VALUE")
        if name not in LIMIT_NAMES:
            raise LimitsError(f"limits.{name}: unknown limit (known: {', '.join(LIMIT_NAMES)})")
        if text.lower() == "none":
            values.pop(name, None)
            continue
        try:
            number = json.loads(text)
        except ValueError:
            raise LimitsError(f"limits.{name}: {text!r} is not a number") from None
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise LimitsError(f"limits.{name}: {text!r} is not a number")
        values[name] = number
    return parse_limits(values)
