"""Property-based fuzzing of ``/<endpoint_id>/mcp`` on a running gateway: generated JSON-RPC
envelopes (MCP methods, unknown ones, notifications, batches, wrong ids and versions), params
and tool arguments, bodies that are not JSON or not what their Content-Encoding says, with and
without an open session, protocol version and Accept headers of any kind.

Every reply is below 500 and has no traceback; a refusal is an MCP (JSON-RPC) error object,
and an event stream carries only JSON-RPC messages.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzz_requests import (
    encoded_body,
    json_values,
    served_in_thread,
    server_error_of,
)
from tests.support.harness import running_gateway

pytest.importorskip("mcp")
pytestmark = pytest.mark.timeout(300)
HYPOTHESIS = settings(max_examples=50, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
METHODS = ["initialize", "tools/list", "tools/call", "ping", "notifications/initialized",
           "notifications/cancelled", "notifications/progress", "resources/list",
           "prompts/get", "server/discover", "logging/setLevel", "tasks/get", "nope", ""]
VERSIONS = [None, "2025-11-25", "2025-06-18", "2026-07-28", "1999-01-01", "", "x" * 300]
ACCEPTS = [None, "application/json, text/event-stream", "application/json", "text/event-stream",
           "*/*", "text/html"]


@asynccontextmanager
async def mcp_gateway() -> AsyncIterator[str]:
    async with running_gateway() as gw:
        endpoint = await gw.add_endpoint(settings={"delay": 0})
        yield f"{gw.endpoint_url(endpoint)}/mcp"


_arguments = st.one_of(
    json_values,
    st.fixed_dictionaries({"message": json_values},
                          optional={"taskId": json_values, "contextId": json_values}),
    st.fixed_dictionaries({"message": st.text(max_size=40)},
                          optional={"taskId": st.text(max_size=12)}),
)
_params = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"name": st.sampled_from(["chat", "ask", "", "x" * 100]) | st.text(max_size=8)},
        optional={"arguments": _arguments, "_meta": json_values},
    ),
    st.fixed_dictionaries({"protocolVersion": st.sampled_from(VERSIONS[1:]),
                           "capabilities": json_values, "clientInfo": json_values}),
)
_envelope = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]) | json_values,
        "id": st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=12), st.none(),
                        st.floats(allow_nan=False), st.booleans(), st.lists(st.integers())),
        "method": st.sampled_from(METHODS) | json_values,
        "params": _params,
    },
)


_valid_calls = st.one_of(
    st.just({"method": "tools/list"}),
    st.fixed_dictionaries({"method": st.just("tools/call"), "params": st.fixed_dictionaries(
        {"name": st.just("chat"), "arguments": st.fixed_dictionaries(
            {"message": st.text(min_size=1, max_size=30)})})}),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, dict[str, str], bytes, bool]:
    """(HTTP method, headers, body, whether to send the open session's id)."""
    if draw(st.integers(0, 3)) == 0:  # a well-formed call in the session, among the rest
        call = {"jsonrpc": "2.0", "id": draw(st.integers(1, 10**6)), **draw(_valid_calls)}
        headers = {"Accept": ACCEPTS[1], "MCP-Protocol-Version": "2025-11-25",
                   "Content-Type": "application/json"}
        return "POST", headers, json.dumps(call).encode(), True
    headers: dict[str, str] = {}
    for name, values in (("Accept", ACCEPTS), ("MCP-Protocol-Version", VERSIONS)):
        value = draw(st.sampled_from(values))
        if value is not None:
            headers[name] = value
    headers["Content-Type"] = draw(st.sampled_from(
        ["application/json", "application/json", "text/plain", "application/x-www-form-urlencoded"],
    ))
    value = draw(st.one_of(_envelope, st.lists(_envelope, max_size=3), json_values))
    body, _ = draw(encoded_body(value, headers))
    method = draw(st.sampled_from(["POST"] * 8 + ["GET", "DELETE", "PUT"]))
    # a DELETE in the session would end it for the examples that follow
    return method, headers, body, method != "DELETE" and draw(st.booleans())


def _mcp_error_problems(response: httpx.Response) -> list[str]:
    content_type = response.headers.get("Content-Type", "")
    if response.status_code < 400 or not content_type.startswith("application/json"):
        return []
    reply = response.json()
    error = reply.get("error") if isinstance(reply, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), int) or not isinstance(
        error.get("message"), str
    ):
        return [f"{response.status_code} without a JSON-RPC error: {response.text[:200]}"]
    return []


def _stream_problems(response: httpx.Response) -> list[str]:
    if not response.headers.get("Content-Type", "").startswith("text/event-stream"):
        return []
    found = []
    for event in response.text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].removeprefix(" ") for line in event.split("\n")
                         if line.startswith("data:"))
        if data.strip():
            message = json.loads(data)
            if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                found.append(f"not a JSON-RPC message in the stream: {data[:200]}")
    return found


def test_malformed_mcp_requests_get_mcp_errors_never_a_server_error() -> None:
    with served_in_thread(mcp_gateway) as served, httpx.Client(timeout=30) as http:
        url = served.value
        opened = http.post(url, headers={"Accept": "application/json, text/event-stream"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "1"}}})
        assert opened.status_code == 200, opened.text
        session = opened.headers["Mcp-Session-Id"]
        seen: list[int] = []

        @HYPOTHESIS
        @given(requests())
        def check(request: tuple[str, dict[str, str], bytes, bool]) -> None:
            method, headers, body, in_session = request
            if in_session:
                headers["Mcp-Session-Id"] = session
            with http.stream(method, url, headers=headers, content=body) as response:
                seen.append(response.status_code)
                if method == "GET" and response.status_code == 200:
                    # the session's stream of server messages: open until the session ends
                    assert response.headers["Content-Type"].startswith("text/event-stream")
                    return
                response.read()
            found = [p for p in [server_error_of(response, response.text, allowed=())] if p]
            found += _mcp_error_problems(response) + _stream_problems(response)
            assert not found, (method, headers, body[:300], found)

        check()
        assert any(status < 300 for status in seen) and any(status >= 400 for status in seen)
