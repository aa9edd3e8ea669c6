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

The stream is read by the Responses parser of ``handlers.responses_events`` (OpenClaw's names in
its metadata and reasons). See docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

import base64
from typing import Any, ClassVar

from pydantic import Field, SecretStr, field_validator

from handlers import responses_events
from handlers.base import Failed, FileInput, HandlerEvent, HandlerRequest
from handlers.bridge import StreamingBridge
from handlers.responses_events import ResponsesEvents
from handlers.upstream import BridgeSettings, Upstream, request_text

__all__ = ["OpenClawHandler", "OpenClawSettings", "ResponsesStream", "build_input",
           "response_text"]

BACKEND = "OpenClaw"
SESSION_KEY = "openclaw_previous_response_id"
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
    return responses_events.response_text(response, BACKEND)


class ResponsesStream(ResponsesEvents):
    """Maps the events of one streamed OpenResponses run to handler events (the Responses
    parser, named for OpenClaw: ``openclaw`` metadata, the response id remembered for
    ``previous_response_id``). A run OpenClaw cancels itself fails the task."""

    def __init__(self) -> None:
        super().__init__(BACKEND, metadata_key="openclaw", session_key=SESSION_KEY)

    def cancelled(self) -> HandlerEvent:
        return Failed("OpenClaw canceled the run")


def read_response(response: dict[str, Any]) -> HandlerEvent:
    """``Completed`` for a non-streamed ``response``, or ``Failed``."""
    return responses_events.read_response(response, BACKEND, "openclaw")


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
