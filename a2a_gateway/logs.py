"""structlog setup: JSON lines (or console), context variables, secrets dropped."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

SECRET_KEY_PARTS = ("authorization", "api_key", "apikey", "token", "password", "secret", "credential")


def drop_secrets(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Replace values whose key looks like a secret."""
    for key in list(event_dict):
        if any(part in key.lower() for part in SECRET_KEY_PARTS):
            event_dict[key] = "***"
    return event_dict


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        drop_secrets,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer,
        ])
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric, logging.INFO))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
