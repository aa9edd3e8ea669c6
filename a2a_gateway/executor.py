"""The task engine: drives a handler's events for a task and maps them to A2A states.

Each handler event is applied to the task in memory, then split in two paths:

* the live path — text deltas, progress notes and every state change are
  published on the ``LiveHub`` to the task's SSE clients; deltas stop there;
* the durable path — the task is written to the store only when its state
  changes (created/WORKING, INPUT_REQUIRED, terminal), so a reply of a thousand
  tokens costs a handful of writes. The final artifact replaces the streamed
  chunks (same artifact id, ``append: false``, ``lastChunk: true``), so what a
  streaming client reconstructs equals what the store holds.

A run belongs to the engine, not to any request: closing a client stream never
cancels it. Running tasks carry this replica's id and a lease that one batch
renews; a replica that finds an expired lease re-attaches the run (when the
handler can) or fails the task with "gateway instance lost".
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import structlog
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a_gateway.live import LiveHub, Subscription
from a2a_gateway.registry import EndpointRuntime
from a2a_gateway.stores.base import (
    TERMINAL_STATES,
    ConflictError,
    Context,
    Scope,
    Store,
)
from handlers.base import (
    Canceled,
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    InputRejectedError,
    InputRequired,
    Progress,
    Rejected,
    Reply,
    RunStarted,
    SessionUpdate,
    TextDelta,
    Turn,
)

log = structlog.get_logger(__name__)

INTERRUPTED_STATES = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
GATEWAY_LOST = "gateway instance lost"


def copy_task(task: Task) -> Task:
    out = Task()
    out.CopyFrom(task)
    return out


def agent_message(task: Task, text: str, data: dict[str, Any] | None = None) -> Message:
    msg = Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_AGENT, task_id=task.id, context_id=task.context_id
    )
    msg.parts.append(Part(text=text))
    if data is not None:
        part = Part(media_type="application/json")
        ParseDict(data, part.data)
        msg.parts.append(part)
    return msg


def message_text(message: Message) -> str:
    return "\n".join(p.text for p in message.parts if p.HasField("text"))


def message_data(message: Message) -> list[dict[str, Any]]:
    out = []
    for part in message.parts:
        if part.HasField("data"):
            value = MessageToDict(part.data)
            out.append(value if isinstance(value, dict) else {"value": value})
    return out


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


class SupersededError(Exception):
    """The task changed under this run (e.g. canceled elsewhere): stop driving it."""


class TaskRun:
    """One handler iterator driving one task."""

    def __init__(
        self,
        engine: TaskEngine,
        runtime: EndpointRuntime,
        scope: Scope,
        request: HandlerRequest,
        task: Task,
        version: int | None,
        run_state: dict[str, Any],
        events: AsyncIterator[HandlerEvent],
        push_config: Any = None,
    ) -> None:
        self.engine = engine
        self.runtime = runtime
        self.scope = scope
        self.request = request
        self.task = task
        self.version = version
        self.run_state = run_state
        self.run_ref = request.run_ref
        self.initial_task = copy_task(task)
        self.reply: Message | None = None
        self.created = asyncio.Event()
        self.settled = asyncio.Event()
        self.finished = False
        self.cancel_requested = False
        self._events = events
        self._push_config = push_config
        self._write_lock = asyncio.Lock()
        self._text: list[str] = []
        self._artifact_id: str | None = None
        self._session_updates: dict[str, Any] = {}
        self._driver: asyncio.Task[None] | None = None
        self._iterator_done = False
        if version is not None:
            self.created.set()

    # lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        self.engine.runs[self.task.id] = self
        self._driver = asyncio.create_task(self._drive(), name=f"task-run-{self.task.id}")

    def begin_turn(self) -> asyncio.Event:
        """A new wait for the next terminal or interrupted state."""
        self.settled = asyncio.Event()
        return self.settled

    def request_for_cancel(self) -> HandlerRequest:
        self.request.run_ref = self.run_ref
        return self.request

    @property
    def text_so_far(self) -> str:
        return "".join(self._text)

    @property
    def artifact_id(self) -> str | None:
        return self._artifact_id

    async def wait_done(self, timeout: float | None = None) -> bool:
        if self._driver is None:
            return True
        done, _ = await asyncio.wait({self._driver}, timeout=timeout)
        return bool(done)

    async def stop_driver(self) -> None:
        if self._driver is not None and not self._driver.done():
            self._driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._driver

    async def _drive(self) -> None:
        with structlog.contextvars.bound_contextvars(
            task_id=self.task.id, endpoint_id=self.scope.endpoint_id
        ):
            try:
                async for event in self._events:
                    await self._apply(event)
                    if self.finished:
                        break
                else:
                    await self._exhausted()
            except SupersededError:
                log.info("task_superseded")
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("handler_failed")
                await self._safe_fail("the agent failed unexpectedly")
            finally:
                await self._close_events()
                if self.engine.runs.get(self.task.id) is self:
                    del self.engine.runs[self.task.id]
                if self.finished and self.reply is None:
                    self.engine.hub.end(self.task.id)
                self.created.set()
                self.settled.set()

    async def _close_events(self) -> None:
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()

    async def _exhausted(self) -> None:
        self._iterator_done = True
        if self.finished or self.task.status.state in INTERRUPTED_STATES:
            if self.task.status.state in INTERRUPTED_STATES and self.version is not None:
                await self._write()  # release ownership: nothing runs this task now
            return
        await self._finish(TaskState.TASK_STATE_FAILED, "the agent ended without a result")

    async def _safe_fail(self, reason: str) -> None:
        if self.finished:
            return
        try:
            await self._finish(TaskState.TASK_STATE_FAILED, reason)
        except Exception:
            log.exception("task_fail_write_failed")

    # event mapping -------------------------------------------------------------
    async def _apply(self, event: HandlerEvent) -> None:
        if isinstance(event, Reply):
            await self._on_reply(event)
            return
        if isinstance(event, SessionUpdate):
            self._session_updates.update(event.values)
            return
        if isinstance(event, RunStarted) and self.version is None:
            self.run_ref = event.run_ref
            await self._ensure_created()
            return
        await self._ensure_created()
        if isinstance(event, TextDelta):
            self._on_text(event.text)
        elif isinstance(event, Progress):
            self._on_progress(event)
        elif isinstance(event, RunStarted):
            self.run_ref = event.run_ref
            await self._write()
        elif isinstance(event, InputRequired):
            await self._on_input_required(event)
        elif isinstance(event, Completed):
            await self._on_completed(event)
        elif isinstance(event, Failed):
            await self._finish(TaskState.TASK_STATE_FAILED, event.reason)
        elif isinstance(event, Rejected):
            await self._finish(TaskState.TASK_STATE_REJECTED, event.reason)
        elif isinstance(event, Canceled):
            await self._finish(TaskState.TASK_STATE_CANCELED, event.reason or "canceled")

    async def _ensure_created(self) -> None:
        if self.version is not None:
            return
        self._set_status(TaskState.TASK_STATE_WORKING)
        self.version = await self.engine.store.create_task(
            self.scope,
            self.task,
            run_ref=self.run_ref,
            run_state=self.run_state,
            owner=self.engine.replica_id,
            lease_until=self.engine.lease_deadline(),
        )
        self.created.set()
        if self._push_config is not None:
            await self.engine.push.save_inline_config(self.scope, self.task.id, self._push_config)
        self._publish_status()
        await self.engine.push.notify(self.runtime, self.scope, self.task)

    def _on_text(self, text: str) -> None:
        if not text:
            return
        first = self._artifact_id is None
        if first:
            self._artifact_id = str(uuid.uuid4())
        self._text.append(text)
        artifact = Artifact(artifact_id=self._artifact_id, name="response")
        artifact.parts.append(Part(text=text))
        self.engine.hub.publish(
            self.task.id,
            TaskArtifactUpdateEvent(
                task_id=self.task.id, context_id=self.task.context_id, artifact=artifact, append=not first
            ),
        )

    def _on_progress(self, event: Progress) -> None:
        self._set_status(TaskState.TASK_STATE_WORKING)
        if event.text:
            self.task.status.message.CopyFrom(agent_message(self.task, event.text))
        metadata = {"kind": event.kind, **event.data}
        self._publish_status(metadata)

    async def _on_input_required(self, event: InputRequired) -> None:
        self._set_status(TaskState.TASK_STATE_INPUT_REQUIRED)
        prompt = agent_message(self.task, event.prompt, event.data)
        self.task.status.message.CopyFrom(prompt)
        self.task.history.append(prompt)
        self.run_state["pending_input"] = event.data or {}
        await self._remember_turn(event.prompt)
        await self._write()
        self._publish_status()
        await self.engine.push.notify(self.runtime, self.scope, self.task)
        self.settled.set()

    async def _on_completed(self, event: Completed) -> None:
        parts = list(event.parts) if event.parts else []
        final_text = event.text if event.text is not None else self.text_so_far
        if not parts and (final_text or self._artifact_id):
            parts = [Part(text=final_text)]
        if parts:
            artifact = Artifact(artifact_id=self._artifact_id or str(uuid.uuid4()), name=event.artifact_name)
            artifact.parts.extend(parts)
            if event.metadata:
                artifact.metadata.update(event.metadata)
            self._replace_artifact(artifact)
            self.engine.hub.publish(
                self.task.id,
                TaskArtifactUpdateEvent(
                    task_id=self.task.id,
                    context_id=self.task.context_id,
                    artifact=artifact,
                    append=False,
                    last_chunk=True,
                ),
            )
        await self._remember_turn(final_text or "")
        await self._finish(TaskState.TASK_STATE_COMPLETED, None)

    async def _on_reply(self, event: Reply) -> None:
        if self.version is not None:
            log.warning("reply_after_task_created")
            await self._on_completed(Completed(text=event.text, parts=event.parts, metadata=event.metadata))
            return
        msg = Message(
            message_id=str(uuid.uuid4()), role=Role.ROLE_AGENT, context_id=self.task.context_id
        )
        msg.parts.extend(event.parts or [Part(text=event.text or "")])
        if event.metadata:
            msg.metadata.update(event.metadata)
        self.reply = msg
        await self._remember_turn(event.text or message_text(msg))
        self.finished = True
        self.created.set()
        self.settled.set()

    def _replace_artifact(self, artifact: Artifact) -> None:
        for i, existing in enumerate(self.task.artifacts):
            if existing.artifact_id == artifact.artifact_id:
                self.task.artifacts[i].CopyFrom(artifact)
                return
        self.task.artifacts.append(artifact)

    async def _finish(self, state: int, reason: str | None) -> None:
        await self._ensure_created()
        self._set_status(state)
        if reason:
            self.task.status.message.CopyFrom(agent_message(self.task, reason))
        self.run_state.pop("pending_input", None)
        self.finished = True
        await self._write()
        self._publish_status()
        await self.engine.push.notify(self.runtime, self.scope, self.task)
        self.settled.set()

    # helpers -----------------------------------------------------------------
    def _set_status(self, state: int) -> None:
        status = TaskStatus(state=state)
        status.timestamp.GetCurrentTime()
        self.task.status.CopyFrom(status)

    def _publish_status(self, metadata: dict[str, Any] | None = None) -> None:
        event = TaskStatusUpdateEvent(task_id=self.task.id, context_id=self.task.context_id)
        event.status.CopyFrom(self.task.status)
        if metadata:
            event.metadata.update(metadata)
        self.engine.hub.publish(self.task.id, event)

    async def _write(self) -> None:
        async with self._write_lock:
            terminal = self.task.status.state in TERMINAL_STATES
            running = not terminal and not self._iterator_done and not self._driver_done()
            for attempt in (1, 2):
                try:
                    self.version = await self.engine.store.update_task(
                        self.scope,
                        self.task,
                        expected_version=self.version or 0,
                        run_ref=self.run_ref,
                        run_state=self.run_state,
                        owner=self.engine.replica_id if running else None,
                        lease_until=self.engine.lease_deadline() if running else None,
                    )
                    return
                except ConflictError:
                    stored = await self.engine.store.get_task(self.scope, self.task.id)
                    if stored is None or stored.task.status.state in TERMINAL_STATES:
                        self.finished = True
                        raise SupersededError from None
                    if attempt == 2:
                        raise
                    # a write of ours was interrupted after it landed (e.g. by cancel);
                    # this run still owns the task, so its state in memory wins
                    self.version = stored.version

    def _driver_done(self) -> bool:
        return self._driver is not None and self._driver.done()

    async def _remember_turn(self, agent_text: str) -> None:
        if not self.engine.remembers_context(self.runtime):
            return
        context = await self.engine.store.get_context(self.scope, self.task.context_id) or Context()
        context.turns.append({"role": "user", "text": self.request.text})
        if agent_text:
            context.turns.append({"role": "agent", "text": agent_text})
        context.turns = context.turns[-self.engine.max_turns :]
        context.session.update(self._session_updates)
        self._session_updates.clear()
        await self.engine.store.put_context(self.scope, self.task.context_id, context)


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
        remote_poll_seconds: float = 1.0,
    ) -> None:
        self.store = store
        self.hub = hub
        self.push = push
        self.replica_id = replica_id
        self.lease_seconds = lease_seconds
        self.cancel_wait_seconds = cancel_wait_seconds
        self.max_turns = max_turns
        self.remote_poll_seconds = remote_poll_seconds
        self.runs: dict[str, TaskRun] = {}
        self._task_locks: dict[str, asyncio.Lock] = {}

    def lease_deadline(self) -> float:
        return time.time() + self.lease_seconds

    @staticmethod
    def remembers_context(runtime: EndpointRuntime) -> bool:
        handler = runtime.handler
        return bool(handler is not None and getattr(handler, "uses_context", True))

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
            text=message_text(message),
            data=message_data(message),
            history=[Turn(t["role"], t["text"]) for t in context.turns],  # type: ignore[arg-type]
            session=dict(context.session),
            run_ref=run_ref,
            pending_input=pending,
            endpoint_id=scope.endpoint_id,
            tenant=scope.tenant,
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
        task = Task(id=str(uuid.uuid4()), context_id=message.context_id or str(uuid.uuid4()))
        message.task_id, message.context_id = task.id, task.context_id
        task.status.state = TaskState.TASK_STATE_SUBMITTED
        task.status.timestamp.GetCurrentTime()
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
        handler = runtime.require_handler()
        async with self._task_lock(message.task_id):
            stored = await self.store.get_task(scope, message.task_id)
            if stored is None:
                raise TaskNotFoundError(f"Task {message.task_id} not found")
            live = self.runs.get(message.task_id)
            task = live.task if live is not None else stored.task
            version = live.version if live is not None else stored.version
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
            message.context_id = task.context_id
            context = await self._context(runtime, scope, task.context_id)
            run_state = dict(stored.run_state)
            request = self._request(
                runtime, scope, task, message, context, streaming=streaming,
                run_ref=stored.run_ref, pending=run_state.get("pending_input"),
            )
            try:
                continued = await handler.resume(request)
            except InputRejectedError as exc:
                rejected = await self._reject_input(runtime, scope, task, version, message, exc, live)
                return SendOutcome(task=rejected)
            if continued and live is None and self.owned_elsewhere(stored):
                # the run goes on at its owner, which records what follows
                return SendOutcome(task=copy_task(task), follow_version=version, scope=scope)
            task.history.append(message)
            task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_WORKING))
            task.status.timestamp.GetCurrentTime()
            run_state.pop("pending_input", None)
            sub = self.hub.subscribe(task.id) if subscribe else None
            if continued and live is not None:
                run = live
                run.begin_turn()
                run.request = request
                run.run_state = run_state
                await run._write()
                run.initial_task = copy_task(task)
                run._publish_status()
                return SendOutcome(run=run, subscription=sub)
            if live is not None:
                await live.stop_driver()  # the handler starts over with a fresh run
            events = handler.reattach(request) if continued else handler.run(request)
            run = TaskRun(self, runtime, scope, request, task, version, run_state, events)
            await run._write()
            run.initial_task = copy_task(task)
            run._publish_status()
            run.start()
            return SendOutcome(run=run, subscription=sub)

    async def _reject_input(
        self, runtime: EndpointRuntime, scope: Scope, task: Task, version: int, message: Message,
        exc: InputRejectedError, live: TaskRun | None,
    ) -> Task:
        task.history.append(message)
        prompt = agent_message(task, exc.prompt, exc.data)
        task.status.message.CopyFrom(prompt)
        task.status.timestamp.GetCurrentTime()
        task.history.append(prompt)
        if live is not None:
            await live._write()
            live._publish_status()
        else:
            await self.store.update_task(scope, task, expected_version=version)
        return copy_task(task)

    # cancel ---------------------------------------------------------------------------
    async def cancel(self, runtime: EndpointRuntime, scope: Scope, task_id: str) -> Task:
        from a2a.utils.errors import TaskNotCancelableError

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
        run.cancel_requested = True
        try:
            waits = await handler.cancel(run.request_for_cancel())
        except Exception:
            log.exception("handler_cancel_failed", task_id=run.task.id)
            waits = False
        if waits:
            await run.wait_done(self.cancel_wait_seconds)
        await run.stop_driver()
        if not run.finished:
            await run._finish(TaskState.TASK_STATE_CANCELED, "canceled")
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
        status = TaskStatus(state=TaskState.TASK_STATE_CANCELED)
        status.timestamp.GetCurrentTime()
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
        event = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id)
        event.status.CopyFrom(task.status)
        self.hub.publish(task.id, event)
        self.hub.end(task.id)
        await self.push.notify(runtime, scope, task)

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
        if handler is not None and final.status.state == TaskState.TASK_STATE_CANCELED:
            with contextlib.suppress(Exception):
                await handler.cancel(run.request_for_cancel())
        event = TaskStatusUpdateEvent(task_id=final.id, context_id=final.context_id)
        event.status.CopyFrom(final.status)
        self.hub.publish(final.id, event)  # before the driver stops, which ends the hub
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
        from a2a_gateway.errors import GatewayError

        task = stored.task
        try:
            runtime = await registry.get(scope.endpoint_id)
        except GatewayError:
            runtime = None
        handler = runtime.handler if runtime is not None else None
        if handler is not None and handler.supports_reattach and stored.run_ref:
            users = [m for m in task.history if m.role == Role.ROLE_USER]
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
        status = TaskStatus(state=TaskState.TASK_STATE_FAILED)
        status.timestamp.GetCurrentTime()
        task.status.CopyFrom(status)
        task.status.message.CopyFrom(agent_message(task, GATEWAY_LOST))
        await self.store.update_task(scope, task, expected_version=stored.version)
        event = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id)
        event.status.CopyFrom(task.status)
        self.hub.publish(task.id, event)
        self.hub.end(task.id)
        log.warning("task_failed_gateway_lost", task_id=task.id)

    async def aclose(self) -> None:
        """Stop driving runs (their leases expire and another replica takes them over)."""
        for run in list(self.runs.values()):
            await run.stop_driver()
