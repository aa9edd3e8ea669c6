"""The run of a run-id bridge: a handler whose task is a run the backend keeps (Hermes
``/v1/runs``, LangGraph runs on threads, Agno AgentOS runs, ADK ``/run_sse``).

``RunBridge`` owns the algorithm; a bridge supplies its ``Upstream`` and hooks, called in
this order:

1. ``needs_input(request)``: False lets a message without text, data or files through
   (default: it is refused with ``Rejected`` before any call).
2. Message mode only: ``reply(request, deadline)``, the answer of one plain call; None (the
   default) runs a task and keeps only its memory and final answer. A question the run asks
   then fails the answer (message mode cannot answer it).
3. ``conversation(request, deadline, lost=False)``: the backend's conversation for the
   request's A2A context (a thread, a session) and the values the context's memory should
   keep (they go out as ``SessionUpdate``). The default is a session id kept under
   ``session_key``, else one named after the caller and the context.
4. ``start(conversation, request, deadline)``: the run's state (its frame mapper, see
   ``FollowedRun``) and the call whose stream carries its events, not entered yet (None:
   the run is followed by its status). When ``start`` already learned the run's id (the
   backend answered it) and the request did not name that run, ``RunStarted`` goes out;
   otherwise the mapper announces the run from its first frames.
5. Following the run: every frame of the stream goes through ``run.feed(frame)``, which
   returns events and sets ``run.terminal`` once the run's outcome is known (the terminal
   event may also be the last of the events it returns; it goes out once, last). When a
   stream ends or breaks off without a terminal event, ``status(run, request, deadline)``
   reads the run (events, and ``run.terminal`` once it ended); while it goes on, after
   ``poll_interval``, ``join(run, request, deadline)`` joins its stream again (None, the
   default: read ``status`` again). A stream that breaks
   before the run has an id fails the task, as does one that ends so (a bridge whose
   backend names no runs sets ``run_ids = False``: its stream is the whole run and
   ``status`` gives the outcome).
6. If ``follow`` fails with an ``UpstreamError`` that ``conversation_lost(exc, run, request,
   deadline)`` explains (the backend forgot the conversation: an in-memory server restarted),
   steps 3-5 run once more with ``conversation(..., lost=True)``.

Raising: every ``UpstreamError`` from a hook or a call ends the task ``Failed`` with its
reason, logged as ``failure_log``; any other exception propagates (the gateway fails the task
with a generic reason). A frame or status of a shape the bridge does not know
(``UnexpectedFrame``) and the run's time bound (``run_timeout_seconds``) abandon the run: it is
canceled at the backend (``cancel_run``, best effort) and the task fails. A ``Failed`` never
shows the backend's secrets.

Reading and waiting are split: the run's stream and status are read in a task of their own,
which hands their events to the iterator the gateway consumes, so the run's time bound, a
stop's wait (``stop_wait_seconds``) and a bridge's own timer (``next_wake``/``wake``, e.g.
answering an approval nobody answered) fire while the backend is silent.

Cancel: ``run_of(request)`` is the run ``request.run_ref`` names (None: cancel answers False
and the gateway closes the iterator, which closes the stream); ``cancel_run`` asks the backend
to stop it and the run's own events (or status) end the task ``Canceled``. With
``stop_wait_seconds``, a run this instance follows that has not confirmed the stop within that
time ends ``Canceled`` anyway. Re-attach (after a gateway restart): ``run_of(request)``, then
``join`` (or ``status``) from the run's first event, so the task gets the whole answer; its
time bound counts again from the re-attach.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import abstractmethod
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import httpx
import structlog
from pydantic import Field

from handlers.base import (
    Canceled,
    Completed,
    Failed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRequired,
    Rejected,
    RunStarted,
    SessionUpdate,
)
from handlers.upstream import (
    BridgeSettings,
    Deadline,
    RunTimedOut,
    SSEFrame,
    UnexpectedFrame,
    Upstream,
    UpstreamCall,
    UpstreamError,
    clip,
    has_input,
)

__all__ = ["FollowedRun", "RunBridge", "RunSettings"]

log = structlog.get_logger(__name__)


class RunSettings(BridgeSettings):
    """The settings of a bridge that looks at a run again while it goes on."""

    poll_interval_seconds: float = Field(0.5, gt=0)
    """Wait before looking again at a run that is still going on (joining its stream again,
    or reading its state)."""


class FollowedRun(Protocol):
    """A run's state as the bridge's frame mapper keeps it."""

    @property
    def run_id(self) -> str | None:
        """The backend's id of the run, once known."""

    @property
    def terminal(self) -> HandlerEvent | None:
        """The event that ends the task's part of the run, once known."""

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """The events of one frame (``UnexpectedFrame`` for a shape the bridge does not
        know); sets ``terminal`` once the frame says how the run ended."""


R = TypeVar("R", bound=FollowedRun)


@dataclass(slots=True)
class _Followed:
    """A run this instance follows, as ``cancel`` tells it a stop is under way."""

    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    stop_at: float | None = None


class RunBridge(Handler, Generic[R]):
    """Base of the bridges whose task is a backend run; see the module docstring."""

    run_name: ClassVar[str]
    """The run in reasons (``the LangGraph run``)."""
    log_name: ClassVar[str]
    """The prefix of this bridge's log events (``langgraph``)."""
    failure_log: ClassVar[str]
    """The log event of a task failed by the backend."""
    question: ClassVar[str] = "the agent asked for input"
    """What a question of the run is called when message mode cannot answer it."""
    session_key: ClassVar[str] = ""
    """Where the default ``conversation`` keeps the session id in the context's memory."""
    run_ids: ClassVar[bool] = True
    """False: the backend names no run; its stream is the whole run."""
    settings: BridgeSettings

    def __init__(self, settings: HandlerSettings, http: httpx.AsyncClient) -> None:
        super().__init__(settings, http)
        self.upstream = self.make_upstream()
        self._followed: dict[str, _Followed] = {}
        """The runs this instance follows, by run id: the gateway cancels a run through the
        instance whose ``run``/``reattach`` follows it."""

    # -- hooks ---------------------------------------------------------------------

    @abstractmethod
    def make_upstream(self) -> Upstream:
        """The backend, from the settings."""

    def needs_input(self, request: HandlerRequest) -> bool:
        """False: ``request`` goes to the backend even without text, data or files."""
        return True

    async def reply(self, request: HandlerRequest, deadline: Deadline) -> HandlerEvent | None:
        """Message mode: the answer of one plain call; None runs a task instead."""
        return None

    async def conversation(self, request: HandlerRequest, deadline: Deadline, *,
                           lost: bool) -> tuple[Any, dict[str, Any]]:
        """The backend's conversation of the request's context (a new one when ``lost``) and
        what the context's memory should keep of it."""
        if not self.session_key:
            return None, {}
        kept = request.session.get(self.session_key)
        session_id = kept or request.backend_user(per_context=True)
        return session_id, {} if kept == session_id else {self.session_key: session_id}

    async def conversation_lost(self, exc: UpstreamError, run: R, request: HandlerRequest,
                                deadline: Deadline) -> bool:
        """True when ``exc`` says the backend forgot the conversation and the request may go
        to a new one (raise to fail with a reason of the bridge's own)."""
        return False

    @abstractmethod
    async def start(self, conversation: Any, request: HandlerRequest,
                    deadline: Deadline) -> tuple[R, UpstreamCall | None]:
        """The run's state and the call that streams its events (not entered yet)."""

    def join(self, run: R, request: HandlerRequest, deadline: Deadline) -> UpstreamCall | None:
        """The run's stream again, after the events seen (all of them on a re-attach); None:
        the run cannot be joined, its status is read instead."""
        return None

    @abstractmethod
    async def status(self, run: R, request: HandlerRequest,
                     deadline: Deadline) -> list[HandlerEvent]:
        """The run's events read from its state; sets ``run.terminal`` once it ended."""

    def run_of(self, request: HandlerRequest) -> R | None:
        """The run ``request.run_ref`` names (to cancel or re-attach to), or None."""
        return None

    async def cancel_run(self, run: R, request: HandlerRequest) -> None:
        """Ask the backend to stop the run (``UpstreamError`` when it cannot be asked)."""
        raise NotImplementedError(f"{type(self).__name__} cannot cancel a run")

    @property
    def stop_wait_seconds(self) -> float | None:
        """How long a stopped run this instance follows may take to confirm the stop."""
        return None

    def next_wake(self, run: R, current: float | None) -> float | None:
        """When (``time.monotonic``) to call ``wake`` if the run says nothing before, after
        each of its steps; ``current`` is the time set so far."""
        return None

    async def wake(self, run: R, request: HandlerRequest) -> None:
        """Called at ``next_wake``."""

    @property
    def poll_interval(self) -> float:
        """``RunSettings.poll_interval_seconds`` (a bridge that never looks again has none)."""
        return getattr(self.settings, "poll_interval_seconds", 0.5)

    # -- the contract --------------------------------------------------------------

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        if self.needs_input(request) and not has_input(request):
            yield Rejected(f"the message has no text or data for {self.upstream.name}")
            return
        events = self._task(request)
        if self.message_mode:
            events = self._message_mode(events)
        # aclosing: closing this iterator (cancel) closes the follower, and its stream, now
        async with aclosing(events) as events:
            async for event in events:
                yield event

    async def cancel(self, request: HandlerRequest) -> bool:
        run = self.run_of(request)
        if run is None:
            return False
        try:
            await self.cancel_run(run, request)
        except UpstreamError as exc:
            log.warning(f"{self.log_name}_cancel_failed", run_ref=request.run_ref,
                        reason=exc.reason)
            return False
        followed = self._followed.get(run.run_id or "")
        if followed is not None and self.stop_wait_seconds is not None:
            followed.stop_at = time.monotonic() + self.stop_wait_seconds
            followed.queue.put_nowait(("wake", None))
        return True

    async def reattach(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        run = self.run_of(request)
        if run is None:
            yield Failed(f"no {self.upstream.name} run to re-attach to")
            return
        deadline = self.settings.deadline(self.run_name)
        try:
            async with aclosing(self._follow(run, self.join(run, request, deadline), request,
                                             deadline)) as events:
                async for event in events:
                    yield event
        except UpstreamError as exc:
            yield self._failed(request, exc.reason)

    # -- a task's run --------------------------------------------------------------

    async def _task(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        deadline = self.settings.deadline(self.run_name)
        try:
            answer = await self.reply(request, deadline) if self.message_mode else None
            if answer is not None:
                yield self._redacted(answer)
                return
            async with aclosing(self._in_conversation(request, deadline)) as events:
                async for event in events:
                    yield event
        except UpstreamError as exc:
            yield self._failed(request, exc.reason)

    async def _in_conversation(self, request: HandlerRequest,
                               deadline: Deadline) -> AsyncIterator[HandlerEvent]:
        conversation, remembered = await self.conversation(request, deadline, lost=False)
        for attempt in (1, 2):
            run, call = await self.start(conversation, request, deadline)
            if run.run_id is not None and run.run_id != request.run_ref:
                yield RunStarted(run.run_id)
            if remembered:
                yield SessionUpdate(remembered)
            try:
                async with aclosing(self._follow(run, call, request, deadline)) as events:
                    async for event in events:
                        yield event
                return
            except UpstreamError as exc:
                if attempt == 2 or not await self.conversation_lost(exc, run, request, deadline):
                    raise
            conversation, remembered = await self.conversation(request, deadline, lost=True)

    async def _message_mode(self, task: AsyncIterator[HandlerEvent]) -> AsyncIterator[HandlerEvent]:
        """Only the memory and the final answer, as one Message (no task is created)."""
        async with aclosing(task) as events:
            async for event in events:
                if isinstance(event, SessionUpdate):
                    yield event
                elif isinstance(event, InputRequired):
                    yield Failed(f"{self.question} ({clip(event.prompt, 200)}), which "
                                 "response_mode message cannot answer: use response_mode task")
                elif isinstance(event, Completed | Failed | Canceled | Rejected):
                    yield self.answer(event)

    # -- following a run -----------------------------------------------------------

    async def _follow(self, run: R, call: UpstreamCall | None, request: HandlerRequest,
                      deadline: Deadline) -> AsyncIterator[HandlerEvent]:
        """The run's events until its terminal one, read by ``_pump``; the run's time bound,
        a stop's wait and the bridge's timer are kept here."""
        followed = _Followed()
        pump = asyncio.create_task(self._pump(run, call, request, deadline, followed.queue))
        key: str | None = None
        wake_at: float | None = None
        try:
            while True:
                if key is None and run.run_id is not None:
                    key = run.run_id
                    self._followed[key] = followed
                bounds = [t for t in (followed.stop_at, wake_at) if t is not None]
                timeout = max(0.0, min([*bounds, deadline.at]) - time.monotonic())
                try:
                    if followed.queue.empty():
                        async with asyncio.timeout(timeout):  # not wait_for: it can lose a cancel
                            kind, item = await followed.queue.get()
                    else:  # an event waiting is taken as the timed wait would: no timer per event
                        kind, item = followed.queue.get_nowait()
                except TimeoutError:
                    now = time.monotonic()
                    # a cancel under way ends CANCELED, even when the run's bound passes first
                    if followed.stop_at is not None and now >= min(followed.stop_at, deadline.at):
                        log.warning(f"{self.log_name}_stop_unconfirmed", run_id=run.run_id)
                        yield Canceled(f"stopped; {self.upstream.name} did not confirm the stop "
                                       "in time")
                        return
                    if now >= deadline.at:
                        await self._abandon(run, request)
                        raise RunTimedOut(deadline.reason) from None
                    if wake_at is not None and now >= wake_at:
                        wake_at = None
                        await self.wake(run, request)
                    continue
                if kind == "events":
                    for event in item:
                        if event is not run.terminal:
                            yield event
                    wake_at = self.next_wake(run, wake_at)
                elif kind == "error":
                    if isinstance(item, UnexpectedFrame | RunTimedOut):
                        await self._abandon(run, request)
                    raise item
                elif kind == "end":
                    break
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            if key is not None and self._followed.get(key) is followed:
                del self._followed[key]
        assert run.terminal is not None
        yield self._redacted(run.terminal)

    async def _pump(self, run: R, call: UpstreamCall | None, request: HandlerRequest,
                    deadline: Deadline, queue: asyncio.Queue[tuple[str, Any]]) -> None:
        """Queue the run's events until its outcome is known: its stream, its status where
        no stream says how it ended, its stream joined again while it goes on."""
        try:
            while True:
                if call is not None:
                    await self._stream(run, call, queue)
                if run.terminal is None:
                    if run.run_id is None and self.run_ids:
                        raise UpstreamError(
                            f"{self.upstream.name} closed the stream before the run started")
                    _put(queue, await self.status(run, request, deadline))
                if run.terminal is not None:
                    break
                await asyncio.sleep(self.poll_interval)
                call = self.join(run, request, deadline)
        except Exception as exc:  # noqa: BLE001 - handed to the follower, which raises it
            queue.put_nowait(("error", exc))
        else:
            queue.put_nowait(("end", None))

    async def _stream(self, run: R, call: UpstreamCall,
                      queue: asyncio.Queue[tuple[str, Any]]) -> None:
        """Queue the events of one stream of the run, until it ends or the outcome is known;
        a stream that breaks off after the run started is only logged (the run goes on)."""
        try:
            async with call:
                async for frame in call.frames():
                    _put(queue, run.feed(frame))
                    if run.terminal is not None:
                        break
        except (UnexpectedFrame, RunTimedOut):
            raise
        except UpstreamError as exc:
            if run.run_id is None:
                raise
            log.warning(f"{self.log_name}_stream_lost", run_id=run.run_id, reason=exc.reason)

    async def _abandon(self, run: R, request: HandlerRequest) -> None:
        """Cancel a run the bridge gives up on (best effort)."""
        if run.run_id is None:
            return
        log.warning(f"{self.log_name}_run_abandoned", run_id=run.run_id, task_id=request.task_id)
        try:
            await self.cancel_run(run, request)
        except UpstreamError as exc:
            log.warning(f"{self.log_name}_cancel_failed", run_id=run.run_id, reason=exc.reason)

    def _failed(self, request: HandlerRequest, reason: str) -> Failed:
        """A call to the backend failed the task: logged as every bridge logs one."""
        log.warning(self.failure_log, endpoint_id=request.endpoint_id, task_id=request.task_id,
                    reason=reason)
        return Failed(reason)

    def _redacted(self, event: HandlerEvent) -> HandlerEvent:
        """A backend's own failure text may echo a secret."""
        return Failed(self.upstream.reason(event.reason)) if isinstance(event, Failed) else event


def _put(queue: asyncio.Queue[tuple[str, Any]], events: list[HandlerEvent]) -> None:
    if events:
        queue.put_nowait(("events", events))
