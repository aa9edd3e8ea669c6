"""Any OpenAI-compatible chat backend (``POST /v1/chat/completions``): vLLM,
Ollama, LiteLLM, or the chat endpoints of Hermes and OpenClaw.

The backend is treated as stateless: every call carries the optional system
prompt, the A2A context's earlier turns (``request.history``) and the new
message. Inbound image files go with the message as ``image_url`` content parts
(inline bytes as a ``data:`` URL). Tasks are streamed (SSE chunks until
``data: [DONE]``) for blocking and streaming A2A sends alike; ``response_mode:
message`` makes one non-streamed call and replies with a single A2A Message.
Canceling a task closes the upstream stream.

See docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

import base64
from typing import Any, ClassVar

from pydantic import Field, SecretStr

from handlers.base import (
    Completed,
    Failed,
    FileInput,
    HandlerEvent,
    HandlerRequest,
    Progress,
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

__all__ = ["ChatStream", "OpenAIChatHandler", "OpenAIChatSettings", "build_messages",
           "read_completion"]

BACKEND = "the chat backend"


class OpenAIChatSettings(BridgeSettings):
    base_url: str = "http://127.0.0.1:8000/v1"
    """Base URL of the OpenAI API (``…/v1``); ``/chat/completions`` is appended."""
    api_key: SecretStr | None = None
    """Sent as ``Authorization: Bearer``; ``env:NAME`` in endpoint rows."""
    model: str = "default"
    timeout: float = Field(default=600.0, gt=0)
    """Seconds the backend may stay silent (connect: at most 10 s) before the task fails."""
    extra_headers: dict[str, str] = Field(default_factory=dict)
    """Added to every request (e.g. routing headers); ``env:NAME`` values are expanded."""
    system_prompt: str | None = None
    stream_usage: bool = True
    """Ask for a usage chunk (``stream_options.include_usage``); turn off for
    backends that reject the field."""


def history_messages(request: HandlerRequest) -> list[dict[str, str]]:
    """The context's earlier turns (oldest first) as chat messages."""
    return [{"role": "assistant" if turn.role == "agent" else "user", "content": turn.text}
            for turn in request.history if turn.text]


def image_url(file: FileInput) -> dict[str, Any]:
    """An ``image_url`` content part: the file's URI, or its bytes as a ``data:`` URL."""
    url = file.uri
    if url is None:
        url = f"data:{file.media_type};base64,{base64.b64encode(file.data or b'').decode()}"
    return {"type": "image_url", "image_url": {"url": url}}


def user_content(request: HandlerRequest) -> str | list[dict[str, Any]]:
    """The new message: its text, or content parts when it carries images."""
    text = request_text(request)
    if not request.files:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return parts + [image_url(file) for file in request.files]


def build_messages(request: HandlerRequest, system_prompt: str | None) -> list[dict[str, Any]]:
    """System prompt, earlier turns (oldest first), then the new message."""
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, *history_messages(request), {"role": "user", "content": user_content(request)}]


def _message_text(content: Any, backend: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    raise UnexpectedFrame(backend, "'content' is neither text nor a list of parts")


def _choices(data: dict[str, Any], backend: str) -> list[dict[str, Any]]:
    """The ``choices`` of a chunk or completion (missing or null: none)."""
    choices = data.get("choices")
    if choices is None:
        return []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise UnexpectedFrame(backend, "'choices' is not a list of objects")
    return choices


def _object(value: Any, name: str, backend: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UnexpectedFrame(backend, f"{name!r} is not an object")
    return value


def _chunk_error(data: dict[str, Any]) -> str | None:
    error = data.get("error")
    if error is None:
        return None
    if isinstance(error, dict):
        return clip(str(error.get("message") or error.get("code") or "error"))
    return clip(str(error))


def read_completion(data: dict[str, Any], backend: str = BACKEND) -> HandlerEvent:
    """``Completed`` for a non-streamed chat completion, or ``Failed``."""
    error = _chunk_error(data)
    if error is not None:
        return Failed(f"{backend} reported an error: {error}")
    choices = _choices(data, backend)
    if not choices or choices[0].get("message") is None:
        return Failed(f"{backend} answered without a message")
    first = choices[0]
    text = _message_text(_object(first["message"], "message", backend).get("content"), backend)
    return Completed(text=text, metadata=_metadata(
        data.get("usage"), first.get("finish_reason"), data.get("model")))


class ChatStream:
    """Maps the chunks of one streamed chat completion to handler events."""

    def __init__(self, backend: str = BACKEND) -> None:
        self.backend = backend
        self.parts: list[str] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.done = False
        self.error: str | None = None

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """Events for one frame; ``UnexpectedFrame`` when it has an unknown shape."""
        if frame.done:
            self.done = True
            return []
        if frame.event == "hermes.tool.progress":
            return [self._tool_progress(frame.object(self.backend))]
        if frame.event and frame.event != "chunk":  # unnamed frames arrive as ""
            return []  # other named events of a backend's own
        data = frame.object(self.backend)
        error = _chunk_error(data)
        if error is not None:
            self.error = error
            return []
        if isinstance(data.get("model"), str):
            self.model = data["model"]
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        events: list[HandlerEvent] = []
        for choice in _choices(data, self.backend):
            if choice.get("index", 0) != 0:
                continue
            delta = _object(choice.get("delta"), "delta", self.backend)
            text = _message_text(delta.get("content"), self.backend)
            if text:
                self.parts.append(text)
                events.append(TextDelta(text))
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return events

    @staticmethod
    def _tool_progress(data: dict[str, Any]) -> Progress:
        status = data.get("status")
        kind = "tool_completed" if status in ("completed", "done", "finished") else "tool_started"
        keep = {k: data[k] for k in ("tool", "label", "toolCallId", "status") if k in data}
        return Progress(kind, text=str(data.get("label") or data.get("tool") or ""),
                        data={"tool": keep})

    @property
    def ended(self) -> bool:
        return self.done or self.error is not None

    def finish(self) -> list[HandlerEvent]:
        if self.error is not None:
            return [Failed(f"{self.backend} reported an error: {self.error}")]
        if not self.done and self.finish_reason is None:
            return [Failed(f"{self.backend} closed the stream before the answer was complete")]
        return [Completed(text="".join(self.parts), metadata=_metadata(
            self.usage, self.finish_reason, self.model))]


def _metadata(usage: Any, finish_reason: str | None, model: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if isinstance(usage, dict):
        metadata["usage"] = usage
    if finish_reason:
        metadata["finish_reason"] = finish_reason
    if model:
        metadata["model"] = model
    return metadata


class OpenAIChatHandler(StreamingBridge):
    Settings = OpenAIChatSettings
    settings: OpenAIChatSettings
    accepted_file_types: ClassVar[tuple[str, ...]] = ("image/*",)
    path = "/chat/completions"
    run_name = "the chat completion"
    failure_log = "chat_backend_request_failed"

    def make_upstream(self) -> Upstream:
        key = self.settings.api_key.get_secret_value() if self.settings.api_key else None
        headers = dict(self.settings.extra_headers)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        secrets = tuple(s for s in (key, *self.settings.extra_headers.values()) if s)
        return Upstream(self.http, BACKEND, self.settings.base_url.rstrip("/"), headers,
                        self.settings.timeout, self.settings.retry, secrets, self.settings.max_event_bytes)

    def build_body(self, request: HandlerRequest, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.settings.model,
            "messages": build_messages(request, self.settings.system_prompt),
            "stream": stream,
            "user": request.backend_user(),  # the OpenAI API's end-user id, one per caller
        }
        if stream and self.settings.stream_usage:
            body["stream_options"] = {"include_usage": True}
        return body

    def stream_parser(self) -> ChatStream:
        return ChatStream()

    def read_answer(self, data: dict[str, Any]) -> HandlerEvent:
        return read_completion(data)
