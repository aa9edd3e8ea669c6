"""Typed keys for what the transport stores on a request."""

from __future__ import annotations

from aiohttp import web

REQUEST_ID = web.RequestKey("request_id", str)
A2A_METHOD = web.RequestKey("a2a_method", str)
A2A_ERROR = web.RequestKey("a2a_error", str)
