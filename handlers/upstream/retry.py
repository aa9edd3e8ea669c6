"""Retries of a request the backend refused for now (HTTP 429 or 503), as ``Retry-After``
asks, within the run's deadline."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
import structlog

from handlers.upstream.deadline import Deadline
from handlers.upstream.redaction import shown_url

RETRIED_STATUSES = frozenset({429, 503})

log = structlog.get_logger(__name__)


def retry_after(value: str | None) -> float | None:
    """The seconds a ``Retry-After`` header asks for (delay-seconds or an HTTP date)."""
    value = (value or "").strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass(frozen=True, slots=True)
class Retry:
    """Repeats a request the backend refused for now: HTTP 429 (rate limit, too many
    runs) or 503 (overloaded, starting)."""

    attempts: int
    """Retries after the first try."""
    backoff: float
    max_wait: float

    def wait(self, response: httpx.Response, retries: int,
             deadline: Deadline | None) -> float | None:
        """Seconds to wait before retry number ``retries + 1``, or None to give up:
        not a 429/503, no retries left, or the wait would end past the deadline."""
        if response.status_code not in RETRIED_STATUSES or retries >= self.attempts:
            return None
        asked = retry_after(response.headers.get("retry-after"))
        wait = min(self.backoff * 2**retries if asked is None else asked, self.max_wait)
        return wait if deadline is None or wait < deadline.remaining() else None

    async def send(self, http: httpx.AsyncClient, request: httpx.Request,
                   deadline: Deadline | None, *,
                   stream: bool = False) -> tuple[httpx.Response, int]:
        """The backend's last answer to ``request`` (the caller closes it) and the
        number of tries. Every try is bounded by ``deadline`` (``RunTimedOut``)."""
        tries = 0
        while True:
            sent = http.send(request, stream=stream)
            response = await (deadline.within(sent) if deadline else sent)
            wait = self.wait(response, tries, deadline)
            tries += 1
            if wait is None:
                return response, tries
            await response.aclose()
            log.info("backend_busy_retrying", url=shown_url(str(request.url)),
                     status=response.status_code, attempt=tries, wait_seconds=round(wait, 3))
            await asyncio.sleep(wait)


NO_RETRY = Retry(0, 0.0, 0.0)
