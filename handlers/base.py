"""The handler contract: how a framework handler turns one A2A request into events.

A handler is the only place that knows a framework's native API. The gateway
creates one instance per endpoint, with that endpoint's settings already resolved
(endpoint metadata → gateway settings → the handler's defaults, ``env:NAME``
expanded) and an ``httpx.AsyncClient`` that the gateway owns and closes.

``run(request)`` is an async iterator of the events below, in this order:

* optionally ``RunStarted(run_ref)`` as soon as the backend has accepted the work
  (e.g. the Hermes run id). The gateway stores the reference once, so cancel,
  resume and re-attach work from any replica and after a restart.
* any number of ``TextDelta`` (answer tokens: sent live to streaming clients,
  never stored one by one), ``Progress`` (tool started/finished, reasoning notes:
  WORKING status updates with metadata) and ``SessionUpdate`` (handler memory
  for this conversation).
* any number of ``ArtifactDelta``: named artifacts of their own (text, file and
  data parts), several per task, streamed in chunks (``append``/``last_chunk``) and
  kept on the task; the store sees them at the next state change.
* ``InputRequired`` pauses the task (INPUT_REQUIRED), ``AuthRequired`` the same
  with AUTH_REQUIRED (the caller must authorize something out of band, spec
  §7.6.1). A handler whose backend keeps the run open (Hermes approvals) keeps the
  iterator open and receives the client's answer through ``resume``; a stateless
  handler simply ends the iterator and gets a fresh ``run`` with the answer in the
  history.
* exactly one terminal event ends a task: ``Completed``, ``Failed``, ``Rejected``
  or ``Canceled``. ``Reply`` instead of all of the above answers with a single
  A2A Message and creates no task (message mode); only ``SessionUpdate`` may
  come before it.

An iterator that ends without a terminal event after its last ``InputRequired``
leaves the task waiting for input; one that ends without any of them fails the
task. An exception raised from ``run`` fails the task with a generic reason (the
exception is logged, never shown to the client, since it may carry secrets):
handlers should turn their native errors into ``Failed`` with a clear reason.

Inbound file parts reach the handler as ``FileInput`` values (``request.files``) only
when the handler names their media types in ``accepted_file_types``; any other
file part is refused before a task exists (ContentTypeNotSupportedError), never
dropped. The gateway calls ``await open()`` once before the first request and
``await aclose()`` only after the handler's last run has ended.

A handler never touches HTTP routing, the task store or SSE.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import httpx
from a2a.types import Message, Part
from pydantic import BaseModel, ConfigDict

__all__ = [
    "ArtifactDelta",
    "AuthRequired",
    "Canceled",
    "Completed",
    "Failed",
    "FileInput",
    "Handler",
    "HandlerEvent",
    "HandlerRequest",
    "HandlerSettings",
    "InputRejectedError",
    "InputRequired",
    "Progress",
    "Rejected",
    "Reply",
    "ResponseModeSettings",
    "RunStarted",
    "SessionUpdate",
    "TextDelta",
    "Turn",
    "data_part",
    "file_part",
    "text_part",
]


class HandlerSettings(BaseModel):
    """Base of every handler's settings model; unknown keys are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class ResponseModeSettings(HandlerSettings):
    """Settings of a handler that can answer without a task (``Handler.answer``)."""

    response_mode: Literal["task", "message"] = "task"
    """``task``: every message is a task. ``message``: the answer is one A2A Message
    and no task is created."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One earlier turn of the conversation (an A2A context), oldest first."""

    role: Literal["user", "agent"]
    text: str


@dataclass(frozen=True, slots=True)
class FileInput:
    """A file part of the inbound message: its bytes, or a URI the backend may fetch."""

    media_type: str
    name: str = ""
    data: bytes | None = None
    uri: str | None = None


@dataclass(slots=True)
class HandlerRequest:
    """One A2A message for the handler, with what the gateway remembers."""

    task_id: str
    context_id: str
    message: Message
    """The inbound A2A message (protobuf), all parts included."""
    text: str
    """The text parts of ``message`` joined with newlines."""
    data: list[dict[str, Any]] = field(default_factory=list)
    """The data parts of ``message``."""
    files: list[FileInput] = field(default_factory=list)
    """The file parts of ``message`` (only of the handler's ``accepted_file_types``)."""
    history: list[Turn] = field(default_factory=list)
    """Earlier turns of this context, not including ``message``."""
    session: dict[str, Any] = field(default_factory=dict)
    """What this handler stored for this context through ``SessionUpdate``."""
    run_ref: str | None = None
    """On resume, cancel and re-attach: the reference from ``RunStarted``."""
    pending_input: dict[str, Any] | None = None
    """On resume: the ``data`` of the ``InputRequired`` being answered."""
    endpoint_id: str = ""
    tenant: str = ""
    principal: str = "anonymous"
    """The caller; contexts (and so ``history``/``session``) belong to one caller."""
    key_id: str = ""
    """The id of the API key the caller presented ("" for other credentials)."""
    key_name: str = ""
    """That key's operator label."""
    extensions: frozenset[str] = frozenset()
    """The A2A extensions the caller activated (``A2A-Extensions``) that the agent declares."""
    headers: dict[str, str] = field(default_factory=dict)
    """Selected inbound headers worth passing on (trace context: ``traceparent``, ...)."""
    streaming: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    def backend_user(self, *, per_context: bool = False) -> str:
        """An opaque, stable name of this caller (``per_context``: of this caller's context)
        for the backend's own user or session field, so two callers never share a backend
        conversation, even when they chose the same context id."""
        parts = [self.tenant, self.endpoint_id, self.principal]
        if per_context:
            parts.append(self.context_id)
        return "a2a-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_ref: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ArtifactDelta:
    """A chunk of the artifact ``artifact_id`` (a handler-chosen id, unique in the task).
    ``append`` adds ``parts`` to what this id streamed so far (otherwise they replace it);
    ``last_chunk`` says the artifact is complete."""

    artifact_id: str
    parts: list[Part]
    name: str = ""
    append: bool = False
    last_chunk: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


def text_part(text: str) -> Part:
    return Part(text=text)


def file_part(
    media_type: str, *, data: bytes | None = None, uri: str | None = None, name: str = ""
) -> Part:
    """A file part: inline ``data`` or a ``uri``."""
    if (data is None) == (uri is None):
        raise ValueError("a file part has either data or a uri")
    part = Part(media_type=media_type, filename=name)
    if data is not None:
        part.raw = data
    else:
        part.url = uri
    return part


def data_part(value: dict[str, Any]) -> Part:
    part = Part(media_type="application/json")
    part.data.struct_value.update(value)
    return part


@dataclass(frozen=True, slots=True)
class Progress:
    """A WORKING status update: ``kind`` is e.g. ``tool_started``, ``tool_completed``,
    ``reasoning``; ``data`` goes into the status update's metadata."""

    kind: str
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionUpdate:
    """Keys merged into this context's handler memory (``HandlerRequest.session``)."""

    values: dict[str, Any]


@dataclass(frozen=True, slots=True)
class InputRequired:
    """The run waits for the client: ``prompt`` becomes the status message text,
    ``data`` (e.g. ``{"command", "description", "choices"}``) a data part, ``metadata`` the
    message's metadata, and ``extensions`` the URIs the message says it uses (an extension's
    payload goes in ``metadata`` under its URI)."""

    prompt: str
    data: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    extensions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AuthRequired:
    """The run waits for the caller to authorize something (AUTH_REQUIRED): ``prompt``
    says what and where (e.g. a consent URL), ``data`` becomes a data part. Answered
    and resumed like ``InputRequired``."""

    prompt: str
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Completed:
    """The final answer: ``text`` (or ``parts``) becomes the task's artifact; it
    replaces whatever ``TextDelta`` streamed. ``metadata`` (e.g. usage) goes on
    the artifact."""

    text: str | None = None
    parts: list[Part] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    artifact_name: str = "response"


@dataclass(frozen=True, slots=True)
class Failed:
    reason: str


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: str


@dataclass(frozen=True, slots=True)
class Canceled:
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Reply:
    """Message mode: answer with one A2A Message; no task is created."""

    text: str | None = None
    parts: list[Part] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


HandlerEvent = (
    RunStarted
    | TextDelta
    | ArtifactDelta
    | Progress
    | SessionUpdate
    | InputRequired
    | AuthRequired
    | Completed
    | Failed
    | Rejected
    | Canceled
    | Reply
)


class InputRejectedError(Exception):
    """Raised by ``resume`` when the answer is not acceptable: the task stays in
    INPUT_REQUIRED and ``prompt`` (e.g. the list of valid choices) is shown."""

    def __init__(self, prompt: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(prompt)
        self.prompt = prompt
        self.data = data


class Handler(ABC):
    """Base class of framework handlers; see the module docstring for the contract."""

    Settings: ClassVar[type[HandlerSettings]] = HandlerSettings
    """The pydantic model of this handler's settings (with defaults)."""

    supports_reattach: ClassVar[bool] = False
    """True when ``reattach`` can follow a run started before a gateway restart."""

    accepted_file_types: ClassVar[tuple[str, ...]] = ()
    """Media types of inbound file parts the backend takes (``image/*`` matches a family,
    ``*/*`` any type);
    a file part of another type is refused with ContentTypeNotSupportedError."""

    uses_context: ClassVar[bool] = True
    """False when the handler never reads ``history``/``session``: the gateway then
    skips loading and saving the conversation for it."""

    def __init__(self, settings: HandlerSettings, http: httpx.AsyncClient) -> None:
        self.settings = settings
        self.http = http

    async def open(self) -> None:  # noqa: B027 - an optional hook
        """Called once before the first request (e.g. to start a subprocess or a pool)."""

    def accepts_file(self, media_type: str) -> bool:
        kind = media_type.split(";")[0].strip().lower()
        return any(
            t == "*/*" or kind == t or (t.endswith("/*") and kind.startswith(t[:-1]))
            for t in self.accepted_file_types
        )

    @property
    def message_mode(self) -> bool:
        """True when this endpoint answers with one A2A Message (``response_mode: message``)."""
        return isinstance(self.settings, ResponseModeSettings) and (
            self.settings.response_mode == "message")

    def answer(self, event: HandlerEvent) -> HandlerEvent:
        """The final event as the endpoint's ``response_mode`` asks: in message mode a
        ``Completed`` becomes a ``Reply`` with its text, parts and metadata; any other
        event (``Failed``, ...) is returned as it is."""
        if self.message_mode and isinstance(event, Completed):
            return Reply(text=event.text, parts=event.parts, metadata=event.metadata)
        return event

    @abstractmethod
    def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        """Start work on ``request`` and yield its events."""

    async def resume(self, request: HandlerRequest) -> bool:
        """Deliver the client's answer (``request.message``) to a pending input request.

        Return True when the answer went to a run that goes on producing events
        on the iterator ``run`` returned (or, after a restart, on ``reattach``).
        Return False (the default) to have the gateway call ``run(request)`` again
        with the earlier turns in ``request.history``. Raise ``InputRejectedError``
        to keep the task waiting for a valid answer.
        """
        return False

    async def cancel(self, request: HandlerRequest) -> bool:
        """Ask the backend to stop the run ``request.run_ref``.

        Return True when the backend was asked and the run's iterator will end
        with ``Canceled`` (the gateway waits for it, within a bounded time).
        Return False (the default) to have the gateway close the iterator itself,
        which closes any upstream connection the handler holds open.
        """
        return False

    def reattach(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        """Follow the run ``request.run_ref`` that started before a gateway restart."""
        raise NotImplementedError(f"{type(self).__name__} cannot re-attach to a run")

    def card_fields(self) -> dict[str, Any]:
        """Agent card fields (JSON names: ``description``, ``skills``, ``defaultInputModes``,
        ...) the handler contributes, read once after ``open``; the row's own card fields win."""
        return {}

    async def aclose(self) -> None:  # noqa: B027 - an optional hook
        """Release what the handler opened itself (never the shared http client)."""
