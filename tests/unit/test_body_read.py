"""``read_body``: a body that arrived whole with the headers is read without arming the read
timeout (nothing is waited for); a body still arriving is bounded by
``body_read_timeout_seconds``."""

from __future__ import annotations

import asyncio
from unittest import mock

import pytest
from aiohttp import streams, web
from aiohttp.test_utils import make_mocked_request

from a2a_gateway.settings import GatewaySettings
from a2a_gateway.transport import body
from a2a_gateway.transport.body import BODY_BUDGET, BodyBudget, BodyTimeoutError, read_body


def _request(payload: streams.StreamReader, length: int) -> web.Request:
    app = web.Application()
    app[BODY_BUDGET] = BodyBudget(1 << 20)
    return make_mocked_request(
        "POST", "/x/a2a", headers={"Content-Length": str(length)}, payload=payload, app=app
    )


def _payload() -> streams.StreamReader:
    protocol = mock.Mock(_reading_paused=False)
    return streams.StreamReader(protocol, 2**16, loop=asyncio.get_running_loop())


async def test_a_body_received_whole_is_read_without_a_timer(monkeypatch):
    payload = _payload()
    payload.feed_data(b'{"jsonrpc": "2.0"}')
    payload.feed_eof()
    armed = mock.Mock(side_effect=asyncio.timeout)
    monkeypatch.setattr(body.asyncio, "timeout", armed)
    assert await read_body(_request(payload, 18), GatewaySettings()) == b'{"jsonrpc": "2.0"}'
    assert armed.call_count == 0


async def test_a_body_still_arriving_is_bounded_by_the_read_timeout():
    payload = _payload()
    payload.feed_data(b'{"jsonrpc"')  # the rest never comes
    settings = GatewaySettings(body_read_timeout_seconds=0.2)
    with pytest.raises(BodyTimeoutError):
        await read_body(_request(payload, 18), settings)
