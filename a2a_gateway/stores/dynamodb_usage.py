"""The usage ledger on DynamoDB: a ``UsageRecord`` as attributes of the task's own item, set by
the task's terminal ``PutItem``/``UpdateItem`` (so one call, no transaction: the record lands
exactly when the terminal state does, and costs no write unit of its own beyond the item's
size), and the sparse index ``by_usage_day`` that only ended tasks with a record are in.

The index is keyed by the UTC day of the task's end (``usage_day``) and its end in epoch
microseconds (``usage_end``): a summary over a bounded range queries each day (up to
``QUERY_DAYS``), other summaries scan the index. The day partition takes one day's ended
tasks: DynamoDB sustains about 1,000 writes a second per index partition, which is the
ceiling of tasks ending per second before the index throttles the task writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from a2a_gateway.stores.base import UsageQuery, UsageRecord, UsageTotals
from a2a_gateway.stores.dynamodb_items import Expr, N, S
from a2a_gateway.stores.dynamodb_schema import USAGE_INDEX
from a2a_gateway.stores.usage_rows import day_text, epoch_us, fold, matches, partial_of

QUERY_DAYS = 62
"""A summary over at most this many days queries each; a longer or open one scans the index."""

_NUMBERS = ("started_us", "requests", "bytes_in", "bytes_out", "input_tokens", "output_tokens",
            "cost_micros")

AllPages = Callable[..., Awaitable[list[dict[str, Any]]]]
"""``DynamoDBStore._all_pages``: every item of a paginated call."""


def usage_attrs(usage: UsageRecord | None) -> dict[str, Any]:
    """The record's attributes on the task item (none without one)."""
    if usage is None:
        return {}
    ended = epoch_us(usage.ended_at)
    values = {
        "started_us": epoch_us(usage.started_at), "requests": usage.requests,
        "bytes_in": usage.bytes_in, "bytes_out": usage.bytes_out,
        "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
        "cost_micros": usage.cost_micros,
    }
    return {
        "usage_day": S(day_text(ended)),
        "usage_end": N(ended),
        "usage_key_id": S(usage.key_id),
        "usage_key_name": S(usage.key_name),
        "currency": S(usage.currency),
        **{name: N(value) for name, value in values.items()},
    }


def _record_of(item: dict[str, Any]) -> UsageRecord:
    numbers = {name: int(item[name]["N"]) for name in _NUMBERS if name in item}
    return UsageRecord(
        started_at=_at(numbers.pop("started_us", 0)),
        ended_at=_at(int(item["usage_end"]["N"])),
        key_id=item.get("usage_key_id", {}).get("S", ""),
        key_name=item.get("usage_key_name", {}).get("S", ""),
        currency=item.get("currency", {}).get("S", ""),
        **numbers,
    )


def _at(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)


def _days(query: UsageQuery, now: float) -> list[str] | None:
    """The days to query, or None to scan (no start, or a long range). A range without an
    end ends now (a quota's "since the window's start")."""
    if query.start is None:
        return None
    end = epoch_us(query.end) if query.end is not None else int(now * 1_000_000) + 1
    first, last = epoch_us(query.start), end - 1
    if last < first:
        return []
    day, count = _at(first).date(), (_at(last).date() - _at(first).date()).days + 1
    if count > QUERY_DAYS:
        return None
    return [(day + timedelta(days=n)).isoformat() for n in range(count)]


async def summarize_usage(
    all_pages: AllPages, table: str, query: UsageQuery, now: float
) -> list[UsageTotals]:
    """``Store.usage_summary`` over the tasks table's ``by_usage_day`` index."""
    days = _days(query, now)
    if days is None:
        pages = [all_pages("scan", TableName=table, IndexName=USAGE_INDEX)]
    else:
        pages = [_day(all_pages, table, day, query) for day in days]
    items = [item for page in await asyncio.gather(*pages) for item in page]
    partials = []
    for item in items:
        if "expires_at" in item and int(item["expires_at"]["N"]) <= now:
            continue  # ended and expired: DynamoDB deletes it lazily
        usage = _record_of(item)
        tenant, endpoint_id, principal = (
            item["tenant"]["S"], item["endpoint_id"]["S"], item["principal"]["S"]
        )
        if matches(query, tenant, endpoint_id, principal, usage):
            partials.append(
                partial_of(query, endpoint_id, principal, int(item["state"]["N"]), usage)
            )
    return fold(partials)


def _day(all_pages: AllPages, table: str, day: str, query: UsageQuery) -> Awaitable[list[Any]]:
    e = Expr()
    condition = f"{e.n('usage_day')} = {e.v(S(day))}"
    if query.start is not None and query.end is not None:
        condition += (
            f" AND {e.n('usage_end')} BETWEEN {e.v(N(epoch_us(query.start)))}"
            f" AND {e.v(N(epoch_us(query.end) - 1))}"
        )
    elif query.start is not None:
        condition += f" AND {e.n('usage_end')} >= {e.v(N(epoch_us(query.start)))}"
    filters = [
        f"{e.n(name)} = {e.v(S(value))}"
        for name, value in (("endpoint_id", query.endpoint_id), ("principal", query.principal),
                            ("usage_key_id", query.key_id))
        if value is not None
    ]
    return all_pages(
        "query",
        **e.params(
            TableName=table, IndexName=USAGE_INDEX, KeyConditionExpression=condition,
            FilterExpression=" AND ".join(filters) or None,
        ),
    )
