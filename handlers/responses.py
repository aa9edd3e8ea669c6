"""Any OpenAI Responses API server (``POST /v1/responses``): OpenAI itself, Microsoft Agent
Framework DevUI, or another server of that API. OpenClaw's bridge (``handlers.openclaw``)
reads its stream with the same parser (``ResponsesEvents``).

One A2A message is one response. Tasks are always streamed (blocking and streaming A2A
sends alike); ``response_mode: message`` makes one non-streamed call and replies with a
single A2A Message.

Conversation continuity (``responses_continuity``), remembered per A2A context through
``SessionUpdate``:

* ``previous_response_id``: each completed response's id goes with the next turn (OpenAI);
* ``conversation``: one conversation per context (``POST /v1/conversations`` on its first
  message), sent as ``conversation`` with every turn (DevUI, which ignores
  ``previous_response_id``);
* ``none``: the server keeps nothing; every call carries the context's earlier turns.

A tool call the server wants approved (``response.function_approval.requested``, DevUI)
pauses the task (INPUT_REQUIRED); the client's yes or no goes in the next request on the
same conversation as a ``function_approval_response`` input item. Canceling a task asks the
server to cancel the response (``POST /v1/responses/{id}/cancel``); where that is not served,
the stream is closed instead. A response cannot be re-joined after a gateway restart.

See docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Any, Literal

import structlog
from pydantic import Field, SecretStr

from handlers.base import (
    Canceled,
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    InputRejectedError,
    InputRequired,
    Progress,
    RunStarted,
    SessionUpdate,
    TextDelta,
)
from handlers.bridge import StreamingBridge
from handlers.confirmation import call_text, yes_or_no
from handlers.upstream import (
    BridgeSettings,
    SSEFrame,
    UnexpectedFrame,
    Upstream,
    UpstreamError,
    clip,
    has_input,
    request_text,
)

__all__ = ["ResponsesEvents", "ResponsesHandler", "ResponsesSettings", "approval_answer",
           "read_response", "response_text"]

log = structlog.get_logger(__name__)

PREVIOUS_KEY = "responses_previous_response_id"
CONVERSATION_KEY = "responses_conversation"
APPROVAL_KEY = "responses_approval"
APPROVALS_KEY = "responses_approvals"
_STARTED = ("response.created", "response.in_progress", "response.queued")
_TERMINAL = ("response.completed", "response.failed", "response.incomplete", "response.cancelled")


class ResponsesSettings(BridgeSettings):
    responses_api_url: str = "http://127.0.0.1:8000"
    """Base URL of the server (a trailing ``/v1`` is accepted); ``/v1/responses`` is appended."""
    responses_api_key: SecretStr | None = None
    """Sent as ``Authorization: Bearer``; ``env:NAME`` in endpoint rows."""
    responses_model: str | None = None
    """The ``model`` of every request (DevUI: the entity id); unset: not sent."""
    responses_metadata: dict[str, str] = Field(default_factory=dict)
    """The ``metadata`` object of every request and new conversation (DevUI needs
    ``{"entity_id": "<id>"}``); empty: not sent."""
    responses_continuity: Literal["previous_response_id", "conversation", "none"] = (
        "previous_response_id")
    """How a context's next turn continues the last: ``previous_response_id``,
    ``conversation`` (the Conversations API) or ``none`` (earlier turns sent as input)."""
    responses_user: Literal["caller", "context", "none"] = "caller"
    """The ``user`` field: an opaque name of the caller, of the caller's context (OpenClaw
    keeps one session per ``user``), or ``none`` (not sent)."""
    responses_cancel: bool = True
    """Cancel a task's response with ``POST /v1/responses/{id}/cancel`` (the response id is
    recorded with the task); off, or where the server refuses, the stream is closed."""
    responses_timeout: float = Field(default=600.0, gt=0)
    """Seconds the server may stay silent (connect: at most 10 s) before the task fails."""
    responses_name: str = Field(default="Responses server", min_length=1, max_length=60)
    """The server's name in failure reasons (e.g. ``DevUI``)."""


# -- the response object ----------------------------------------------------------------

def _objects(value: Any, name: str, backend: str) -> list[dict[str, Any]]:
    """A list of JSON objects (missing or null: empty)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise UnexpectedFrame(backend, f"{name!r} is not a list of objects")
    return value


def response_text(response: dict[str, Any], backend: str) -> str:
    """The answer of a ``response`` object: its ``output_text`` parts joined."""
    texts: list[str] = []
    for item in _objects(response.get("output"), "output", backend):
        if item.get("type") != "message":
            continue
        for part in _objects(item.get("content"), "content", backend):
            if part.get("type") == "output_text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise UnexpectedFrame(backend, "an output_text without text")
                texts.append(text)
    return "".join(texts)


def _response(data: dict[str, Any], backend: str) -> dict[str, Any]:
    """The ``response`` object of a lifecycle event (missing: empty)."""
    response = data.get("response")
    if response is None:
        return {}
    if not isinstance(response, dict):
        raise UnexpectedFrame(backend, "'response' is not an object")
    return response


def _error_reason(response: dict[str, Any], fallback: str, backend: str) -> str:
    error = response.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"]:
        return f"{backend} run failed: {clip(error['message'])}"
    if isinstance(error, str) and error:
        return f"{backend} run failed: {clip(error)}"
    return fallback


def _result_metadata(response: dict[str, Any], metadata_key: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if isinstance(response.get("usage"), dict):
        metadata["usage"] = response["usage"]
    known = {k: response[k] for k in ("id", "model") if isinstance(response.get(k), str)}
    if known:
        metadata[metadata_key] = {"response_id" if k == "id" else k: v for k, v in known.items()}
    return metadata


def read_response(response: dict[str, Any], backend: str, metadata_key: str) -> HandlerEvent:
    """``Completed`` for a non-streamed ``response``, or ``Failed``."""
    if response.get("status") not in (None, "completed"):
        return Failed(_error_reason(response, f"{backend} run ended with status "
                                              f"{response.get('status')!r}", backend))
    return Completed(text=response_text(response, backend),
                     metadata=_result_metadata(response, metadata_key))


# -- approvals ----------------------------------------------------------------------------

def _approval(data: dict[str, Any], backend: str) -> dict[str, Any]:
    """``request_id``, ``name`` and ``arguments`` of a ``response.function_approval.requested``."""
    request_id, call = data.get("request_id"), data.get("function_call")
    if not isinstance(request_id, str) or not request_id or not isinstance(call, dict):
        raise UnexpectedFrame(backend, "an approval request without request_id or function_call")
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    name = call.get("name") if isinstance(call.get("name"), str) else ""
    return {"request_id": request_id, "name": name, "arguments": arguments}


def approval_question(approvals: list[dict[str, Any]]) -> InputRequired:
    """The question of one or more pending approvals, answered once for all of them."""
    lines = [f"Allow {call_text(a['name'], a['arguments'])}? Answer approve or deny."
             for a in approvals]
    data: dict[str, Any] = {APPROVAL_KEY: approvals[0], "choices": ["approve", "deny"]}
    if len(approvals) > 1:
        data[APPROVALS_KEY] = approvals
    return InputRequired("\n".join(lines), data)


def approval_answer(request: HandlerRequest) -> bool | None:
    """The client's answer to an approval: a data part ``{"approved": bool}`` (or a ``choice``),
    or a text such as approve/yes or deny/no; None when it is neither."""
    for data in request.data:
        if isinstance(data.get("approved"), bool):
            return data["approved"]
        if isinstance(data.get("choice"), str):
            return yes_or_no(data["choice"])
    return yes_or_no(request.text) if request.text.strip() else None


def _pending_approvals(request: HandlerRequest) -> list[dict[str, Any]]:
    pending = request.pending_input or {}
    approvals = pending.get(APPROVALS_KEY) or [pending.get(APPROVAL_KEY)]
    return [a for a in approvals if isinstance(a, dict) and isinstance(a.get("request_id"), str)]


# -- the stream ---------------------------------------------------------------------------

class ResponsesEvents:
    """Maps the events of one streamed response to handler events.

    ``feed`` returns the events to yield now; once a terminal event arrived, ``terminal``
    holds the closing events (the first terminal event wins, later ones are ignored);
    ``finish`` gives them, or ``Failed`` when the stream ended without one. ``metadata_key``
    names the object (``response_id``, ``model``) in status and artifact metadata;
    ``session_key``, when given, remembers the completed response's id; ``report_run`` makes
    the response id the task's run reference (``RunStarted``), for ``cancel``.
    """

    def __init__(self, backend: str, *, metadata_key: str, session_key: str | None,
                 report_run: bool = False) -> None:
        self.backend = backend
        self.metadata_key = metadata_key
        self.session_key = session_key
        self.report_run = report_run
        self.response_id: str | None = None
        self.started = False
        self.done = False
        self.deltas: list[str] = []
        self.approvals: list[dict[str, Any]] = []
        self.terminal: list[HandlerEvent] | None = None

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """Events for one frame; ``UnexpectedFrame`` when it has an unknown shape."""
        if frame.done:
            self.done = True
            return []
        if self.terminal is not None:
            return []
        data = frame.object(self.backend)
        kind = data.get("type") if isinstance(data.get("type"), str) else frame.event
        if kind in _STARTED:
            return self._started(_response(data, self.backend))
        if kind == "response.output_text.delta":
            delta = data.get("delta")
            if not isinstance(delta, str):
                raise UnexpectedFrame(self.backend, "a text delta without text")
            if delta:
                self.deltas.append(delta)
                return [TextDelta(delta)]
            return []
        if kind == "response.function_approval.requested":
            self.approvals.append(_approval(data, self.backend))
        elif kind in _TERMINAL:
            self.terminal = self._close(kind, _response(data, self.backend))
        elif kind == "error":
            message = data.get("message")
            self.terminal = [Failed(f"{self.backend} run failed: {clip(message)}"
                                    if isinstance(message, str) and message
                                    else _error_reason(data, f"{self.backend} run failed: "
                                                             "error event", self.backend))]
        return []

    def _started(self, response: dict[str, Any]) -> list[HandlerEvent]:
        if isinstance(response.get("id"), str):
            self.response_id = response["id"]
        if self.started:
            return []
        self.started = True
        events: list[HandlerEvent] = []
        if self.report_run and self.response_id:
            events.append(RunStarted(self.response_id))
        extra = {self.metadata_key: {"response_id": self.response_id}} if self.response_id else {}
        events.append(Progress("working", data=extra))
        return events

    def cancelled(self) -> HandlerEvent:
        """The event of a response the server canceled."""
        return Canceled(f"{self.backend} canceled the response")

    def _close(self, kind: str, response: dict[str, Any]) -> list[HandlerEvent]:
        status = response.get("status")
        if kind == "response.failed" or status == "failed":
            return [Failed(_error_reason(response, f"{self.backend} run failed without a reason",
                                         self.backend))]
        if kind == "response.cancelled" or status == "cancelled":
            return [self.cancelled()]
        if kind == "response.incomplete" or status == "incomplete":
            details = response.get("incomplete_details")
            why = details.get("reason") if isinstance(details, dict) else None
            return [Failed(f"{self.backend} returned an incomplete response"
                           + (f" ({clip(str(why), 100)})" if why else ""))]
        response_id = response.get("id") if isinstance(response.get("id"), str) else None
        response_id = response_id or self.response_id
        events: list[HandlerEvent] = []
        if response_id and self.session_key:
            events.append(SessionUpdate({self.session_key: response_id}))
        if self.approvals:
            return [*events, approval_question(self.approvals)]
        text = response_text(response, self.backend)
        if not text and self.deltas:
            text = "".join(self.deltas)
        events.append(Completed(text=text,
                                metadata=_result_metadata(response, self.metadata_key)))
        return events

    @property
    def ended(self) -> bool:
        return self.terminal is not None or self.done

    def finish(self) -> list[HandlerEvent]:
        if self.terminal is not None:
            return self.terminal
        if self.done:
            return [Failed(f"{self.backend} ended the stream ([DONE]) without a final response")]
        return [Failed(f"{self.backend} closed the stream before the run finished")]


# -- the handler --------------------------------------------------------------------------

def build_input(request: HandlerRequest, *, with_history: bool) -> str | list[dict[str, Any]]:
    """The ``input``: the answer to a pending approval as ``function_approval_response``
    items, else the message's text, after the context's earlier turns ``with_history``."""
    approvals = _pending_approvals(request)
    if approvals:
        approved = approval_answer(request) is True  # resume refused anything unclear
        return [{"type": "message", "role": "user", "content": [
            {"type": "function_approval_response", "request_id": a["request_id"],
             "approved": approved} for a in approvals]}]
    text = request_text(request)
    if not with_history or not request.history:
        return text
    items = [{"type": "message", "role": "user" if turn.role == "user" else "assistant",
              "content": turn.text} for turn in request.history if turn.text]
    return [*items, {"type": "message", "role": "user", "content": text}]


class ResponsesHandler(StreamingBridge):
    """Any OpenAI Responses API server (``POST /v1/responses``)."""

    Settings = ResponsesSettings
    settings: ResponsesSettings
    path = "/v1/responses"
    run_name = "the response"
    failure_log = "responses_request_failed"

    def make_upstream(self) -> Upstream:
        s = self.settings
        return Upstream.for_backend(self.http, s.responses_name, s, url=s.responses_api_url,
                                    drop_suffix="/v1", timeout=s.responses_timeout,
                                    api_key=s.responses_api_key)

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        """The base's run, after making the context's conversation when it has none yet."""
        if (self.settings.responses_continuity == "conversation" and has_input(request)
                and not isinstance(request.session.get(CONVERSATION_KEY), str)):
            try:
                conversation = await self._new_conversation(request)
            except UpstreamError as exc:
                log.warning(self.failure_log, endpoint_id=request.endpoint_id,
                            task_id=request.task_id, reason=exc.reason)
                yield Failed(exc.reason)
                return
            yield SessionUpdate({CONVERSATION_KEY: conversation})
            request = replace(request, session={**request.session, CONVERSATION_KEY: conversation})
        async with aclosing(super().run(request)) as events:
            async for event in events:
                yield event

    async def _new_conversation(self, request: HandlerRequest) -> str:
        body = {"metadata": self.settings.responses_metadata} if (
            self.settings.responses_metadata) else {}
        answer = await self.upstream.json("POST", "/v1/conversations", body, request=request,
                                          deadline=self.settings.deadline(self.run_name))
        if not isinstance(answer.get("id"), str) or not answer["id"]:
            raise UnexpectedFrame(self.upstream.name, "a conversation without an id")
        return answer["id"]

    def build_body(self, request: HandlerRequest, *, stream: bool) -> dict[str, Any]:
        s = self.settings
        body: dict[str, Any] = {
            "input": build_input(request, with_history=s.responses_continuity == "none"),
            "stream": stream,
        }
        if s.responses_model:
            body["model"] = s.responses_model
        if s.responses_metadata:
            body["metadata"] = dict(s.responses_metadata)
        if s.responses_user != "none":
            body["user"] = request.backend_user(per_context=s.responses_user == "context")
        key = {"previous_response_id": PREVIOUS_KEY, "conversation": CONVERSATION_KEY}.get(
            s.responses_continuity)
        value = request.session.get(key) if key else None
        if isinstance(value, str) and value:
            body[s.responses_continuity] = value
        return body

    def stream_parser(self, body: dict[str, Any]) -> ResponsesEvents:
        s = self.settings
        return ResponsesEvents(
            self.upstream.name, metadata_key="responses", report_run=s.responses_cancel,
            session_key=PREVIOUS_KEY if s.responses_continuity == "previous_response_id"
            else None)

    def read_answer(self, data: dict[str, Any]) -> HandlerEvent:
        """The plain answer; one that is only a tool call waiting for approval (DevUI) fails:
        a reply cannot ask."""
        event = read_response(data, self.upstream.name, "responses")
        calls = [i for i in _objects(data.get("output"), "output", self.upstream.name)
                 if i.get("type") == "function_call"]
        if isinstance(event, Completed) and not event.text and calls:
            return Failed(f"{self.upstream.name} wants a tool call approved, which a reply "
                          "(response_mode: message) cannot ask")
        return event

    async def resume(self, request: HandlerRequest) -> bool:
        """The answer goes in a fresh ``run`` (the asking response has ended); an answer that
        is neither approve nor deny is refused, the task keeps waiting."""
        if _pending_approvals(request) and approval_answer(request) is None:
            raise InputRejectedError(
                'Answer approve or deny (yes or no), as text or as a data part '
                '{"approved": true|false}.', request.pending_input or None)
        return False

    async def cancel(self, request: HandlerRequest) -> bool:
        """Ask the server to cancel the response ``run_ref``; True when it says it did (its
        stream then ends with ``response.cancelled``), False when the stream must be closed."""
        if not self.settings.responses_cancel or not request.run_ref:
            return False
        path = f"{self.path}/{urllib.parse.quote(request.run_ref, safe='')}/cancel"
        try:
            answer = await self.upstream.json("POST", path, {}, request=request, retry=False,
                                              timeout=10.0)
        except UpstreamError as exc:
            log.info("responses_cancel_refused", task_id=request.task_id, reason=exc.reason)
            return False
        return answer.get("status") == "cancelled"
