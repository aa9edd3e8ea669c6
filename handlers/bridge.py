"""The run of a streaming bridge: a handler whose task is one streamed upstream call
(OpenClaw ``/v1/responses``, the chat handler's ``/v1/chat/completions``).

``StreamingBridge.run`` refuses a message with nothing to send, bounds the run by
``run_timeout_seconds``, streams the task (the parser turns frames into events) or,
in message mode, makes one plain call and answers through ``Handler.answer``, and
turns every ``UpstreamError`` into ``Failed``. A bridge supplies its ``Upstream``,
its request body, its stream parser and how to read a plain answer. A task that is a backend
run with an id (Hermes, LangGraph, Agno, ADK) is ``handlers.run_bridge.RunBridge``'s.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, ClassVar, Protocol

import httpx
import structlog

from handlers.base import Failed, Handler, HandlerEvent, HandlerRequest, HandlerSettings, Rejected
from handlers.upstream import (
    BridgeSettings,
    Deadline,
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

    @abstractmethod
    def read_answer(self, data: dict[str, Any]) -> HandlerEvent:
        """``Completed`` or ``Failed`` for a plain (non-streamed) answer."""

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
            yield Failed(exc.reason)

    async def _plain(self, request: HandlerRequest, deadline: Deadline) -> HandlerEvent:
        data = await self.upstream.json("POST", self.path, self.build_body(request, stream=False),
                                        request=request, deadline=deadline)
        return self._redacted(self.read_answer(data))

    async def _stream(self, request: HandlerRequest,
                      deadline: Deadline) -> AsyncIterator[HandlerEvent]:
        body = self.build_body(request, stream=True)
        parser = self.stream_parser(body)
        async with self.upstream.call("POST", self.path, body, request=request,
                                      deadline=deadline, events=True) as call:
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
