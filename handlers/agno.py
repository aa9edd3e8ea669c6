"""Agno AgentOS handler: A2A tasks as runs of one AgentOS agent (``POST /agents/{id}/runs``).

One A2A context is one Agno session: its id (derived from the caller and the context, kept in
the context's handler memory) goes with every run as ``session_id``, and Agno keeps the
conversation, so only the new message is sent. Runs are started in the background
(``background=true``) and streamed, so a run outlives a broken stream or a gateway restart;
its stream is then joined again (``POST .../runs/{run_id}/resume``, which replays the events
after the last one seen), and its state (``GET /agents/{id}/runs/{run_id}``) says how it
ended when no stream does.

A tool that needs the user's confirmation pauses the run (``RunPaused``: INPUT_REQUIRED); the
answer continues it (``/continue`` with each waiting tool marked ``confirmed``). Cancel is
``POST .../runs/{run_id}/cancel``; the ``RunCancelled`` that follows ends the task (Agno sends
a ``RunCompleted`` after it, which is ignored).

See docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import structlog
from pydantic import Field, SecretStr

from handlers.base import (
    Canceled,
    Completed,
    Failed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRejectedError,
    InputRequired,
    Progress,
    Rejected,
    RunStarted,
    SessionUpdate,
    TextDelta,
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
    request_text,
)

__all__ = ["AgnoHandler", "AgnoRun", "AgnoSettings", "confirmations"]

log = structlog.get_logger(__name__)

BACKEND = "Agno"
RUN = "the Agno run"
SESSION_KEY = "agno_session_id"
RUNNING = frozenset({"PENDING", "RUNNING"})
YES = frozenset({"yes", "y", "approve", "approved", "confirm", "confirmed", "ok", "allow"})
NO = frozenset({"no", "n", "deny", "denied", "reject", "rejected", "cancel"})
CHOICES = ["yes", "no"]


class AgnoSettings(BridgeSettings):
    """The response mode, ``run_timeout_seconds`` and the retries come from ``BridgeSettings``."""

    agno_api_url: str = "http://127.0.0.1:7777"
    """Base URL of the AgentOS app."""
    agno_agent_id: str = Field(min_length=1)
    """The id of the AgentOS agent to run (``Agent(id=...)``)."""
    agno_api_key: SecretStr | None = None
    """The AgentOS security key (``OS_SECURITY_KEY``), sent as ``Authorization: Bearer``;
    ``env:NAME`` in endpoint rows."""
    agno_timeout: float = Field(300.0, gt=0)
    """Seconds AgentOS may stay silent on a call (its streams are silent while a tool or the
    model works)."""
    poll_interval_seconds: float = Field(0.5, gt=0)
    """Wait before joining again the stream of a run that is still going on."""


@dataclass(slots=True)
class AgnoRun:
    """What the frames (or the stored state) of one Agno run said so far; ``terminal`` is the
    event that ends the task's part of it (an answer, a question, a failure, a cancel)."""

    session_id: str
    run_id: str | None = None
    terminal: HandlerEvent | None = None
    streamed: list[str] = field(default_factory=list)
    last_event_index: int | None = None
    """The ``event_index`` of the last event seen (a joined stream replays those after it)."""

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """The events of one frame; ``UnexpectedFrame`` for a shape this bridge does not know."""
        if self.terminal is not None or not frame.data:
            return []  # the RunCompleted after a RunCancelled
        data = frame.object(BACKEND)
        kind = frame.event or str(data.get("event") or "")
        if isinstance(data.get("event_index"), int):
            self.last_event_index = data["event_index"]
        if kind == "error":  # e.g. a joined stream whose run is in no buffer
            raise UpstreamError(clip(f"{BACKEND} could not stream the run: {data.get('error')}"))
        if kind == "RunStarted":
            return self._started(data)
        if kind == "RunContent":
            content = data.get("content")
            if isinstance(content, str) and content:
                self.streamed.append(content)
                return [TextDelta(content)]
            return []
        if kind in ("ToolCallStarted", "ToolCallCompleted"):
            return [tool_progress(kind, data)]
        if kind == "RunPaused":
            self.terminal = paused(self, _tools(data))
        elif kind == "RunCancelled":
            self.terminal = Canceled(f"{RUN} was cancelled")
        elif kind == "RunCompleted":
            self.terminal = self.completed(data)
        elif kind == "RunError":
            self.terminal = Failed(run_error(data))
        return []

    def _started(self, data: dict[str, Any]) -> list[HandlerEvent]:
        run_id = data.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise UnexpectedFrame(BACKEND, "a RunStarted event without a run_id")
        if self.run_id is not None:
            return []
        self.run_id = run_id
        return [RunStarted(run_id)]

    def completed(self, data: dict[str, Any]) -> Completed:
        """The answer: the run's content (the streamed text when it has none)."""
        content = data.get("content")
        text = content if isinstance(content, str) else "".join(self.streamed)
        metadata: dict[str, Any] = {"agno_run_id": self.run_id, "agno_session_id": self.session_id}
        metrics = data.get("metrics") if isinstance(data.get("metrics"), dict) else {}
        usage = {k: metrics[k] for k in ("input_tokens", "output_tokens", "total_tokens")
                 if isinstance(metrics.get(k), int)}
        if usage:
            metadata["usage"] = usage
        return Completed(text=text, metadata=metadata)

    def from_state(self, run: dict[str, Any]) -> HandlerEvent | None:
        """The terminal event of a run read with ``GET /agents/{id}/runs/{run_id}``, or None
        while it goes on."""
        status = run.get("status")
        if not isinstance(status, str):
            raise UnexpectedFrame(BACKEND, "a run without a status")
        if status in RUNNING:
            return None
        if status == "COMPLETED":
            return self.completed(run)
        if status == "PAUSED":
            return paused(self, _tools(run))
        if status == "CANCELLED":
            return Canceled(f"{RUN} was cancelled")
        if status == "ERROR":
            return Failed(run_error(run))
        return Failed(f"{RUN} ended with an unknown status ({clip(status, 40)})")


def _tools(data: dict[str, Any]) -> list[dict[str, Any]]:
    tools = data.get("tools")
    if not isinstance(tools, list):
        raise UnexpectedFrame(BACKEND, "a paused run whose tools are not a list")
    return [t for t in tools if isinstance(t, dict)]


def tool_progress(kind: str, data: dict[str, Any]) -> Progress:
    tool = data.get("tool") if isinstance(data.get("tool"), dict) else {}
    info: dict[str, Any] = {"tool": tool.get("tool_name") or "",
                            "tool_call_id": tool.get("tool_call_id")}
    if kind == "ToolCallCompleted":
        info["error"] = bool(tool.get("tool_call_error"))
    return Progress("tool_started" if kind == "ToolCallStarted" else "tool_completed", data=info)


def run_error(data: dict[str, Any]) -> str:
    detail = data.get("content")
    return clip(f"{RUN} failed: {detail if isinstance(detail, str) and detail else 'no detail'}")


def _call_text(tool: dict[str, Any]) -> str:
    args = tool.get("tool_args") if isinstance(tool.get("tool_args"), dict) else {}
    shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
    return f"{tool.get('tool_name') or 'a tool'}({shown})"


def paused(run: AgnoRun, tools: list[dict[str, Any]]) -> HandlerEvent:
    """INPUT_REQUIRED for the tools awaiting confirmation; a run paused for anything else
    (user input, an external tool's result, an admin approval) fails: the bridge has no way
    to answer it."""
    waiting = [t for t in tools if t.get("requires_confirmation") and t.get("confirmed") is None]
    other = [t for t in tools if t.get("requires_user_input") and not t.get("answered")
             or t.get("external_execution_required") and t.get("result") is None
             or t.get("approval_type")]
    if other or not waiting:
        return Failed(f"{RUN} paused for something this bridge cannot answer (user input, an "
                      "external tool's result or an admin approval); only confirmations are "
                      "supported")
    prompt = "\n".join(f"Confirm the tool call {_call_text(t)}? Answer yes or no."
                       for t in waiting)
    return InputRequired(prompt, {
        "run_id": run.run_id, "choices": CHOICES,
        "tools": [{k: t.get(k) for k in ("tool_call_id", "tool_name", "tool_args")}
                  for t in waiting]})


def _decision(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower().strip(".!\"' ")
    return True if word in YES else False if word in NO else None


def confirmations(request: HandlerRequest, tools: list[dict[str, Any]]) -> dict[str, bool] | None:
    """Each waiting tool's confirmation from the answer: a data part ``{"confirmed": bool}``
    (or ``{"confirmed": {tool_call_id: bool}}`` naming every tool), or a yes/no word; None
    when the answer says neither."""
    ids = [str(t.get("tool_call_id")) for t in tools]
    for data in request.data:
        value = data.get("confirmed", data.get("approved"))
        if isinstance(value, dict):
            decided = {i: _decision(value.get(i)) for i in ids}
            if all(d is not None for d in decided.values()):
                return decided  # type: ignore[return-value]
            return None
        if value is not None:
            decision = _decision(value)
            return None if decision is None else dict.fromkeys(ids, decision)
    decision = _decision(request.text) if request.text.strip() else None
    return None if decision is None else dict.fromkeys(ids, decision)


def session_of(request: HandlerRequest) -> str:
    """The Agno session of the request's context: the one kept in the context's memory, else
    one named after the caller and the context (so two callers never share a session)."""
    return request.session.get(SESSION_KEY) or request.backend_user(per_context=True)


class AgnoHandler(Handler):
    Settings: ClassVar[type[HandlerSettings]] = AgnoSettings
    supports_reattach: ClassVar[bool] = True
    settings: AgnoSettings

    def __init__(self, settings: HandlerSettings, http: httpx.AsyncClient) -> None:
        super().__init__(settings, http)
        s = self.settings
        self.upstream = Upstream.for_backend(http, BACKEND, s, url=s.agno_api_url,
                                             timeout=s.agno_timeout, api_key=s.agno_api_key)
        self.runs_path = f"/agents/{urllib.parse.quote(self.settings.agno_agent_id, safe='')}/runs"

    # -- the contract --------------------------------------------------------------

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        events = self._task(request)
        if self.message_mode:
            events = self._message_mode(events)
        async with contextlib.aclosing(events) as events:
            async for event in events:
                yield event

    async def resume(self, request: HandlerRequest) -> bool:
        """The answer continues the paused run in a fresh ``run``; one that is neither yes nor
        no is refused and the task keeps waiting."""
        tools = (request.pending_input or {}).get("tools") or []
        if confirmations(request, tools) is None:
            raise InputRejectedError(
                "Answer yes or no (or send a data part {\"confirmed\": true|false}).",
                request.pending_input or None)
        return False

    async def cancel(self, request: HandlerRequest) -> bool:
        if not request.run_ref:
            return False
        try:
            await self._cancel_run(request.run_ref, request)
        except UpstreamError as exc:
            log.warning("agno_cancel_failed", run_ref=request.run_ref, reason=exc.reason)
            return False
        return True

    async def reattach(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        # The run went on in the background: joining it replays its events from the first
        # one, so the re-attached task gets the whole answer. Its time bound counts from here.
        if not request.run_ref:
            yield Failed(f"no {BACKEND} run to re-attach to")
            return
        run = AgnoRun(session_of(request), run_id=request.run_ref)
        deadline = self.settings.deadline(RUN)
        try:
            async with contextlib.aclosing(self._follow(
                    run, self._join(run, request, deadline), request, deadline)) as events:
                async for event in events:
                    yield event
        except UpstreamError as exc:
            yield Failed(exc.reason)

    # -- a task's run --------------------------------------------------------------

    async def _task(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        session_id = session_of(request)
        if request.session.get(SESSION_KEY) != session_id:
            yield SessionUpdate({SESSION_KEY: session_id})
        tools = (request.pending_input or {}).get("tools")
        deadline = self.settings.deadline(RUN)
        try:
            if tools and request.run_ref:
                run = AgnoRun(session_id, run_id=request.run_ref)
                call = self._continue(run, tools, request, deadline)
            elif has_input(request):
                run = AgnoRun(session_id)
                call = self._start(run, request, deadline)
            else:
                yield Rejected(f"the message has no text or data for {BACKEND}")
                return
            async with contextlib.aclosing(self._follow(run, call, request, deadline)) as events:
                async for event in events:
                    yield event
        except UpstreamError as exc:
            log.warning("agno_run_failed", endpoint_id=request.endpoint_id,
                        task_id=request.task_id, reason=exc.reason)
            yield Failed(exc.reason)

    async def _message_mode(self, task: AsyncIterator[HandlerEvent]) -> AsyncIterator[HandlerEvent]:
        """Only the memory and the final answer, as one Message (no task is created)."""
        async with contextlib.aclosing(task) as events:
            async for event in events:
                if isinstance(event, SessionUpdate):
                    yield event
                elif isinstance(event, InputRequired):
                    yield Failed(f"the agent asked for confirmation ({clip(event.prompt, 200)}), "
                                 "which response_mode message cannot answer: use response_mode task")
                elif isinstance(event, Completed | Failed | Canceled | Rejected):
                    yield self.answer(event)

    def _start(self, run: AgnoRun, request: HandlerRequest, deadline: Deadline) -> UpstreamCall:
        return self.upstream.call("POST", self.runs_path, request=request, deadline=deadline,
                                  events=True, form={
                                      "message": request_text(request), "stream": "true",
                                      "background": "true", "session_id": run.session_id,
                                      "user_id": request.backend_user()})

    def _continue(self, run: AgnoRun, tools: list[dict[str, Any]], request: HandlerRequest,
                  deadline: Deadline) -> UpstreamCall:
        decided = confirmations(request, tools) or {}
        answered = [{**t, "requires_confirmation": True,
                     "confirmed": decided.get(str(t.get("tool_call_id")), False)} for t in tools]
        return self.upstream.call(
            "POST", f"{self.runs_path}/{run.run_id}/continue", request=request, deadline=deadline,
            events=True, form={"tools": json.dumps(answered), "stream": "true",
                               "background": "true", "session_id": run.session_id,
                               "user_id": request.backend_user()})

    async def _follow(self, run: AgnoRun, call: UpstreamCall, request: HandlerRequest,
                      deadline: Deadline) -> AsyncIterator[HandlerEvent]:
        """The run's events until its terminal one. A stream that broke off (or ended early)
        while the run goes on is joined again after the last event seen; the run's state says
        how it ended when no stream does. A run past ``deadline`` or one whose frames make no
        sense is canceled and fails."""
        try:
            while True:
                try:
                    async with call:
                        async for frame in call.frames():
                            for event in run.feed(frame):
                                yield event
                            if run.terminal is not None:
                                break
                except (UnexpectedFrame, RunTimedOut):
                    raise
                except UpstreamError as exc:
                    if run.run_id is None:
                        raise
                    log.warning("agno_stream_lost", run_id=run.run_id, reason=exc.reason)
                if run.terminal is not None:
                    break
                if run.run_id is None:
                    raise UpstreamError(f"{BACKEND} closed the stream before the run started")
                run.terminal = run.from_state(await self._state(run, request, deadline))
                if run.terminal is not None:
                    break
                await deadline.within(asyncio.sleep(self.settings.poll_interval_seconds))
                call = self._join(run, request, deadline)
        except (UnexpectedFrame, RunTimedOut):
            await self._abandon(run, request)
            raise
        if isinstance(run.terminal, Failed):
            run.terminal = Failed(self.upstream.reason(run.terminal.reason))
        yield run.terminal

    def _join(self, run: AgnoRun, request: HandlerRequest, deadline: Deadline) -> UpstreamCall:
        """The run's stream again: the events after ``last_event_index`` (all of them when
        none was seen), then the live ones."""
        form = {"session_id": run.session_id}
        if run.last_event_index is not None:
            form["last_event_index"] = str(run.last_event_index)
        return self.upstream.call("POST", f"{self.runs_path}/{run.run_id}/resume",
                                  request=request, deadline=deadline, events=True, form=form)

    async def _state(self, run: AgnoRun, request: HandlerRequest,
                     deadline: Deadline) -> dict[str, Any]:
        try:
            return await self.upstream.json(
                "GET", f"{self.runs_path}/{run.run_id}?session_id={run.session_id}",
                request=request, deadline=deadline)
        except UpstreamError as exc:
            if exc.status == 404:
                raise UpstreamError(f"{BACKEND} no longer knows run {run.run_id}") from None
            raise

    # -- calls ---------------------------------------------------------------------

    async def _cancel_run(self, run_id: str, request: HandlerRequest) -> None:
        async with self.upstream.call(
                "POST", f"{self.runs_path}/{run_id}/cancel?session_id={session_of(request)}",
                request=request, retry=False):
            pass

    async def _abandon(self, run: AgnoRun, request: HandlerRequest) -> None:
        """Cancel a run the bridge gives up on (best effort)."""
        if run.run_id is None:
            return
        log.warning("agno_run_abandoned", run_id=run.run_id)
        try:
            await self._cancel_run(run.run_id, request)
        except UpstreamError as exc:
            log.warning("agno_cancel_failed", run_id=run.run_id, reason=exc.reason)
