"""The engine as the live hub sees it (``live.hub.LocalRuns``), and the key under which
a stream names the id of the event it yields.

The hub never holds the engine: it asks this view whether a task runs here, where
its run stores it, what text it streamed so far, and hands it control commands from
other replicas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from a2a.server.context import ServerCallContext
from a2a.types import TaskArtifactUpdateEvent

if TYPE_CHECKING:
    from a2a_gateway.tasks.engine import TaskEngine
    from a2a_gateway.tasks.run import TaskRun

T = TypeVar("T")

EVENT_ID = "sse_event_id"
"""``ServerCallContext.state`` key: the id of the event a stream is about to yield (the
transport writes it as the SSE ``id:`` line)."""

LAST_EVENT_ID = "Last-Event-ID"
"""The request header of a reconnecting SSE client: the id of the last event it got."""


class LiveView:
    """``LocalRuns`` over the engine's runs."""

    def __init__(self, engine: TaskEngine) -> None:
        self._engine = engine

    def run(self, task_id: str) -> TaskRun | None:
        return self._engine.runs.get(task_id)

    def text_so_far(self, task_id: str) -> TaskArtifactUpdateEvent | None:
        return self._engine.text_so_far(task_id)

    async def handle_control(self, command: str, task_id: str) -> None:
        await self._engine.handle_control(command, task_id)


def tagged(context: ServerCallContext, event_id: str | None, event: T) -> T:
    """``event``, with ``event_id`` noted for the transport that frames it (None: no id)."""
    context.state[EVENT_ID] = event_id
    return event
