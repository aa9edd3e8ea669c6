"""What a handler is told about a message: the inbound parts as typed values, the
caller, and the conversation (earlier turns and handler memory) of its context.

``Conversation`` loads a context's turns for a ``HandlerRequest`` and records a turn
once the agent answered; handlers that declare ``uses_context = False`` cost no
context reads or writes, and a context the gateway just made (the client named none)
is not read: the store cannot hold it yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers.proto_helpers import get_message_text
from a2a.types import Message, Task
from a2a.utils.errors import ContentTypeNotSupportedError
from google.protobuf.json_format import MessageToDict

from a2a_gateway.stores.base import Context, Scope, Store
from handlers.base import FileInput, Handler, HandlerRequest, Turn

PASSED_HEADERS = ("traceparent", "tracestate", "baggage")
"""Inbound headers a handler may pass on to its backend (W3C trace context)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent the message and how: the principal tasks are recorded under, the
    extensions the request activated, the inbound headers worth passing on."""

    principal: str = "anonymous"
    extensions: frozenset[str] = frozenset()
    headers: Mapping[str, str] = field(default_factory=dict)
    key_id: str = ""
    """The API key presented, for the usage ledger ("" for other credentials)."""
    key_name: str = ""

    @classmethod
    def of(
        cls, principal: str, extensions: set[str] | frozenset[str], headers: Mapping[str, str],
        key: tuple[str, str] = ("", ""),
    ) -> Caller:
        """``key``: the API key's (id, name), if the caller presented one."""
        passed = {name: headers[name] for name in PASSED_HEADERS if name in headers}
        return cls(principal, frozenset(extensions), passed, *key)


def message_data(message: Message) -> list[dict[str, Any]]:
    """The data parts of ``message`` (a non-object value as ``{"value": ...}``)."""
    out = []
    for part in message.parts:
        if part.HasField("data"):
            value = MessageToDict(part.data)
            out.append(value if isinstance(value, dict) else {"value": value})
    return out


def message_files(message: Message, handler: Handler) -> list[FileInput]:
    """The file parts of ``message``; ``ContentTypeNotSupportedError`` for one the handler
    does not take (refused before anything is written, never dropped)."""
    files = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind not in ("raw", "url"):
            continue
        media_type = part.media_type or "application/octet-stream"
        if not handler.accepts_file(media_type):
            accepted = ", ".join(handler.accepted_file_types) or "no file parts"
            raise ContentTypeNotSupportedError(
                f"this agent does not take {media_type} file parts (it takes: {accepted})"
            )
        if kind == "raw":
            files.append(FileInput(media_type, part.filename, data=part.raw))
        else:
            files.append(FileInput(media_type, part.filename, uri=part.url))
    return files


class Conversation:
    """The turns and handler memory of each context, in the store."""

    def __init__(self, store: Store, max_turns: int) -> None:
        self._store = store
        self._max_turns = max_turns

    async def load(self, handler: Handler, scope: Scope, context_id: str) -> Context:
        if not handler.uses_context:
            return Context()
        return await self._store.get_context(scope, context_id) or Context()

    async def request(
        self, handler: Handler, scope: Scope, task: Task, message: Message, caller: Caller, *,
        streaming: bool, run_ref: str | None = None, pending: dict[str, Any] | None = None,
        new_context: bool = False,
    ) -> HandlerRequest:
        """The ``HandlerRequest`` of ``message`` in ``task``, with its context's turns
        (``new_context``: the gateway just made the context id, so it has none)."""
        files = message_files(message, handler)
        context = Context() if new_context else await self.load(handler, scope, task.context_id)
        return HandlerRequest(
            task_id=task.id,
            context_id=task.context_id,
            message=message,
            text=get_message_text(message),
            data=message_data(message),
            files=files,
            history=[Turn(t["role"], t["text"]) for t in context.turns],  # type: ignore[arg-type]
            session=dict(context.session),
            run_ref=run_ref,
            pending_input=pending,
            endpoint_id=scope.endpoint_id,
            tenant=scope.tenant,
            principal=scope.principal,
            key_id=caller.key_id,
            key_name=caller.key_name,
            extensions=caller.extensions,
            headers=dict(caller.headers),
            streaming=streaming,
            metadata=dict(message.metadata) if message.metadata else {},
        )

    async def remember(
        self, handler: Handler, scope: Scope, request: HandlerRequest, agent_text: str,
        session_updates: dict[str, Any], *, unseen: bool = False,
    ) -> None:
        """Record the user's message and the agent's answer as the context's latest turn.

        The context is read again first, so a turn that another task of the same context
        recorded since ``request`` was built is kept (the write itself is unconditional:
        of two turns recorded at the same instant, the later write wins). ``unseen``: no
        one but this run knows the context id yet (a context the gateway made for a task
        not written or streamed so far), so no other turn can exist and the context
        ``request`` was built from is extended without a read."""
        if not handler.uses_context:
            return
        if unseen:
            context = Context(
                [{"role": t.role, "text": t.text} for t in request.history], dict(request.session)
            )
        else:
            context = await self._store.get_context(scope, request.context_id) or Context()
        context.turns.append({"role": "user", "text": request.text})
        if agent_text:
            context.turns.append({"role": "agent", "text": agent_text})
        context.turns = context.turns[-self._max_turns :]
        context.session.update(session_updates)
        await self._store.put_context(scope, request.context_id, context)
