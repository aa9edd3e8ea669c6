"""Waiting for something in a test: poll it with a bound, never sleep a fixed time.

``eventually`` calls a probe until its value passes, failing after a timeout:

    task = await eventually(lambda: client.get_task(request),
                            until=lambda t: t.status.state == COMPLETED, what="the task completed")
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], T | Awaitable[T]],
    *,
    until: Callable[[T], Any] = bool,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "the condition",
) -> T:
    """Call ``probe`` (a function or a coroutine function) every ``interval`` seconds until
    ``until`` holds for what it returned (by default: until that is truthy), and return
    that value. An AssertionError naming ``what`` and the last value ends the wait after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if until(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last seen: {value!r})")
        await asyncio.sleep(interval)
