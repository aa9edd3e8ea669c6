"""The admin API under ``/admin/api/``: endpoints, their API keys and every endpoint's tasks,
for gateway operators (the credential of the event feed, ``auth.operators``).

Answers are JSON. Settings values never leave the gateway: an endpoint lists its setting
names and which of them are ``env:`` references. A new key is shown once, in the answer
that creates it. Operators are not scoped to a caller: a task is addressed by its endpoint,
the principal it runs for (what the task list and the feed show) and optionally its tenant
(default: the endpoint's). A running task's own stream (its text as it arrives) is open to
them too, like SubscribeToTask.

The console's session cookie is taken too (``auth.sessions``); a change made with it
needs its CSRF token in ``X-CSRF-Token``.

A caller's API key is refused with 403 (it is a credential, not an operator's); no
credential or an unknown bearer token is 401. Enabling or disabling an endpoint takes effect
on this replica at once; on the other replicas at once on PostgreSQL (the database announces
the change), otherwise within ``endpoint_cache_seconds``.

An endpoint's ``health`` is how its backend answered the runs of every replica sharing the
store (``backend_health``); ``/admin/api/stats`` is the last hour of this replica's own
metrics (``stats``), or with ``?scope=fleet`` of every replica sharing the Redis.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import structlog
from a2a.types import StreamResponse, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError
from aiohttp import web
from pydantic import ValidationError

from a2a_gateway.auth.api_keys import key_id_of, make_key
from a2a_gateway.auth.callers import bearer_token
from a2a_gateway.auth.operators import NotAnOperatorError, Operator
from a2a_gateway.auth.sessions import CSRF_HEADER, csrf_ok
from a2a_gateway.endpoints.backend_health import health_json
from a2a_gateway.endpoints.file import FROM_FILE, GATEWAY_KEYS, Entry, endpoint_row
from a2a_gateway.endpoints.registry import (
    EndpointRuntime,
    check_endpoint,
    handler_path,
    runtime_auth,
    secret_settings,
)
from a2a_gateway.errors import (
    EndpointMisconfiguredError,
    EndpointNotFoundError,
    UnauthenticatedError,
)
from a2a_gateway.governance.audit import endpoint_fields
from a2a_gateway.governance.limits import LimitsError, parse_limits
from a2a_gateway.live.feed import state_name
from a2a_gateway.observability.fleet_stats import FLEET_STATS, fleet_answer
from a2a_gateway.observability.stats import STATS
from a2a_gateway.protojson import message_to_dict
from a2a_gateway.settings import RESERVED_METADATA_KEYS
from a2a_gateway.state import GATEWAY, Gateway
from a2a_gateway.stores.base import (
    ApiKey,
    ConflictError,
    Endpoint,
    EndpointHealth,
    EndpointTaskPage,
    Scope,
    status_timestamp_us,
)
from a2a_gateway.stores.page_token import decode_page_token, encode_page_token
from a2a_gateway.tasks.kill_switch import operator_reason
from a2a_gateway.tasks.streams import LAST_EVENT_ID, subscribe_stream
from a2a_gateway.transport.admin_audit import actor_of, audit_route, record_change
from a2a_gateway.transport.admin_handlers import handlers_route
from a2a_gateway.transport.admin_query import page_size, page_token
from a2a_gateway.transport.admin_usage import usage_route
from a2a_gateway.transport.feed import MAX_CONTEXT_ID, feed_filter
from a2a_gateway.transport.sse import SSEStream

PREFIX = "/admin/api"
View = Callable[[web.Request], Awaitable[web.StreamResponse]]

log = structlog.get_logger(__name__)


class CallerKeyError(NotAnOperatorError):
    message = "a caller's API key is not a gateway operator credential"


class CsrfError(NotAnOperatorError):
    message = f"a change made with a console session needs its CSRF token in {CSRF_HEADER}"


def operator_of(request: web.Request) -> Operator:
    """The gateway operator the request comes from: 401 without a credential, 403 for a
    caller's key and for a console session's change without its CSRF token."""
    gateway = request.app[GATEWAY]
    try:
        operator = gateway.operators.require_gateway_operator(request.headers)
    except UnauthenticatedError:
        presented = [
            bearer_token(request.headers),
            request.headers.get(gateway.settings.api_key_header),
        ]
        if any(p and key_id_of(p.strip()) for p in presented):
            raise CallerKeyError() from None
        raise
    if (
        request.method != "GET"
        and operator.session is not None
        and not csrf_ok(operator.session, request.headers)
    ):
        raise CsrfError()
    return operator


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json",
                        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()  # within max_body_bytes (413 beyond)
    try:
        body = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        raise web.HTTPBadRequest(reason="the body is not JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(reason="the body must be a JSON object")
    if _holds_nul(body):
        raise web.HTTPBadRequest(
            reason="the body holds a NUL character (\\u0000), which no store keeps"
        )
    return body


def _holds_nul(value: Any) -> bool:
    """Whether a string anywhere in the JSON ``value`` holds NUL (PostgreSQL text cannot)."""
    pending = [value]
    while pending:  # a loop, not recursion: orjson takes nesting deeper than Python's stack
        item = pending.pop()
        if isinstance(item, str) and "\x00" in item:
            return True
        if isinstance(item, dict):
            pending += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            pending += item
    return False


async def _endpoint(gateway: Gateway, endpoint_id: str) -> Endpoint:
    found = await gateway.store.get_endpoint(endpoint_id) if _is_uuid(endpoint_id) else None
    if found is None:
        raise web.HTTPNotFound(reason=f"no endpoint {_shown(endpoint_id)}")
    return found


def _shown(value: str) -> str:
    """A value of the request as an error reason repeats it: at most 64 characters, quoted
    with its control characters escaped when it has any (a reason cannot hold a line break)."""
    shown = value[:64]
    return shown if shown.isprintable() else repr(shown)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


# endpoints ------------------------------------------------------------------------------


def endpoint_json(endpoint: Endpoint, gateway: Gateway, base_url: str,
                  health: dict[str, EndpointHealth]) -> dict[str, Any]:
    """An endpoint as operators see it: no settings value, only names and ``env:`` references;
    ``health`` is ``BackendHealth.all()``."""
    secret = secret_settings(endpoint, gateway.settings)
    settings = [
        {"name": k, "env": isinstance(v, str) and v.startswith("env:"), "secret": k in secret}
        for k, v in endpoint.metadata.items()
        if k not in RESERVED_METADATA_KEYS
    ]
    return {
        "id": endpoint.id,
        "name": endpoint.name,
        "tenant": endpoint.tenant,
        "description": endpoint.description,
        "enabled": endpoint.enabled,
        "handler": handler_path(endpoint.metadata),
        "auth": _auth_mode(endpoint, gateway),
        "cardUrl": f"{base_url}/{endpoint.id}/.well-known/agent-card.json",
        "settings": settings,
        "health": health_json(health.get(endpoint.id) or EndpointHealth()),
        "limits": _endpoint_limits(endpoint),
        "endpointsFile": bool(
            endpoint.metadata.get(FROM_FILE)
        ),  # a change here lasts until the file is applied
        "createdAt": endpoint.created_at.isoformat(),
        "updatedAt": endpoint.updated_at.isoformat(),
    }


def _endpoint_limits(endpoint: Endpoint) -> dict[str, Any]:
    """The row's quota limits as stored (a malformed value shows as none: the endpoint's
    check names it)."""
    limits = endpoint.metadata.get("limits")
    return dict(limits) if isinstance(limits, dict) else {}


def _auth_mode(endpoint: Endpoint, gateway: Gateway) -> dict[str, Any]:
    try:
        auth = runtime_auth(endpoint, gateway.settings, resolve_env=False)
    except EndpointMisconfiguredError as exc:
        return {"problem": exc.message}
    return {
        "anonymous": auth.anonymous,
        "apiKey": auth.api_key_header is not None,
        "jwtIssuer": auth.jwt.issuer if auth.jwt else None,
        "trustedProxy": auth.trusted_header is not None,
    }


async def list_endpoints(request: web.Request) -> web.Response:
    operator_of(request)
    gateway = request.app[GATEWAY]
    base = gateway.base_url(request)
    endpoints, health = (
        await gateway.store.list_endpoints(),
        await gateway.engine.services.health.all(),
    )
    return _json({"endpoints": [endpoint_json(e, gateway, base, health) for e in endpoints]})


async def get_endpoint(request: web.Request) -> web.Response:
    operator_of(request)
    gateway = request.app[GATEWAY]
    endpoint = await _endpoint(gateway, request.match_info["endpoint_id"])
    health = await gateway.engine.services.health.all()
    return _json(endpoint_json(endpoint, gateway, gateway.base_url(request), health))


async def create_endpoint(request: web.Request) -> web.Response:
    """The body of an endpoints-file entry (``id`` optional); refused with the problems that
    ``a2a-gateway endpoints add`` would print."""
    operator = operator_of(request)
    gateway = request.app[GATEWAY]
    base = gateway.base_url(request)  # before the change: a Host it refuses changes nothing
    body = await _body(request)
    body.setdefault("id", str(uuid.uuid4()))
    try:
        entry = Entry.model_validate(body)
        endpoint = endpoint_row(
            str(entry.id),
            entry.name,
            entry.handler,
            tenant=entry.tenant,
            description=entry.description,
            enabled=entry.enabled,
            card=entry.card,
            settings=entry.settings,
            **{key: getattr(entry, key) for key in GATEWAY_KEYS},
        )
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()]
        return _json({"error": "invalid endpoint", "problems": problems}, status=400)
    except ValueError as exc:
        return _json({"error": "invalid endpoint", "problems": [f"handler {exc}"]}, status=400)
    check = check_endpoint(endpoint, gateway.settings)
    if check.problems:
        return _json(
            {"error": "endpoint not added", "problems": check.problems, "notes": check.notes},
            status=400,
        )
    try:
        await gateway.store.create_endpoint(endpoint)
    except ConflictError:
        raise web.HTTPConflict(reason=f"endpoint {endpoint.id} exists") from None
    log.info("admin_endpoint_created", endpoint_id=endpoint.id, by=operator.name)
    await record_change(
        request, operator, "endpoint.added", endpoint.id, after=endpoint_fields(endpoint),
        secret_fields=secret_settings(endpoint, gateway.settings),
    )
    return _json({"endpoint": endpoint_json(endpoint, gateway, base, {}), "notes": check.notes},
                 status=201)


def set_enabled(enabled: bool) -> View:
    async def change(request: web.Request) -> web.Response:
        """Disabling takes ``{"cancelRunning": true}``: the kill switch, which also cancels
        the endpoint's running tasks on every replica."""
        operator = operator_of(request)
        gateway = request.app[GATEWAY]
        base = gateway.base_url(request)  # before the change, as in create_endpoint
        endpoint = await _endpoint(gateway, request.match_info["endpoint_id"])
        cancel_running = not enabled and await _cancel_running(request)
        # the runtime before the change: its handler stops the runs the kill switch cancels
        runtime = await _runtime(gateway, endpoint.id) if cancel_running else None
        canceled: list[str] = []
        before = endpoint.enabled
        if endpoint.enabled != enabled:
            endpoint.enabled = enabled
            endpoint.updated_at = datetime.now(UTC)
            await gateway.store.update_endpoint(endpoint)
            gateway.registry.forget(endpoint.id)  # at once here
            await gateway.hub.announce_endpoint_change(endpoint.id)  # and on the other replicas
            log.info("admin_endpoint_enabled" if enabled else "admin_endpoint_disabled",
                     endpoint_id=endpoint.id, by=operator.name)
        if runtime is not None:
            reason = operator_reason(actor_of(request, operator), "endpoint disabled")
            canceled = await gateway.engine.cancel_running(runtime, reason)
        if before != enabled or cancel_running:
            await record_change(
                request, operator, "endpoint.enabled" if enabled else "endpoint.disabled",
                endpoint.id, before={"enabled": before}, after={"enabled": enabled},
                details={"canceledTasks": canceled} if cancel_running else None,
            )
        health = await gateway.engine.services.health.all()
        body = endpoint_json(endpoint, gateway, base, health)
        return _json({**body, "canceledTasks": canceled} if cancel_running else body)

    return change


async def delete_endpoint(request: web.Request) -> web.Response:
    """Remove a disabled endpoint's row (409 while it is enabled: disable it first, with
    ``cancelRunning`` to end its running tasks). Its keys and stored tasks stay, unreachable;
    a row of the endpoints file comes back when the file is applied again."""
    operator = operator_of(request)
    gateway = request.app[GATEWAY]
    endpoint = await _endpoint(gateway, request.match_info["endpoint_id"])
    if endpoint.enabled:
        raise web.HTTPConflict(
            reason="the endpoint is enabled: disable it first (cancelRunning ends its tasks)"
        )
    if await gateway.store.delete_endpoint(endpoint.id):
        gateway.registry.forget(endpoint.id)
        await gateway.hub.announce_endpoint_change(endpoint.id)
        log.info("admin_endpoint_deleted", endpoint_id=endpoint.id, by=operator.name)
        await record_change(
            request, operator, "endpoint.deleted", endpoint.id, before=endpoint_fields(endpoint),
            secret_fields=secret_settings(endpoint, gateway.settings),
        )
    return _json({"deleted": endpoint.id})


async def _cancel_running(request: web.Request) -> bool:
    """The body's ``cancelRunning`` (default false)."""
    cancel = (await _body(request)).get("cancelRunning", False)
    if not isinstance(cancel, bool):
        raise web.HTTPBadRequest(reason="cancelRunning must be true or false")
    return cancel


# keys -----------------------------------------------------------------------------------


def key_json(row: ApiKey) -> dict[str, Any]:
    """A key row without its hash."""
    now = datetime.now(UTC)
    state = ("revoked" if row.revoked_at is not None
             else "expired" if row.expires_at is not None and row.expires_at <= now else "active")
    return {
        "id": row.id,
        "endpointId": row.endpoint_id,
        "tenant": row.tenant,
        "principal": row.principal,
        "name": row.name,
        "state": state,
        "createdAt": row.created_at.isoformat(),
        "expiresAt": row.expires_at.isoformat() if row.expires_at else None,
        "revokedAt": row.revoked_at.isoformat() if row.revoked_at else None,
        "limits": dict(row.limits),
    }


async def list_keys(request: web.Request) -> web.Response:
    operator_of(request)
    gateway = request.app[GATEWAY]
    endpoint = await _endpoint(gateway, request.match_info["endpoint_id"])
    return _json(
        {"keys": [key_json(row) for row in await gateway.store.list_api_keys(endpoint.id)]}
    )


async def create_key(request: web.Request) -> web.Response:
    """``{"principal"?, "name"?, "expiresDays"?, "limits"?}``; the answer holds the key, once."""
    operator = operator_of(request)
    gateway = request.app[GATEWAY]
    endpoint = await _endpoint(gateway, request.match_info["endpoint_id"])
    body = await _body(request)
    principal, name, expires = (
        body.get("principal") or None,
        body.get("name") or "",
        body.get("expiresDays"),
    )
    if principal is not None and not (isinstance(principal, str) and 0 < len(principal) <= 256):
        raise web.HTTPBadRequest(reason="principal must be a string of 1 to 256 characters")
    if not (isinstance(name, str) and len(name) <= 256):
        raise web.HTTPBadRequest(reason="name must be a string of at most 256 characters")
    if expires is not None and (
        isinstance(expires, bool) or not isinstance(expires, int | float) or expires <= 0
    ):
        raise web.HTTPBadRequest(reason="expiresDays must be a positive number of days")
    limits = _limits(body.get("limits"))
    try:
        row, key = make_key(
            gateway.settings.api_key_secret.get_secret_value().encode(),
            endpoint_id=endpoint.id,
            tenant=endpoint.tenant,
            principal=principal,
            name=name,
            expires_days=expires,
        )
    except OverflowError:  # past the year 9999
        raise web.HTTPBadRequest(
            reason="expiresDays is beyond the last date the gateway can write"
        ) from None
    row.limits = limits
    await gateway.store.create_api_key(row)
    log.info(
        "admin_key_created",
        endpoint_id=endpoint.id,
        key_id=row.id,
        principal=row.principal,
        by=operator.name,
    )
    await record_change(request, operator, "key.created", row.id, after=key_json(row))
    return _json({"key": key, **key_json(row)}, status=201)


async def _endpoint_key(request: web.Request, gateway: Gateway) -> tuple[Endpoint, ApiKey]:
    """The endpoint and key the path names; 404 unless the key is that endpoint's."""
    endpoint = await _endpoint(gateway, request.match_info["endpoint_id"])
    key_id = request.match_info["key_id"]
    row = await gateway.store.get_api_key(key_id)
    if row is None or row.endpoint_id != endpoint.id:
        raise web.HTTPNotFound(reason=f"no key {_shown(key_id)} of this endpoint")
    return endpoint, row


async def revoke_key(request: web.Request) -> web.Response:
    operator = operator_of(request)
    gateway = request.app[GATEWAY]
    endpoint, row = await _endpoint_key(request, gateway)
    key_id = row.id
    cancel_running = await _cancel_running(request)
    await gateway.store.revoke_api_key(key_id, datetime.now(UTC))
    log.info("admin_key_revoked", endpoint_id=endpoint.id, key_id=key_id, by=operator.name)
    canceled: list[str] = []
    if cancel_running:  # the tasks of the key's principal: keys sharing it share this
        reason = operator_reason(actor_of(request, operator), "API key revoked")
        runtime = await _runtime(gateway, endpoint.id)
        canceled = await gateway.engine.cancel_running(
            runtime, reason, principal=Scope(row.tenant, endpoint.id, row.principal)
        )
    revoked = await gateway.store.get_api_key(key_id) or row
    await record_change(
        request, operator, "key.revoked", key_id, before=key_json(row), after=key_json(revoked),
        details={"canceledTasks": canceled} if cancel_running else None,
    )
    body = key_json(revoked)
    return _json({**body, "canceledTasks": canceled} if cancel_running else body)


def _limits(value: Any) -> dict[str, int | float]:
    """A key's limits from a request body (``governance.limits``); 400 naming the field."""
    try:
        return parse_limits(value).set()
    except LimitsError as exc:
        raise web.HTTPBadRequest(reason=str(exc)) from None


async def set_key_limits(request: web.Request) -> web.Response:
    """``{"limits": {NAME: VALUE, …}}`` replaces the key's limits (``{}`` clears them);
    running gateways apply them within ``api_key_cache_seconds``."""
    operator = operator_of(request)
    gateway = request.app[GATEWAY]
    endpoint, row = await _endpoint_key(request, gateway)
    key_id = row.id
    body = await _body(request)
    if "limits" not in body:
        raise web.HTTPBadRequest(reason="limits: required (an object of limit names to numbers)")
    limits = _limits(body["limits"])
    await gateway.store.set_api_key_limits(key_id, limits)
    changed = await gateway.store.get_api_key(key_id) or row
    log.info("admin_key_limited", endpoint_id=endpoint.id, key_id=key_id, by=operator.name)
    await record_change(request, operator, "key.limited", key_id, before=key_json(row),
                        after=key_json(changed))
    return _json(key_json(changed))


# tasks ----------------------------------------------------------------------------------


MAX_EXACT_INTEGER = 2**53


def whole_numbers(value: Any) -> Any:
    """``value`` (a message as JSON) with every whole number an integer: a ``Struct`` keeps all
    numbers as doubles, so the counts in metadata (``usage``'s tokens) would read ``3.0``."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) <= MAX_EXACT_INTEGER else value
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


def task_json(message: Any) -> dict[str, Any]:
    """A task or stream event as the admin API shows it (counts as integers)."""
    return whole_numbers(message_to_dict(message))


def task_entry(scope: Scope, task: Any) -> dict[str, Any]:
    return {
        "endpointId": scope.endpoint_id,
        "tenant": scope.tenant,
        "principal": scope.principal,
        "taskId": task.id,
        "contextId": task.context_id,
        "state": state_name(task.status.state),
        "timestamp": task.status.timestamp.ToJsonString()
        if task.status.HasField("timestamp")
        else "",
    }


async def list_tasks(request: web.Request) -> web.Response:
    """Recent tasks of every state and caller, newest status first, a page at a time:
    ``endpoint`` (ids, repeated or comma-separated; default: every endpoint), ``state``
    (repeated or comma-separated), ``context``, ``page_size`` (1 to
    ``admin_tasks_max_page_size``, default 50 or that) and ``page_token`` (a page's
    ``nextPageToken``)."""
    operator_of(request)
    gateway = request.app[GATEWAY]
    wanted = _task_list_query(request, gateway)
    known = {e.id for e in await gateway.store.list_endpoints()}
    unknown = sorted(wanted.endpoints - known)
    if unknown:
        raise web.HTTPBadRequest(reason=f"endpoint: no endpoint {_shown(unknown[0])}")
    pages = [
        await gateway.store.list_endpoint_tasks(
            endpoint_id,
            states=wanted.states,
            context_id=wanted.context,
            page_size=wanted.page_size,
            page_token=wanted.page_token,
        )
        for endpoint_id in sorted(wanted.endpoints or known)
    ]
    shown, next_cursor = _merged(pages, wanted.page_size, wanted.token_key)
    token = encode_page_token(*next_cursor, key=wanted.token_key) if next_cursor else ""
    return _json({"tasks": [task_entry(s, t) for s, t in shown], "nextPageToken": token})


@dataclass(frozen=True, slots=True)
class TaskListQuery:
    endpoints: frozenset[str]
    states: frozenset[int]
    context: str
    page_size: int
    page_token: str
    token_key: bytes


def _task_list_query(request: web.Request, gateway: Gateway) -> TaskListQuery:
    """The task list's parameters, 400 for a bad one (``endpointId``/``contextId``: the
    feed's names)."""
    query = request.query
    filters = feed_filter(query)  # state
    endpoints = {
        e.strip()
        for name in ("endpoint", "endpointId")
        for value in query.getall(name, [])
        for e in value.split(",")
        if e.strip()
    }
    context = query.get("context", "") or filters.context_id
    if len(context) > MAX_CONTEXT_ID:
        raise web.HTTPBadRequest(reason=f"context is longer than {MAX_CONTEXT_ID} characters")
    size = page_size(query, gateway.settings.admin_tasks_max_page_size)
    key = gateway.settings.page_token_key.get_secret_value().encode()
    return TaskListQuery(frozenset(endpoints), filters.states, context, size,
                         page_token(query, key), key)


def _merged(
    pages: list[EndpointTaskPage], page_size: int, key: bytes
) -> tuple[list[tuple[Scope, Task]], tuple[int, str] | None]:
    """One page from the endpoints' pages, and the cursor it ends at (None: the last page).

    An endpoint whose page has a next token is known only down to that cursor: tasks below
    the highest such cursor wait for the next page, so none is skipped or shown twice."""
    bound = max(
        (decode_page_token(p.next_page_token, key=key) for p in pages if p.next_page_token),
        default=None,
    )
    tasks = sorted((task for page in pages for task in page.tasks), key=_cursor, reverse=True)
    known = [task for task in tasks if bound is None or _cursor(task) >= bound]
    shown = known[:page_size]
    return shown, _cursor(shown[-1]) if len(known) > page_size else bound


def _cursor(found: tuple[Scope, Task]) -> tuple[int, str]:
    return status_timestamp_us(found[1]), found[1].id


async def _task_scope(request: web.Request, gateway: Gateway) -> Scope:
    endpoint = await _endpoint(gateway, request.match_info["endpoint_id"])
    principal = request.query.get("principal", "")
    if not principal:
        raise web.HTTPBadRequest(
            reason="principal is required (the task list and the feed show it)"
        )
    return Scope(request.query.get("tenant") or endpoint.tenant, endpoint.id, principal)


async def get_task(request: web.Request) -> web.Response:
    """The whole task (history, artifacts) of ``?principal=`` (``&tenant=``)."""
    operator_of(request)
    gateway = request.app[GATEWAY]
    scope = await _task_scope(request, gateway)
    stored = await gateway.store.get_task(scope, request.match_info["task_id"])
    if stored is None:
        raise web.HTTPNotFound(reason="no such task")
    return _json({**task_entry(scope, stored.task), "task": task_json(stored.task)})


async def cancel_task(request: web.Request) -> web.Response:
    operator = operator_of(request)
    gateway = request.app[GATEWAY]
    scope = await _task_scope(request, gateway)
    runtime = await _runtime(gateway, scope.endpoint_id)
    try:
        task = await gateway.engine.cancel(runtime, scope, request.match_info["task_id"])
    except TaskNotFoundError:
        raise web.HTTPNotFound(reason="no such task") from None
    except TaskNotCancelableError:
        raise web.HTTPConflict(reason="the task is already in a terminal state") from None
    log.info(
        "admin_task_canceled", endpoint_id=scope.endpoint_id, task_id=task.id, by=operator.name
    )
    await record_change(
        request, operator, "task.canceled", task.id,
        details={"endpointId": scope.endpoint_id, "tenant": scope.tenant,
                 "principal": scope.principal},
    )
    return _json({**task_entry(scope, task), "task": task_json(task)})


async def task_stream(request: web.Request) -> web.StreamResponse:
    """SubscribeToTask for operators: the task, its text so far, then every event as it
    happens (text chunks too), as SSE of A2A ``StreamResponse`` JSON; ``Last-Event-ID`` resumes."""
    operator_of(request)
    gateway = request.app[GATEWAY]
    scope = await _task_scope(request, gateway)
    last_event_id = request.headers.get(LAST_EVENT_ID, "").strip() or None
    events = subscribe_stream(gateway.engine, scope, request.match_info["task_id"], last_event_id)
    try:
        first = await anext(events)
    except TaskNotFoundError:
        raise web.HTTPNotFound(reason="no such task") from None
    except (UnsupportedOperationError, StopAsyncIteration):
        raise web.HTTPConflict(reason="the task is in a terminal state: read it instead") from None
    current = [first[0]]

    async def rest() -> AsyncIterator[tuple[str | None, Any]]:
        async for item in events:
            current[0] = item[0]
            yield item

    stream = await SSEStream.open(request, gateway.settings.sse_keepalive_seconds)
    following = rest()
    try:
        if await stream.send(_stream_frame(first), event_id=first[0]):
            await stream.pump(following, _stream_frame, lambda: current[0])
    finally:
        await following.aclose()
        await events.aclose()
    return await stream.close()


def _stream_frame(item: tuple[str | None, Any]) -> bytes:
    event = item[1]
    field = {
        Task: "task",
        TaskStatusUpdateEvent: "status_update",
        TaskArtifactUpdateEvent: "artifact_update",
    }
    return orjson.dumps(task_json(StreamResponse(**{field.get(type(event), "message"): event})))


async def _runtime(gateway: Gateway, endpoint_id: str) -> EndpointRuntime:
    """The endpoint's runtime, or a handlerless one (a disabled endpoint's tasks can still be
    ended)."""
    try:
        return await gateway.registry.get(endpoint_id)
    except (EndpointNotFoundError, EndpointMisconfiguredError):
        return EndpointRuntime.gone(endpoint_id)


# numbers at a glance -------------------------------------------------------------------


async def stats(request: web.Request) -> web.Response:
    """The last ``stats_window_seconds`` of this replica's metrics, one point every
    ``stats_interval_seconds`` (``a2a_gateway.observability.stats``; docs/console.md);
    ``?scope=fleet``: every replica's that shares the Redis (``observability.fleet_stats``)."""
    operator_of(request)
    scope = request.query.get("scope", "replica")
    if scope not in ("replica", "fleet"):
        raise web.HTTPBadRequest(reason=f"scope must be replica or fleet, not {_shown(scope)}")
    fleet = request.app.get(FLEET_STATS)
    if scope == "fleet" and fleet is not None:
        return _json(await fleet.fleet())
    own = {"replica": request.app[GATEWAY].settings.replica_id, **request.app[STATS].series()}
    if scope == "fleet":  # no Redis: this replica alone
        return _json(fleet_answer([own], available=False))
    return _json({**own, "fleetAvailable": fleet is not None})


def add_admin_routes(app: web.Application) -> None:
    endpoint = f"{PREFIX}/endpoints/{{endpoint_id}}"
    app.router.add_get(f"{PREFIX}/endpoints", list_endpoints)
    app.router.add_post(f"{PREFIX}/endpoints", create_endpoint)
    app.router.add_get(endpoint, get_endpoint)
    app.router.add_delete(endpoint, delete_endpoint)
    app.router.add_post(f"{endpoint}/enable", set_enabled(True))
    app.router.add_post(f"{endpoint}/disable", set_enabled(False))
    app.router.add_get(f"{endpoint}/keys", list_keys)
    app.router.add_post(f"{endpoint}/keys", create_key)
    app.router.add_post(f"{endpoint}/keys/{{key_id}}/revoke", revoke_key)
    app.router.add_put(f"{endpoint}/keys/{{key_id}}/limits", set_key_limits)
    app.router.add_get(f"{PREFIX}/tasks", list_tasks)
    app.router.add_get(f"{endpoint}/tasks/{{task_id}}", get_task)
    app.router.add_post(f"{endpoint}/tasks/{{task_id}}/cancel", cancel_task)
    app.router.add_get(
        f"{endpoint}/tasks/{{task_id}}/stream", task_stream, allow_head=False
    )  # as the feed
    app.router.add_get(f"{PREFIX}/stats", stats)
    app.router.add_get(f"{PREFIX}/audit", audit_route(operator_of))
    app.router.add_get(f"{PREFIX}/usage", usage_route(operator_of))
    app.router.add_get(f"{PREFIX}/handlers", handlers_route(operator_of))
