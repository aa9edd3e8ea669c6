"""The usage ledger in the admin API: ``GET /admin/api/usage``, the sums of ended tasks per
endpoint, principal and/or day, as JSON or (``Accept: text/csv``) CSV."""

from __future__ import annotations

import csv
import io
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
from aiohttp import web

from a2a_gateway.auth.operators import Operator
from a2a_gateway.state import GATEWAY
from a2a_gateway.stores.base import USAGE_GROUPS, UsageQuery, UsageTotals
from a2a_gateway.transport.admin_query import query_time

View = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_RANGE_DAYS = 400
"""The longest range one summary may cover (a year and a bit, for year-on-year views)."""
DEFAULT_DAYS = 30
"""The range when ``from`` is not given: this many days before ``to``."""
MAX_FILTER = 512
_PARAMETERS = frozenset({"endpoint", "principal", "key", "from", "to", "group_by"})
_OUTCOMES = ("completed", "failed", "canceled", "rejected")
_CSV_COLUMNS = (
    "day", "endpoint", "principal", "tasks", *_OUTCOMES, "duration_seconds", "requests",
    "bytes_in", "bytes_out", "input_tokens", "output_tokens", "cost",
)
_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def usage_route(operator_of: Callable[[web.Request], Operator]) -> View:
    """``GET /admin/api/usage`` for the operators ``operator_of`` admits (the admin API's
    check, handed in: that module registers this one)."""

    async def usage(request: web.Request) -> web.Response:
        """Sums of the tasks that ended in [``from``, ``to``): ``endpoint``, ``principal`` and
        ``key`` filter, ``group_by`` (comma-separated: endpoint, principal, day) groups; 400
        naming a bad parameter."""
        operator_of(request)
        query = usage_query(request.query, datetime.now(UTC))
        totals = await request.app[GATEWAY].store.usage_summary(query)
        if "text/csv" in request.headers.get("Accept", ""):
            return web.Response(
                text=_csv(totals), content_type="text/csv", charset="utf-8", headers=_HEADERS
            )
        body = {
            "from": _iso(query.start), "to": _iso(query.end), "groupBy": list(query.group_by),
            "totals": [totals_json(t) for t in totals],
        }
        return web.Response(body=orjson.dumps(body), content_type="application/json",
                            headers=_HEADERS)

    return usage


def usage_query(params: Any, now: datetime) -> UsageQuery:
    """The store query of the route's parameters (``web.HTTPBadRequest`` naming a bad one)."""
    unknown = sorted(set(params) - _PARAMETERS)
    if unknown:
        raise web.HTTPBadRequest(reason=f"{_shown(unknown[0])}: not a parameter of the usage")
    filters = {}
    for name, field in (("endpoint", "endpoint_id"), ("principal", "principal"),
                        ("key", "key_id")):
        value = params.get(name)
        if value is None or value == "":
            continue
        if len(value) > MAX_FILTER or "\x00" in value or not _storable(value):
            raise web.HTTPBadRequest(
                reason=f"{name} must be at most {MAX_FILTER} characters, without NUL"
            )
        filters[field] = value
    end = query_time(params, "to", end=True) or now
    start = query_time(params, "from") or end - timedelta(days=DEFAULT_DAYS)
    if start > end:
        raise web.HTTPBadRequest(reason="from must not be after to")
    if end - start > timedelta(days=MAX_RANGE_DAYS):
        raise web.HTTPBadRequest(reason=f"from to to must span at most {MAX_RANGE_DAYS} days")
    return UsageQuery(start=start, end=end, group_by=_groups(params.get("group_by", "")),
                      **filters)


def _groups(raw: str) -> tuple[str, ...]:
    names = [name.strip() for name in raw.split(",") if name.strip()]
    for name in names:
        if name not in USAGE_GROUPS:
            raise web.HTTPBadRequest(
                reason=f"group_by: {_shown(name)} is not one of {', '.join(USAGE_GROUPS)}"
            )
    return tuple(dict.fromkeys(names))


def money(micros: int) -> str:
    """Millionths of a currency unit as a decimal amount (``1500`` → ``0.001500``)."""
    return str(Decimal(micros).scaleb(-6))


def totals_json(totals: UsageTotals) -> dict[str, Any]:
    out: dict[str, Any] = {
        name: value for name, value in (("endpoint", totals.endpoint_id),
                                        ("principal", totals.principal), ("day", totals.day))
        if value is not None
    }
    return out | {
        "tasks": totals.tasks,
        "outcomes": totals.outcomes,
        "durationSeconds": round(totals.duration_seconds, 6),
        "requests": totals.requests,
        "bytesIn": totals.bytes_in,
        "bytesOut": totals.bytes_out,
        "inputTokens": totals.input_tokens,
        "outputTokens": totals.output_tokens,
        "cost": [
            {"currency": currency, "micros": micros, "amount": money(micros)}
            for currency, micros in sorted(totals.cost_micros.items())
        ],
    }


def _csv(rows: list[UsageTotals]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(_CSV_COLUMNS)
    for t in rows:
        cost = " + ".join(f"{money(m)} {c}" for c, m in sorted(t.cost_micros.items()))
        writer.writerow([
            _cell(t.day), _cell(t.endpoint_id), _cell(t.principal), t.tasks,
            *(t.outcomes.get(o, 0) for o in _OUTCOMES), f"{t.duration_seconds:.3f}", t.requests,
            t.bytes_in, t.bytes_out, t.input_tokens, t.output_tokens, cost,
        ])
    return out.getvalue()


def _cell(value: str | None) -> str:
    """A text cell a spreadsheet shows as text: never a formula (a principal may be any
    caller-chosen name, e.g. ``=HYPERLINK(…)``)."""
    text = value or ""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _storable(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _shown(value: str) -> str:
    shown = value[:64]
    return shown if shown.isprintable() else repr(shown)
