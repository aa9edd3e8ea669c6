"""OpenClaw gateway over its OpenResponses HTTP API (``POST /v1/responses``).

One A2A message is one OpenClaw agent run. Tasks are always streamed from
OpenClaw (for blocking and streaming A2A sends alike), so answer tokens reach
streaming clients live and a canceled task closes the upstream stream, which
makes OpenClaw abort the run. ``response_mode: message`` asks OpenClaw for one
JSON answer instead and replies with a single A2A Message (no task).

Conversation continuity: every A2A context maps to one OpenClaw session through
the request's ``user`` field (an opaque value derived from tenant, endpoint and
context id); after each completed run the response id is remembered
(``SessionUpdate``) and sent as ``previous_response_id`` on the next turn.
OpenClaw keeps the transcript, so only the new message is sent.

Limits of OpenClaw's HTTP API: no approvals (server-side tools run or are denied
inside OpenClaw, never INPUT_REQUIRED here), no run retrieval (a run cannot be
re-attached after a gateway restart), no tool or reasoning events.

See docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Literal

import structlog
from pydantic import Field, SecretStr, field_validator

from handlers.base import (
    Completed,
    Failed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    Progress,
    Rejected,
    Reply,
    SessionUpdate,
    TextDelta,
)
from handlers.openai_stream import (
    Deadline,
    RunLimits,
    SSEFrame,
    UnexpectedFrame,
    UpstreamCall,
    UpstreamError,
    clip,
    request_text,
)

__all__ = ["OpenClawHandler", "OpenClawSettings", "ResponsesStream", "response_text"]

log = structlog.get_logger(__name__)

BACKEND = "OpenClaw"
RUN = "the OpenClaw run"
SESSION_KEY = "openclaw_previous_response_id"
_TERMINAL = ("response.completed", "response.failed", "response.incomplete", "response.cancelled")


class OpenClawSettings(RunLimits):
    openclaw_api_url: str = "http://127.0.0.1:18789"
    """Base URL of the OpenClaw gateway (a trailing ``/v1`` is accepted)."""
    openclaw_api_key: SecretStr | None = None
    """The gateway token (``gateway.auth.token``); ``env:NAME`` in endpoint rows."""
    openclaw_agent_id: str | None = None
    """OpenClaw agent id (``model: "openclaw/<id>"``); unset = the default agent."""
    openclaw_model: str | None = None
    """Backend model override (``x-openclaw-model``, e.g. ``provider/model``)."""
    openclaw_timeout: float = Field(default=600.0, gt=0)
    """Seconds OpenClaw may stay silent (connect: at most 10 s) before the task fails.
    OpenClaw sends nothing while server-side tools run, so keep it generous."""
    response_mode: Literal["task", "message"] = "task"

    @field_validator("openclaw_agent_id")
    @classmethod
    def _agent_id(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        value = value.strip().lower()
        if not value or len(value) > 64 or not all(c.isalnum() or c in "_-" for c in value):
            raise ValueError("must match [a-z0-9][a-z0-9_-]{0,63}")
        return value


def response_text(response: dict[str, Any]) -> str:
    """The answer of an OpenResponses ``response``: its ``output_text`` parts joined."""
    texts: list[str] = []
    for item in _objects(response.get("output"), "output"):
        if item.get("type") != "message":
            continue
        for part in _objects(item.get("content"), "content"):
            if part.get("type") == "output_text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise UnexpectedFrame(BACKEND, "an output_text without text")
                texts.append(text)
    return "".join(texts)


def _objects(value: Any, name: str) -> list[dict[str, Any]]:
    """A list of JSON objects (missing or null: empty)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise UnexpectedFrame(BACKEND, f"{name!r} is not a list of objects")
    return value


def _response(data: dict[str, Any]) -> dict[str, Any]:
    """The ``response`` object of a lifecycle event (missing: empty)."""
    response = data.get("response")
    if response is None:
        return {}
    if not isinstance(response, dict):
        raise UnexpectedFrame(BACKEND, "'response' is not an object")
    return response


def _error_reason(response: dict[str, Any], fallback: str) -> str:
    error = response.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"]:
        return f"OpenClaw run failed: {clip(error['message'])}"
    if isinstance(error, str) and error:
        return f"OpenClaw run failed: {clip(error)}"
    return fallback


def _result_metadata(response: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if isinstance(response.get("usage"), dict):
        metadata["usage"] = response["usage"]
    openclaw = {k: response[k] for k in ("id", "model") if isinstance(response.get(k), str)}
    if openclaw:
        metadata["openclaw"] = {"response_id" if k == "id" else k: v for k, v in openclaw.items()}
    return metadata


class ResponsesStream:
    """Maps the events of one streamed OpenResponses run to handler events.

    ``feed`` returns the events to yield now; once a terminal event arrived,
    ``terminal`` holds the closing events (the first terminal event wins, later
    ones are ignored); ``finish`` gives them, or ``Failed`` when the stream ended
    without one.
    """

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.started = False
        self.done = False
        self.deltas: list[str] = []
        self.terminal: list[HandlerEvent] | None = None

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """Events for one frame; ``UnexpectedFrame`` when it has an unknown shape."""
        if frame.done:
            self.done = True
            return []
        if self.terminal is not None:
            return []
        data = frame.object(BACKEND)
        kind = data.get("type") if isinstance(data.get("type"), str) else frame.event
        if kind in ("response.created", "response.in_progress", "response.queued"):
            response = _response(data)
            if isinstance(response.get("id"), str):
                self.response_id = response["id"]
            if self.started:
                return []
            self.started = True
            extra = {"openclaw": {"response_id": self.response_id}} if self.response_id else {}
            return [Progress("working", data=extra)]
        if kind == "response.output_text.delta":
            delta = data.get("delta")
            if not isinstance(delta, str):
                raise UnexpectedFrame(BACKEND, "a text delta without text")
            if delta:
                self.deltas.append(delta)
                return [TextDelta(delta)]
            return []
        if kind in _TERMINAL:
            self.terminal = self._close(kind, _response(data))
            return []
        if kind == "error":
            message = data.get("message")
            self.terminal = [Failed(f"OpenClaw run failed: {clip(message)}"
                                    if isinstance(message, str) and message
                                    else _error_reason(data, "OpenClaw run failed: error event"))]
        return []

    def _close(self, kind: str, response: dict[str, Any]) -> list[HandlerEvent]:
        status = response.get("status")
        if kind == "response.failed" or status == "failed":
            return [Failed(_error_reason(response, "OpenClaw run failed without a reason"))]
        if kind == "response.cancelled" or status == "cancelled":
            return [Failed("OpenClaw canceled the run")]
        if kind == "response.incomplete" or status == "incomplete":
            details = response.get("incomplete_details")
            why = details.get("reason") if isinstance(details, dict) else None
            return [Failed("OpenClaw returned an incomplete response"
                           + (f" ({clip(str(why), 100)})" if why else ""))]
        response_id = response.get("id") if isinstance(response.get("id"), str) else None
        response_id = response_id or self.response_id
        text = response_text(response)
        if not text and self.deltas:
            text = "".join(self.deltas)
        events: list[HandlerEvent] = []
        if response_id:
            events.append(SessionUpdate({SESSION_KEY: response_id}))
        events.append(Completed(text=text, metadata=_result_metadata(response)))
        return events

    def finish(self) -> list[HandlerEvent]:
        if self.terminal is not None:
            return self.terminal
        if self.done:
            return [Failed("OpenClaw ended the stream ([DONE]) without a final response")]
        return [Failed("OpenClaw closed the stream before the run finished")]


class OpenClawHandler(Handler):
    Settings = OpenClawSettings
    settings: OpenClawSettings

    @property
    def responses_url(self) -> str:
        base = self.settings.openclaw_api_url.rstrip("/")
        base = base.removesuffix("/v1")
        return f"{base}/v1/responses"

    @property
    def _token(self) -> str | None:
        key = self.settings.openclaw_api_key
        return key.get_secret_value() if key is not None else None

    def session_user(self, request: HandlerRequest) -> str:
        """The ``user`` that pins this A2A context to one OpenClaw session."""
        return request.backend_user(per_context=True)

    def build_body(self, request: HandlerRequest, *, stream: bool) -> dict[str, Any]:
        """The request body: only keys OpenClaw accepts (it rejects unknown ones)."""
        agent = self.settings.openclaw_agent_id
        body: dict[str, Any] = {
            "model": f"openclaw/{agent}" if agent else "openclaw",
            "input": request_text(request),
            "stream": stream,
            "user": self.session_user(request),
        }
        previous = request.session.get(SESSION_KEY)
        if isinstance(previous, str) and previous:
            body["previous_response_id"] = previous
        return body

    def build_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if self.settings.openclaw_model:
            headers["x-openclaw-model"] = self.settings.openclaw_model
        return headers

    def _call(self, request: HandlerRequest, deadline: Deadline, *, stream: bool) -> UpstreamCall:
        return UpstreamCall(
            self.http, backend=BACKEND, url=self.responses_url,
            body=self.build_body(request, stream=stream), headers=self.build_headers(),
            timeout=self.settings.openclaw_timeout, deadline=deadline,
            retry=self.settings.retry, secrets=[self._token])

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        if not request_text(request).strip():
            yield Rejected("the message has no text or data for OpenClaw")
            return
        deadline = self.settings.deadline(RUN)
        try:
            if self.settings.response_mode == "message":
                yield await self._reply(request, deadline)
                return
            # aclosing: when the gateway closes this iterator (cancel), the inner
            # one must close now, so that the upstream stream closes at once.
            async with aclosing(self._stream(request, deadline)) as events:
                async for event in events:
                    yield event
        except UpstreamError as exc:
            log.warning("openclaw_request_failed", endpoint_id=request.endpoint_id,
                        task_id=request.task_id, reason=exc.reason)
            yield Failed(exc.reason)

    async def _reply(self, request: HandlerRequest, deadline: Deadline) -> HandlerEvent:
        async with self._call(request, deadline, stream=False) as call:
            response = await call.json()
        if response.get("status") not in (None, "completed"):
            return Failed(call.reason(_error_reason(
                response, f"OpenClaw run ended with status {response.get('status')!r}")))
        return Reply(text=response_text(response), metadata=_result_metadata(response))

    async def _stream(self, request: HandlerRequest,
                      deadline: Deadline) -> AsyncIterator[HandlerEvent]:
        parser = ResponsesStream()
        async with self._call(request, deadline, stream=True) as call:
            async for frame in call.frames():
                for event in parser.feed(frame):
                    yield event
                if parser.terminal is not None or parser.done:
                    break
            if parser.terminal is not None and not parser.done:
                await call.drain()
        for event in parser.finish():
            if isinstance(event, Failed):
                event = Failed(call.reason(event.reason))
            yield event
