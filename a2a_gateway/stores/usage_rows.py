"""The usage ledger as the stores keep it: a ``UsageRecord`` as columns of the task's row, the
aggregate query's SQL (SQLite and PostgreSQL), and the folding of partial sums into
``UsageTotals`` (every store).

Each store sums per (its groups, outcome, currency) and ``fold`` merges those partial sums
into one ``UsageTotals`` per group, so the outcome counts and the cost per currency come out
of a single aggregate query.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from a2a.types.a2a_pb2 import (
    TASK_STATE_CANCELED,
    TASK_STATE_COMPLETED,
    TASK_STATE_FAILED,
    TASK_STATE_REJECTED,
)

from a2a_gateway.stores.base import UsageQuery, UsageRecord, UsageTotals

OUTCOMES = {
    TASK_STATE_COMPLETED: "completed",
    TASK_STATE_FAILED: "failed",
    TASK_STATE_CANCELED: "canceled",
    TASK_STATE_REJECTED: "rejected",
}
"""A task's terminal state → its outcome in the ledger."""

USAGE_COLUMNS = (
    "usage_key_id", "usage_key_name", "started_us", "ended_us", "requests", "bytes_in",
    "bytes_out", "input_tokens", "output_tokens", "cost_micros", "currency",
)
"""The ledger's columns on ``tasks`` (SQLite and PostgreSQL), in ``usage_values`` order;
``ended_us`` is NULL on a task without a usage record."""

_US_PER_DAY = 86_400_000_000


def epoch_us(value: datetime) -> int:
    """Epoch microseconds of an aware (or UTC naive) datetime."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def usage_values(usage: UsageRecord | None) -> tuple[Any, ...]:
    """The record as the values of ``USAGE_COLUMNS`` (all None without a record)."""
    if usage is None:
        return (None,) * len(USAGE_COLUMNS)
    return (
        usage.key_id, usage.key_name, epoch_us(usage.started_at), epoch_us(usage.ended_at),
        usage.requests, usage.bytes_in, usage.bytes_out, usage.input_tokens,
        usage.output_tokens, usage.cost_micros, usage.currency,
    )


def day_text(ended_us: int) -> str:
    """The UTC day (``YYYY-MM-DD``) of an epoch-microsecond instant."""
    return datetime.fromtimestamp(ended_us // _US_PER_DAY * 86_400, UTC).date().isoformat()


@dataclass(frozen=True, slots=True)
class PartialSum:
    """The sums of one (group, outcome, currency) as a store computed them."""

    endpoint_id: str | None
    principal: str | None
    day: str | None
    state: int
    currency: str
    tasks: int
    duration_us: int
    requests: int
    bytes_in: int
    bytes_out: int
    input_tokens: int
    output_tokens: int
    cost_micros: int


def fold(partials: Iterable[PartialSum]) -> list[UsageTotals]:
    """One ``UsageTotals`` per group, ordered by day, endpoint, principal."""
    groups: dict[tuple[str, str, str], UsageTotals] = {}
    for p in partials:
        key = (p.day or "", p.endpoint_id or "", p.principal or "")
        totals = groups.get(key)
        if totals is None:
            totals = groups[key] = UsageTotals(p.endpoint_id, p.principal, p.day)
        if p.tasks:
            outcome = OUTCOMES.get(p.state, "other")
            totals.tasks += p.tasks
            totals.outcomes[outcome] = totals.outcomes.get(outcome, 0) + p.tasks
        totals.duration_seconds += p.duration_us / 1_000_000
        totals.requests += p.requests
        totals.bytes_in += p.bytes_in
        totals.bytes_out += p.bytes_out
        totals.input_tokens += p.input_tokens
        totals.output_tokens += p.output_tokens
        if p.currency and p.cost_micros:
            totals.cost_micros[p.currency] = totals.cost_micros.get(p.currency, 0) + p.cost_micros
    return [groups[key] for key in sorted(groups)]


def matches(query: UsageQuery, tenant: str, endpoint_id: str, principal: str,
            usage: UsageRecord) -> bool:
    """Whether a record passes the query's filters (stores that filter in Python)."""
    ended = epoch_us(usage.ended_at)
    return (
        (query.endpoint_id is None or query.endpoint_id == endpoint_id)
        and (query.principal is None or query.principal == principal)
        and (query.tenant is None or query.tenant == tenant)
        and (query.key_id is None or query.key_id == usage.key_id)
        and (query.start is None or ended >= epoch_us(query.start))
        and (query.end is None or ended < epoch_us(query.end))
    )


def partial_of(query: UsageQuery, endpoint_id: str, principal: str, state: int,
               usage: UsageRecord) -> PartialSum:
    """One record as a partial sum of its group (stores that sum in Python)."""
    ended = epoch_us(usage.ended_at)
    groups = query.group_by
    return PartialSum(
        endpoint_id if "endpoint" in groups else None,
        principal if "principal" in groups else None,
        day_text(ended) if "day" in groups else None,
        state, usage.currency, 1, ended - epoch_us(usage.started_at), usage.requests,
        usage.bytes_in, usage.bytes_out, usage.input_tokens, usage.output_tokens,
        usage.cost_micros,
    )


def usage_sql(query: UsageQuery, placeholder: Callable[[int], str]) -> tuple[str, list[Any]]:
    """The aggregate query over ``tasks`` and its parameters; ``placeholder(n)`` writes the
    n-th parameter (1-based) in the driver's style. Rows: endpoint_id, principal, day (epoch
    day number) — NULL when not grouped by — then state, currency and the sums."""
    where, params = ["ended_us IS NOT NULL"], []

    def param(value: Any) -> str:
        params.append(value)
        return placeholder(len(params))

    for column, value in (("endpoint_id", query.endpoint_id), ("principal", query.principal),
                          ("tenant", query.tenant), ("usage_key_id", query.key_id)):
        if value is not None:
            where.append(f"{column} = {param(value)}")
    if query.start is not None:
        where.append(f"ended_us >= {param(epoch_us(query.start))}")
    if query.end is not None:
        where.append(f"ended_us < {param(epoch_us(query.end))}")
    groups = query.group_by
    selected = [
        "endpoint_id" if "endpoint" in groups else "NULL",
        "principal" if "principal" in groups else "NULL",
        f"ended_us / {_US_PER_DAY}" if "day" in groups else "NULL",
    ]
    sql = (
        f"SELECT {selected[0]} AS g_endpoint, {selected[1]} AS g_principal,"
        f" {selected[2]} AS g_day, state, currency, count(*),"
        " sum(ended_us - started_us), sum(requests), sum(bytes_in), sum(bytes_out),"
        " sum(input_tokens), sum(output_tokens), sum(cost_micros)"
        f" FROM tasks WHERE {' AND '.join(where)} GROUP BY 1, 2, 3, 4, 5"
    )
    return sql, params


def whole_days(query: UsageQuery) -> tuple[tuple[int | None, int | None], list[UsageQuery]]:
    """The query split for a store that keeps daily sums (PostgreSQL's ``usage_daily``): the
    whole UTC days it covers, as [first, last) day numbers (None: unbounded), and the queries
    of the partial days at its ends, to sum from the tasks. ((0, 0), [query]) when it covers
    no whole day, or filters by key (the daily sums have no key)."""
    start = None if query.start is None else epoch_us(query.start)
    end = None if query.end is None else epoch_us(query.end)
    if query.key_id is not None:
        return (0, 0), [query]
    first = None if start is None else -(-start // _US_PER_DAY)
    last = None if end is None else end // _US_PER_DAY
    if first is not None and last is not None and first >= last:
        return (0, 0), [query]
    edges = []
    if first is not None and start is not None and start < first * _US_PER_DAY:
        edges.append(replace(query, end=_at_day(first)))
    if last is not None and end is not None and end > last * _US_PER_DAY:
        edges.append(replace(query, start=_at_day(last)))
    return (first, last), edges


def _at_day(day: int) -> datetime:
    return datetime.fromtimestamp(day * 86_400, UTC)


def daily_sql(query: UsageQuery, days: tuple[int | None, int | None],
              placeholder: Callable[[int], str]) -> tuple[str, list[Any]]:
    """The sums of ``usage_daily`` over the whole days [first, last): per group and currency,
    tasks per outcome then the sums (``partials_of_daily_rows``)."""
    where, params = ["TRUE"], []

    def param(value: Any) -> str:
        params.append(value)
        return placeholder(len(params))

    for column, value in (("endpoint_id", query.endpoint_id), ("principal", query.principal),
                          ("tenant", query.tenant)):
        if value is not None:
            where.append(f"{column} = {param(value)}")
    if days[0] is not None:
        where.append(f"day >= {param(days[0])}")
    if days[1] is not None:
        where.append(f"day < {param(days[1])}")
    groups = query.group_by
    sql = (
        f"SELECT {'endpoint_id' if 'endpoint' in groups else 'NULL'},"
        f" {'principal' if 'principal' in groups else 'NULL'},"
        f" {'day' if 'day' in groups else 'NULL'}, currency, sum(completed), sum(failed),"
        " sum(canceled), sum(rejected), sum(duration_us), sum(requests), sum(bytes_in),"
        " sum(bytes_out), sum(input_tokens), sum(output_tokens), sum(cost_micros)"
        f" FROM usage_daily WHERE {' AND '.join(where)} GROUP BY 1, 2, 3, 4"
    )
    return sql, params


_DAILY_OUTCOMES = (TASK_STATE_COMPLETED, TASK_STATE_FAILED, TASK_STATE_CANCELED,
                   TASK_STATE_REJECTED)
"""The order of ``daily_sql``'s task counts."""


def partials_of_daily_rows(rows: Iterable[Any]) -> list[PartialSum]:
    """The rows of ``daily_sql`` as partial sums: one of the sums with no task, and one per
    outcome with its count of tasks and no sums."""
    partials = []
    for r in rows:
        day = None if r[2] is None else day_text(int(r[2]) * _US_PER_DAY)
        sums = [int(v or 0) for v in r[8:15]]
        partials.append(PartialSum(r[0], r[1], day, 0, r[3] or "", 0, *sums))
        for state, count in zip(_DAILY_OUTCOMES, r[4:8], strict=True):
            if count:
                partials.append(PartialSum(r[0], r[1], day, state, "", int(count),
                                           *(0,) * len(sums)))
    return partials


def partials_of_rows(rows: Iterable[Any]) -> list[PartialSum]:
    """The rows of ``usage_sql`` (or ``daily_sql``) as partial sums."""
    return [
        PartialSum(
            r[0], r[1], None if r[2] is None else day_text(int(r[2]) * _US_PER_DAY),
            int(r[3]), r[4] or "", *(int(v or 0) for v in r[5:13]),
        )
        for r in rows
    ]
