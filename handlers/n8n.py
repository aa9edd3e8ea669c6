"""n8n workflows as A2A agents: a Chat Trigger in streaming mode (``POST <chat URL>``).

One A2A message is one n8n execution of the workflow: the gateway posts
``{"action": "sendMessage", "sessionId", "chatInput"}`` to the Chat Trigger's webhook URL
and n8n answers with JSON lines (``begin`` / ``item`` / ``end`` per streaming node, ``error``
when the execution fails), which become text deltas and, when the stream ends, the task's
answer. Tasks are always streamed from n8n; ``response_mode: message`` reads the same stream
and replies with one A2A Message.

Conversation continuity: ``sessionId`` is an opaque value per caller and A2A context, so
the turns of one context share the workflow's memory node (Simple Memory and the like) and
two callers never do. n8n keeps the conversation; only the new message is sent.

Cancel: closing the stream does not stop an n8n execution. With the owner's credentials
(``n8n_owner_email`` / ``n8n_owner_password``) cancel logs in to n8n's REST API, finds the
running execution of this task (the newest running one whose trigger data carries this
context's ``sessionId``: n8n gives no execution id in the stream) and stops it, as it does
for a run past ``run_timeout_seconds``; without them the stream is closed and the execution
runs on in n8n.

Limits of n8n's chat webhook: no human-in-the-loop (n8n's approval gates need the hosted
chat's WebSocket), no files, no tool or reasoning events, no re-attach after a gateway
restart (the stream is tied to the POST), and n8n's agent node may deliver the whole
answer in one burst at the end rather than token by token.

See docs/handlers.md for the settings and the event mapping.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx
import structlog
from pydantic import Field, SecretStr, field_validator

from handlers.base import (
    Completed,
    Failed,
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
    UpstreamError,
    clip,
    make_timeout,
    redact,
    request_text,
)

__all__ = ["ChatStream", "N8nHandler", "N8nSettings"]

BACKEND = "n8n"
RUNNING_LISTED = 100
"""The running executions cancel looks through (n8n lists the newest first)."""
log = structlog.get_logger(__name__)


class N8nSettings(BridgeSettings):
    n8n_chat_url: str = Field(min_length=1)
    """The Chat Trigger's webhook URL (``https://n8n.example.com/webhook/<id>/chat``)."""
    n8n_api_url: str | None = None
    """Base URL of n8n's REST API, for cancel; unset: the chat URL's part before
    ``/webhook``."""
    n8n_owner_email: str | None = None
    """The login of an n8n user who may stop the workflow's executions (for cancel);
    ``env:NAME`` in endpoint rows."""
    n8n_owner_password: SecretStr | None = None
    """That user's password; ``env:NAME`` in endpoint rows."""
    n8n_timeout: float = Field(default=600.0, gt=0)
    """Seconds n8n may stay silent (connect: at most 10 s) before the task fails. n8n's
    agent node may send nothing until the model has finished, so keep it generous."""

    @field_validator("n8n_chat_url", "n8n_api_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError("must be an http(s) URL")
        return value

    @property
    def rest_url(self) -> str:
        """The base URL of n8n's REST API."""
        if self.n8n_api_url:
            return self.n8n_api_url.rstrip("/")
        for marker in ("/webhook/", "/webhook-test/"):
            if marker in self.n8n_chat_url:
                return self.n8n_chat_url.split(marker, 1)[0]
        parts = urlsplit(self.n8n_chat_url)
        return f"{parts.scheme}://{parts.netloc}"


def _text(data: dict[str, Any], key: str, what: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise UnexpectedFrame(BACKEND, f"{what} without text")
    return value


class ChatStream:
    """Maps the JSON lines of one streamed n8n execution to handler events.

    Each streaming node sends ``begin``, its ``item`` texts and ``end``; the answer is every
    node's text, in order (a blank line between two nodes' texts, streamed too), complete
    when the stream ends after every node that began has ended. ``error`` fails the task
    at once; a line of another ``type`` is skipped (n8n may add kinds).
    """

    done = False
    """JSON lines have no ``[DONE]`` frame: the end of the HTTP answer ends the stream."""

    def __init__(self) -> None:
        self.started = False
        self.open_nodes = 0
        self.ended_nodes = 0
        self.texts: list[str] = []
        self.failure: Failed | None = None
        self._node_has_text = False

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """Events for one line; ``UnexpectedFrame`` when it is not an n8n chunk."""
        if self.failure is not None:
            return []
        data = frame.object(BACKEND)
        kind = data.get("type")
        if not isinstance(kind, str):
            raise UnexpectedFrame(BACKEND, "a line without a type")
        if kind == "begin":
            return self._begin()
        if kind == "item":
            return self._item(_text(data, "content", "an item"))
        if kind == "end":
            self.open_nodes = max(self.open_nodes - 1, 0)
            self.ended_nodes += 1
            return []
        if kind == "error":
            content = data.get("content")
            reason = clip(content) if isinstance(content, str) and content else "no reason given"
            self.failure = Failed(f"the n8n execution failed: {reason}")
        return []

    def _begin(self) -> list[HandlerEvent]:
        self.open_nodes += 1
        self._node_has_text = False
        if self.started:
            return []
        self.started = True
        return [Progress("working")]

    def _item(self, text: str) -> list[HandlerEvent]:
        if not text:
            return []
        events: list[HandlerEvent] = []
        if self.texts and not self._node_has_text:
            self.texts.append("\n\n")  # the next node's answer
            events.append(TextDelta("\n\n"))
        self._node_has_text = True
        self.texts.append(text)
        events.append(TextDelta(text))
        return events

    @property
    def ended(self) -> bool:
        return self.failure is not None

    def finish(self) -> list[HandlerEvent]:
        if self.failure is not None:
            return [self.failure]
        if self.ended_nodes == 0 or self.open_nodes > 0:
            return [Failed("n8n closed the stream before the execution finished")]
        return [Completed(text="".join(self.texts))]


class N8nHandler(StreamingBridge):
    """An n8n workflow through its Chat Trigger's streaming webhook."""

    Settings = N8nSettings
    settings: N8nSettings
    uses_context: ClassVar[bool] = False  # n8n's memory node keeps the conversation
    path = ""  # the chat URL is the whole address
    run_name = "the n8n execution"
    failure_log = "n8n_request_failed"
    answers_only_streamed = True

    def make_upstream(self) -> Upstream:
        s = self.settings
        upstream = Upstream.for_backend(self.http, BACKEND, s, url=s.n8n_chat_url,
                                        timeout=s.n8n_timeout)
        return dataclasses.replace(upstream, json_lines=True)

    def session_id(self, request: HandlerRequest) -> str:
        """The ``sessionId`` that pins this caller's A2A context to one n8n chat session."""
        return request.backend_user(per_context=True)

    def build_body(self, request: HandlerRequest, *, stream: bool) -> dict[str, Any]:
        return {"action": "sendMessage", "sessionId": self.session_id(request),
                "chatInput": request_text(request)}

    def stream_parser(self, body: dict[str, Any]) -> ChatStream:
        return ChatStream()

    async def cancel(self, request: HandlerRequest) -> bool:
        """Stop the task's execution (``stop_execution``); then the gateway closes the
        stream."""
        await self.stop_execution(request)
        return False

    async def stop_execution(self, request: HandlerRequest) -> None:
        """Stop the task's n8n execution over the REST API when the owner's credentials are
        set (a failure is logged, never raised)."""
        s = self.settings
        if s.n8n_owner_email and s.n8n_owner_password is not None:
            password = s.n8n_owner_password.get_secret_value()
            try:
                stopped = await ExecutionStopper(s.rest_url, s.n8n_owner_email, password,
                                                 s.n8n_timeout).stop(self.session_id(request))
            except (UpstreamError, httpx.HTTPError, ValueError) as exc:
                reason = exc.reason if isinstance(exc, UpstreamError) else type(exc).__name__
                log.warning("n8n_stop_failed", endpoint_id=request.endpoint_id,
                            task_id=request.task_id, reason=redact(reason, (password,)))
            else:
                log.info("n8n_execution_stopped", endpoint_id=request.endpoint_id,
                         task_id=request.task_id, execution_id=stopped)


class ExecutionStopper:
    """Stops the running execution of one chat session through n8n's REST API, with a login
    session of its own (its cookie never reaches the gateway's shared client)."""

    def __init__(self, base_url: str, email: str, password: str, timeout: float) -> None:
        self.base_url = base_url
        self.email = email
        self.password = password
        self.timeout = min(timeout, 30.0)

    async def stop(self, session_id: str) -> str | None:
        """The id of the execution stopped, or None when none of the session was running."""
        async with httpx.AsyncClient(base_url=self.base_url,
                                     timeout=make_timeout(self.timeout)) as rest:
            await self._call(rest, "POST", "/rest/login",
                             {"emailOrLdapLoginId": self.email, "password": self.password})
            # Sent by hand: n8n may mark its cookie Secure, which a cookie jar keeps off http.
            session = rest.cookies.get("n8n-auth")
            if not session:
                raise UpstreamError("n8n's login answer carried no session cookie")
            rest.cookies.clear()
            rest.headers["Cookie"] = f"n8n-auth={session}"
            execution = await self._running_execution(rest, session_id)
            if execution is not None:
                await self._call(rest, "POST", f"/rest/executions/{execution}/stop", {})
            return execution

    async def _running_execution(self, rest: httpx.AsyncClient, session_id: str) -> str | None:
        """The newest running execution whose data carries ``session_id``."""
        found = await self._call(rest, "GET", "/rest/executions", params={
            "filter": json.dumps({"status": ["running"]}), "limit": str(RUNNING_LISTED)})
        data = found.get("data") if isinstance(found, dict) else None
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise UpstreamError("n8n listed the executions in an unexpected shape")
        ids = sorted((str(e["id"]) for e in results if isinstance(e, dict) and "id" in e),
                     key=lambda i: (len(i), i), reverse=True)
        for execution in ids:
            details = await self._call(rest, "GET", f"/rest/executions/{execution}")
            if session_id in json.dumps(details):
                return execution
        return None

    async def _call(self, rest: httpx.AsyncClient, method: str, path: str,
                    body: dict[str, Any] | None = None,
                    params: dict[str, str] | None = None) -> Any:
        response = await rest.request(method, path, json=body, params=params)
        if response.status_code >= 400:
            raise UpstreamError(f"n8n answered HTTP {response.status_code} to {method} "
                                f"{path.split('/')[2]}")
        return response.json()
