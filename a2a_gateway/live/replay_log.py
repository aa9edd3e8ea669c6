"""A replay log: the recent events of one stream (a task's run on the live hub, an endpoint
on the operators' feed), numbered in order under a random token: from 1, or by a number the
events carry (a task's generation). Event ids are ``<token>.<n>``: a client that reconnects
with one as ``Last-Event-ID`` gets exactly the events after it, or nothing when the log no
longer holds them all (an id of another log, of a restarted process, too old, or not an id
at all)."""

from __future__ import annotations

import os
from typing import Any, Generic, TypeVar

E = TypeVar("E")

LOG_OVERHEAD = 256
"""Bytes a log counts for itself, so a byte budget also bounds many empty logs."""


class ReplayLog(Generic[E]):
    """The last events of one stream, each kept with its size in bytes: as given, or in the
    smaller form a subclass's ``_pack`` makes of it (``after`` gives back ``_unpack``'s)."""

    __slots__ = ("token", "events", "last", "floor", "touched", "size")

    def __init__(self, now: float, start: int = 0) -> None:
        self.token = os.urandom(6).hex()
        self.events: list[tuple[int, Any, int]] = []  # (n, packed event, bytes)
        """Oldest first. A list, not a deque: most logs hold a few events, and an empty deque
        alone is 600 bytes; dropping the oldest of a full log moves ``max_events`` pointers."""
        self.last = start
        """The number of the last event (``start`` before the first: the stream's position
        when the log opened)."""
        self.floor = start
        """The log holds every event numbered above this one."""
        self.touched = now
        """When the log was last active (its owner's clock)."""
        self.size = LOG_OVERHEAD

    def id(self, n: int) -> str:
        return f"{self.token}.{n}"

    def append(
        self, event: E, size: int, max_events: int, number: int = 0
    ) -> tuple[str, int]:
        """Log ``event`` as ``number`` (the next one when that is not above the last: numbers
        only grow), dropping the oldest past ``max_events``; its id and the bytes the log
        grew by (less than ``size`` when events were dropped)."""
        before = self.size
        self.last = number if number > self.last else self.last + 1
        self.events.append((self.last, self._pack(event), size))
        self.size += size
        while len(self.events) > max_events:
            self.floor, _, dropped = self.events.pop(0)
            self.size -= dropped
        return self.id(self.last), self.size - before

    def after(self, event_id: str) -> list[tuple[str, E, int]] | None:
        """The events after ``event_id`` with their sizes; None unless this log holds all of
        them. The id comes from a client: anything but one of this log's is None."""
        token, _, number = event_id.rpartition(".")
        if token != self.token or not number.isascii() or not number.isdigit() or len(number) > 18:
            return None
        n = int(number)
        if not self.floor <= n <= self.last:
            return None
        return [(self.id(m), self._unpack(kept), size) for m, kept, size in self.events if m > n]

    def _pack(self, event: E) -> Any:
        """What the log keeps of ``event``: the event itself."""
        return event

    def _unpack(self, kept: Any) -> E:
        """The event ``_pack`` kept ``kept`` for."""
        return kept
