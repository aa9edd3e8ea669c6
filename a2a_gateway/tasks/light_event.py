"""``LightEvent``: an ``asyncio.Event`` that holds a waiter list only while someone waits.

``asyncio.Event`` makes a ``deque`` of waiters in its constructor (600 bytes, kept for the
event's life). Every run has two events (``created``, ``settled``) and most are waited on
once or never; with ten thousand idle streams that was 15 MB of empty deques.
"""

from __future__ import annotations

import asyncio


class LightEvent:
    """``set``, ``clear``, ``is_set`` and ``await wait()`` as ``asyncio.Event``'s."""

    __slots__ = ("_value", "_waiters")

    def __init__(self) -> None:
        self._value = False
        self._waiters: list[asyncio.Future[bool]] | None = None

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        """Set the flag and wake every waiter."""
        if self._value:
            return
        self._value = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(True)

    def clear(self) -> None:
        self._value = False

    async def wait(self) -> bool:
        """Return True once the flag is set (at once if it is)."""
        if self._value:
            return True
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            return await waiter
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)
                if not self._waiters:
                    self._waiters = None
