"""The kill switch's store-side end of a task: for a process with no task engine (the CLI) or a
task whose endpoint has no handler left here. ``cancel_in_store`` is the one writer of a task
besides its run (``TaskRun._write``).

The task is written CANCELED with the operator's reason and its usage record (tokens the backend
had not reported yet are unknown here: none are counted), conditionally on the version read, as
the ownership module writes a task no run of this replica drives. The replica running it sees
the terminal state — at once when told (a cancel control message over PostgreSQL NOTIFY, or a
change of the endpoint announced after the kill: ``TaskEngine.endpoint_changed``), otherwise at
its next lease check (``lease_seconds / 3``) — and stops its run with the handler's cancel, which
stops the backend run. The task's webhooks get its end through the push outbox: queued unclaimed
and due at once, so a serving replica's outbox loop sends it (within ``push_poll_seconds``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
from a2a.types import StreamResponse, Task
from a2a.types.a2a_pb2 import (  # plain ints
    TASK_STATE_AUTH_REQUIRED,
    TASK_STATE_CANCELED,
    TASK_STATE_INPUT_REQUIRED,
    TASK_STATE_SUBMITTED,
    TASK_STATE_WORKING,
)

from a2a_gateway.events import agent_message, new_id, new_status, status_event
from a2a_gateway.governance.usage import ending_now
from a2a_gateway.protojson import message_to_dict
from a2a_gateway.stores.base import (
    TERMINAL_STATES,
    ConflictError,
    PushDelivery,
    Scope,
    Store,
    StoredTask,
)

RUNNING_STATES = frozenset({TASK_STATE_SUBMITTED, TASK_STATE_WORKING, TASK_STATE_INPUT_REQUIRED,
                            TASK_STATE_AUTH_REQUIRED})
"""The states of a task that has not ended."""
PAGE_SIZE = 200
"""Tasks read at a time when the kill switch looks for running ones."""
WRITE_ATTEMPTS = 5
"""The run may write the task meanwhile (a status, its lease): read again and retry."""


def operator_reason(actor: str, what: str) -> str:
    """The status message of a task the kill switch ended, e.g. ``canceled by operator
    os:alice: endpoint disabled``."""
    return f"canceled by operator {actor}: {what}"


async def cancel_in_store(
    store: Store, scope: Scope, stored: StoredTask, reason: str,
    endpoint_metadata: Mapping[str, Any] | None = None,
) -> Task | None:
    """End the task CANCELED with ``reason`` unless it ended already, with its usage record
    (priced by ``endpoint_metadata``'s ``cost``, if given); the task as written, or None if it
    was terminal (or gone) before this write could land."""
    for _ in range(WRITE_ATTEMPTS):
        if stored.task.status.state in TERMINAL_STATES:
            return None
        task = Task()
        task.CopyFrom(stored.task)
        task.status.CopyFrom(new_status(TASK_STATE_CANCELED, agent_message(task, reason)))
        usage = ending_now(task, stored.run_state, (0, 0), endpoint_metadata or {})
        try:
            await store.update_task(scope, task, expected_version=stored.version, usage=usage)
        except ConflictError:
            reread = await store.get_task(scope, task.id)
            if reread is None:
                return None
            stored = reread
            continue
        await _queue_push(store, scope, task)
        return task
    return None


async def _queue_push(store: Store, scope: Scope, task: Task) -> None:
    """The task's end for each of its webhooks, in the outbox for any replica to send."""
    configs = await store.list_push_configs(scope, task.id)
    if configs:
        body = orjson.dumps(message_to_dict(StreamResponse(status_update=status_event(task))))
        await store.add_push_deliveries([
            PushDelivery(new_id(), scope, task.id, config.id, body, due_at=time.time())
            for config in configs
        ])


async def running_tasks(
    store: Store, endpoint_id: str, principal: Scope | None = None
) -> AsyncIterator[tuple[Scope, Task]]:
    """Every non-terminal task of the endpoint (of ``principal``'s tenant and principal only, if
    given), newest first, a page at a time: the caller may end each as it goes (an ended task
    leaves the filter, and the pages go on below it)."""
    token = ""
    while True:
        page = await store.list_endpoint_tasks(
            endpoint_id, states=RUNNING_STATES, page_size=PAGE_SIZE, page_token=token
        )
        for scope, task in page.tasks:
            if principal is None or (scope.tenant, scope.principal) == (
                principal.tenant, principal.principal
            ):
                yield scope, task
        if not page.next_page_token:
            return
        token = page.next_page_token


async def cancel_running_in_store(
    store: Store, endpoint_id: str, reason: str, *, principal: Scope | None = None,
) -> list[tuple[Scope, StoredTask]]:
    """``cancel_in_store`` for every non-terminal task of the endpoint (of ``principal``'s
    tenant and principal only, if given); the tasks ended, each as it was before (its
    ``owner`` is the replica to tell)."""
    endpoint = await store.get_endpoint(endpoint_id)
    metadata = endpoint.metadata if endpoint is not None else {}
    ended: list[tuple[Scope, StoredTask]] = []
    async for scope, task in running_tasks(store, endpoint_id, principal):
        stored = await store.get_task(scope, task.id)
        if stored is not None and await cancel_in_store(store, scope, stored, reason, metadata):
            ended.append((scope, stored))
    return ended
