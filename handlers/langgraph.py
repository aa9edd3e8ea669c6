"""LangGraph Agent Server handler: A2A tasks as runs of one assistant on LangGraph threads.

One A2A context is one LangGraph thread, created (``POST /threads``) on the context's first
message and kept in the context's handler memory; the thread holds the conversation, so
only the new message is sent. Each message streams a run (``POST
/threads/{id}/runs/stream``: ``messages-tuple`` for answer tokens, ``updates`` for node
outputs and interrupts). ``interrupt()`` in the graph pauses the task (INPUT_REQUIRED) and
the answer streams the next run on the thread with ``{"command": {"resume": answer}}``.
Cancel is ``POST /threads/{id}/runs/{run_id}/cancel?action=interrupt``.

A LangGraph stream just closes, whether the run succeeded, failed after its ``error``
event, or was canceled, so a run's outcome is always read from ``GET
/threads/{id}/runs/{run_id}``. A stream that broke off while the run goes on, and a run
re-attached after a gateway restart, are joined again (``GET .../runs/{run_id}/stream``,
replayed after the last event seen: runs are started resumable).

Following a run, cancel, re-attach and message mode are ``RunBridge``'s; this module supplies
the hooks and the frame mapper (``RunStream``). See docs/handlers.md for the settings and the
event mapping.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar

import structlog
from pydantic import Field, SecretStr, field_validator

from handlers.approvals import (
    HITL_URI,
    asking_approval,
    card_extension,
    decisions,
    decisions_or_refusal,
    pending_request,
)
from handlers.base import (
    Canceled,
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRejectedError,
    InputRequired,
    Progress,
    RunStarted,
    TextDelta,
)
from handlers.langgraph_approvals import approval_of, decisions_value, is_approval
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
    has_input,
    request_text,
)

__all__ = ["LangGraphHandler", "LangGraphSettings", "RunStream", "message_text", "run_ref"]

log = structlog.get_logger(__name__)

BACKEND = "LangGraph"
RUN = "the LangGraph run"
SESSION_KEY = "langgraph_thread_id"
STREAM_MODES = frozenset({"messages-tuple", "updates", "values", "custom", "events", "debug",
                          "tasks", "checkpoints"})
RUNNING = frozenset({"pending", "running"})
REPLAY_ALL = "0"
"""``Last-Event-ID`` before every event of a run (event ids are ``<ms>-<seq>``)."""
_PROMPT_KEYS = ("question", "prompt", "message", "description", "text")


class LangGraphSettings(RunSettings):
    """The response mode, ``run_timeout_seconds``, the retries and ``poll_interval_seconds``
    come from ``RunSettings``."""

    langgraph_api_url: str = "http://127.0.0.1:2024"
    """Base URL of the LangGraph Agent Server (``langgraph dev`` listens on port 2024)."""
    langgraph_assistant_id: str = "agent"
    """The assistant to run: an assistant id or a graph id of ``langgraph.json``."""
    langgraph_api_key: SecretStr | None = None
    """Sent as ``langgraph_api_key_header`` (a deployment's LangSmith API key); ``env:NAME``
    in endpoint rows."""
    langgraph_api_key_header: str = "X-Api-Key"
    """The header that carries ``langgraph_api_key``."""
    langgraph_stream_mode: tuple[str, ...] = ("messages-tuple", "updates")
    """Stream modes of each run: ``updates`` is needed (interrupts, the final answer),
    ``messages-tuple`` streams tokens, ``custom`` becomes progress; others are ignored."""
    langgraph_timeout: float = Field(60.0, gt=0)
    """Seconds LangGraph may stay silent on a call (its streams send a heartbeat every 5 s)."""
    poll_interval_seconds: float = Field(0.5, gt=0)
    """Wait before joining the stream of a run again that is still going on."""

    @field_validator("langgraph_stream_mode")
    @classmethod
    def _stream_modes(cls, modes: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(modes) - STREAM_MODES)
        if unknown:
            raise ValueError(f"unknown or unsupported stream modes {unknown} (use messages-tuple "
                             f"for tokens; one of {sorted(STREAM_MODES)})")
        if "updates" not in modes:
            raise ValueError("must include 'updates' (interrupts and the final answer come there)")
        return tuple(dict.fromkeys(modes))


def run_ref(thread_id: str, run_id: str) -> str:
    return f"{thread_id}:{run_id}"


def parse_ref(ref: str | None) -> tuple[str, str] | None:
    thread_id, _, run_id = (ref or "").partition(":")
    return (thread_id, run_id) if thread_id and run_id else None


def message_text(content: Any) -> str:
    """The text of a LangChain message ``content``: a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b if isinstance(b, str) else str(b.get("text") or "")
                       for b in content
                       if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text"))
    return ""


def _objects(value: Any) -> list[dict[str, Any]]:
    """The JSON objects of a list (a single object counts as a list of one)."""
    if isinstance(value, dict):
        return [value]
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def interrupt_prompt(value: Any) -> str:
    """What the client is asked: the interrupt's text, or its question field, or its JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in _PROMPT_KEYS:
            if isinstance(value.get(key), str) and value[key]:
                return value[key]
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass(slots=True)
class RunStream:
    """What the frames of one run (one stream, or its joins) said so far."""

    thread_id: str
    run_id: str | None = None
    last_event_id: str | None = None
    error: str | None = None
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    answer: str | None = None
    """The text of the run's last AI message in ``updates``."""
    usage: dict[str, int] = field(default_factory=dict)
    terminal: HandlerEvent | None = None
    """The outcome, from the run's status once it ended (the stream never says)."""
    rejoined: bool = False
    """The stream was joined again after a break: events may be missing (the in-memory
    server numbers events per millisecond, so a resumed stream skips the rest of one)."""
    _streamed_id: str | None = None
    _streamed: str = ""
    """The text streamed of the AI message ``_streamed_id`` (the answer without ``updates``)."""

    @property
    def final_text(self) -> str | None:
        return self.answer if self.answer is not None else (self._streamed or None)

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """The events of one frame; ``UnexpectedFrame`` for a shape this bridge does not know."""
        if frame.id:
            self.last_event_id = frame.id
        kind = frame.event.partition("|")[0]  # subgraph events: "updates|<namespace>"
        if kind == "metadata":
            return self._metadata(frame.object(BACKEND))
        if kind == "messages":
            return self._message(frame)
        if kind == "updates":
            return self._updates(frame.object(BACKEND))
        if kind == "custom":
            return [Progress("custom", data=_custom_data(frame))]
        if kind == "error":
            data = frame.object(BACKEND)
            name, message = data.get("error"), data.get("message")
            detail = ": ".join(str(p) for p in (name, message) if p) or "no detail"
            self.error = clip(f"{RUN} failed: {detail}")
        return []

    def _metadata(self, data: dict[str, Any]) -> list[HandlerEvent]:
        run_id = data.get("run_id")
        if run_id is None or self.run_id is not None:
            return []  # a join's lifecycle notes, or the metadata of a run already known
        if not isinstance(run_id, str) or not run_id:
            raise UnexpectedFrame(BACKEND, "a metadata event whose run_id is not a string")
        self.run_id = run_id
        return [RunStarted(run_ref(self.thread_id, run_id))]

    def _message(self, frame: SSEFrame) -> list[HandlerEvent]:
        try:
            value = json.loads(frame.data)
        except ValueError:
            raise UnexpectedFrame(BACKEND, "data that is not JSON") from None
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], dict)):
            raise UnexpectedFrame(BACKEND, "a messages event that is not [message, metadata]")
        chunk = value[0]
        if chunk.get("type") not in ("AIMessageChunk", "ai"):
            return []  # tool results and other nodes' messages are not the answer
        message_id = chunk.get("id")
        if message_id == self._streamed_id and chunk.get("type") == "ai":
            return []  # the whole message after its tokens
        if message_id != self._streamed_id:
            self._streamed_id, self._streamed = message_id, ""
        text = message_text(chunk.get("content"))
        if not text:
            return []
        self._streamed += text
        return [TextDelta(text)]

    def _updates(self, data: dict[str, Any]) -> list[HandlerEvent]:
        events: list[HandlerEvent] = []
        for node, update in data.items():
            if node == "__interrupt__":
                self.interrupts += [{"id": i.get("id"), "value": i.get("value")}
                                    for i in _objects(update)]
            elif isinstance(update, dict):
                for message in _objects(update.get("messages")):
                    events += self._node_message(message)
        return events

    def _node_message(self, message: dict[str, Any]) -> list[HandlerEvent]:
        kind = message.get("type")
        if kind == "tool":
            return [Progress("tool_completed", data={
                "tool": message.get("name") or "", "tool_call_id": message.get("tool_call_id"),
                "status": message.get("status")})]
        if kind != "ai":
            return []
        text = message_text(message.get("content"))
        if text:
            self.answer = text
        for key, count in (message.get("usage_metadata") or {}).items():
            if isinstance(count, int):
                self.usage[key] = self.usage.get(key, 0) + count
        return [Progress("tool_started", data={"tool": call.get("name"),
                                               "tool_call_id": call.get("id")})
                for call in _objects(message.get("tool_calls"))]

    def input_required(self) -> InputRequired:
        """The question: the interrupts as they came and, when some ask to approve tool
        calls, their structured approval request."""
        data: dict[str, Any] = {"interrupts": self.interrupts}
        prompts = [interrupt_prompt(i["value"]) for i in self.interrupts
                   if not is_approval(i["value"])]
        approval = approval_of(self.interrupts)
        if approval is not None:
            prompts.insert(0, approval[0])
            data[HITL_URI] = approval[1]
        return asking_approval("\n".join(prompts), data)


def _custom_data(frame: SSEFrame) -> dict[str, Any]:
    try:
        value = json.loads(frame.data)
    except ValueError:
        raise UnexpectedFrame(BACKEND, "data that is not JSON") from None
    return value if isinstance(value, dict) else {"value": value}


def resume_value(request: HandlerRequest, interrupts: list[dict[str, Any]]) -> Any:
    """``command.resume`` for the client's answer: its data part (or its text), or for an
    approval interrupt the decisions the answer makes; for several interrupts a map by
    interrupt id (the data part's own map when it names them)."""
    answer: Any = request.data[0] if request.data else request.text
    decided = decisions(request) if pending_request(request.pending_input) else None

    def value_for(interrupt: dict[str, Any]) -> Any:
        if decided is not None and is_approval(interrupt.get("value")):
            return decisions_value(interrupt, decided)
        return answer

    ids = [i.get("id") for i in interrupts if i.get("id")]
    if len(ids) < 2:
        return value_for(interrupts[0]) if interrupts else answer
    if decided is None and isinstance(answer, dict) and answer and set(answer) <= set(ids):
        return answer
    return {i["id"]: value_for(i) for i in interrupts if i.get("id")}


class LangGraphHandler(RunBridge[RunStream]):
    """Runs of one assistant of a LangGraph Agent Server, one thread per context."""

    Settings: ClassVar[type[HandlerSettings]] = LangGraphSettings
    supports_reattach: ClassVar[bool] = True
    settings: LangGraphSettings
    run_name = RUN
    log_name = "langgraph"
    failure_log = "langgraph_run_failed"
    question = "the graph asked for input"

    def make_upstream(self) -> Upstream:
        s = self.settings
        return Upstream.for_backend(self.http, BACKEND, s, url=s.langgraph_api_url,
                                    timeout=s.langgraph_timeout, api_key=s.langgraph_api_key,
                                    key_header=s.langgraph_api_key_header, bearer=False)

    async def resume(self, request: HandlerRequest) -> bool:
        """The answer goes in a fresh ``run`` (the interrupted run has ended); an empty one is
        refused, the task keeps waiting."""
        if not has_input(request):
            raise InputRejectedError("Send the answer to the graph's question as text or a data "
                                     "part.", request.pending_input or None)
        decided = decisions_or_refusal(request)
        if decided is None and pending_request(request.pending_input):
            raise InputRejectedError(
                "Answer yes or no, or send a tool_approval_response data part (see the "
                "request's tools).", request.pending_input or None)
        return False

    def card_fields(self) -> dict[str, Any]:
        # editable where the graph's interrupt allows "edit" (the HITL middleware's shape)
        return {"extensions": [card_extension(editable=True)]}

    # -- the hooks of RunBridge -------------------------------------------------------

    async def conversation(self, request: HandlerRequest, deadline: Deadline, *,
                           lost: bool) -> tuple[str, dict[str, Any]]:
        thread_id = None if lost else request.session.get(SESSION_KEY)
        if thread_id:
            return thread_id, {}
        thread = await self.upstream.json(
            "POST", "/threads", {"metadata": {"a2a_owner": request.backend_user(per_context=True)}},
            request=request, deadline=deadline)
        thread_id = thread.get("thread_id")
        if not isinstance(thread_id, str) or not thread_id:
            raise UpstreamError(f"{BACKEND} created a thread but returned no thread id")
        return thread_id, {SESSION_KEY: thread_id}

    async def conversation_lost(self, exc: UpstreamError, run: RunStream, request: HandlerRequest,
                                deadline: Deadline) -> bool:
        """True when a run was refused because the server no longer knows its thread, and
        the message can go to a new thread (a new message, not an answer to a question)."""
        if exc.status != 404 or run.run_id is not None:
            return False
        try:
            await self._thread(run, request, deadline)
        except UpstreamError as missing:
            if missing.status != 404:
                raise
            if (request.pending_input or {}).get("interrupts"):
                raise UpstreamError(f"{BACKEND} no longer knows thread {run.thread_id}, so "
                                    "its question cannot be answered") from None
            log.warning("langgraph_thread_lost", thread_id=run.thread_id)
            return True
        return False

    async def start(self, thread_id: str, request: HandlerRequest,
                    deadline: Deadline) -> tuple[RunStream, UpstreamCall]:
        body: dict[str, Any] = {
            "assistant_id": self.settings.langgraph_assistant_id,
            "stream_mode": list(self.settings.langgraph_stream_mode),
            "stream_resumable": True,
            "on_disconnect": "continue",  # a gateway restart re-attaches; cancel is explicit
            "metadata": correlation_metadata(request),  # the run's own, shown with the run
        }
        interrupts = (request.pending_input or {}).get("interrupts")
        if interrupts:
            body["command"] = {"resume": resume_value(request, interrupts)}
        else:
            body["input"] = {"messages": [{"role": "user", "content": request_text(request)}]}
        return RunStream(thread_id), self.upstream.call(
            "POST", f"/threads/{thread_id}/runs/stream", body, request=request,
            deadline=deadline, events=True)

    def join(self, run: RunStream, request: HandlerRequest, deadline: Deadline) -> UpstreamCall:
        """The run's stream again, after the last event seen (all of them on a re-attach:
        nothing is missing then)."""
        call = self.upstream.call(
            "GET", f"/threads/{run.thread_id}/runs/{run.run_id}/stream?stream_mode="
            + urllib.parse.quote(json.dumps(list(self.settings.langgraph_stream_mode))),
            request=request, deadline=deadline, events=True)
        if run.last_event_id:
            call.headers["Last-Event-ID"] = run.last_event_id
        run.rejoined = run.rejoined or run.last_event_id != REPLAY_ALL
        return call

    async def status(self, run: RunStream, request: HandlerRequest,
                     deadline: Deadline) -> list[HandlerEvent]:
        """The outcome once the run's status says it ended (a LangGraph stream just closes)."""
        try:
            state = await self.upstream.json(
                "GET", f"/threads/{run.thread_id}/runs/{run.run_id}", request=request,
                deadline=deadline)
        except UpstreamError as exc:
            if exc.status == 404:
                raise UpstreamError(f"{BACKEND} no longer knows run {run.run_id}") from None
            raise
        status = state.get("status")
        if not isinstance(status, str):
            raise UnexpectedFrame(BACKEND, "a run without a status")
        if status not in RUNNING:
            run.terminal = await self._outcome(run, status, request, deadline)
        return []

    def run_of(self, request: HandlerRequest) -> RunStream | None:
        # The run was started resumable: joining it replays its events from the first one.
        ref = parse_ref(request.run_ref)
        return RunStream(ref[0], run_id=ref[1], last_event_id=REPLAY_ALL) if ref else None

    async def cancel_run(self, run: RunStream, request: HandlerRequest) -> None:
        async with self.upstream.call(
                "POST", f"/threads/{run.thread_id}/runs/{run.run_id}/cancel?action=interrupt",
                request=request, retry=False):
            pass

    # -- the outcome ---------------------------------------------------------------

    async def _outcome(self, run: RunStream, status: str, request: HandlerRequest,
                       deadline: Deadline) -> HandlerEvent:
        if status == "success":
            if run.interrupts:
                return run.input_required()
            if run.final_text is None or run.rejoined:
                # events may be missing: the thread has the question or the answer
                return await self._thread_outcome(run, request, deadline)
            return Completed(text=run.final_text, metadata=_metadata(run))
        if status == "error":
            return Failed(run.error or await self._thread_error(run, request, deadline))
        if status == "interrupted":
            return Canceled(f"{RUN} was interrupted")
        if status == "timeout":
            return Failed(f"{BACKEND} stopped the run at its own time limit")
        return Failed(f"{RUN} ended with an unknown status ({clip(status, 40)})")

    async def _thread_outcome(self, run: RunStream, request: HandlerRequest,
                              deadline: Deadline) -> HandlerEvent:
        thread = await self._thread(run, request, deadline)
        for waiting in (thread.get("interrupts") or {}).values():
            run.interrupts += [{"id": i.get("id"), "value": i.get("value")}
                               for i in _objects(waiting)]
        if run.interrupts:
            return run.input_required()
        values = thread.get("values") if isinstance(thread.get("values"), dict) else {}
        messages = _objects(values.get("messages"))
        last = messages[-1] if messages else {}
        text = message_text(last.get("content")) if last.get("type") == "ai" else ""
        return Completed(text=text, metadata=_metadata(run))

    async def _thread_error(self, run: RunStream, request: HandlerRequest,
                            deadline: Deadline) -> str:
        thread = await self._thread(run, request, deadline)
        error = thread.get("error") if isinstance(thread.get("error"), dict) else {}
        detail = ": ".join(str(error[k]) for k in ("error", "message") if error.get(k))
        return clip(f"{RUN} failed: {detail or 'no detail'}")

    async def _thread(self, run: RunStream, request: HandlerRequest,
                      deadline: Deadline) -> dict[str, Any]:
        return await self.upstream.json("GET", f"/threads/{run.thread_id}", request=request,
                                        deadline=deadline)


def _metadata(run: RunStream) -> dict[str, Any]:
    metadata: dict[str, Any] = {"langgraph_thread_id": run.thread_id,
                                "langgraph_run_id": run.run_id}
    if run.usage:
        metadata["usage"] = run.usage
    return metadata
