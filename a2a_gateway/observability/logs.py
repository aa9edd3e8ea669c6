"""structlog setup: JSON lines (or console lines, on a terminal with ``auto``), context
variables, secrets dropped.

Also for the log lines of libraries (stdlib ``logging``): credentials in URLs are masked,
tracebacks are text, and a request aiohttp's parser rejects (a client's malformed bytes,
not a fault of the gateway) is one INFO line naming the error, never its bytes.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from typing import Any

import orjson
import structlog
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

SECRET_KEY_PARTS = (
    "authorization",
    "api_key",
    "apikey",
    "token",
    "password",
    "secret",
    "credential",
)


@functools.lru_cache(maxsize=1024)
def looks_secret(key: str) -> bool:
    """Whether a field named ``key`` likely holds a credential."""
    lowered = key.lower().replace("-", "_")  # header names too: X-Api-Key
    return any(part in lowered for part in SECRET_KEY_PARTS)


def drop_secrets(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Replace values whose key looks like a secret."""
    for key in event_dict:
        if looks_secret(key):
            event_dict[key] = "***"
    return event_dict


_URL_CREDENTIALS = re.compile(r"(?<=://)[^/\s@]+@")
_QUERY_PARAMETER = re.compile(r"(?<=[?&])([^=&#\s\"']+)=([^&#\s\"']*)")
SECRET_QUERY_NAMES = frozenset({"key", "sig", "code"})
"""Query parameters that carry a credential though their name does not look it (``?key=``;
a presigned URL's ``…Signature=`` too)."""


def _masked_parameter(match: re.Match[str]) -> str:
    name = match[1].lower()
    secret = looks_secret(name) or name in SECRET_QUERY_NAMES or "signature" in name
    return f"{match[1]}=***" if secret else match[0]


def mask_credentials(value: str) -> str:
    """``value`` with the credentials of the URLs in it masked."""
    if "@" in value:
        value = _URL_CREDENTIALS.sub("***@", value)
    if "=" in value:
        value = _QUERY_PARAMETER.sub(_masked_parameter, value)
    return value


def mask_url_credentials(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """``scheme://user:password@host`` → ``scheme://***@host``, and ``?token=…`` (any
    parameter whose name looks secret) → ``?token=***``, in every string value."""
    for key, value in event_dict.items():
        if isinstance(value, str):
            event_dict[key] = mask_credentials(value)
    return event_dict


class RejectedRequests(logging.Filter):
    """aiohttp logs each request its parser rejects (folded or oversized headers, a bad
    ``Expect``, undecodable bodies) at ERROR with a traceback; this makes it one INFO line
    with the error's class and HTTP status, without the request's bytes."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, HttpProcessingError | RequestPayloadError):
            return True
        status = getattr(error, "code", 400)
        record.msg, record.args = f"http_request_rejected {type(error).__name__} {status}", ()
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.exc_info = record.exc_text = None
        return logging.getLogger().isEnabledFor(logging.INFO)


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    """Log to stdout as ``fmt``: ``json``, ``console`` or ``auto`` (console on a terminal)."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        drop_secrets,
    ]
    terminal = sys.stdout.isatty()
    json_lines = fmt == "json" or (fmt == "auto" and not terminal)
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=orjson.dumps)
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=terminal)
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, mask_url_credentials, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=(
            structlog.BytesLoggerFactory(sys.stdout.buffer)
            if json_lines
            else structlog.PrintLoggerFactory(sys.stdout)
        ),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            mask_url_credentials,
            structlog.processors.JSONRenderer() if json_lines else renderer,  # text for stdlib
        ])
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.INFO))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    for chatty in ("httpx", "httpcore"):  # a line per request, its whole URL
        logging.getLogger(chatty).setLevel(logging.WARNING)
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, RejectedRequests) for f in server.filters):
        server.addFilter(RejectedRequests())
