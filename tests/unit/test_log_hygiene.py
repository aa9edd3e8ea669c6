"""Log lines never carry the credentials of a URL, from the gateway's own loggers or from a
library's (the a2a-sdk's push-URL warnings log the URL as given)."""

from __future__ import annotations

import asyncio
import logging

import structlog
from a2a.utils.push_url_validator import validate_push_notification_url

from a2a_gateway.observability.logs import RejectedRequests, configure_logging


def test_credentials_in_logged_urls_are_masked(capsys):
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("info", "json")
        # the SDK's own warning: "Push-notification URL scheme 'ftp' is not http/https: <url>"
        assert not asyncio.run(validate_push_notification_url("ftp://hook-user:hook-pass@example.com/in"))
        structlog.get_logger("a2a_gateway.test").warning(
            "webhook_refused", target="https://alice:s3cret@hooks.example.com/x?y=1"
        )
        out = capsys.readouterr().out
    finally:
        structlog.configure(**saved)
        root.handlers[:], root.level = handlers, level
        server = logging.getLogger("aiohttp.server")
        server.filters[:] = [f for f in server.filters if not isinstance(f, RejectedRequests)]
    assert "ftp://***@example.com/in" in out and "https://***@hooks.example.com/x?y=1" in out
    assert "hook-pass" not in out and "s3cret" not in out and "hook-user" not in out
