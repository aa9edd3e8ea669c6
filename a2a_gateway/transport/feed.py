"""``GET /{endpoint_id}/events``: the endpoint event feed as Server-Sent Events, for the
endpoint's operators (``auth.operators``); ``GET /events``: every endpoint's, for gateway
operators (optionally narrowed with ``endpointId``, repeated or comma-separated).

A client starts from a snapshot — one ``snapshot`` event listing the endpoint's
non-terminal tasks, read from the store after subscribing, so nothing between the two is
missed — then gets every lifecycle event as it happens (``live.feed``). A client that
reconnects with ``Last-Event-ID`` gets exactly the events it missed when this replica's log
still holds them, otherwise a fresh snapshot. Optional filters: ``state`` (repeated or
comma-separated, e.g. ``input-required`` or ``TASK_STATE_INPUT_REQUIRED``) and
``contextId``. The wire format is in docs/streams.md, "Endpoint event feed".
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from a2a.types import TaskState
from aiohttp import web
from multidict import MultiMapping

from a2a_gateway.live.feed import (
    EVERY_ENDPOINT,
    FeedFilter,
    FeedOverflowError,
    FeedSubscription,
    snapshot_event,
)
from a2a_gateway.state import GATEWAY, Gateway
from a2a_gateway.stores.base import status_timestamp_us
from a2a_gateway.tasks.streams import LAST_EVENT_ID
from a2a_gateway.transport.sse import SSEStream

MAX_CONTEXT_ID = 256


async def endpoint_events(request: web.Request) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    runtime = await gateway.registry.get(request.match_info["endpoint_id"])
    await gateway.operators.endpoint_operator(request.headers, runtime.auth_view)
    return await _feed(request, gateway, runtime.endpoint.id, feed_filter(request.query))


async def gateway_events(request: web.Request) -> web.StreamResponse:
    gateway = request.app[GATEWAY]
    gateway.operators.require_gateway_operator(request.headers)
    wanted = feed_filter(request.query)
    endpoints = {
        e for given in request.query.getall("endpointId", []) for e in given.split(",") if e.strip()
    }
    wanted = FeedFilter(wanted.states, wanted.context_id, frozenset(e.strip() for e in endpoints))
    return await _feed(request, gateway, EVERY_ENDPOINT, wanted)


async def _feed(
    request: web.Request, gateway: Gateway, key: str, wanted: FeedFilter
) -> web.StreamResponse:
    last_event_id = request.headers.get(LAST_EVENT_ID, "").strip()
    sub = gateway.hub.feed.resume(key, last_event_id, wanted) if last_event_id else None
    snapshot: bytes | None = None
    if sub is None:
        sub = gateway.hub.feed.subscribe(key, wanted)  # before the read: nothing is missed
        try:
            await gateway.hub.feed.watching(key)  # every replica sends its events, then the read
            snapshot = await _snapshot(gateway, key, wanted)
        except BaseException:
            sub.close()
            raise
    return await _stream(request, gateway, sub, snapshot)


async def _snapshot(gateway: Gateway, key: str, wanted: FeedFilter) -> bytes:
    """The non-terminal tasks of the endpoint (or of every enabled one) that ``wanted`` wants."""
    limit = gateway.settings.event_feed_snapshot_max_tasks
    if key != EVERY_ENDPOINT:
        endpoints = [key]
    else:
        endpoints = [e.id for e in await gateway.store.list_endpoints()
                     if e.enabled and (not wanted.endpoints or e.id in wanted.endpoints)]
    tasks = [
        found
        for endpoint_id in endpoints
        for found in await gateway.store.list_active_tasks(endpoint_id, limit + 1)
    ]
    tasks.sort(key=lambda found: (status_timestamp_us(found[1]), found[1].id), reverse=True)
    shown = [(scope, task) for scope, task in tasks[:limit]
             if wanted.matches(task.context_id, task.status.state, scope.endpoint_id)]
    return snapshot_event(key, shown, truncated=len(tasks) > limit)


async def _stream(
    request: web.Request, gateway: Gateway, sub: FeedSubscription, snapshot: bytes | None
) -> web.StreamResponse:
    current = [sub.position]

    async def events() -> AsyncIterator[bytes]:
        async for event_id, event in sub:
            current[0] = event_id  # the id pump asks for right after this event
            yield event.data

    try:
        stream = await SSEStream.open(request, gateway.settings.sse_keepalive_seconds)
    except BaseException:
        sub.close()
        raise
    items = events()
    try:
        if snapshot is None or await stream.send(snapshot, event_id=sub.position):
            await stream.pump(items, lambda data: data, lambda: current[0])
    except FeedOverflowError as exc:
        body = {
            "kind": "error",
            "reason": "behind",
            "message": f"{exc}; reconnect with Last-Event-ID",
        }
        await stream.send(orjson.dumps(body), event="error")
    finally:
        await items.aclose()
        sub.close()
    return await stream.close()


def feed_filter(query: MultiMapping[str]) -> FeedFilter:
    """The ``state`` and ``contextId`` filters of a feed request (400 for a bad one)."""
    states = set()
    for given in query.getall("state", []):
        for name in filter(None, (part.strip() for part in given.split(","))):
            states.add(_state(name))
    context_id = query.get("contextId", "")
    if len(context_id) > MAX_CONTEXT_ID:
        raise web.HTTPBadRequest(reason=f"contextId is longer than {MAX_CONTEXT_ID} characters")
    return FeedFilter(frozenset(states), context_id)


def _state(name: str) -> int:
    upper = name.upper().replace("-", "_")
    full = upper if upper.startswith("TASK_STATE_") else f"TASK_STATE_{upper}"
    if full == "TASK_STATE_UNSPECIFIED" or full not in TaskState.keys():
        shown = name if len(name) <= 40 else f"{name[:40]}…"
        raise web.HTTPBadRequest(
            reason=f"unknown state {shown!r} (e.g. working, input-required, completed)"
        )
    return TaskState.Value(full)
