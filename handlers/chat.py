"""The OpenAI chat-completions format, as the chat-shaped bridges speak it: the messages of a
request (system prompt, earlier turns, the new message with its images), a plain completion
read as ``Completed`` or ``Failed``, and the chunks of a streamed one mapped to handler events.
The chat handler streams it; Hermes sends the same messages and reads the same completions.
"""

from __future__ import annotations

import base64
from typing import Any

from handlers.base import (
    Completed,
    Failed,
    FileInput,
    HandlerEvent,
    HandlerRequest,
    Progress,
    TextDelta,
)
from handlers.upstream import SSEFrame, UnexpectedFrame, clip, request_text

__all__ = ["BACKEND", "ChatStream", "build_messages", "history_messages", "read_completion",
           "user_content"]

BACKEND = "the chat backend"
"""The backend in reasons when the bridge names no other."""


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
