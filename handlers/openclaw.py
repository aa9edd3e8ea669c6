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

Input files: images (JPEG, PNG, GIF, WebP, HEIC/HEIF) go with the message as
``input_image`` parts, documents (plain text, Markdown, HTML, CSV, JSON, PDF) as
``input_file`` parts (OpenClaw adds their text to the run's system prompt); inline
bytes are sent base64, a URI as a URL for OpenClaw to fetch. These are the types
OpenClaw takes by default (``gateway.http.endpoints.responses.images/files``).

See docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

import base64
from typing import Any, ClassVar

from pydantic import Field, SecretStr, field_validator

from handlers.base import (
    Completed,
    Failed,
    FileInput,
    HandlerEvent,
    HandlerRequest,
    Progress,
    SessionUpdate,
    TextDelta,
)
from handlers.bridge import StreamingBridge
from handlers.upstream import (
    BridgeSettings,
    SSEFrame,
    UnexpectedFrame,
    Upstream,
    clip,
    request_text,
)

__all__ = ["OpenClawHandler", "OpenClawSettings", "ResponsesStream", "build_input",
           "response_text"]

BACKEND = "OpenClaw"
SESSION_KEY = "openclaw_previous_response_id"
_TERMINAL = ("response.completed", "response.failed", "response.incomplete", "response.cancelled")
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp", "image/heic", "image/heif")
FILE_TYPES = ("text/plain", "text/markdown", "text/html", "text/csv", "application/json",
              "application/pdf")


class OpenClawSettings(BridgeSettings):
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

    @field_validator("openclaw_agent_id")
    @classmethod
    def _agent_id(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        value = value.strip().lower()
        if not value or len(value) > 64 or not all(c.isalnum() or c in "_-" for c in value):
            raise ValueError("must match [a-z0-9][a-z0-9_-]{0,63}")
        return value


def input_part(file: FileInput) -> dict[str, Any]:
    """An ``input_image`` or ``input_file`` content part for one inbound file."""
    media_type = file.media_type.split(";")[0].strip().lower()
    kind = "input_image" if media_type in IMAGE_TYPES else "input_file"
    if file.uri is not None:
        return {"type": kind, "source": {"type": "url", "url": file.uri}}
    source = {"type": "base64", "data": base64.b64encode(file.data or b"").decode(),
              "media_type": media_type if kind == "input_image" else file.media_type}
    if kind == "input_file" and file.name:
        source["filename"] = file.name
    return {"type": kind, "source": source}


def build_input(request: HandlerRequest) -> str | list[dict[str, Any]]:
    """The ``input``: the message's text, or one user message item with content parts
    when it carries files."""
    text = request_text(request)
    if not request.files:
        return text
    content = [{"type": "input_text", "text": text}] if text else []
    content += [input_part(file) for file in request.files]
    return [{"type": "message", "role": "user", "content": content}]


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

    @property
    def ended(self) -> bool:
        return self.terminal is not None or self.done

    def finish(self) -> list[HandlerEvent]:
        if self.terminal is not None:
            return self.terminal
        if self.done:
            return [Failed("OpenClaw ended the stream ([DONE]) without a final response")]
        return [Failed("OpenClaw closed the stream before the run finished")]


def read_response(response: dict[str, Any]) -> HandlerEvent:
    """``Completed`` for a non-streamed ``response``, or ``Failed``."""
    if response.get("status") not in (None, "completed"):
        return Failed(_error_reason(response, f"OpenClaw run ended with status "
                                              f"{response.get('status')!r}"))
    return Completed(text=response_text(response), metadata=_result_metadata(response))


class OpenClawHandler(StreamingBridge):
    """An OpenClaw gateway over its OpenResponses HTTP API (``POST /v1/responses``)."""

    Settings = OpenClawSettings
    settings: OpenClawSettings
    accepted_file_types: ClassVar[tuple[str, ...]] = IMAGE_TYPES + FILE_TYPES
    path = "/v1/responses"
    run_name = "the OpenClaw run"
    failure_log = "openclaw_request_failed"

    def make_upstream(self) -> Upstream:
        s = self.settings
        model = {"x-openclaw-model": s.openclaw_model} if s.openclaw_model else {}
        return Upstream.for_backend(self.http, BACKEND, s, url=s.openclaw_api_url,
                                    drop_suffix="/v1", timeout=s.openclaw_timeout,
                                    api_key=s.openclaw_api_key, headers=model)

    def session_user(self, request: HandlerRequest) -> str:
        """The ``user`` that pins this A2A context to one OpenClaw session."""
        return request.backend_user(per_context=True)

    def build_body(self, request: HandlerRequest, *, stream: bool) -> dict[str, Any]:
        """The request body: only keys OpenClaw accepts (it rejects unknown ones)."""
        agent = self.settings.openclaw_agent_id
        body: dict[str, Any] = {
            "model": f"openclaw/{agent}" if agent else "openclaw",
            "input": build_input(request),
            "stream": stream,
            "user": self.session_user(request),
        }
        previous = request.session.get(SESSION_KEY)
        if isinstance(previous, str) and previous:
            body["previous_response_id"] = previous
        return body

    def stream_parser(self, body: dict[str, Any]) -> ResponsesStream:
        return ResponsesStream()

    def read_answer(self, data: dict[str, Any]) -> HandlerEvent:
        return read_response(data)
