"""The audit log in the admin API: who an operator is in an entry (``actor_of``), the entries of
an admin change (``record_change``) and ``GET /admin/api/audit``, the entries newest first.

Entries are append-only here: no route changes or deletes one (``audit_retention_days`` prunes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from a2a_gateway.auth.callers import bearer_token
from a2a_gateway.auth.operators import Operator
from a2a_gateway.governance.audit import entry_json, record
from a2a_gateway.state import GATEWAY
from a2a_gateway.stores.base import AuditEntry, AuditQuery
from a2a_gateway.transport.admin_query import page_size, page_token, query_time

View = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_PAGE_SIZE = 500
MAX_FILTER = 512
"""Longest action, target or actor a filter may name."""


def actor_of(request: web.Request, operator: Operator) -> str:
    """The operator as an entry names it: ``key:<ref>`` for a gateway operator key (its
    reference, not the key), ``oidc:<subject>`` for an OIDC console sign-in, else the
    operator's name."""
    session = operator.session
    if session is not None:
        if session.oidc is not None:
            return f"oidc:{session.oidc.subject}"
        if session.key_ref is not None:
            return f"key:{session.key_ref}"
    bearer = bearer_token(request.headers)
    ref = request.app[GATEWAY].operators.key_ref(bearer) if bearer else None
    return f"key:{ref}" if ref else operator.name


async def record_change(
    request: web.Request, operator: Operator, action: str, target: str, **change: Any
) -> AuditEntry:
    """``governance.audit.record`` for a change made through the admin API."""
    return await record(
        request.app[GATEWAY].store, actor_of(request, operator), action, target, **change
    )


def audit_route(operator_of: Callable[[web.Request], Operator]) -> View:
    """``GET /admin/api/audit`` for the operators ``operator_of`` admits (the admin API's
    check, handed in: that module registers this one)."""

    async def list_audit(request: web.Request) -> web.Response:
        """Entries newest first: ``action``, ``target``, ``actor`` (exact), ``from``
        (inclusive) and ``to`` (exclusive) as ISO 8601 times or dates (a date ``to``: the end
        of that day), ``page_size`` (1 to 500,
        default 50) and ``page_token`` (a page's ``nextPageToken``); 400 naming a bad
        parameter."""
        operator_of(request)
        gateway = request.app[GATEWAY]
        key = gateway.settings.page_token_key.get_secret_value().encode()
        page = await gateway.store.list_audit_entries(_audit_query(request, key))
        body = {"entries": [entry_json(e) for e in page.entries],
                "nextPageToken": page.next_page_token}
        return web.Response(
            body=orjson.dumps(body), content_type="application/json",
            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
        )

    return list_audit


def _audit_query(request: web.Request, token_key: bytes) -> AuditQuery:
    params = request.query
    unknown = sorted(set(params) - {"action", "target", "actor", "from", "to", "page_size",
                                    "page_token"})
    if unknown:
        raise web.HTTPBadRequest(reason=f"{_shown(unknown[0])}: not a parameter of the audit log")
    filters = {}
    for name in ("action", "target", "actor"):
        value = params.get(name, "")
        if len(value) > MAX_FILTER or "\x00" in value:
            raise web.HTTPBadRequest(
                reason=f"{name} must be at most {MAX_FILTER} characters, without NUL"
            )
        filters[name] = value
    since, until = query_time(params, "from"), query_time(params, "to", end=True)
    if since is not None and until is not None and since >= until:
        raise web.HTTPBadRequest(reason="from must be before to")
    return AuditQuery(**filters, since=since, until=until,
                      page_size=page_size(params, MAX_PAGE_SIZE),
                      page_token=page_token(params, token_key))


def _shown(value: str) -> str:
    shown = value[:64]
    return shown if shown.isprintable() else repr(shown)
