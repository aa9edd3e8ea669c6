"""The settings every bridge shares: the response mode, a run's time bound, retries of HTTP
429/503 and the bound of one streamed event."""

from __future__ import annotations

from pydantic import Field

from handlers.base import ResponseModeSettings
from handlers.upstream.deadline import Deadline
from handlers.upstream.retry import Retry
from handlers.upstream.sse import DEFAULT_MAX_EVENT_BYTES


class BridgeSettings(ResponseModeSettings):
    """The settings every bridge shares: the response mode, a run's time bound and
    retries of HTTP 429/503."""

    run_timeout_seconds: float = Field(3600.0, gt=0)
    """Longest a run may take, from the first request to its final answer (streamed,
    polled or re-attached); then the task fails and the run is stopped where the
    backend allows it."""
    retry_attempts: int = Field(3, ge=0)
    """Retries of a request the backend refused with HTTP 429 or 503."""
    retry_backoff_seconds: float = Field(0.5, ge=0)
    """Wait before the first retry when the answer has no ``Retry-After``; doubles per retry."""
    retry_max_wait_seconds: float = Field(30.0, ge=0)
    """Longest wait before one retry, whatever ``Retry-After`` asks for."""
    max_event_bytes: int = Field(DEFAULT_MAX_EVENT_BYTES, gt=0)
    """Largest event the backend's stream may send (its lines, a line not ended yet
    included); a larger one fails the run, so a backend that never ends a line cannot
    fill the gateway's memory."""

    def deadline(self, run: str) -> Deadline:
        return Deadline.start(self.run_timeout_seconds, run)

    @property
    def retry(self) -> Retry:
        return Retry(self.retry_attempts, self.retry_backoff_seconds, self.retry_max_wait_seconds)
