"""Query parameters the admin API's listings share — times, page sizes, page tokens — each
refused with a 400 that names the parameter."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta

from aiohttp import web

from a2a_gateway.stores.base import InvalidPageTokenError
from a2a_gateway.stores.page_token import decode_page_token


def query_time(params: Mapping[str, str], name: str, *, end: bool = False) -> datetime | None:
    """``name`` as an aware UTC time, None when absent: an ISO 8601 time, or a date — its
    start, or with ``end`` the start of the next day (so a range's last day counts whole)."""
    raw = params.get(name, "").strip()
    if not raw:
        return None
    value: datetime | None
    try:
        if len(raw) == 10:
            day = date.fromisoformat(raw)
            value = datetime(day.year, day.month, day.day, tzinfo=UTC)
            value += timedelta(days=1) if end and day < date.max else timedelta()
        else:
            value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except (ValueError, OverflowError):
        value = None
    if value is None or not 1970 <= value.year <= 9998:
        raise web.HTTPBadRequest(
            reason=f"{name} must be an ISO 8601 date or time from 1970 on, e.g. 2026-12-01"
        )
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def page_size(params: Mapping[str, str], most: int, default: int = 50) -> int:
    """``page_size``, from 1 to ``most`` (``default``, or ``most`` if smaller, when absent)."""
    size = params.get("page_size", str(min(default, most))).strip()
    digits = size.lstrip("0")  # int() refuses more than 4300 digits: a long one is too large
    if not (size.isdecimal() and len(digits) <= len(str(most)) and 1 <= int(size) <= most):
        raise web.HTTPBadRequest(reason=f"page_size must be a whole number from 1 to {most}")
    return int(size)


def page_token(params: Mapping[str, str], key: bytes) -> str:
    """``page_token``: "" for the first page, else a ``nextPageToken`` this gateway signed."""
    token = params.get("page_token", "").strip()
    if token:
        try:
            decode_page_token(token, key=key)
        except InvalidPageTokenError:
            raise web.HTTPBadRequest(
                reason="page_token is not a nextPageToken of this gateway"
            ) from None
    return token
