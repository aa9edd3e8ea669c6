"""The time bound of one run (``run_timeout_seconds``), shared by every call the run makes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from handlers.upstream.errors import RunTimedOut

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a run must have ended: ``seconds`` after it started (``time.monotonic``)."""

    at: float
    seconds: float
    run: str
    """What runs, for the reason: e.g. ``the Hermes run``."""

    @classmethod
    def start(cls, seconds: float, run: str) -> Deadline:
        return cls(time.monotonic() + seconds, seconds, run)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    @property
    def reason(self) -> str:
        return f"{self.run} exceeded run_timeout_seconds={self.seconds:g}"

    async def within(self, awaitable: Awaitable[T]) -> T:
        """``await awaitable``, or ``RunTimedOut`` once the deadline passes. Use it
        around one await, never around a ``yield``: a timeout spanning a yield
        would cancel the consumer instead."""
        try:
            async with asyncio.timeout(self.remaining()):
                return await awaitable
        except TimeoutError:
            raise RunTimedOut(self.reason) from None
