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

Following a run, cancel, re-attach and message mode are ``RunBridge``'s; this module supplies
the hooks and the frame mapper (``AgnoRun``). See docs/handlers.md for the settings and the
event mapping.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import Field, SecretStr

from handlers.approvals import (
    HITL_URI,
    ApprovalAnswerError,
    AskedCall,
    approval_request,
    asking_approval,
    call_text,
    card_extension,
    decisions,
    structured_answer,
    yes_or_no,
)
from handlers.base import (
    Canceled,
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRejectedError,
    Progress,
    RunStarted,
    TextDelta,
)
from handlers.run_bridge import RunBridge, RunSettings
from handlers.upstream import (
    Deadline,
    SSEFrame,
    UnexpectedFrame,
    Upstream,
    UpstreamCall,
    UpstreamError,
    clip,
    correlation_metadata,
    request_text,
)

__all__ = ["AgnoHandler", "AgnoRun", "AgnoSettings", "confirmations"]

BACKEND = "Agno"
RUN = "the Agno run"
SESSION_KEY = "agno_session_id"
RUNNING = frozenset({"PENDING", "RUNNING"})
CHOICES = ["yes", "no"]


class AgnoSettings(RunSettings):
    """The response mode, ``run_timeout_seconds``, the retries and ``poll_interval_seconds``
    come from ``RunSettings``."""

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
    prompt = "\n".join(
        f"Confirm the tool call {call_text(t.get('tool_name'), t.get('tool_args'))}? "
        "Answer yes or no."
        for t in waiting
    )
    # Agno continues a confirmed tool with the arguments it proposed: none are edited here
    asked = approval_request(
        [AskedCall(str(t.get("tool_call_id")), str(t.get("tool_name") or ""),
                   t["tool_args"] if isinstance(t.get("tool_args"), dict) else {})
         for t in waiting], hint=prompt)
    return asking_approval(prompt, {
        "run_id": run.run_id, "choices": CHOICES,
        "tools": [{k: t.get(k) for k in ("tool_call_id", "tool_name", "tool_args")}
                  for t in waiting], HITL_URI: asked})


def confirmations(request: HandlerRequest, tools: list[dict[str, Any]]) -> dict[str, bool] | None:
    """Each waiting tool's confirmation from the answer: a ``tool_approval_response``
    (``handlers.approvals``; raises ``ApprovalAnswerError`` when it does not fit), a data part
    ``{"confirmed": bool}`` (or ``{"confirmed": {tool_call_id: bool}}`` naming every tool),
    or a yes/no word; None when the answer says neither."""
    ids = [str(t.get("tool_call_id")) for t in tools]
    if structured_answer(request) is not None:
        decided = decisions(request) or {}
        return {i: decided[i].approved for i in ids if i in decided}
    for data in request.data:
        value = data.get("confirmed", data.get("approved"))
        if isinstance(value, dict):
            decided = {i: yes_or_no(value.get(i)) for i in ids}
            if all(d is not None for d in decided.values()):
                return decided  # type: ignore[return-value]
            return None
        if value is not None:
            decision = yes_or_no(value)
            return None if decision is None else dict.fromkeys(ids, decision)
    decision = yes_or_no(request.text) if request.text.strip() else None
    return None if decision is None else dict.fromkeys(ids, decision)


def session_of(request: HandlerRequest) -> str:
    """The Agno session of the request's context: the one kept in the context's memory, else
    one named after the caller and the context (so two callers never share a session)."""
    return request.session.get(SESSION_KEY) or request.backend_user(per_context=True)


class AgnoHandler(RunBridge[AgnoRun]):
    """Runs of one agent of an Agno AgentOS."""

    Settings: ClassVar[type[HandlerSettings]] = AgnoSettings
    supports_reattach: ClassVar[bool] = True
    settings: AgnoSettings
    run_name = RUN
    log_name = "agno"
    failure_log = "agno_run_failed"
    question = "the agent asked for confirmation"
    session_key = SESSION_KEY

    def make_upstream(self) -> Upstream:
        s = self.settings
        return Upstream.for_backend(self.http, BACKEND, s, url=s.agno_api_url,
                                    timeout=s.agno_timeout, api_key=s.agno_api_key)

    @property
    def runs_path(self) -> str:
        return f"/agents/{urllib.parse.quote(self.settings.agno_agent_id, safe='')}/runs"

    async def resume(self, request: HandlerRequest) -> bool:
        """The answer continues the paused run in a fresh ``run``; one that is neither yes nor
        no is refused and the task keeps waiting."""
        tools = (request.pending_input or {}).get("tools") or []
        try:
            decided = confirmations(request, tools)
        except ApprovalAnswerError as exc:
            raise InputRejectedError(f"Not a valid answer to the approval request: {exc}.",
                                     request.pending_input or None) from None
        if decided is None:
            raise InputRejectedError(
                "Answer yes or no (or send a data part {\"confirmed\": true|false}).",
                request.pending_input or None)
        return False

    def card_fields(self) -> dict[str, Any]:
        return {"extensions": [card_extension(editable=False)]}

    # -- the hooks of RunBridge -------------------------------------------------------

    def needs_input(self, request: HandlerRequest) -> bool:
        return not _paused_tools(request)  # an answer continues the paused run

    async def start(self, session_id: str, request: HandlerRequest,
                    deadline: Deadline) -> tuple[AgnoRun, UpstreamCall]:
        """The run (in the background, streamed), or the paused run continued with each
        waiting tool confirmed or not."""
        tools = _paused_tools(request)
        run = AgnoRun(session_id, run_id=request.run_ref if tools else None)
        form = {"stream": "true", "background": "true", "session_id": session_id,
                "user_id": request.backend_user()}
        if not tools:
            # the run's metadata (kept with the run), a JSON object as AgentOS reads it
            metadata = json.dumps(correlation_metadata(request))
            return run, self.upstream.call("POST", self.runs_path, request=request,
                                           deadline=deadline, events=True,
                                           form={"message": request_text(request),
                                                 "metadata": metadata, **form})
        decided = confirmations(request, tools) or {}
        answered = [{**t, "requires_confirmation": True,
                     "confirmed": decided.get(str(t.get("tool_call_id")), False)} for t in tools]
        return run, self.upstream.call(
            "POST", f"{self.runs_path}/{run.run_id}/continue", request=request, deadline=deadline,
            events=True, form={"tools": json.dumps(answered), **form})

    def join(self, run: AgnoRun, request: HandlerRequest, deadline: Deadline) -> UpstreamCall:
        """The run's stream again: the events after ``last_event_index`` (all of them when
        none was seen), then the live ones."""
        form = {"session_id": run.session_id}
        if run.last_event_index is not None:
            form["last_event_index"] = str(run.last_event_index)
        return self.upstream.call("POST", f"{self.runs_path}/{run.run_id}/resume",
                                  request=request, deadline=deadline, events=True, form=form)

    async def status(self, run: AgnoRun, request: HandlerRequest,
                     deadline: Deadline) -> list[HandlerEvent]:
        try:
            state = await self.upstream.json(
                "GET", f"{self.runs_path}/{run.run_id}?session_id={run.session_id}",
                request=request, deadline=deadline)
        except UpstreamError as exc:
            if exc.status == 404:
                raise UpstreamError(f"{BACKEND} no longer knows run {run.run_id}") from None
            raise
        run.terminal = run.from_state(state)
        return []

    def run_of(self, request: HandlerRequest) -> AgnoRun | None:
        # The run went on in the background: joining it replays its events from the first one.
        return AgnoRun(session_of(request), run_id=request.run_ref) if request.run_ref else None

    async def cancel_run(self, run: AgnoRun, request: HandlerRequest) -> None:
        async with self.upstream.call(
                "POST", f"{self.runs_path}/{run.run_id}/cancel?session_id={run.session_id}",
                request=request, retry=False):
            pass


def _paused_tools(request: HandlerRequest) -> list[dict[str, Any]]:
    """The tools of the paused run the request answers (none: the request starts a run)."""
    tools = (request.pending_input or {}).get("tools")
    return tools if tools and request.run_ref else []
