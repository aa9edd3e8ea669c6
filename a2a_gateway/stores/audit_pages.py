"""The audit log's pages, shared by the store drivers: the keyset cursor (time, entry id) of a
page token, the filter of a query, and the page made of the rows a driver read."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from a2a_gateway.stores.base import AuditEntry, AuditPage, AuditQuery, audit_time_us
from a2a_gateway.stores.page_token import decode_page_token, encode_page_token


def audit_cursor(query: AuditQuery, key: bytes | None) -> tuple[int, str] | None:
    """The ``(time_us, id)`` a page starts after (newest first); None for the first page.
    ``InvalidPageTokenError`` for a token no store issued."""
    return decode_page_token(query.page_token, key=key) if query.page_token else None


def time_bounds_us(query: AuditQuery) -> tuple[int | None, int | None]:
    """``(since, until)`` of the query in epoch microseconds (None where open)."""
    since = audit_time_us(query.since) if query.since is not None else None
    until = audit_time_us(query.until) if query.until is not None else None
    return since, until


def audit_matches(entry: AuditEntry, query: AuditQuery, cursor: tuple[int, str] | None) -> bool:
    """Whether ``entry`` passes the query's filters and comes after ``cursor`` (newest first)."""
    at_us = audit_time_us(entry.at)
    since, until = time_bounds_us(query)
    return (
        (not query.action or entry.action == query.action)
        and (not query.target or entry.target == query.target)
        and (not query.actor or entry.actor == query.actor)
        and (since is None or at_us >= since)
        and (until is None or at_us < until)
        and (cursor is None or (at_us, entry.id) < cursor)
    )


def audit_page(entries: Sequence[AuditEntry], page_size: int, key: bytes | None) -> AuditPage:
    """The page of ``entries``, read newest first up to ``page_size + 1``: one beyond the page
    means a next page."""
    page = list(entries[:page_size])
    token = ""
    if len(entries) > page_size and page:
        token = encode_page_token(audit_time_us(page[-1].at), page[-1].id, key=key)
    return AuditPage(page, token)


def json_or_none(value: dict[str, Any] | None) -> str | None:
    """The text SQLite keeps for an optional JSON object."""
    return None if value is None else json.dumps(value, sort_keys=True)
