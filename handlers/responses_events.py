"""The events of a streamed OpenAI Responses API answer (``POST /v1/responses`` with
``stream: true``) as handler events, and the ``response`` object they carry: text deltas, the
terminal events (completed, failed, incomplete, cancelled in OpenAI's and DevUI's shapes),
``error``, and DevUI's ``response.function_approval.requested`` with the question it becomes
and how its answer is read. Used by ``handlers.responses`` and ``handlers.openclaw``.
"""

from __future__ import annotations

import json
from typing import Any

from handlers.approvals import HITL_URI, AskedCall, approval_request, asking_approval, call_text
from handlers.base import (
    Canceled,
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    InputRequired,
    Progress,
    RunStarted,
    SessionUpdate,
    TextDelta,
)
from handlers.upstream import SSEFrame, UnexpectedFrame, clip

__all__ = ["ResponsesEvents", "approval_question", "objects",
           "pending_approvals", "read_response", "response_text"]

APPROVAL_KEY = "responses_approval"
APPROVALS_KEY = "responses_approvals"
_STARTED = ("response.created", "response.in_progress", "response.queued")
_TERMINAL = ("response.completed", "response.failed", "response.incomplete", "response.cancelled")


# -- the response object ----------------------------------------------------------------

def objects(value: Any, name: str, backend: str) -> list[dict[str, Any]]:
    """A list of JSON objects (missing or null: empty)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise UnexpectedFrame(backend, f"{name!r} is not a list of objects")
    return value


def response_text(response: dict[str, Any], backend: str) -> str:
    """The answer of a ``response`` object: its ``output_text`` parts joined."""
    texts: list[str] = []
    for item in objects(response.get("output"), "output", backend):
        if item.get("type") != "message":
            continue
        for part in objects(item.get("content"), "content", backend):
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
    # a function_approval_response is approved or not: no edited arguments, no reason
    asked = approval_request(
        [AskedCall(a["request_id"], a["name"],
                   a["arguments"] if isinstance(a["arguments"], dict) else {})
         for a in approvals],
        hint="\n".join(f"Allow {call_text(a['name'], a['arguments'])}?" for a in approvals))
    data: dict[str, Any] = {APPROVAL_KEY: approvals[0], "choices": ["approve", "deny"],
                            HITL_URI: asked}
    if len(approvals) > 1:
        data[APPROVALS_KEY] = approvals
    return asking_approval("\n".join(lines), data)


def pending_approvals(request: HandlerRequest) -> list[dict[str, Any]]:
    """The approvals the answered question asked for (``request.pending_input``)."""
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
