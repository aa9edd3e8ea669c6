"""One run (``TaskRun``): maps one handler run's events to A2A task states and artifacts.

Each handler event is applied to the task in memory, then split in two paths:

* the live path — text deltas, progress notes and every state change are
  published on the ``LiveHub`` to the task's SSE clients; deltas stop there;
* the durable path — the task is written to the store only when its state
  changes (created/WORKING, INPUT_REQUIRED, terminal), so a reply of a thousand
  tokens costs a handful of writes. The final artifact replaces the streamed
  chunks (same artifact id, ``append: false``, ``lastChunk: true``), so what a
  streaming client reconstructs equals what the store holds.

A ``TaskRun`` belongs to the engine (``engine.py``), not to any request: closing a
client stream never cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import structlog
from a2a.helpers.proto_helpers import get_message_text
from a2a.types import (
    Artifact,
    Message,
    Part,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.types.a2a_pb2 import (  # plain ints: the enum wrappers resolve names per access
    ROLE_AGENT,
    TASK_STATE_AUTH_REQUIRED,
    TASK_STATE_CANCELED,
    TASK_STATE_COMPLETED,
    TASK_STATE_FAILED,
    TASK_STATE_INPUT_REQUIRED,
    TASK_STATE_REJECTED,
    TASK_STATE_WORKING,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.timestamp_pb2 import Timestamp

from a2a_gateway.tasks.events import (
    INTERRUPTED_STATES,
    agent_message,
    copy_task,
    new_id,
    stamp,
    status_event,
    text_chunk,
)
from a2a_gateway.metrics import MESSAGES, TASKS_STARTED, task_ended
from a2a_gateway.registry import EndpointRuntime
from a2a_gateway.stores.base import (
    TERMINAL_STATES,
    ConflictError,
    Context,
    Scope,
    StoreUnavailableError,
)
from handlers.base import (
    Canceled,
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    InputRequired,
    Progress,
    Rejected,
    Reply,
    RunStarted,
    SessionUpdate,
    TextDelta,
)

if TYPE_CHECKING:
    from a2a_gateway.tasks.engine import TaskEngine

log = structlog.get_logger(__name__)



def message_data(message: Message) -> list[dict[str, Any]]:
    out = []
    for part in message.parts:
        if part.HasField("data"):
            value = MessageToDict(part.data)
            out.append(value if isinstance(value, dict) else {"value": value})
    return out


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
        self.initial_task = copy_task(task) if request.streaming else task  # streams start from it
        self.reply: Message | None = None
        self.created = asyncio.Event()
        self.settled = asyncio.Event()
        self.finished = False
        self._events = events
        self._push_config = push_config
        self._write_lock = asyncio.Lock()
        self._text: list[str] = []
        self._artifact_id: str | None = None
        self._session_updates: dict[str, Any] = {}
        self._driver: asyncio.Task[None] | None = None
        self._iterator_done = False
        self.store_error: StoreUnavailableError | None = None
        """Set when the store could not be written: the caller answers with a retriable error."""
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
        # this driver runs in its own copy of the request's context
        structlog.contextvars.bind_contextvars(task_id=self.task.id, endpoint_id=self.scope.endpoint_id)
        try:
            async for event in self._events:
                await self._apply(event)
                if self.finished:
                    break
            else:
                await self._exhausted()
        except SupersededError:
            log.info("task_superseded")
        except StoreUnavailableError as exc:
            await self._store_lost(exc)
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

    async def _store_lost(self, exc: StoreUnavailableError) -> None:
        """The store went away mid-run: stop driving. A created task keeps its lease, which
        runs out, and a replica re-attaches (or fails it) once the store is back; a task
        never created cannot be recovered, so its backend run is stopped."""
        self.store_error = exc
        log.warning("task_store_unavailable", created=self.version is not None)
        self.engine.hub.end(self.task.id)  # streams end; clients may subscribe again later
        if self.version is None and self.run_ref and self.runtime.handler is not None:
            with contextlib.suppress(Exception):
                await self.runtime.handler.cancel(self.request_for_cancel())

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
        await self._finish(TASK_STATE_FAILED, "the agent ended without a result")

    async def _safe_fail(self, reason: str) -> None:
        if self.finished:
            return
        try:
            await self._finish(TASK_STATE_FAILED, reason)
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
        if isinstance(event, TextDelta | Progress) and self.task.status.state in INTERRUPTED_STATES:
            await self._back_to_working()
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
            await self._finish(TASK_STATE_FAILED, event.reason)
        elif isinstance(event, Rejected):
            await self._finish(TASK_STATE_REJECTED, event.reason)
        elif isinstance(event, Canceled):
            await self._finish(TASK_STATE_CANCELED, event.reason or "canceled")

    async def _ensure_created(self) -> None:
        if self.version is not None:
            return
        self._set_status(TASK_STATE_WORKING)
        self.version = await self.engine.store.create_task(
            self.scope,
            self.task,
            run_ref=self.run_ref,
            run_state=self.run_state,
            owner=self.engine.replica_id,
            lease_until=self.engine.lease_deadline(),
        )
        TASKS_STARTED.inc()
        self.created.set()
        self._publish_status()
        if self._push_config is not None:
            # no other config can exist yet: the client does not know the task id
            push = self.engine.push
            config = await push.save_inline_config(self.scope, self.task.id, self._push_config)
            await push.notify(self.runtime, self.scope, self.task, [config])

    async def _back_to_working(self) -> None:
        """The run went on without an answer (e.g. the backend's approval expired)."""
        self.run_state.pop("pending_input", None)
        self._set_status(TASK_STATE_WORKING)
        await self._write()

    def _on_text(self, text: str) -> None:
        if not text:
            return
        first = self._artifact_id is None
        if first:
            self._artifact_id = new_id()
        self._text.append(text)
        if not self.engine.hub.has_listeners(self.task.id):
            return  # nobody streams this task: the text is kept for the final artifact
        artifact = Artifact(artifact_id=self._artifact_id, name="response")
        artifact.parts.append(Part(text=text))
        self.engine.hub.publish(
            self.task.id,
            TaskArtifactUpdateEvent(
                task_id=self.task.id, context_id=self.task.context_id, artifact=artifact, append=not first
            ),
        )

    def _on_progress(self, event: Progress) -> None:
        self._set_status(TASK_STATE_WORKING)
        if event.text:
            self.task.status.message.CopyFrom(agent_message(self.task, event.text))
        metadata = {"kind": event.kind, **event.data}
        self._publish_status(metadata)

    async def _on_input_required(self, event: InputRequired) -> None:
        self._set_status(TASK_STATE_INPUT_REQUIRED)
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
            artifact = Artifact(artifact_id=self._artifact_id or new_id(), name=event.artifact_name)
            artifact.parts.extend(parts)
            if event.metadata:
                artifact.metadata.update(event.metadata)
            self._replace_artifact(artifact)
            if self.engine.hub.has_listeners(self.task.id):
                final = TaskArtifactUpdateEvent(
                    task_id=self.task.id, context_id=self.task.context_id,
                    artifact=artifact, append=False, last_chunk=True,
                )
                self.engine.hub.publish(self.task.id, final)
        await self._remember_turn(final_text or "")
        await self._finish(TASK_STATE_COMPLETED, None)

    async def _on_reply(self, event: Reply) -> None:
        if self.version is not None:
            log.warning("reply_after_task_created")
            await self._on_completed(Completed(text=event.text, parts=event.parts, metadata=event.metadata))
            return
        msg = Message(
            message_id=new_id(), role=ROLE_AGENT, context_id=self.task.context_id
        )
        msg.parts.extend(event.parts or [Part(text=event.text or "")])
        if event.metadata:
            msg.metadata.update(event.metadata)
        self.reply = msg
        MESSAGES.inc()
        await self._remember_turn(event.text or get_message_text(msg))
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
        task_ended(state)
        self._publish_status()
        await self.engine.push.notify(self.runtime, self.scope, self.task)
        self.settled.set()

    # helpers -----------------------------------------------------------------
    def _set_status(self, state: int) -> None:
        status = TaskStatus(state=state)
        stamp(status.timestamp)
        self.task.status.CopyFrom(status)

    def _publish_status(self, metadata: dict[str, Any] | None = None) -> None:
        if not self.engine.hub.has_listeners(self.task.id):
            return
        event = status_event(self.task, metadata)
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
