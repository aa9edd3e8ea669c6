"""The run of a streaming bridge: a handler whose task is one streamed upstream call
(OpenClaw and any Responses server, the chat handler, AG-UI agents, n8n, AgentCore).

``StreamingBridge.run`` refuses a message with nothing to send, bounds the run by
``run_timeout_seconds`` (past it, asks the backend to stop through ``cancel``), streams the
task (the parser turns frames into events) or, in message mode, makes one plain call (or,
for a backend that only streams, reads the stream to its end) and answers through
``Handler.answer``, and turns every ``UpstreamError`` into ``Failed``. A bridge supplies
its ``Upstream``, its request body, its stream parser and how to read a plain answer; it may
give one call headers of its own (``upstream_for``: a session, a signature) and take a JSON
answer where it asked for a stream (``accepts_json_answer``). A task that is a backend run
with an id (Hermes, LangGraph, Agno, ADK) is ``handlers.run_bridge.RunBridge``'s.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, ClassVar, Protocol

import httpx
import structlog

from handlers.base import (
    AuthRequired,
    Canceled,
    Completed,
    Failed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRequired,
    Rejected,
)
from handlers.upstream import (
    BridgeSettings,
    Deadline,
    RunTimedOut,
    SSEFrame,
    Upstream,
    UpstreamError,
    has_input,
)

log = structlog.get_logger(__name__)


class StreamParser(Protocol):
    """Turns the frames of one streamed answer into handler events."""

    done: bool
    """``[DONE]`` arrived."""

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """Events for one frame; ``UnexpectedFrame`` when it has an unknown shape."""

    @property
    def ended(self) -> bool:
        """Nothing after this frame changes the answer (a terminal event, an error)."""

    def finish(self) -> list[HandlerEvent]:
        """The closing events: the terminal event, or ``Failed`` for a cut stream."""


class StreamingBridge(Handler):
    """Base of the bridges that stream a task from one upstream call."""

    path: ClassVar[str]
    """Appended to the upstream's base URL (e.g. ``/v1/responses``)."""
    run_name: ClassVar[str]
    """The run in the deadline's reason (``the OpenClaw run``)."""
    failure_log: ClassVar[str]
    """The log event of a failed call."""
    answers_only_streamed: ClassVar[bool] = False
    """The backend has no plain answer: message mode reads the stream to its end."""
    accepts_json_answer: ClassVar[bool] = False
    """The backend may answer a streaming call with one JSON value (``read_answer`` reads it)."""
    settings: BridgeSettings

    def __init__(self, settings: HandlerSettings, http: httpx.AsyncClient) -> None:
        super().__init__(settings, http)
        self.upstream = self.make_upstream()

    @abstractmethod
    def make_upstream(self) -> Upstream:
        """The backend, from the settings."""

    @abstractmethod
    def build_body(self, request: HandlerRequest, *, stream: bool) -> dict[str, Any]:
        """The request body."""

    @abstractmethod
    def stream_parser(self, body: dict[str, Any]) -> StreamParser:
        """A parser for the streamed answer to ``body`` (the request body just built)."""

    def read_answer(self, data: Any) -> HandlerEvent:
        """``Completed`` or ``Failed`` for a plain (non-streamed) answer: a JSON object, or
        any JSON value where ``accepts_json_answer``."""
        raise NotImplementedError(f"{type(self).__name__} has no plain answer")

    async def upstream_for(self, request: HandlerRequest, path: str,
                           body: dict[str, Any]) -> Upstream:
        """The upstream of one call to ``path`` with ``body`` (a bridge whose calls carry
        headers of their own, such as a session or a signature, returns a copy with them)."""
        return self.upstream

    def failure_reason(self, exc: UpstreamError) -> str:
        """The task's reason for a failed call (a bridge may say more, e.g. what a 403 lacks)."""
        return exc.reason

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        if not has_input(request):
            yield Rejected(f"the message has no text, data or file for {self.upstream.name}")
            return
        deadline = self.settings.deadline(self.run_name)
        try:
            if self.message_mode:
                yield self.answer(await self._plain(request, deadline))
                return
            # aclosing: when the gateway closes this iterator (cancel), the inner
            # one must close now, so that the upstream stream closes at once.
            async with aclosing(self._stream(request, deadline)) as events:
                async for event in events:
                    yield event
        except UpstreamError as exc:
            log.warning(self.failure_log, endpoint_id=request.endpoint_id,
                        task_id=request.task_id, reason=exc.reason)
            if isinstance(exc, RunTimedOut):
                await self.cancel(request)  # the backend's own stop, where it has one
            yield Failed(self.failure_reason(exc))

    async def _plain(self, request: HandlerRequest, deadline: Deadline) -> HandlerEvent:
        if self.answers_only_streamed:
            return await self._end_of_stream(request, deadline)
        body = self.build_body(request, stream=False)
        upstream = await self.upstream_for(request, self.path, body)
        data = await upstream.json("POST", self.path, body, request=request, deadline=deadline)
        return self._redacted(self.read_answer(data))

    async def _end_of_stream(self, request: HandlerRequest,
                             deadline: Deadline) -> HandlerEvent:
        """The stream's terminal event, for message mode on a backend that only streams."""
        final: HandlerEvent = Failed(f"{self.upstream.name} ended the stream without an answer")
        async with aclosing(self._stream(request, deadline)) as events:
            async for event in events:
                if isinstance(event, (InputRequired, AuthRequired)):
                    final = Failed(f"{self.upstream.name} asked for input, which "
                                   "response_mode: message cannot carry; use response_mode: task")
                elif isinstance(event, (Completed, Failed, Canceled, Rejected)):
                    final = event
        return final

    async def _stream(self, request: HandlerRequest,
                      deadline: Deadline) -> AsyncIterator[HandlerEvent]:
        body = self.build_body(request, stream=True)
        parser = self.stream_parser(body)
        upstream = await self.upstream_for(request, self.path, body)
        async with upstream.call("POST", self.path, body, request=request,
                                 deadline=deadline, events=True) as call:
            if self.accepts_json_answer and not call.is_event_stream:
                yield self._redacted(self.read_answer(await call.json_value()))
                return
            async for frame in call.frames():
                for event in parser.feed(frame):
                    yield event
                if parser.ended:
                    break
            if parser.ended and not parser.done:
                await call.drain()
        for event in parser.finish():
            yield self._redacted(event)

    def _redacted(self, event: HandlerEvent) -> HandlerEvent:
        """A backend's own failure text may echo a secret."""
        return Failed(self.upstream.reason(event.reason)) if isinstance(event, Failed) else event
