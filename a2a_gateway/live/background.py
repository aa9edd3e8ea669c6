"""What a hub spanning replicas runs beside the requests: its loops (listening, sending,
refreshing) and short side tasks (a control command, a store read), all stopped together;
its warnings, at most one every few seconds however often a fault repeats; and the wait for
a task's stored version that an event too large for the wire points to."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from a2a_gateway.stores.base import TERMINAL_STATES, Scope, Store, StoredTask

log = structlog.get_logger(__name__)

WARN_EVERY_SECONDS = 5.0


STOP_WAIT_SECONDS = 5.0


class Background:
    """The loops and side tasks of one hub."""

    def __init__(self, stats: dict[str, int]) -> None:
        self._loops: list[asyncio.Task[None]] = []
        self._side: set[asyncio.Task[Any]] = set()
        self._stats = stats
        self._last_warning = 0.0

    def start(self, **loops: Coroutine[Any, Any, None]) -> None:
        """Run each loop (named by its keyword) until ``stop``."""
        self._loops += [asyncio.create_task(loop, name=name) for name, loop in loops.items()]

    def spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` beside the loops; a failure is logged, never raised."""
        task = asyncio.ensure_future(work)
        self._side.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._side.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("live_side_task_failed", error=repr(task.exception()))

    async def side_tasks_done(self) -> None:
        """Wait for the side tasks under way now."""
        await asyncio.gather(*self._side, return_exceptions=True)

    async def stop(self, last: Callable[[], Awaitable[None]] | None = None) -> None:
        """Give ``last`` (sending what is queued) a second, then cancel everything, waiting
        at most ``STOP_WAIT_SECONDS`` for it to end (a shutdown never hangs on a client
        library that holds on to a cancelled call)."""
        if last is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await last()
        tasks = [*self._loops, *self._side]
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=STOP_WAIT_SECONDS)
            if pending:
                log.warning("live_hub_tasks_still_running", tasks=len(pending))
        for task in tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: a loop's error was logged where it happened
        self._loops.clear()

    def warn(self, event: str, **fields: Any) -> None:
        """A warning with the hub's counters, unless one was logged in the last seconds."""
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY_SECONDS:
            self._last_warning = now
            log.warning(event, **fields, stats=dict(self._stats))


async def stored_at_least(store: Store, scope: Scope, task_id: str, version: int,
                          wait_seconds: float) -> StoredTask | None:
    """The stored task once it holds ``version`` (or has ended), read again for up to
    ``wait_seconds`` (the owner's write may land after its notice); None after that, or when
    there is no such task."""
    deadline = time.monotonic() + wait_seconds
    while True:
        stored = await store.get_task(scope, task_id)
        if stored is None:
            return None
        if stored.version >= version or stored.task.status.state in TERMINAL_STATES:
            return stored
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.02)
