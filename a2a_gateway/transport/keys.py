"""Typed keys for what the transport stores on a request."""

from __future__ import annotations

from typing import Any

from aiohttp import web

REQUEST_ID = web.RequestKey("request_id", str)
A2A_METHOD = web.RequestKey("a2a_method", str)
A2A_ERROR = web.RequestKey("a2a_error", str)
JSONRPC_ID = web.RequestKey("jsonrpc_id", Any)
"""The JSON-RPC request's ``id`` once it is read (every error on that URL echoes it)."""
