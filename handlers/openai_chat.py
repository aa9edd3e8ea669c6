"""Any OpenAI-compatible chat backend (``POST /v1/chat/completions``): vLLM,
Ollama, LiteLLM, or the chat endpoints of Hermes and OpenClaw.

The backend is treated as stateless: every call carries the optional system
prompt, the A2A context's earlier turns (``request.history``) and the new
message. Inbound image files go with the message as ``image_url`` content parts
(inline bytes as a ``data:`` URL). Tasks are streamed (SSE chunks until
``data: [DONE]``) for blocking and streaming A2A sends alike; ``response_mode:
message`` makes one non-streamed call and replies with a single A2A Message.
Canceling a task closes the upstream stream.

The chat format itself (messages, completions, chunks) is ``handlers.chat``. See
docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, SecretStr

from handlers.base import HandlerEvent, HandlerRequest
from handlers.bridge import StreamingBridge
from handlers.chat import BACKEND, ChatStream, build_messages, read_completion
from handlers.upstream import BridgeSettings, Upstream

__all__ = ["OpenAIChatHandler", "OpenAIChatSettings"]


class OpenAIChatSettings(BridgeSettings):
    base_url: str = "http://127.0.0.1:8000/v1"
    """Base URL of the OpenAI API (``…/v1``); ``/chat/completions`` is appended."""
    api_key: SecretStr | None = None
    """Sent as ``Authorization: Bearer``; ``env:NAME`` in endpoint rows."""
    model: str = "default"
    """The ``model`` of every request."""
    timeout: float = Field(default=600.0, gt=0)
    """Seconds the backend may stay silent (connect: at most 10 s) before the task fails."""
    extra_headers: dict[str, str] = Field(default_factory=dict)
    """Added to every request (e.g. routing headers); ``env:NAME`` values are expanded."""
    system_prompt: str | None = None
    """Sent first as the system message of every call (none: no system message)."""
    stream_usage: bool = True
    """Ask for a usage chunk (``stream_options.include_usage``); turn off for
    backends that reject the field."""


class OpenAIChatHandler(StreamingBridge):
    """Any OpenAI-compatible chat backend (``POST /v1/chat/completions``)."""

    Settings = OpenAIChatSettings
    settings: OpenAIChatSettings
    accepted_file_types: ClassVar[tuple[str, ...]] = ("image/*",)
    path = "/chat/completions"
    run_name = "the chat completion"
    failure_log = "chat_backend_request_failed"

    def make_upstream(self) -> Upstream:
        s = self.settings
        return Upstream.for_backend(self.http, BACKEND, s, url=s.base_url, timeout=s.timeout,
                                    api_key=s.api_key, headers=s.extra_headers,
                                    secret_headers=True)

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

    def stream_parser(self, body: dict[str, Any]) -> ChatStream:
        return ChatStream()

    def read_answer(self, data: dict[str, Any]) -> HandlerEvent:
        return read_completion(data)
