"""Any OpenAI-compatible chat backend (``POST /v1/chat/completions``): vLLM,
Ollama, LiteLLM, or the chat endpoints of Hermes and OpenClaw.

The backend is treated as stateless: every call carries the optional system
prompt, the A2A context's earlier turns (``request.history``) and the new
message. Tasks are streamed (SSE chunks until ``data: [DONE]``) for blocking and
streaming A2A sends alike; ``response_mode: message`` makes one non-streamed
call and replies with a single A2A Message. Canceling a task closes the
upstream stream.

See docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import structlog
from pydantic import Field, SecretStr

from handlers.base import (
    Completed,
    Failed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    Progress,
    Rejected,
    Reply,
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

__all__ = ["ChatStream", "OpenAIChatHandler", "OpenAIChatSettings", "build_messages"]

log = structlog.get_logger(__name__)

BACKEND = "the chat backend"
RUN = "the chat completion"


class OpenAIChatSettings(RunLimits):
    base_url: str = "http://127.0.0.1:8000/v1"
    """Base URL of the OpenAI API (``…/v1``); ``/chat/completions`` is appended."""
    api_key: SecretStr | None = None
    """Sent as ``Authorization: Bearer``; ``env:NAME`` in endpoint rows."""
    model: str = "default"
    timeout: float = Field(default=600.0, gt=0)
    """Seconds the backend may stay silent (connect: at most 10 s) before the task fails."""
    extra_headers: dict[str, str] = Field(default_factory=dict)
    """Added to every request (e.g. routing headers); ``env:NAME`` values are expanded."""
    response_mode: Literal["task", "message"] = "task"
    system_prompt: str | None = None
    stream_usage: bool = True
    """Ask for a usage chunk (``stream_options.include_usage``); turn off for
    backends that reject the field."""


def build_messages(request: HandlerRequest, system_prompt: str | None) -> list[dict[str, str]]:
    """System prompt, earlier turns (oldest first), then the new message."""
    messages: list[dict[str, str]] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    for turn in request.history:
        if turn.text:
            role = "assistant" if turn.role == "agent" else "user"
            messages.append({"role": role, "content": turn.text})
    messages.append({"role": "user", "content": request_text(request)})
    return messages


def _message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    raise UnexpectedFrame(BACKEND, "'content' is neither text nor a list of parts")


def _choices(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``choices`` of a chunk or completion (missing or null: none)."""
    choices = data.get("choices")
    if choices is None:
        return []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise UnexpectedFrame(BACKEND, "'choices' is not a list of objects")
    return choices


def _object(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UnexpectedFrame(BACKEND, f"{name!r} is not an object")
    return value


def _chunk_error(data: dict[str, Any]) -> str | None:
    error = data.get("error")
    if error is None:
        return None
    if isinstance(error, dict):
        return clip(str(error.get("message") or error.get("code") or "error"))
    return clip(str(error))


class ChatStream:
    """Maps the chunks of one streamed chat completion to handler events."""

    def __init__(self) -> None:
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
            return [self._tool_progress(frame.object(BACKEND))]
        if frame.event and frame.event != "chunk":  # unnamed frames arrive as ""
            return []  # other named events of a backend's own
        data = frame.object(BACKEND)
        error = _chunk_error(data)
        if error is not None:
            self.error = error
            return []
        if isinstance(data.get("model"), str):
            self.model = data["model"]
        if isinstance(data.get("usage"), dict):
            self.usage = data["usage"]
        events: list[HandlerEvent] = []
        for choice in _choices(data):
            if choice.get("index", 0) != 0:
                continue
            text = _message_text(_object(choice.get("delta"), "delta").get("content"))
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

    def finish(self) -> HandlerEvent:
        if self.error is not None:
            return Failed(f"the chat backend reported an error: {self.error}")
        if not self.done and self.finish_reason is None:
            return Failed("the chat backend closed the stream before the answer was complete")
        return Completed(text="".join(self.parts), metadata=_metadata(
            self.usage, self.finish_reason, self.model))


def _metadata(usage: Any, finish_reason: str | None, model: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if isinstance(usage, dict):
        metadata["usage"] = usage
    if finish_reason:
        metadata["finish_reason"] = finish_reason
    if model:
        metadata["model"] = model
    return metadata


class OpenAIChatHandler(Handler):
    Settings = OpenAIChatSettings
    settings: OpenAIChatSettings

    @property
    def completions_url(self) -> str:
        return self.settings.base_url.rstrip("/") + "/chat/completions"

    @property
    def _token(self) -> str | None:
        key = self.settings.api_key
        return key.get_secret_value() if key is not None else None

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

    def build_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self.settings.extra_headers}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def _call(self, request: HandlerRequest, deadline: Deadline, *, stream: bool) -> UpstreamCall:
        secrets = [self._token, *self.settings.extra_headers.values()]
        return UpstreamCall(
            self.http, backend=BACKEND, url=self.completions_url,
            body=self.build_body(request, stream=stream), headers=self.build_headers(),
            timeout=self.settings.timeout, deadline=deadline, retry=self.settings.retry,
            secrets=secrets)

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        if not request_text(request).strip():
            yield Rejected("the message has no text or data")
            return
        deadline = self.settings.deadline(RUN)
        try:
            if self.settings.response_mode == "message":
                yield await self._reply(request, deadline)
                return
            parser = ChatStream()
            async with self._call(request, deadline, stream=True) as call:
                async for frame in call.frames():
                    for event in parser.feed(frame):
                        yield event
                    if parser.ended:
                        break
            final = parser.finish()
            if isinstance(final, Failed):
                final = Failed(call.reason(final.reason))
            yield final
        except UpstreamError as exc:
            log.warning("chat_backend_request_failed", endpoint_id=request.endpoint_id,
                        task_id=request.task_id, reason=exc.reason)
            yield Failed(exc.reason)

    async def _reply(self, request: HandlerRequest, deadline: Deadline) -> HandlerEvent:
        async with self._call(request, deadline, stream=False) as call:
            data = await call.json()
        error = _chunk_error(data)
        if error is not None:
            return Failed(call.reason(f"the chat backend reported an error: {error}"))
        choices = _choices(data)
        if not choices or choices[0].get("message") is None:
            return Failed("the chat backend answered without a message")
        first = choices[0]
        text = _message_text(_object(first["message"], "message").get("content"))
        return Reply(text=text, metadata=_metadata(
            data.get("usage"), first.get("finish_reason"), data.get("model")))

