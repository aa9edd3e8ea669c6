"""The engine as the live hub sees it (``live.hub.LocalRuns``).

The hub never holds the engine: it asks this view whether a task runs here, where
its run stores it, what text it streamed so far, and hands it control commands from
other replicas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from a2a.types import TaskArtifactUpdateEvent

if TYPE_CHECKING:
    from a2a_gateway.tasks.engine import TaskEngine
    from a2a_gateway.tasks.run import TaskRun

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

