"""Any OpenAI Responses API server (``POST /v1/responses``): OpenAI itself, Microsoft Agent
Framework DevUI, or another server of that API. The stream is read by
``handlers.responses_events``, as OpenClaw's bridge (``handlers.openclaw``) reads its own.

One A2A message is one response. Tasks are always streamed (blocking and streaming A2A
sends alike); ``response_mode: message`` makes one non-streamed call and replies with a
single A2A Message.

Conversation continuity (``responses_continuity``), remembered per A2A context through
``SessionUpdate``:

* ``previous_response_id``: each completed response's id goes with the next turn (OpenAI);
* ``conversation``: one conversation per context (``POST /v1/conversations`` on its first
  message), sent as ``conversation`` with every turn (DevUI, which ignores
  ``previous_response_id``);
* ``none``: the server keeps nothing; every call carries the context's earlier turns.

A tool call the server wants approved (``response.function_approval.requested``, DevUI)
pauses the task (INPUT_REQUIRED); the client's yes or no goes in the next request on the
same conversation as a ``function_approval_response`` input item. Canceling a task asks the
server to cancel the response (``POST /v1/responses/{id}/cancel``); where that is not served,
the stream is closed instead. With ``responses_background`` a response runs apart from its
stream (OpenAI's background mode) and a task whose gateway restarted re-joins it
(``GET /v1/responses/{id}?stream=true``); otherwise such a task fails.

See docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Any, Literal

import structlog
from pydantic import Field, SecretStr

from handlers.approvals import (
    card_extension,
    confirmation_answer,
    decisions,
    decisions_or_refusal,
)
from handlers.base import (
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    InputRejectedError,
    Reply,
    SessionUpdate,
)
from handlers.bridge import StreamingBridge
from handlers.responses_events import (
    ResponsesEvents,
    objects,
    pending_approvals,
    read_response,
)
from handlers.upstream import (
    BridgeSettings,
    UnexpectedFrame,
    Upstream,
    UpstreamError,
    has_input,
    request_text,
)

__all__ = ["ResponsesHandler", "ResponsesSettings", "build_input"]

log = structlog.get_logger(__name__)

PREVIOUS_KEY = "responses_previous_response_id"
CONVERSATION_KEY = "responses_conversation"


class ResponsesSettings(BridgeSettings):
    responses_api_url: str = "http://127.0.0.1:8000"
    """Base URL of the server (a trailing ``/v1`` is accepted); ``/v1/responses`` is appended."""
    responses_api_key: SecretStr | None = None
    """Sent as ``Authorization: Bearer``; ``env:NAME`` in endpoint rows."""
    responses_model: str | None = None
    """The ``model`` of every request (DevUI: the entity id); unset: not sent."""
    responses_metadata: dict[str, str] = Field(default_factory=dict)
    """The ``metadata`` object of every request and new conversation (DevUI needs
    ``{"entity_id": "<id>"}``); empty: not sent."""
    responses_continuity: Literal["previous_response_id", "conversation", "none"] = (
        "previous_response_id")
    """How a context's next turn continues the last: ``previous_response_id``,
    ``conversation`` (the Conversations API) or ``none`` (earlier turns sent as input)."""
    responses_user: Literal["caller", "context", "none"] = "caller"
    """The ``user`` field: an opaque name of the caller, of the caller's context (OpenClaw
    keeps one session per ``user``), or ``none`` (not sent)."""
    responses_cancel: bool = True
    """Cancel a task's response with ``POST /v1/responses/{id}/cancel`` (the response id is
    recorded with the task); off, or where the server refuses, the stream is closed."""
    responses_background: bool = False
    """Start responses with ``background: true`` (OpenAI): the server runs them apart from the
    stream, so a task whose gateway restarted re-joins its response
    (``GET /v1/responses/{id}?stream=true``); OpenAI cancels only background responses."""
    responses_timeout: float = Field(default=600.0, gt=0)
    """Seconds the server may stay silent (connect: at most 10 s) before the task fails."""
    responses_name: str = Field(default="Responses server", min_length=1, max_length=60)
    """The server's name in failure reasons (e.g. ``DevUI``)."""


# -- the handler --------------------------------------------------------------------------

def build_input(request: HandlerRequest, *, with_history: bool) -> str | list[dict[str, Any]]:
    """The ``input``: the answer to a pending approval as ``function_approval_response``
    items, else the message's text, after the context's earlier turns ``with_history``."""
    approvals = pending_approvals(request)
    if approvals:
        decided = decisions(request) or {}
        approved = confirmation_answer(request) is True  # resume refused anything unclear
        return [{"type": "message", "role": "user", "content": [
            {"type": "function_approval_response", "request_id": a["request_id"],
             "approved": decided[a["request_id"]].approved if a["request_id"] in decided
             else approved} for a in approvals]}]
    text = request_text(request)
    if not with_history or not request.history:
        return text
    items = [{"type": "message", "role": "user" if turn.role == "user" else "assistant",
              "content": turn.text} for turn in request.history if turn.text]
    return [*items, {"type": "message", "role": "user", "content": text}]


class ResponsesHandler(StreamingBridge):
    """Any OpenAI Responses API server (``POST /v1/responses``)."""

    Settings = ResponsesSettings
    settings: ResponsesSettings
    path = "/v1/responses"
    run_name = "the response"
    failure_log = "responses_request_failed"

    def make_upstream(self) -> Upstream:
        s = self.settings
        return Upstream.for_backend(self.http, s.responses_name, s, url=s.responses_api_url,
                                    drop_suffix="/v1", timeout=s.responses_timeout,
                                    api_key=s.responses_api_key)

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        """The base's run, after making the context's conversation when it has none yet; a
        reply (message mode) remembers its response id as a streamed answer does."""
        if (self.settings.responses_continuity == "conversation" and has_input(request)
                and not isinstance(request.session.get(CONVERSATION_KEY), str)):
            try:
                conversation = await self._new_conversation(request)
            except UpstreamError as exc:
                log.warning(self.failure_log, endpoint_id=request.endpoint_id,
                            task_id=request.task_id, reason=exc.reason)
                yield Failed(self.failure_reason(exc))
                return
            yield SessionUpdate({CONVERSATION_KEY: conversation})
            request = replace(request, session={**request.session, CONVERSATION_KEY: conversation})
        async with aclosing(super().run(request)) as events:
            async for event in events:
                remembered = self._reply_response_id(event)
                if remembered:
                    yield SessionUpdate({PREVIOUS_KEY: remembered})
                yield event

    def _reply_response_id(self, event: HandlerEvent) -> str | None:
        """The response id of a reply, when contexts continue by ``previous_response_id``."""
        if (not isinstance(event, Reply)
                or self.settings.responses_continuity != "previous_response_id"):
            return None
        known = event.metadata.get("responses")
        response_id = known.get("response_id") if isinstance(known, dict) else None
        return response_id if isinstance(response_id, str) and response_id else None

    async def _new_conversation(self, request: HandlerRequest) -> str:
        body = {"metadata": self.settings.responses_metadata} if (
            self.settings.responses_metadata) else {}
        answer = await self.upstream.json("POST", "/v1/conversations", body, request=request,
                                          deadline=self.settings.deadline(self.run_name))
        if not isinstance(answer.get("id"), str) or not answer["id"]:
            raise UnexpectedFrame(self.upstream.name, "a conversation without an id")
        return answer["id"]

    def build_body(self, request: HandlerRequest, *, stream: bool) -> dict[str, Any]:
        s = self.settings
        body: dict[str, Any] = {
            "input": build_input(request, with_history=s.responses_continuity == "none"),
            "stream": stream,
        }
        if s.responses_model:
            body["model"] = s.responses_model
        if s.responses_metadata:
            body["metadata"] = dict(s.responses_metadata)
        if s.responses_background and stream:
            body["background"] = True
        if s.responses_user != "none":
            body["user"] = request.backend_user(per_context=s.responses_user == "context")
        key = {"previous_response_id": PREVIOUS_KEY, "conversation": CONVERSATION_KEY}.get(
            s.responses_continuity)
        value = request.session.get(key) if key else None
        if isinstance(value, str) and value:
            body[s.responses_continuity] = value
        return body

    def stream_parser(self, body: dict[str, Any]) -> ResponsesEvents:
        """A parser for the answer to ``body`` (empty: a re-joined response, whose id the
        task already has)."""
        s = self.settings
        return ResponsesEvents(
            self.upstream.name, metadata_key="responses",
            report_run=bool(body) and (s.responses_cancel or s.responses_background),
            session_key=PREVIOUS_KEY if s.responses_continuity == "previous_response_id"
            else None)

    @property
    def supports_reattach(self) -> bool:
        """Only a background response goes on without its stream and can be re-joined."""
        return self.settings.responses_background

    async def reattach(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        """Follow the background response ``run_ref`` again, from its first event."""
        parser = self.stream_parser({})
        path = f"{self.path}/{urllib.parse.quote(request.run_ref or '', safe='')}?stream=true"
        try:
            async with self.upstream.call("GET", path, request=request, events=True,
                                          deadline=self.settings.deadline(self.run_name)) as call:
                async for frame in call.frames():
                    for event in parser.feed(frame):
                        yield event
                    if parser.ended:
                        break
                if parser.ended and not parser.done:
                    await call.drain()
        except UpstreamError as exc:
            log.warning(self.failure_log, endpoint_id=request.endpoint_id,
                        task_id=request.task_id, reason=exc.reason)
            yield Failed(self.failure_reason(exc))
            return
        for event in parser.finish():
            yield self._redacted(event)

    def read_answer(self, data: dict[str, Any]) -> HandlerEvent:
        """The plain answer; one that is only a tool call waiting for approval (DevUI) fails:
        a reply cannot ask."""
        event = read_response(data, self.upstream.name, "responses")
        calls = [i for i in objects(data.get("output"), "output", self.upstream.name)
                 if i.get("type") == "function_call"]
        if isinstance(event, Completed) and not event.text and calls:
            return Failed(f"{self.upstream.name} wants a tool call approved, which a reply "
                          "(response_mode: message) cannot ask")
        return event

    async def resume(self, request: HandlerRequest) -> bool:
        """The answer goes in a fresh ``run`` (the asking response has ended); an answer that
        is neither approve nor deny, or a structured answer that does not fit the request, is
        refused; the task keeps waiting."""
        if not pending_approvals(request):
            return False
        decided = decisions_or_refusal(request)
        if decided is None:
            raise InputRejectedError(
                'Answer approve or deny (yes or no), as text or as a data part '
                '{"approved": true|false}.', request.pending_input or None)
        return False

    def card_fields(self) -> dict[str, Any]:
        # a server may ask to approve a function call (DevUI's function_approval)
        return {"extensions": [card_extension(editable=False)]}

    async def cancel(self, request: HandlerRequest) -> bool:
        """Ask the server to cancel the response ``run_ref``; True when it says it did (its
        stream then ends with ``response.cancelled``), False when the stream must be closed."""
        if not self.settings.responses_cancel or not request.run_ref:
            return False
        path = f"{self.path}/{urllib.parse.quote(request.run_ref, safe='')}/cancel"
        try:
            answer = await self.upstream.json("POST", path, {}, request=request, retry=False,
                                              timeout=10.0)
        except UpstreamError as exc:
            log.info("responses_cancel_refused", task_id=request.task_id, reason=exc.reason)
            return False
        return answer.get("status") == "cancelled"
