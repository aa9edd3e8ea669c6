"""The task engine: starts, continues, cancels and recovers task runs.

Runs are ``tasks.run.TaskRun`` objects keyed by task id in this replica. Running
tasks carry this replica's id and a lease that one batch renews; a replica that
finds an expired lease re-attaches the run (when the handler can) or fails the
task with "gateway instance lost". A task owned by another replica is followed
through the store and the hub, and canceled through the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import structlog
from a2a.helpers.proto_helpers import get_message_text
from a2a.types import (
    Message,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
)
from a2a.types.a2a_pb2 import (  # plain ints: the enum wrappers resolve names per access
    ROLE_USER,
    TASK_STATE_CANCELED,
    TASK_STATE_FAILED,
    TASK_STATE_SUBMITTED,
    TASK_STATE_WORKING,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from a2a_gateway.errors import GatewayError
from a2a_gateway.tasks.events import (
    GATEWAY_LOST,
    INTERRUPTED_STATES,
    agent_message,
    copy_task,
    new_id,
    stamp,
    status_event,
    text_chunk,
)
from a2a_gateway.tasks.run import SupersededError, TaskRun, message_data
from a2a_gateway.live.hub import LiveHub, Subscription
from a2a_gateway.metrics import task_ended
from a2a_gateway.registry import EndpointRuntime
from a2a_gateway.stores.base import (
    TERMINAL_STATES,
    ConflictError,
    Context,
    Scope,
    Store,
)
from handlers.base import (
    HandlerRequest,
    InputRejectedError,
    Turn,
)

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class SendOutcome:
    """What ``TaskEngine.send`` started: a local ``run``; or a ``task`` that is already
    the answer; or, with ``follow_version``, a task whose run lives on another replica
    (follow it through the store and the hub from that version on)."""

    run: TaskRun | None = None
    task: Task | None = None
    subscription: Subscription | None = None
    follow_version: int | None = None
    scope: Scope | None = None



class TaskEngine:
    """Starts, continues, cancels and recovers task runs for every endpoint."""

    def __init__(
        self,
        store: Store,
        hub: LiveHub,
        push: Any,
        *,
        replica_id: str,
        lease_seconds: float = 30.0,
        cancel_wait_seconds: float = 10.0,
        max_turns: int = 200,
        max_task_history: int = 1000,
        remote_poll_seconds: float = 1.0,
    ) -> None:
        self.store = store
        self.hub = hub
        self.push = push
        self.replica_id = replica_id
        self.lease_seconds = lease_seconds
        self.cancel_wait_seconds = cancel_wait_seconds
        self.max_turns = max_turns
        self.max_task_history = max_task_history
        self.remote_poll_seconds = remote_poll_seconds
        self.runs: dict[str, TaskRun] = {}
        self._task_locks: dict[str, asyncio.Lock] = {}

    def lease_deadline(self) -> float:
        return time.time() + self.lease_seconds

    @staticmethod
    def remembers_context(runtime: EndpointRuntime) -> bool:
        handler = runtime.handler
        return bool(handler is not None and handler.uses_context)

    @contextlib.asynccontextmanager
    async def _task_lock(self, task_id: str) -> AsyncIterator[None]:
        """Serializes follow-up messages to one task within this replica."""
        lock = self._task_locks.setdefault(task_id, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and not getattr(lock, "_waiters", None):
                self._task_locks.pop(task_id, None)

    async def _context(self, runtime: EndpointRuntime, scope: Scope, context_id: str) -> Context:
        if not self.remembers_context(runtime):
            return Context()
        return await self.store.get_context(scope, context_id) or Context()

    def _request(
        self, runtime: EndpointRuntime, scope: Scope, task: Task, message: Message, context: Context,
        *, streaming: bool, run_ref: str | None = None, pending: dict[str, Any] | None = None,
    ) -> HandlerRequest:
        return HandlerRequest(
            task_id=task.id,
            context_id=task.context_id,
            message=message,
            text=get_message_text(message),
            data=message_data(message),
            history=[Turn(t["role"], t["text"]) for t in context.turns],  # type: ignore[arg-type]
            session=dict(context.session),
            run_ref=run_ref,
            pending_input=pending,
            endpoint_id=scope.endpoint_id,
            tenant=scope.tenant,
            principal=scope.principal,
            streaming=streaming,
            metadata=dict(message.metadata) if message.metadata else {},
        )

    # sending -----------------------------------------------------------------------
    async def send(
        self, runtime: EndpointRuntime, scope: Scope, message: Message, *,
        streaming: bool, subscribe: bool, push_config: Any = None,
    ) -> SendOutcome:
        """Start a task or continue one (see ``SendOutcome``)."""
        handler = runtime.require_handler()
        if message.task_id:
            return await self._continue(runtime, scope, message, streaming=streaming, subscribe=subscribe)
        task = Task(id=new_id(), context_id=message.context_id or new_id())
        message.task_id, message.context_id = task.id, task.context_id
        task.status.state = TASK_STATE_SUBMITTED
        stamp(task.status.timestamp)
        task.history.append(message)
        context = await self._context(runtime, scope, task.context_id)
        request = self._request(runtime, scope, task, message, context, streaming=streaming)
        run = TaskRun(self, runtime, scope, request, task, None, {}, handler.run(request), push_config)
        sub = self.hub.subscribe(task.id) if subscribe else None
        run.start()
        return SendOutcome(run=run, subscription=sub)

    def owned_elsewhere(self, stored: Any) -> bool:
        """True when another replica runs the task and its lease is current."""
        return (
            stored.owner is not None
            and stored.owner != self.replica_id
            and (stored.lease_until or 0) > time.time()
        )

    async def _continue(
        self, runtime: EndpointRuntime, scope: Scope, message: Message, *, streaming: bool, subscribe: bool
    ) -> SendOutcome:
        runtime.require_handler()
        async with self._task_lock(message.task_id):
            stored = await self.store.get_task(scope, message.task_id)
            if stored is None:
                raise TaskNotFoundError(f"Task {message.task_id} not found")
            live = self.runs.get(message.task_id)
            task = live.task if live is not None else stored.task
            state = task.status.state
            if state in TERMINAL_STATES:
                raise UnsupportedOperationError(
                    f"Task {task.id} is in a terminal state and accepts no more messages"
                )
            if message.context_id and message.context_id != task.context_id:
                raise InvalidParamsError("contextId does not match the task's contextId")
            if state not in INTERRUPTED_STATES:
                raise UnsupportedOperationError(
                    f"Task {task.id} is still working; send a message when it asks for input"
                )
            if len(task.history) >= self.max_task_history:
                raise InvalidParamsError(
                    f"Task {task.id} holds {len(task.history)} messages, the max_task_history "
                    "limit: go on in a new task of the same context"
                )
            message.context_id = task.context_id
            context = await self._context(runtime, scope, task.context_id)
            run_state = dict(stored.run_state)
            request = self._request(
                runtime, scope, task, message, context, streaming=streaming,
                run_ref=stored.run_ref, pending=run_state.get("pending_input"),
            )
            sub = self.hub.subscribe(task.id) if subscribe else None
            outcome = SendOutcome()
            try:
                if live is not None:
                    outcome = await self._continue_live(live, request, message, run_state, sub)
                else:
                    outcome = await self._continue_idle(
                        runtime, scope, stored, request, message, run_state, sub
                    )
                return outcome
            finally:
                if sub is not None and outcome.subscription is not sub:
                    sub.close()  # answered at once, or followed elsewhere: not needed

    async def _continue_live(
        self, run: TaskRun, request: HandlerRequest, message: Message,
        run_state: dict[str, Any], sub: Subscription | None,
    ) -> SendOutcome:
        """The handler's iterator is still open here: WORKING first, then the answer goes
        to the handler, and the events that follow arrive on the same run."""
        task = run.task
        prompt_status = TaskStatus()
        prompt_status.CopyFrom(task.status)
        settled = run.begin_turn()
        task.history.append(message)
        task.status.CopyFrom(TaskStatus(state=TASK_STATE_WORKING))
        stamp(task.status.timestamp)
        run.request, run.run_state = request, run_state
        run_state.pop("pending_input", None)
        try:
            await run._write()
        except SupersededError:
            return SendOutcome(task=await self._final_task(run))
        run.initial_task = copy_task(task)
        run._publish_status()
        try:
            continued = await run.runtime.require_handler().resume(request)
        except InputRejectedError as exc:
            if run.finished:
                return SendOutcome(task=copy_task(run.task))
            task.status.CopyFrom(prompt_status)
            run_state["pending_input"] = request.pending_input or {}
            rejected = await self._reject_input(run.scope, task, run.version, exc, run)
            settled.set()
            return SendOutcome(task=rejected)
        if continued:
            return SendOutcome(run=run, subscription=sub)
        await run.stop_driver()  # the handler starts over with a fresh run
        fresh = TaskRun(self, run.runtime, run.scope, request, task, run.version, run_state,
                        run.runtime.require_handler().run(request))
        fresh.start()
        return SendOutcome(run=fresh, subscription=sub)

    async def _continue_idle(
        self, runtime: EndpointRuntime, scope: Scope, stored: Any, request: HandlerRequest,
        message: Message, run_state: dict[str, Any], sub: Subscription | None,
    ) -> SendOutcome:
        """No iterator runs here: the answer goes to the handler, then a fresh run (or a
        re-attached one) carries on, unless another replica owns the run."""
        task, version = stored.task, stored.version
        handler = runtime.require_handler()
        try:
            continued = await handler.resume(request)
        except InputRejectedError as exc:
            task.history.append(message)
            return SendOutcome(task=await self._reject_input(scope, task, version, exc, None))
        if continued and self.owned_elsewhere(stored):
            # the run goes on at its owner, which records what follows
            return SendOutcome(task=copy_task(task), follow_version=version, scope=scope)
        task.history.append(message)
        task.status.CopyFrom(TaskStatus(state=TASK_STATE_WORKING))
        stamp(task.status.timestamp)
        run_state.pop("pending_input", None)
        events = handler.reattach(request) if continued else handler.run(request)
        run = TaskRun(self, runtime, scope, request, task, version, run_state, events)
        try:
            await run._write()
        except SupersededError:
            return SendOutcome(task=await self._final_task(run))
        run._publish_status()
        run.start()
        return SendOutcome(run=run, subscription=sub)

    async def _final_task(self, run: TaskRun) -> Task:
        stored = await self.store.get_task(run.scope, run.task.id)
        return stored.task if stored is not None else copy_task(run.task)

    async def _reject_input(
        self, scope: Scope, task: Task, version: int | None, exc: InputRejectedError, live: TaskRun | None,
    ) -> Task:
        """Keep the task waiting for input, with a status message saying why the answer
        was not accepted (e.g. the valid choices)."""
        prompt = agent_message(task, exc.prompt, exc.data)
        task.status.message.CopyFrom(prompt)
        stamp(task.status.timestamp)
        task.history.append(prompt)
        if live is not None:
            await live._write()
            live._publish_status()
        else:
            await self.store.update_task(scope, task, expected_version=version or 0)
        return copy_task(task)

    # cancel ---------------------------------------------------------------------------
    async def cancel(self, runtime: EndpointRuntime, scope: Scope, task_id: str) -> Task:
        stored = await self.store.get_task(scope, task_id)
        if stored is None:
            raise TaskNotFoundError(f"Task {task_id} not found")
        if stored.task.status.state in TERMINAL_STATES:
            raise TaskNotCancelableError(f"Task {task_id} is already in a terminal state")
        run = self.runs.get(task_id)
        handler = runtime.require_handler()
        if run is not None:
            await self._cancel_run(run, handler)
        else:
            # idle, or running on another replica: that owner notices the terminal
            # state (hub message or its next lease check) and stops its run
            await self._cancel_idle(runtime, scope, stored, handler)
            if stored.owner and stored.owner != self.replica_id:
                await self.hub.send_control(stored.owner, "cancel", task_id)
        final = await self.store.get_task(scope, task_id)
        return final.task if final else stored.task

    async def _cancel_run(self, run: TaskRun, handler: Any) -> None:
        try:
            waits = await handler.cancel(run.request_for_cancel())
        except Exception:
            log.exception("handler_cancel_failed", task_id=run.task.id)
            waits = False
        if waits:
            await run.wait_done(self.cancel_wait_seconds)
        await run.stop_driver()
        if not run.finished:
            await run._finish(TASK_STATE_CANCELED, "canceled")
            self.hub.end(run.task.id)

    async def _cancel_idle(self, runtime: EndpointRuntime, scope: Scope, stored: Any, handler: Any) -> None:
        task = stored.task
        if stored.run_ref:
            request = HandlerRequest(
                task_id=task.id, context_id=task.context_id, message=Message(), text="",
                run_ref=stored.run_ref, endpoint_id=scope.endpoint_id, tenant=scope.tenant,
            )
            with contextlib.suppress(Exception):
                await handler.cancel(request)
        status = TaskStatus(state=TASK_STATE_CANCELED)
        stamp(status.timestamp)
        for _ in range(5):
            task.status.CopyFrom(status)
            task.status.message.CopyFrom(agent_message(task, "canceled"))
            try:
                await self.store.update_task(scope, task, expected_version=stored.version)
                break
            except ConflictError:
                stored = await self.store.get_task(scope, task.id)
                if stored is None or stored.task.status.state in TERMINAL_STATES:
                    return
                task = stored.task
        task_ended(TASK_STATE_CANCELED)
        self.hub.publish(task.id, status_event(task))
        self.hub.end(task.id)
        await self.push.notify(runtime, scope, task)

    def text_so_far(self, task_id: str) -> TaskArtifactUpdateEvent | None:
        """The response text a local run streamed so far, as one chunk (for a late listener)."""
        run = self.runs.get(task_id)
        if run is None or run.finished or not run.artifact_id or not run.text_so_far:
            return None
        return text_chunk(run.task, run.artifact_id, run.text_so_far, append=False)

    # ownership -----------------------------------------------------------------------
    async def renew_leases(self) -> None:
        ids = [tid for tid, run in self.runs.items() if run.version is not None]
        if ids:
            await self.store.renew_leases(self.replica_id, ids, self.lease_deadline())

    async def check_superseded(self) -> None:
        """Stop local runs whose task another replica ended (e.g. canceled there)."""
        for task_id, run in list(self.runs.items()):
            if run.version is None or run.finished:
                continue
            stored = await self.store.get_task(run.scope, task_id)
            if stored is not None and stored.task.status.state in TERMINAL_STATES:
                await self.stop_superseded(run, stored.task)

    async def stop_superseded(self, run: TaskRun, final: Task) -> None:
        run.finished = True
        handler = run.runtime.handler
        if handler is not None and final.status.state == TASK_STATE_CANCELED:
            with contextlib.suppress(Exception):
                await handler.cancel(run.request_for_cancel())
        self.hub.publish(final.id, status_event(final))  # before the driver stops, which ends the hub
        await run.stop_driver()
        self.hub.end(final.id)
        log.info("task_superseded", task_id=final.id, state=TaskState.Name(final.status.state))

    async def handle_control(self, command: str, task_id: str) -> None:
        """A command from another replica about a task this replica may run."""
        run = self.runs.get(task_id)
        if run is None:
            return
        if command == "cancel":
            stored = await self.store.get_task(run.scope, task_id)
            if stored is not None and stored.task.status.state in TERMINAL_STATES:
                await self.stop_superseded(run, stored.task)

    async def recover_expired(self, registry: Any) -> None:
        """Take over tasks whose owner stopped renewing its lease: re-attach to the backend
        run where the handler can, otherwise fail them with "gateway instance lost"."""
        claimed = await self.store.claim_expired_tasks(self.replica_id, time.time(), self.lease_deadline())
        for item in claimed:
            try:
                await self._recover(item.scope, item.stored, registry)
            except Exception:
                log.exception("task_recovery_failed", task_id=item.stored.task.id)

    async def _recover(self, scope: Scope, stored: Any, registry: Any) -> None:
        task = stored.task
        try:
            runtime = await registry.get(scope.endpoint_id)
        except GatewayError:
            runtime = None
        handler = runtime.handler if runtime is not None else None
        if handler is not None and handler.supports_reattach and stored.run_ref:
            users = [m for m in task.history if m.role == ROLE_USER]
            message = users[-1] if users else Message()
            request = self._request(
                runtime, scope, task, message, await self._context(runtime, scope, task.context_id),
                streaming=False, run_ref=stored.run_ref, pending=stored.run_state.get("pending_input"),
            )
            run = TaskRun(self, runtime, scope, request, task, stored.version, dict(stored.run_state),
                          handler.reattach(request))
            run.start()
            log.info("task_reattached", task_id=task.id)
            return
        status = TaskStatus(state=TASK_STATE_FAILED)
        stamp(status.timestamp)
        task.status.CopyFrom(status)
        task.status.message.CopyFrom(agent_message(task, GATEWAY_LOST))
        await self.store.update_task(scope, task, expected_version=stored.version)
        task_ended(TASK_STATE_FAILED)
        self.hub.publish(task.id, status_event(task))
        self.hub.end(task.id)
        log.warning("task_failed_gateway_lost", task_id=task.id)
        if runtime is not None:
            await self.push.notify(runtime, scope, task)

    async def aclose(self) -> None:
        """Stop driving runs and end their leases now, so another replica (or this one,
        restarted) takes them over at once instead of after the lease time."""
        owned = [task_id for task_id, run in self.runs.items() if run.version is not None]
        for run in list(self.runs.values()):
            await run.stop_driver()
        if owned:
            try:
                await self.store.renew_leases(self.replica_id, owned, time.time())
            except Exception:
                log.warning("lease_release_failed", tasks=len(owned))

