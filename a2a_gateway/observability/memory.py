"""Memory back to the operating system after a wave of streams: glibc's ``malloc_trim``.

What a stream holds is freed when it ends (its connection, its run, and, its keep time
later, its replay log), but the allocator keeps the freed pages: the protobuf events of the
replay logs live in many small ``malloc`` blocks, and glibc returns only the top of its heap
by itself. ``malloc_trim(0)`` gives back every free page, wherever it is. It is not free
(it walks the heap: a few milliseconds on a few hundred MB), so ``MemoryRelease`` calls it
only after a wave: when what the process holds (open streams and replay logs, counted by
the caller) has fallen by ``after`` since its highest point since the last trim, and stopped
falling (a wave that is still ending frees more: one trim at its end does for all of it).

Without glibc (musl, macOS) there is nothing to call and nothing is trimmed.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


@functools.cache
def libc_malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim``; None when it has none (not glibc). Looked up at the
    first trim, not at start-up (``find_library`` runs ``ldconfig -p`` in a subprocess)."""
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:  # not glibc
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


class MemoryRelease:
    """Trims the heap once ``held()`` fell by ``after`` from its high point since the last
    trim and no longer falls. ``check()`` is called periodically (``run`` every ``interval``
    seconds); ``after`` 0 never trims."""

    def __init__(
        self, held: Callable[[], int], after: int, interval: float = 5.0,
        trim: Callable[[int], int] | None = None,
    ) -> None:
        self._held = held
        self.after = after
        self.interval = interval
        self._trim = trim
        """None: the C library's, looked up when a trim is first due."""
        self._high = 0
        self._last = 0
        self.trims = 0
        """Trims done (for tests and figures)."""

    def check(self) -> bool:
        """Trim now if a wave ended since the last trim; whether it did."""
        held = self._held()
        falling, self._last = held < self._last, held
        self._high = max(self._high, held)
        if self.after <= 0 or self._high - held < self.after or falling:
            return False
        trim = self._trim or libc_malloc_trim()
        if trim is None:
            return False
        started = time.perf_counter()
        collected = gc.collect()
        released = trim(0)
        self._high, self.trims = held, self.trims + 1
        log.info("memory_trimmed", held=held, collected=collected, released=bool(released),
                 ms=round((time.perf_counter() - started) * 1000, 1))
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.check()
            except Exception:
                log.exception("memory_release_failed")
