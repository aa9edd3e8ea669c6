"""structlog setup: JSON lines (or console), context variables, secrets dropped."""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any

import orjson
import structlog

SECRET_KEY_PARTS = ("authorization", "api_key", "apikey", "token", "password", "secret", "credential")


@functools.lru_cache(maxsize=1024)
def looks_secret(key: str) -> bool:
    """Whether a field named ``key`` likely holds a credential."""
    lowered = key.lower()
    return any(part in lowered for part in SECRET_KEY_PARTS)


def drop_secrets(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Replace values whose key looks like a secret."""
    for key in event_dict:
        if looks_secret(key):
            event_dict[key] = "***"
    return event_dict


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        drop_secrets,
    ]
    json_lines = fmt == "json"
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=orjson.dumps)
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
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
            structlog.processors.JSONRenderer() if json_lines else renderer,  # text for stdlib
        ])
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.INFO))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
