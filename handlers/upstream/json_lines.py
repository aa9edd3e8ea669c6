"""Reading a backend's stream of JSON lines (n8n's streaming webhooks): ``JSONLinesReader``
turns the bytes into one ``SSEFrame`` per non-blank line, chunk by chunk, with every line
bounded in size, so a bridge reads them with the same stream parsers as server-sent events."""

from __future__ import annotations

from handlers.upstream.sse import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, SSEFrame

JSON_LINES_TYPES = ("application/json", "application/x-ndjson", "application/jsonl",
                    "application/json-seq")
"""Content types a JSON-lines answer may come with (n8n sends ``application/json``)."""


class JSONLinesReader:
    """The lines of a JSON-lines stream as frames (``event`` empty, ``data`` the line),
    chunk by chunk: ``feed(chunk)`` gives every line the chunk completes, in order.

    Lines end with LF (a CR before it is dropped); blank lines are skipped. A line longer
    than ``max_event_bytes`` (the unended one included) is ``EventTooLarge``. The chunks of
    a line not ended yet are kept as they came and joined once, when the line ends."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def feed(self, chunk: bytes) -> list[SSEFrame]:
        if b"\n" not in chunk:
            self._pending.append(chunk)
            self._pending_bytes += len(chunk)
            self._check_size(self._pending_bytes)
            return []
        *lines, rest = (b"".join(self._pending) + chunk).split(b"\n")
        self._pending, self._pending_bytes = ([rest], len(rest)) if rest else ([], 0)
        frames: list[SSEFrame] = []
        for line in lines:
            self._check_size(len(line))
            text = line.removesuffix(b"\r").decode("utf-8", "replace").strip()
            if text:
                frames.append(SSEFrame("", text))
        self._check_size(self._pending_bytes)
        return frames

    def finish(self) -> list[SSEFrame]:
        """The last line when the stream ended without a line end."""
        text = b"".join(self._pending).decode("utf-8", "replace").strip()
        self._pending, self._pending_bytes = [], 0
        return [SSEFrame("", text)] if text else []

    def _check_size(self, size: int) -> None:
        if size > self.max_event_bytes:
            self._pending, self._pending_bytes = [], 0
            raise EventTooLarge(self.max_event_bytes)
