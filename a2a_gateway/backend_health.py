"""Backend health: how each endpoint's last exchanges with its backend ended, on this replica.

A task run tells ``BackendHealth`` once, when its handler's run ends (``tasks.run``):
a success (an answer, a question back, a refusal: the backend was reached and answered) or an
error (a FAILED task, or the handler raising) with a short message. The message is safe to show
operators: one line, at most ``MAX_MESSAGE_CHARS``, URLs without ``user:password@``, query or
fragment, no bearer/basic credentials, no gateway API key. Kept in memory per replica (what
the other replicas saw is not here); an endpoint never run is ``unknown``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

MAX_MESSAGE_CHARS = 300

OK, FAILING, UNKNOWN = "ok", "failing", "unknown"

_URL = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)(?:[^/\s@]*@)?([^\s?#]*)(?:[?#]\S*)?")
_CREDENTIAL = re.compile(
    r"\b((?:authorization\s*[:=]\s*)?(?:bearer|basic)\s+|(?:api[-_]?key|token|password|secret|authorization)\s*[:=]\s*)\S+",
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


def error_message(error: BaseException | str) -> str:
    """A failure reason as it is, an exception as ``<class>: <message>``; both made safe."""
    if isinstance(error, str):
        return safe_message(error)
    detail = str(error)
    return safe_message(f"{type(error).__name__}: {detail}" if detail else type(error).__name__)


@dataclass(slots=True)
class EndpointHealth:
    successes: int = 0
    errors: int = 0
    last_success: float | None = None
    """Epoch seconds."""
    last_error: float | None = None
    last_error_message: str = ""

    @property
    def status(self) -> str:
        if self.last_error is None:
            return UNKNOWN if self.last_success is None else OK
        return OK if self.last_success is not None and self.last_success >= self.last_error else FAILING


class BackendHealth:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._endpoints: dict[str, EndpointHealth] = {}

    def succeeded(self, endpoint_id: str) -> None:
        health = self._of(endpoint_id)
        health.successes += 1
        health.last_success = self._clock()

    def failed(self, endpoint_id: str, error: BaseException | str) -> None:
        health = self._of(endpoint_id)
        health.errors += 1
        health.last_error = self._clock()
        health.last_error_message = error_message(error)

    def of(self, endpoint_id: str) -> EndpointHealth:
        """The endpoint's health (all empty, ``unknown``, when none of its runs ended here)."""
        return self._endpoints.get(endpoint_id) or EndpointHealth()

    def _of(self, endpoint_id: str) -> EndpointHealth:
        health = self._endpoints.get(endpoint_id)
        if health is None:
            health = self._endpoints[endpoint_id] = EndpointHealth()
        return health


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
