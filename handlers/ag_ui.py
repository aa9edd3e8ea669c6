"""Agents served over AG-UI (ag-ui-protocol 1.0): LangGraph (``ag-ui-langgraph``), Microsoft
Agent Framework (``agent-framework-ag-ui``), Google ADK (``ag-ui-adk``) and any other adapter.

One A2A message is one AG-UI run: ``POST <ag_ui_url>`` with a ``RunAgentInput`` (threadId =
the caller's A2A context, runId = the task, then a fresh one per resume) answered by one event
stream. The protocol has no cancel call and no re-join: closing the stream is the only way to
stop a run, and a run cannot be followed again after a gateway restart.

History (``ag_ui_history``): ``new`` sends only the new message, for servers that keep the
thread (LangGraph's checkpointer, ADK's session); ``full`` sends the whole conversation, for
stateless servers (Agent Framework by default). The full conversation is the server's own
``MESSAGES_SNAPSHOT`` (its message ids, which LangGraph needs to recognise a message) merged
into what was sent, kept in the context's handler memory and bounded by
``ag_ui_max_history_bytes``. The default follows ``ag_ui_adapter``.

Interrupts: ``RUN_FINISHED.outcome`` of type ``interrupt`` (AG-UI 1.0) or an adapter's older
signal (LangGraph's ``CUSTOM on_interrupt``, an ``adk_request_confirmation`` tool call, Agent
Framework's ``CUSTOM function_approval_request``) makes the task INPUT_REQUIRED with the
interrupts in a data part. The client's answer (approve/deny as text, a data part
``{"approved": bool}``, or ``{"payload": {...}}`` sent as it is) goes in the next run: a
``resume`` entry per interrupt (1.0), LangGraph's ``forwardedProps.command.resume``, or ADK's
confirmation tool message. Approve and deny payloads differ per adapter (``ADAPTERS``).

See docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr

from handlers.approvals import (
    HITL_URI,
    AskedCall,
    approval_request,
    asking_approval,
    call_text,
    card_extension,
    confirmation_answer,
    decisions,
    decisions_or_refusal,
)
from handlers.base import (
    ArtifactDelta,
    Canceled,
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    InputRejectedError,
    InputRequired,
    Progress,
    SessionUpdate,
    TextDelta,
    data_part,
)
from handlers.bridge import StreamingBridge
from handlers.upstream import (
    BridgeSettings,
    SSEFrame,
    UnexpectedFrame,
    Upstream,
    clip,
)
from handlers.upstream.request import request_text

__all__ = ["ADAPTERS", "AgUiHandler", "AgUiSettings", "RunEvents", "resume_fields"]

BACKEND = "the AG-UI agent"
INTERRUPTS_KEY = "ag_ui_interrupts"
MESSAGES_KEY = "ag_ui_messages"
ADK_CONFIRMATION = "adk_request_confirmation"
SYNTHETIC_TOOLS = frozenset({ADK_CONFIRMATION, "confirm_changes"})
"""Tool calls an adapter makes up to carry a question, not tools the agent runs."""
MAX_TOOL_ARGS_CHARS = 64_000
"""Tool-call arguments kept per call (for the question); longer ones are cut."""

Adapter = Literal["langgraph", "agent-framework", "adk", "generic"]
History = Literal["new", "full"]


@dataclass(frozen=True, slots=True)
class AdapterDefaults:
    """What an adapter expects: the history it needs, and the ``resume`` entry's status and
    payload that approve or deny an interrupt."""

    history: History
    approve: tuple[str, dict[str, Any] | None]
    deny: tuple[str, dict[str, Any] | None]


ADAPTERS: dict[str, AdapterDefaults] = {
    # A cancelled resume reaches the interrupted node as {"__agui_cancelled__": true}.
    "langgraph": AdapterDefaults("new", ("resolved", {"approved": True}), ("cancelled", None)),
    "agent-framework": AdapterDefaults(
        "full", ("resolved", {"approved": True}), ("resolved", {"approved": False})),
    "adk": AdapterDefaults(
        "new", ("resolved", {"confirmed": True}), ("resolved", {"confirmed": False})),
    "generic": AdapterDefaults("full", ("resolved", {"approved": True}), ("cancelled", None)),
}


class AgUiSettings(BridgeSettings):
    ag_ui_url: str = "http://127.0.0.1:8000/"
    """The agent's AG-UI route (the URL a frontend POSTs ``RunAgentInput`` to)."""
    ag_ui_api_key: SecretStr | None = None
    """Sent as ``Authorization: Bearer <key>`` (or in ``ag_ui_api_key_header``); ``env:NAME``."""
    ag_ui_api_key_header: str = "Authorization"
    """The header the key goes in (a Bearer value only in ``Authorization``)."""
    ag_ui_adapter: Adapter = "generic"
    """The server's adapter: picks the history default and the approve/deny payloads."""
    ag_ui_history: History | None = None
    """``new`` or ``full`` (see the module docstring); unset: the adapter's default."""
    ag_ui_timeout: float = Field(default=600.0, gt=0)
    """Seconds the server may stay silent (connect: at most 10 s) before the task fails."""
    ag_ui_state_artifact: bool = False
    """Keep the run's last ``STATE_SNAPSHOT`` as a data artifact named ``state``."""
    ag_ui_max_history_bytes: int = Field(default=262_144, gt=0)
    """Largest conversation (JSON) kept for ``full`` history; the oldest turns go first."""

    @property
    def adapter(self) -> AdapterDefaults:
        return ADAPTERS[self.ag_ui_adapter]

    @property
    def history(self) -> History:
        return self.ag_ui_history or self.adapter.history


# -- what is sent -------------------------------------------------------------------------


def user_message(request: HandlerRequest) -> dict[str, Any]:
    message_id = request.message.message_id or str(uuid.uuid4())
    return {"id": message_id, "role": "user", "content": request_text(request)}


def conversation(request: HandlerRequest) -> list[dict[str, Any]]:
    """The messages before this one: the kept conversation, else the context's turns."""
    kept = request.session.get(MESSAGES_KEY)
    if isinstance(kept, list) and all(isinstance(m, dict) for m in kept):
        return list(kept)
    return [{"id": f"{request.context_id}-{n}", "role": "assistant" if t.role == "agent"
             else "user", "content": t.text} for n, t in enumerate(request.history)]


def pending_interrupts(request: HandlerRequest) -> list[dict[str, Any]]:
    value = (request.pending_input or {}).get(INTERRUPTS_KEY)
    return [i for i in value if isinstance(i, dict)] if isinstance(value, list) else []


def resume_fields(request: HandlerRequest, settings: AgUiSettings,
                  interrupts: list[dict[str, Any]]) -> tuple[dict[str, Any],
                                                             list[dict[str, Any]]]:
    """The body fields and the messages that answer ``interrupts`` with the client's answer."""
    payload = next((d["payload"] for d in request.data if isinstance(d.get("payload"), dict)),
                   None)
    decided = decisions(request) or {}  # a structured answer decides each interrupt by id
    answered = bool(confirmation_answer(request))
    fields: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    resume = []
    for interrupt in interrupts:
        known = decided.get(interrupt["id"])
        approved = known.approved if known is not None else answered
        status, default_payload = settings.adapter.approve if approved else settings.adapter.deny
        if payload is not None:
            status = "resolved"
        sent = payload if payload is not None else default_payload
        via = interrupt.get("via")
        if via == "command":  # a null resume is no answer to ag-ui-langgraph
            resumed = sent if sent is not None else {"approved": approved}
            fields["forwardedProps"] = {"command": {"resume": resumed}}
        elif via == "tool_message":
            messages.append({"id": str(uuid.uuid4()), "role": "tool",
                             "toolCallId": interrupt["id"],
                             "content": json.dumps(sent if sent is not None
                                                   else {"confirmed": approved})})
        else:
            entry: dict[str, Any] = {"interruptId": interrupt["id"], "status": status}
            if sent is not None and status == "resolved":
                entry["payload"] = sent
            resume.append(entry)
    if resume:
        fields["resume"] = resume
    return fields, messages


# -- what comes back ----------------------------------------------------------------------


def _string(data: dict[str, Any], key: str, what: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise UnexpectedFrame(BACKEND, f"{what} without a {key!r} string")
    return value


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass(slots=True)
class ToolCall:
    name: str
    args: list[str] = field(default_factory=list)
    size: int = 0
    answered: bool = False

    def arguments(self) -> dict[str, Any]:
        return _json_object("".join(self.args))


class RunEvents:
    """Maps the events of one AG-UI run to handler events.

    ``feed`` returns the events to yield now; ``RUN_FINISHED`` or ``RUN_ERROR`` sets
    ``terminal`` (later events are ignored); ``finish`` gives it, or ``Failed`` when the
    stream ended without one. Event types this bridge has no use for (steps, RAW, reasoning,
    activities, ...) are skipped, so a newer adapter's additions do not fail a run.
    """

    def __init__(self, sent: list[dict[str, Any]], *, keep_messages: bool,
                 max_history_bytes: int, state_artifact: bool) -> None:
        self.sent = sent
        self.keep_messages = keep_messages
        self.max_history_bytes = max_history_bytes
        self.state_artifact = state_artifact
        self.done = False
        self.started = False
        self.deltas: list[str] = []
        self.message_id: str | None = None
        self.separate = False
        self.tools: dict[str, ToolCall] = {}
        self.legacy: list[dict[str, Any]] = []
        self.usage = {"input_tokens": 0, "output_tokens": 0}
        self.counted = False
        self.snapshot: list[dict[str, Any]] | None = None
        self.state: dict[str, Any] | None = None
        self.terminal: list[HandlerEvent] | None = None

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        if frame.done:
            self.done = True
            return []
        if self.terminal is not None:
            return []
        data = frame.object(BACKEND)
        kind = data.get("type")
        if not isinstance(kind, str):
            raise UnexpectedFrame(BACKEND, "an event without a type")
        on = self._on.get(kind)
        return on(self, data) if on else []

    @property
    def ended(self) -> bool:
        return self.terminal is not None

    def finish(self) -> list[HandlerEvent]:
        if self.terminal is not None:
            return self.terminal
        return [Failed("the AG-UI agent closed the stream before the run finished")]

    # -- events ---------------------------------------------------------------------------

    def _run_started(self, data: dict[str, Any]) -> list[HandlerEvent]:
        if self.started:
            return []
        self.started = True
        ids = {k: data[k] for k in ("threadId", "runId") if isinstance(data.get(k), str)}
        return [Progress("working", data={"ag_ui": ids} if ids else {})]

    def _text_start(self, data: dict[str, Any]) -> list[HandlerEvent]:
        message_id = data.get("messageId")
        if message_id != self.message_id and self.deltas:
            self.separate = True
        self.message_id = message_id if isinstance(message_id, str) else None
        return []

    def _text(self, data: dict[str, Any]) -> list[HandlerEvent]:
        if data.get("role") not in (None, "assistant"):
            return []
        if data["type"] == "TEXT_MESSAGE_CHUNK" and data.get("messageId") != self.message_id:
            self._text_start(data)
        delta = data.get("delta", "" if data["type"] == "TEXT_MESSAGE_CHUNK" else None)
        if not isinstance(delta, str):
            raise UnexpectedFrame(BACKEND, "a text message event without a 'delta' string")
        if not delta:
            return []
        events: list[HandlerEvent] = []
        if self.separate:
            # Live and stored text agree: the break between two messages streams too.
            self.separate = False
            self.deltas.append("\n\n")
            events.append(TextDelta("\n\n"))
        self.deltas.append(delta)
        events.append(TextDelta(delta))
        return events

    def _tool_start(self, data: dict[str, Any]) -> list[HandlerEvent]:
        call_id = _string(data, "toolCallId", "a tool call start")
        name = _string(data, "toolCallName", "a tool call start")
        self.tools[call_id] = ToolCall(name)
        if name in SYNTHETIC_TOOLS:
            return []
        return [Progress("tool_started", data={"tool": name, "tool_call_id": call_id})]

    def _tool_args(self, data: dict[str, Any]) -> list[HandlerEvent]:
        call = self.tools.get(_string(data, "toolCallId", "tool call arguments"))
        delta = _string(data, "delta", "tool call arguments")
        if call is not None and call.size + len(delta) <= MAX_TOOL_ARGS_CHARS:
            call.args.append(delta)
            call.size += len(delta)
        return []

    def _tool_result(self, data: dict[str, Any]) -> list[HandlerEvent]:
        call_id = _string(data, "toolCallId", "a tool call result")
        call = self.tools.get(call_id)
        if call is not None:
            call.answered = True
        content = data.get("content")
        result = clip(content if isinstance(content, str) else json.dumps(content), 500)
        return [Progress("tool_completed", data={
            "tool": call.name if call else "", "tool_call_id": call_id, "result": result})]

    def _state(self, data: dict[str, Any]) -> list[HandlerEvent]:
        if isinstance(data.get("snapshot"), dict):
            self.state = data["snapshot"]
        return []

    def _messages(self, data: dict[str, Any]) -> list[HandlerEvent]:
        messages = data.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise UnexpectedFrame(BACKEND, "a messages snapshot that is not a list of objects")
        self.snapshot = messages
        return []

    def _custom(self, data: dict[str, Any]) -> list[HandlerEvent]:
        name, value = data.get("name"), data.get("value")
        if name == "usage" and isinstance(value, dict):
            self._count(value)
        elif name == "on_interrupt":  # LangGraph without emit_interrupt_outcome
            asked = _json_object(value) if isinstance(value, str) else (
                value if isinstance(value, dict) else {})
            self.legacy.append({"id": "", "via": "command", **_interrupt_fields(asked)})
        elif name == "function_approval_request" and isinstance(value, dict):
            call = value.get("function_call") if isinstance(value.get("function_call"),
                                                            dict) else {}
            if isinstance(value.get("id"), str):
                self.legacy.append({"id": value["id"], "via": "resume",
                                    "tool": call.get("name"), "arguments": call.get("arguments"),
                                    "toolCallId": call.get("call_id")})
        return []

    def _count(self, usage: dict[str, Any]) -> None:
        for key, names in (("input_tokens", ("input_token_count", "input_tokens",
                                             "prompt_tokens")),
                           ("output_tokens", ("output_token_count", "output_tokens",
                                              "completion_tokens"))):
            value = next((usage[n] for n in names if isinstance(usage.get(n), int)), 0)
            self.usage[key] += max(0, value)
        self.counted = True

    def _run_error(self, data: dict[str, Any]) -> list[HandlerEvent]:
        message = data.get("message")
        reason = clip(message) if isinstance(message, str) and message else "no reason given"
        code = data.get("code")
        suffix = f" ({clip(code, 80)})" if isinstance(code, str) and code else ""
        self.terminal = [Failed(f"the AG-UI agent's run failed: {reason}{suffix}")]
        return []

    def _run_finished(self, data: dict[str, Any]) -> list[HandlerEvent]:
        outcome = data.get("outcome")
        if outcome is not None and not isinstance(outcome, dict):
            raise UnexpectedFrame(BACKEND, "an outcome that is not an object")
        kind = (outcome or {}).get("type", "success")
        if kind == "cancelled":
            self.terminal = [Canceled("the AG-UI agent canceled the run")]
            return []
        interrupts = (self._outcome_interrupts(outcome or {}) if kind == "interrupt"
                      else self._legacy_interrupts())
        events: list[HandlerEvent] = []
        if self.keep_messages:
            events.append(SessionUpdate({MESSAGES_KEY: self._kept()}))
        if interrupts:
            events.append(question(interrupts))
        else:
            events += self._artifacts()
            events.append(Completed(text=self._text_of_run(), metadata=self._metadata()))
        self.terminal = events
        return []

    _on: ClassVar[dict[str, Any]] = {
        "RUN_STARTED": _run_started,
        "TEXT_MESSAGE_START": _text_start,
        "TEXT_MESSAGE_CONTENT": _text,
        "TEXT_MESSAGE_CHUNK": _text,
        "TOOL_CALL_START": _tool_start,
        "TOOL_CALL_ARGS": _tool_args,
        "TOOL_CALL_RESULT": _tool_result,
        "STATE_SNAPSHOT": _state,
        "MESSAGES_SNAPSHOT": _messages,
        "CUSTOM": _custom,
        "RUN_ERROR": _run_error,
        "RUN_FINISHED": _run_finished,
    }

    # -- the end of a run -----------------------------------------------------------------

    def _outcome_interrupts(self, outcome: dict[str, Any]) -> list[dict[str, Any]]:
        listed = outcome.get("interrupts")
        if not isinstance(listed, list) or not all(
                isinstance(i, dict) and isinstance(i.get("id"), str) for i in listed):
            raise UnexpectedFrame(BACKEND, "an interrupt outcome without interrupt ids")
        interrupts = []
        for given in listed:
            confirmation = self._confirmation(self.tools.get(given["id"]))
            interrupts.append(self._with_call({"id": given["id"], "via": "resume",
                                               **_interrupt_fields(given), **confirmation}))
        return interrupts

    def _legacy_interrupts(self) -> list[dict[str, Any]]:
        confirmations = [{"id": call_id, "via": "tool_message", **self._confirmation(call)}
                         for call_id, call in self.tools.items()
                         if call.name == ADK_CONFIRMATION and not call.answered]
        return [self._with_call(i) for i in self.legacy] + confirmations

    def _with_call(self, interrupt: dict[str, Any]) -> dict[str, Any]:
        """``interrupt`` with the name and arguments of the tool call it names, if it has none."""
        call = self.tools.get(interrupt.get("toolCallId") or "")
        if call is None or "tool" in interrupt:
            return interrupt
        return {**interrupt, "tool": call.name, "arguments": call.arguments()}

    @staticmethod
    def _confirmation(call: ToolCall | None) -> dict[str, Any]:
        """The tool call an ``adk_request_confirmation`` asks about."""
        if call is None or call.name != ADK_CONFIRMATION:
            return {}
        args = call.arguments()
        original = args.get("originalFunctionCall")
        asked = args.get("toolConfirmation")
        fields: dict[str, Any] = {}
        if isinstance(original, dict):
            fields.update(tool=original.get("name"), arguments=original.get("args"),
                          toolCallId=original.get("id"))
        if isinstance(asked, dict) and isinstance(asked.get("hint"), str) and asked["hint"]:
            fields["message"] = asked["hint"]
        return fields

    def _text_of_run(self) -> str:
        if self.deltas:
            return "".join(self.deltas)
        # Some adapters send a reply only in the snapshot (no TEXT_MESSAGE events).
        for message in reversed(self.snapshot or []):
            if message.get("role") == "assistant" and isinstance(message.get("content"), str):
                return message["content"]
        return ""

    def _metadata(self) -> dict[str, Any]:
        return {"usage": dict(self.usage)} if self.counted else {}

    def _artifacts(self) -> list[HandlerEvent]:
        if not self.state_artifact or self.state is None:
            return []
        return [ArtifactDelta("state", [data_part(self.state)], name="state", last_chunk=True)]

    def _kept(self) -> list[dict[str, Any]]:
        """What was sent, then what the server added (its snapshot, by message id; or the
        reply), without the oldest messages beyond the size bound."""
        messages = list(self.sent)
        ids = {m["id"] for m in messages if isinstance(m.get("id"), str)}
        added = self.snapshot if self.snapshot is not None else (
            [{"id": str(uuid.uuid4()), "role": "assistant", "content": "".join(self.deltas)}]
            if self.deltas else [])
        messages += [m for m in added if not (isinstance(m.get("id"), str) and m["id"] in ids)]
        while messages and len(json.dumps(messages)) > self.max_history_bytes:
            messages.pop(0)
            while messages and messages[0].get("role") != "user":
                messages.pop(0)  # never start with a reply or a tool result
        return messages


def _interrupt_fields(given: dict[str, Any]) -> dict[str, Any]:
    """The fields of an interrupt worth showing the client."""
    keep = ("reason", "message", "toolCallId", "responseSchema", "command")
    return {k: given[k] for k in keep if given.get(k) is not None}


def question(interrupts: list[dict[str, Any]]) -> InputRequired:
    lines = []
    for interrupt in interrupts:
        asked = interrupt.get("message")
        if not isinstance(asked, str) or not asked:
            asked = (f"Allow {call_text(interrupt['tool'], interrupt.get('arguments'))}?"
                     if interrupt.get("tool") else "The agent asks to go on.")
        lines.append(f"{asked} Answer approve or deny.")
    # the adapters take approve or deny (or a payload of their own): no edited arguments
    asked_calls = [AskedCall(i["id"], str(i.get("tool") or "interrupt"),
                             i["arguments"] if isinstance(i.get("arguments"), dict) else {},
                             call_id=str(i.get("toolCallId") or i["id"])) for i in interrupts]
    hint = "\n".join(line.removesuffix(" Answer approve or deny.") for line in lines)
    return asking_approval("\n".join(lines), {INTERRUPTS_KEY: interrupts,
                                            "choices": ["approve", "deny"],
                                            HITL_URI: approval_request(asked_calls, hint=hint)})


# -- the handler --------------------------------------------------------------------------


class AgUiHandler(StreamingBridge):
    """An agent behind an AG-UI adapter; see the module docstring."""

    Settings = AgUiSettings
    settings: AgUiSettings
    path = ""
    run_name = "the AG-UI run"
    failure_log = "ag_ui_request_failed"
    answers_only_streamed = True

    def make_upstream(self) -> Upstream:
        s = self.settings
        return Upstream.for_backend(self.http, "the AG-UI agent", s, url=s.ag_ui_url,
                                    timeout=s.ag_ui_timeout, api_key=s.ag_ui_api_key,
                                    key_header=s.ag_ui_api_key_header)

    async def resume(self, request: HandlerRequest) -> bool:
        """The answer goes in a fresh run; one that is neither approve nor deny (nor a
        ``payload``), or a structured answer that does not fit the request, is refused and the
        task keeps waiting."""
        decided = decisions_or_refusal(request)
        if decided is None and not any(
                isinstance(d.get("payload"), dict) for d in request.data):
            raise InputRejectedError(
                'Answer approve or deny, as text or as a data part {"approved": true|false} '
                '(or {"payload": {...}} to send the agent an answer of its own shape).',
                request.pending_input or None)
        return False

    def card_fields(self) -> dict[str, Any]:
        return {"extensions": [card_extension(editable=False)]}

    def build_body(self, request: HandlerRequest, *, stream: bool) -> dict[str, Any]:
        interrupts = pending_interrupts(request)
        full = self.settings.history == "full"
        messages = conversation(request) if full else []
        fields: dict[str, Any] = {}
        if interrupts:
            fields, answers = resume_fields(request, self.settings, interrupts)
            messages += answers
            run_id = f"{request.task_id}-{uuid.uuid4().hex[:8]}"
        else:
            messages.append(user_message(request))
            run_id = request.task_id
        return {"threadId": request.backend_user(per_context=True), "runId": run_id,
                "messages": messages, "state": {}, "tools": [], "context": [],
                "forwardedProps": {}, **fields}

    def stream_parser(self, body: dict[str, Any]) -> RunEvents:
        s = self.settings
        return RunEvents(body["messages"], keep_messages=s.history == "full",
                         max_history_bytes=s.ag_ui_max_history_bytes,
                         state_artifact=s.ag_ui_state_artifact)
