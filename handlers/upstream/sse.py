"""Reading a backend's event stream: ``SSEReader`` turns the bytes of a ``text/event-stream``
into ``SSEFrame``s, chunk by chunk, with every event bounded in size."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from handlers.upstream.errors import UnexpectedFrame

DONE = "[DONE]"
DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SSEFrame:
    """One server-sent event: ``event`` is empty for bare ``data:`` frames."""

    event: str
    data: str
    id: str = ""
    """The frame's ``id:`` (a stream resumed with ``Last-Event-ID`` goes on after it)."""

    @property
    def done(self) -> bool:
        return self.data.strip() == DONE

    def object(self, backend: str) -> dict[str, Any]:
        """The data as a JSON object; anything else is ``UnexpectedFrame``."""
        try:
            value = json.loads(self.data)
        except ValueError:
            raise UnexpectedFrame(backend, "data that is not JSON") from None
        if not isinstance(value, dict):
            raise UnexpectedFrame(backend, "data that is not a JSON object")
        return value


_BOM = b"\xef\xbb\xbf"


class EventTooLarge(Exception):
    """An event (its lines so far, the unended one included) went past ``max_event_bytes``."""


class SSEReader:
    """The frames of an event stream, chunk by chunk: ``feed(chunk)`` gives every frame the
    chunk completes, in order, so one read of many frames is parsed at once.

    Lines end with CRLF, LF or CR (a CR that ends a chunk waits: it may be half a CRLF); a
    blank line ends an event; ``data:`` lines are joined with newlines, ``event:`` names it
    (the default ``message`` reads as ``""``), ``id:`` without a NUL is kept for the events
    that follow; comments, ``retry:`` and unknown fields are skipped. As httpx-sse does, an
    event is reported once any field was set, and one leading BOM is dropped.

    An event larger than ``max_event_bytes`` is ``EventTooLarge``. The chunks of a line not
    ended yet are kept as they came and joined once, when the line ends, so a long line
    costs time linear in its length (``scanned`` counts the bytes looked at)."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.scanned = 0
        self._pending: list[bytes] = []
        """The chunks since the last line end (a CR ending the last of them: ``_half_crlf``)."""
        self._pending_bytes = 0
        self._half_crlf = False
        self._event_bytes = 0
        """The bytes of the lines of the event being read."""
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._id = ""
        self._retry = False

    def feed(self, chunk: bytes) -> list[SSEFrame]:
        if not self._started:
            text = b"".join(self._pending) + chunk
            self._pending, self._pending_bytes = [], 0
            if _BOM.startswith(text):
                self._pending, self._pending_bytes = [text], len(text)
                return []
            self._started = True
            chunk = text.removeprefix(_BOM)
        self.scanned += len(chunk)
        if not self._half_crlf and b"\n" not in chunk and b"\r" not in chunk:
            self._pending.append(chunk)
            self._pending_bytes += len(chunk)
            self._check_size()
            return []
        return self._lines(b"".join(self._pending) + chunk)

    def _lines(self, text: bytes) -> list[SSEFrame]:
        self.scanned += len(text)
        self._half_crlf = text.endswith(b"\r")
        if self._half_crlf:
            text = text[:-1]
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, rest = text.split(b"\n")
        if self._half_crlf:
            rest += b"\r"
        self._pending, self._pending_bytes = ([rest], len(rest)) if rest else ([], 0)
        frames: list[SSEFrame] = []
        for line in lines:
            if line:
                self._event_bytes += len(line) + 1
                self._check_size()
                self._field(line.decode("utf-8", "replace"))
            else:
                self._event_bytes = 0
                if self._event or self._data or self._id or self._retry:
                    event = "" if self._event == "message" else self._event
                    frames.append(SSEFrame(event, "\n".join(self._data), self._id))
                    self._event, self._data, self._retry = "", [], False
        self._check_size()
        return frames

    def _check_size(self) -> None:
        if self._event_bytes + self._pending_bytes > self.max_event_bytes:
            self._pending, self._data = [], []
            raise EventTooLarge(self.max_event_bytes)

    def _field(self, line: str) -> None:
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            self._retry = self._retry or (value.isascii() and value.isdigit())
