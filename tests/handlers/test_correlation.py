"""The A2A task's ids on every backend call (handlers.upstream.correlation): the value of
each ``X-A2A-*`` header, hostile ids (CR/LF, non-ASCII, ``%``, very long) included, and
what ``Upstream.call`` sends, checked on the wire by a real HTTP server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import unquote

import httpx
import pytest
from aiohttp import web

from handlers.upstream import NO_RETRY, Upstream
from handlers.upstream.correlation import (
    CONTEXT_HEADER,
    ENDPOINT_HEADER,
    MAX_HEADER_CHARS,
    TASK_HEADER,
    correlation_headers,
    correlation_metadata,
    header_value,
)
from tests.support.messages import handler_request

pytestmark = pytest.mark.timeout(20)

HOSTILE = [
    "ctx\r\nX-Injected: yes",
    "ctx\nX-Injected: yes",
    "ctx\rX-Injected: yes",
    "ctx\x00nul\x7fdel\ttab",
    "kontekst-żółw-文脈-🙂",
    "100%25 already%0D%0Aencoded",
    "a b;c,d\"e'f<g>h\\i",
]
"""Ids a caller could choose (a context id is the caller's); each must go out as one header."""


def plain_header_text(value: str) -> bool:
    return value.isascii() and all(0x21 <= ord(c) <= 0x7E for c in value)


def test_a_uuid_and_the_gateways_ids_go_out_unchanged() -> None:
    task = str(uuid.uuid4())
    assert header_value(task) == task
    assert header_value("ep_01:tenant@x+y=z~.") == "ep_01:tenant@x+y=z~."


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_id_is_percent_encoded_and_decodes_back(hostile: str) -> None:
    value = header_value(hostile)
    assert plain_header_text(value)
    assert "\r" not in value and "\n" not in value and " " not in value
    assert unquote(value) == hostile  # a log search can encode the same way


def test_a_lone_surrogate_goes_out_as_a_question_mark() -> None:
    assert header_value("ctx-\ud800") == "ctx-%3F"


def test_a_long_id_is_clipped_without_cutting_a_character() -> None:
    assert header_value("a" * 100_000) == "a" * MAX_HEADER_CHARS
    for shift in range(7):  # the bound falls on each character of é's two escapes in turn
        value = header_value("a" * (MAX_HEADER_CHARS - 6 + shift) + "é" * 200)
        assert MAX_HEADER_CHARS - 5 <= len(value) <= MAX_HEADER_CHARS
        decoded = unquote(value, errors="strict")  # whole UTF-8 characters only
        assert decoded.strip("é") == "a" * (MAX_HEADER_CHARS - 6 + shift)


def test_the_three_ids_of_a_request_and_none_without_one() -> None:
    request = handler_request(task_id="t-1", context_id="c-1", endpoint_id="ep-1")
    assert correlation_headers(request) == {
        TASK_HEADER: "t-1", CONTEXT_HEADER: "c-1", ENDPOINT_HEADER: "ep-1"}
    assert correlation_headers(handler_request(endpoint_id="")) == {
        TASK_HEADER: "task-1", CONTEXT_HEADER: "ctx-1"}
    assert correlation_headers(None) == {}


# -- on the wire ---------------------------------------------------------------------------


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[str, list[dict[str, list[str]]]]]:
    """A real HTTP server that answers ``{}`` and keeps each request's headers (every value
    of each name, lower-cased names)."""
    seen: list[dict[str, list[str]]] = []

    async def record(request: web.Request) -> web.Response:
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        seen.append(headers)
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def upstream(http: httpx.AsyncClient, url: str, **headers: str) -> Upstream:
    return Upstream(http, "the test backend", url, headers, 5.0, NO_RETRY)


async def test_every_call_with_a_request_carries_the_ids(recorder) -> None:
    url, seen = recorder
    request = handler_request(task_id="task-7", context_id="ctx-7", endpoint_id="ep-7")
    request.headers = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                       "X-A2A-Task-Id": "a-caller-chosen-id"}
    async with httpx.AsyncClient() as http:
        backend = upstream(http, url)
        await backend.json("POST", "/runs", {"x": 1}, request=request)
        async with backend.call("GET", "/runs/1/events", request=request, events=True):
            pass
        await backend.json("GET", "/health")  # no request: nothing of a task to send
    for headers in seen[:2]:
        assert headers["x-a2a-task-id"] == ["task-7"]  # the gateway's, never the caller's
        assert headers["x-a2a-context-id"] == ["ctx-7"]
        assert headers["x-a2a-endpoint-id"] == ["ep-7"]
        assert headers["traceparent"][0].startswith("00-4bf92f35")
    assert not any(name.startswith("x-a2a-") for name in seen[2])


@pytest.mark.parametrize("hostile", HOSTILE)
async def test_a_hostile_context_id_neither_breaks_nor_smuggles_a_header(recorder,
                                                                          hostile) -> None:
    url, seen = recorder
    request = handler_request(context_id=hostile, endpoint_id=hostile + "-ep")
    async with httpx.AsyncClient() as http:
        await upstream(http, url).json("POST", "/runs", {}, request=request)
    [headers] = seen
    assert "x-injected" not in headers
    assert [unquote(v) for v in headers["x-a2a-context-id"]] == [hostile]
    assert [unquote(v) for v in headers["x-a2a-endpoint-id"]] == [hostile + "-ep"]
    assert all(plain_header_text(v) for v in headers["x-a2a-context-id"])


async def test_the_backends_own_configured_header_wins(recorder) -> None:
    url, seen = recorder
    async with httpx.AsyncClient() as http:
        backend = upstream(http, url, **{"X-A2A-Endpoint-Id": "set-by-the-operator"})
        await backend.json("POST", "/runs", {}, request=handler_request())
    assert seen[0]["x-a2a-endpoint-id"] == ["set-by-the-operator"]
    assert seen[0]["x-a2a-task-id"] == ["task-1"]


def test_the_ids_for_a_runs_metadata_are_sent_as_they_are_but_clipped() -> None:
    request = handler_request(context_id="ctx\r\n-żółw", endpoint_id="", task_id="t" * 500)
    assert correlation_metadata(request) == {"a2a_task_id": "t" * MAX_HEADER_CHARS,
                                             "a2a_context_id": "ctx\r\n-żółw"}
