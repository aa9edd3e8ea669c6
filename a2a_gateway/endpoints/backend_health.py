"""Backend health: how each endpoint's last exchanges with its backend ended, on every replica.

A task run tells ``BackendHealth`` once, when its handler's run ends (``tasks.run``):
a success (an answer, a question back, a refusal: the backend was reached and answered) or an
error (a FAILED task, or the handler raising) with a short message. The message is safe to show
operators: one line, at most ``MAX_MESSAGE_CHARS``, URLs without ``user:password@``, query or
fragment, no bearer/basic credentials, no value after a credential's name (``token=``,
``"client_secret": …``), no gateway API key, none of the endpoint's secret settings values.

The outcomes go to the store, one record per endpoint that every replica adds to
(``Store.record_backend_health``: counts add, the latest times win), so every replica — and
the API instance of a dispatch-mode worker — shows the same health. A replica writes an
endpoint's changes at most once per ``write_seconds``, off the run's path: the first outcome
after a quiet interval at once, the later ones together when the interval ends; a failed write
is kept for the next one and never fails a task. Reads take the store's records (cached for
``cache_seconds``) plus this replica's changes not written yet. An endpoint never run is
``unknown``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import structlog

from a2a_gateway.stores.base import EndpointHealth, Store
from handlers.upstream.redaction import redact

log = structlog.get_logger(__name__)

MAX_MESSAGE_CHARS = 300

_URL = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)(?:[^/\s@]*@)?([^\s?#]*)(?:[?#]\S*)?")
_CREDENTIAL = re.compile(
    r"\b((?:authorization\s*[:=]\s*)?(?:bearer|basic)\s+"
    # a credential's name, also inside a longer one (client_secret, x-refresh-token) and quoted
    # as in a JSON error body; its value ends where such a body's string or item ends
    r"|(?:[a-z0-9]+[-_])*(?:api[-_]?key|token|password|secret|authorization|cookie)(?:[-_][a-z0-9]+)*"
    r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+",
    re.IGNORECASE,
)
_GATEWAY_KEY = re.compile(r"a2agw_\S+")


def safe_message(text: str) -> str:
    """``text`` as operators may read it (see the module's docstring)."""
    text = _URL.sub(r"\1\2", text)
    text = _CREDENTIAL.sub(r"\1***", text)
    text = _GATEWAY_KEY.sub("a2agw_***", text)
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def error_message(error: BaseException | str, secrets: Iterable[str] = ()) -> str:
    """A failure reason as it is, an exception as ``<class>: <message>``; both without
    ``secrets`` (the endpoint's secret settings values) and made safe."""
    if isinstance(error, str):
        return safe_message(redact(error, secrets))
    detail = redact(str(error), secrets)
    return safe_message(f"{type(error).__name__}: {detail}" if detail else type(error).__name__)


class BackendHealth:
    """A replica's own part of the endpoints' backend health (see the module's docstring).

    ``succeeded`` and ``failed`` do no I/O; ``aclose`` writes what is pending (for at most
    ``flush_seconds``) and must run before the store closes."""

    def __init__(self, store: Store, *, write_seconds: float = 5.0, cache_seconds: float = 2.0,
                 flush_seconds: float = 2.0, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._write_seconds = write_seconds
        self._cache_seconds = cache_seconds
        self._flush_seconds = flush_seconds
        self._clock = clock
        self._pending: dict[str, EndpointHealth] = {}
        """Outcomes told here and not written yet, by endpoint."""
        self._written_at: dict[str, float] = {}
        """Monotonic time of each endpoint's last write."""
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._writes: dict[str, asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()
        """Held by a write and by a read of the store, so a read never sees a change both
        stored and pending."""
        self._stored: dict[str, EndpointHealth] | None = None
        self._stored_at = 0.0
        self._closed = False

    def succeeded(self, endpoint_id: str) -> None:
        self._tell(endpoint_id, EndpointHealth(successes=1, last_success=self._clock()))

    def failed(
        self, endpoint_id: str, error: BaseException | str, secrets: Iterable[str] = ()
    ) -> None:
        self._tell(endpoint_id, EndpointHealth(errors=1, last_error=self._clock(),
                                               last_error_message=error_message(error, secrets)))

    async def of(self, endpoint_id: str) -> EndpointHealth:
        """The endpoint's health (all empty, ``unknown``, when no run of it ended anywhere)."""
        return (await self.all()).get(endpoint_id) or EndpointHealth()

    async def all(self) -> dict[str, EndpointHealth]:
        """Every endpoint's health: the store's (read at most every ``cache_seconds``, and after
        each write of this replica) plus what this replica has not written yet."""
        async with self._lock:
            now = time.monotonic()
            if self._stored is None or now - self._stored_at >= self._cache_seconds:
                self._stored, self._stored_at = await self._store.list_backend_health(), now
            shown = dict(self._stored)
            for endpoint_id, change in self._pending.items():
                shown[endpoint_id] = shown.get(endpoint_id, EndpointHealth()).add(change)
        return shown

    async def settled(self) -> None:
        """The writes under way have ended (or ``flush_seconds`` passed)."""
        if self._writes:
            await asyncio.wait(list(self._writes.values()), timeout=self._flush_seconds)

    async def aclose(self) -> None:
        """Write every pending change now, whatever the interval (one attempt each)."""
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._flush_seconds):
                await asyncio.gather(*self._writes.values())
                for endpoint_id in list(self._pending):
                    self._start_write(endpoint_id)
                await asyncio.gather(*self._writes.values())
        left = list(self._writes.values())
        for write in left:
            write.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    def _tell(self, endpoint_id: str, change: EndpointHealth) -> None:
        self._keep(endpoint_id, change)
        self._schedule(endpoint_id)

    def _keep(self, endpoint_id: str, change: EndpointHealth) -> None:
        pending = self._pending.get(endpoint_id)
        self._pending[endpoint_id] = change if pending is None else pending.add(change)

    def _schedule(self, endpoint_id: str) -> None:
        """Write the endpoint's pending change now, or when its interval ends."""
        if self._closed or endpoint_id in self._timers or endpoint_id in self._writes:
            return  # a write under way schedules the next one as it ends
        wait = self._written_at.get(endpoint_id, -math.inf) + self._write_seconds - time.monotonic()
        if wait > 0:
            self._timers[endpoint_id] = asyncio.get_running_loop().call_later(
                wait, self._start_write, endpoint_id
            )
        else:
            self._start_write(endpoint_id)

    def _start_write(self, endpoint_id: str) -> None:
        self._timers.pop(endpoint_id, None)
        self._writes[endpoint_id] = asyncio.create_task(
            self._write(endpoint_id), name="backend-health-write"
        )

    async def _write(self, endpoint_id: str) -> None:
        try:
            async with self._lock:
                change = self._pending.pop(endpoint_id, None)
                if change is None:
                    return
                self._written_at[endpoint_id] = time.monotonic()
                try:
                    await self._store.record_backend_health(endpoint_id, change)
                except Exception as exc:  # kept for the next write; a task never fails for it
                    self._keep(endpoint_id, change)
                    log.warning("backend_health_not_written", endpoint_id=endpoint_id,
                                error=str(exc) or type(exc).__name__)
                self._stored = None  # the next read sees this write
        finally:
            del self._writes[endpoint_id]
            if endpoint_id in self._pending:
                self._schedule(endpoint_id)


def health_json(health: EndpointHealth) -> dict[str, Any]:
    """The admin API's ``health`` of an endpoint."""
    return {
        "status": health.status,
        "last_success": _iso(health.last_success),
        "last_error": ({"at": _iso(health.last_error), "message": health.last_error_message}
                       if health.last_error is not None else None),
        "successes": health.successes,
        "errors": health.errors,
    }


def _iso(epoch: float | None) -> str | None:
    return datetime.fromtimestamp(epoch, UTC).isoformat() if epoch is not None else None
