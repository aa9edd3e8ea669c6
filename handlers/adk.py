"""Google ADK handler: A2A tasks as runs of one agent app of an ``adk api_server``.

One A2A context is one ADK session (``POST /apps/{app}/users/{user}/sessions``), created on
the context's first message and kept in the context's handler memory; the session holds the
conversation, so only the new message is sent. Each message streams one run
(``POST /run_sse`` with ``streaming: true``): partial text events are answer tokens, the
non-partial event after them repeats the whole text. A tool that asks for confirmation
(``FunctionTool(..., require_confirmation=...)``) ends the stream with an
``adk_request_confirmation`` function call (its id in ``longRunningToolIds``): the task waits
for input, and the answer streams the next run with a ``functionResponse`` to that call.

ADK's HTTP API has no run id, no cancel route and no way to join a run again: a task is
canceled by closing its stream (ADK then aborts the run and its LLM call), and a run cut off
by a gateway restart cannot be re-attached.

The stream, message mode and error handling are ``RunBridge``'s; this module supplies the
hooks and the frame mapper (``RunEvents``). See docs/handlers.md for the settings and the
event mapping.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar

import structlog
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
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRejectedError,
    InputRequired,
    Progress,
    TextDelta,
)
from handlers.run_bridge import RunBridge
from handlers.upstream import (
    BridgeSettings,
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

__all__ = ["AdkHandler", "AdkSettings", "RunEvents"]

log = structlog.get_logger(__name__)

BACKEND = "ADK"
RUN = "the ADK run"
CONFIRMATION = "adk_request_confirmation"
CREDENTIAL = "adk_request_credential"
SESSION_KEY = "adk_session_id"
USER_KEY = "adk_user_id"
PENDING_KEY = "adk_confirmations"


class AdkSettings(BridgeSettings):
    """The response mode, ``run_timeout_seconds`` and the retries come from ``BridgeSettings``."""

    adk_api_url: str = "http://127.0.0.1:8000"
    """Base URL of the ``adk api_server`` (its default port is 8000)."""
    adk_app_name: str = Field(min_length=1)
    """The agent app to run: the name of its folder in the server's agents directory."""
    adk_user_id: str | None = None
    """The ADK user id of every session; default: the caller's principal."""
    adk_api_key: SecretStr | None = None
    """A credential for a deployed ADK server behind authentication, sent in
    ``adk_api_key_header`` (as ``Bearer <key>`` when that is ``Authorization``); ``env:NAME``
    in endpoint rows."""
    adk_api_key_header: str = "Authorization"
    """The header that carries ``adk_api_key``."""
    adk_timeout: float = Field(600.0, gt=0)
    """Seconds ADK may stay silent on a call: it sends nothing while a tool or the model
    works, so keep it generous."""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _objects(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


@dataclass(slots=True)
class RunEvents:
    """What the events of one ``/run_sse`` stream said so far."""

    answer: list[str] = field(default_factory=list)
    """The text of each non-partial model event: the streamed tokens, as ADK keeps them."""
    streamed: str = ""
    """Tokens of partial events since the last non-partial one."""
    confirmations: list[dict[str, Any]] = field(default_factory=list)
    credential_asked: bool = False
    error: str | None = None
    invocation_id: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    session_id: str | None = None
    run_id: None = None
    """ADK names no run: its stream is the whole run."""
    terminal: HandlerEvent | None = None
    """The outcome, once the stream ended."""

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """The events of one frame; ``UnexpectedFrame`` for a shape this bridge does not know."""
        data = frame.object(BACKEND)
        if "error" in data:  # the server's own frame for an exception that ended the run
            self._fail(str(data["error"]))
            return []
        if data.get("errorCode") or data.get("errorMessage"):
            detail = ": ".join(str(data[k]) for k in ("errorCode", "errorMessage") if data.get(k))
            self._fail(detail)
            return []
        if isinstance(data.get("invocationId"), str):
            self.invocation_id = data["invocationId"]
        content = data.get("content")
        if content is None:
            return []
        if not isinstance(content, dict) or not isinstance(content.get("parts", []), list):
            raise UnexpectedFrame(BACKEND, "an event whose content has no list of parts")
        parts = _objects(content.get("parts"))
        if data.get("partial"):
            return self._tokens(parts)
        self._count_usage(data.get("usageMetadata"))
        waiting = set(_strings(data.get("longRunningToolIds")))
        asked = _dict(_dict(data.get("actions")).get("requestedToolConfirmations"))
        events: list[HandlerEvent] = []
        for part in parts:
            events += self._part(part, waiting, asked)
        return events

    def _fail(self, detail: str) -> None:
        if self.error is None:  # an error event, then the server's error frame: the first wins
            self.error = clip(f"{RUN} failed: {detail}")

    def _tokens(self, parts: list[dict[str, Any]]) -> list[HandlerEvent]:
        text = "".join(p["text"] for p in parts
                       if isinstance(p.get("text"), str) and not p.get("thought"))
        if not text:
            return []  # a function call streamed in pieces: the whole call follows
        self.streamed += text
        return [TextDelta(text)]

    def _part(self, part: dict[str, Any], waiting: set[str],
              asked: dict[str, Any]) -> list[HandlerEvent]:
        if isinstance(part.get("text"), str):
            return self._text(part)
        call, response = part.get("functionCall"), part.get("functionResponse")
        if isinstance(call, dict):
            return self._call(call, waiting)
        if isinstance(response, dict) and response.get("id") not in asked:
            return [Progress("tool_completed", data={"tool": response.get("name") or "",
                                                     "tool_call_id": response.get("id")})]
        return []

    def _text(self, part: dict[str, Any]) -> list[HandlerEvent]:
        text = part["text"]
        if part.get("thought"):
            return [Progress("reasoning", text=text)] if text else []
        streamed, self.streamed = self.streamed, ""
        self.answer.append(text)
        # an agent that does not stream sends its text only here
        return [TextDelta(text)] if text and not streamed else []

    def _call(self, call: dict[str, Any], waiting: set[str]) -> list[HandlerEvent]:
        name = call.get("name")
        if name == CONFIRMATION and call.get("id") in waiting:
            args = _dict(call.get("args"))
            original = _dict(args.get("originalFunctionCall"))
            self.confirmations.append({
                "id": call["id"], "tool": original.get("name") or "",
                "args": _dict(original.get("args")),
                "hint": _dict(args.get("toolConfirmation")).get("hint") or "",
                "call": call_text(original.get("name"), original.get("args"))})
            return []
        if name == CREDENTIAL:
            self.credential_asked = True
            return []
        return [Progress("tool_started", data={"tool": name or "", "tool_call_id": call.get("id")})]

    def _count_usage(self, usage: Any) -> None:
        for key, count in _dict(usage).items():
            if isinstance(count, int):
                self.usage[key] = self.usage.get(key, 0) + count

    def outcome(self, metadata: dict[str, Any]) -> HandlerEvent:
        """The terminal event (or the question) once the stream has ended."""
        if self.error is not None:
            return Failed(self.error)
        if self.confirmations:
            return confirmation_question(self.confirmations)
        if self.credential_asked:
            return Failed(f"{BACKEND} asked for a tool credential ({CREDENTIAL}), which this "
                          "bridge cannot supply")
        if self.streamed:  # tokens, and not the event that ends them
            return Failed(f"{BACKEND} ended the stream before the answer was complete")
        if not self.answer:
            return Failed(f"{BACKEND} ended the run without an answer")
        text = "".join(self.answer)
        if self.usage:
            metadata["usage"] = self.usage
        if self.invocation_id:
            metadata["adk_invocation_id"] = self.invocation_id
        return Completed(text=text, metadata=metadata)


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def confirmation_question(confirmations: list[dict[str, Any]]) -> InputRequired:
    lines = [f"Allow {c['call']}? Answer yes or no." for c in confirmations]
    # ADK's confirmation answer is a yes or no: no edited arguments, no reason
    # ADK's own hint tells a program how to answer in ADK's terms, not what is asked
    asked = approval_request([AskedCall(c["id"], c["tool"], c["args"]) for c in confirmations],
                             hint="\n".join(f"Allow {c['call']}?" for c in confirmations))
    return asking_approval("\n".join(lines), {
        PENDING_KEY: confirmations, "choices": ["approve", "deny"], HITL_URI: asked})


class AdkHandler(RunBridge[RunEvents]):
    """Runs of one agent app of a Google ADK ``api_server``."""

    Settings: ClassVar[type[HandlerSettings]] = AdkSettings
    settings: AdkSettings
    run_name = RUN
    log_name = "adk"
    failure_log = "adk_run_failed"
    question = "the agent asked for confirmation"
    run_ids = False

    def make_upstream(self) -> Upstream:
        s = self.settings
        return Upstream.for_backend(self.http, BACKEND, s, url=s.adk_api_url,
                                    timeout=s.adk_timeout, api_key=s.adk_api_key,
                                    key_header=s.adk_api_key_header)

    async def resume(self, request: HandlerRequest) -> bool:
        """The answer goes in a fresh ``run`` (the asking run has ended); an answer that is
        neither yes nor no, or a structured answer that does not fit the request, is refused;
        the task keeps waiting."""
        decided = decisions_or_refusal(request)
        if decided is None:
            raise InputRejectedError(
                "Answer yes (approve) or no (deny), as text or as a data part "
                '{"confirmed": true|false}.', request.pending_input or None)
        return False

    def card_fields(self) -> dict[str, Any]:
        return {"extensions": [card_extension(editable=False)]}

    # -- the hooks of RunBridge -------------------------------------------------------

    async def conversation(self, request: HandlerRequest, deadline: Deadline, *,
                           lost: bool) -> tuple[tuple[str, str], dict[str, Any]]:
        """The context's session, created on its first message; its id is derived from the
        caller and the context, so a session the server still has (409) is the same one."""
        user_id = request.session.get(USER_KEY) or self.settings.adk_user_id or request.principal
        session_id = None if lost else request.session.get(SESSION_KEY)
        if session_id:
            return (user_id, session_id), {}
        session_id = request.backend_user(per_context=True)
        path = f"/apps/{_segment(self.settings.adk_app_name)}/users/{_segment(user_id)}/sessions"
        try:
            await self.upstream.json("POST", path, {"session_id": session_id}, request=request,
                                     deadline=deadline)
        except UpstreamError as exc:
            if exc.status != 409:
                raise
        return (user_id, session_id), {SESSION_KEY: session_id, USER_KEY: user_id}

    async def conversation_lost(self, exc: UpstreamError, run: RunEvents, request: HandlerRequest,
                                deadline: Deadline) -> bool:
        """True when ``/run_sse`` was refused because the server no longer knows the session
        (an in-memory server restarted) and the message can go to a new one (not an answer)."""
        if exc.status != 404 or "Session not found" not in exc.reason:
            return False
        if (request.pending_input or {}).get(PENDING_KEY):
            raise UpstreamError(f"{BACKEND} no longer knows the session, so its question cannot "
                                "be answered") from None
        log.warning("adk_session_lost", session_id=run.session_id)
        return True

    async def start(self, conversation: tuple[str, str], request: HandlerRequest,
                    deadline: Deadline) -> tuple[RunEvents, UpstreamCall]:
        user_id, session_id = conversation
        body = {"app_name": self.settings.adk_app_name, "user_id": user_id,
                "session_id": session_id, "new_message": new_message(request), "streaming": True,
                # the run's RunConfig.custom_metadata: on each of its events, seen by tools
                "custom_metadata": correlation_metadata(request)}
        return RunEvents(session_id=session_id), self.upstream.call(
            "POST", "/run_sse", body, request=request, deadline=deadline, events=True)

    async def status(self, run: RunEvents, request: HandlerRequest,
                     deadline: Deadline) -> list[HandlerEvent]:
        """The outcome once the stream ended: ADK's stream is the whole run."""
        run.terminal = run.outcome({SESSION_KEY: run.session_id})
        return []


def _segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def new_message(request: HandlerRequest) -> dict[str, Any]:
    """The ADK ``Content`` of the message: the answer to a pending confirmation as
    ``functionResponse`` parts, else the text (and data parts as JSON lines)."""
    pending = (request.pending_input or {}).get(PENDING_KEY)
    if pending:
        decided = decisions(request) or {}
        confirmed = bool(confirmation_answer(request))
        return {"role": "user", "parts": [
            {"functionResponse": {"id": c["id"], "name": CONFIRMATION, "response": {
                "confirmed": decided[c["id"]].approved if c["id"] in decided else confirmed}}}
            for c in pending]}
    return {"role": "user", "parts": [{"text": request_text(request)}]}
