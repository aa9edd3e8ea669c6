"""The MCP facade (``/<endpoint_id>/mcp``) through a running gateway, with the official ``mcp``
client: tools from the card, a call with progress and its result, elicitation of an input
request, the follow-up call without elicitation, cancellation, and refusals (credentials,
opt-out, malformed JSON-RPC)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import jwt
import mcp_types as types
import pytest
import yaml
from a2a.types import GetTaskRequest, TaskState
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client

from a2a_gateway.auth.api_keys import make_key
from a2a_gateway.endpoints.file import EndpointsFileError, entry_of, load
from a2a_gateway.endpoints.registry import check_endpoint
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import Scope, TaskQuery
from a2a_gateway.transport.mcp import MCP_SERVICE
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.waiting import eventually

pytest.importorskip("mcp")

SKILLS = {"skills": [
    {"id": "echo", "name": "Echo", "description": "Echoes the message.", "tags": ["demo"]},
    {"id": "shout out", "name": "Shout", "description": "Echoes louder.", "tags": ["demo"]},
]}


@asynccontextmanager
async def mcp_session(
    url: str, headers: dict[str, str] | None = None, elicitation: Any = None
) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers=headers or {}, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, elicitation_callback=elicitation) as session:
                await session.initialize()
                yield session


def mcp_url(gw: RunningGateway, endpoint_id: str) -> str:
    return f"{gw.endpoint_url(endpoint_id)}/mcp"


async def stored_task(gw: RunningGateway, endpoint_id: str, task_id: str) -> Any:
    runtime = await gw.gateway.registry.get(endpoint_id)
    handler = gw.gateway.request_handlers(runtime)[0]
    from a2a.server.context import ServerCallContext

    from a2a_gateway.auth.callers import ANONYMOUS

    return await handler.on_get_task(
        GetTaskRequest(id=task_id), ServerCallContext(user=ANONYMOUS, tenant="default")
    )


async def test_tools_progress_result_and_follow_up_without_elicitation():
    async with running_gateway(max_text_chars=100) as gw:
        skilled = await gw.add_endpoint(settings={"delay": 0}, card=SKILLS)
        plain = await gw.add_endpoint(settings={"delay": 0}, name="plain agent",
                                      card={"capabilities": {"streaming": False}})
        async with mcp_session(mcp_url(gw, skilled)) as session:
            listed = await session.list_tools()
            assert [t.name for t in listed.tools] == ["echo", "shout_out"]
            assert listed.tools[0].input_schema["required"] == ["message"]
            chunks: list[str] = []

            async def progress(done: float, total: float | None, message: str | None) -> None:
                chunks.append(message or "")

            result = await session.call_tool(
                "echo", {"message": "hello there MCP"}, progress_callback=progress
            )
            assert not result.is_error
            assert [c.text for c in result.content] == ["echo: hello there MCP"]
            assert "".join(chunks) == "echo: hello there MCP"

            asked = await session.call_tool("echo", {"message": "please ?input"})
            assert not asked.is_error
            task_id = asked.structured_content["taskId"]
            assert asked.structured_content["state"] == "input-required"
            assert "What should I echo?" in asked.content[0].text
            assert task_id in asked.content[0].text
            answered = await session.call_tool(
                "echo", {"message": "the answer", "taskId": task_id,
                         "contextId": asked.structured_content["contextId"]},
            )
            assert [c.text for c in answered.content] == ["echo: the answer"]

            refused = await session.call_tool("echo", {"message": "x", "taskId": "no-such"})
            assert refused.is_error and "no-such" in refused.content[0].text
            too_long = await session.call_tool("echo", {"message": "x" * 101})
            assert too_long.is_error and "max_text_chars is 100" in too_long.content[0].text
            with pytest.raises(Exception, match="unknown tool"):
                await session.call_tool("nope", {"message": "x"})
            with pytest.raises(Exception, match="arguments.message"):
                await session.call_tool("echo", {"message": 3})
        async with mcp_session(mcp_url(gw, plain)) as session:
            assert [t.name for t in (await session.list_tools()).tools] == ["chat"]
            chunks.clear()
            data = await session.call_tool("chat", {"message": "files ?artifacts"},
                                           progress_callback=progress)
            assert not chunks  # an agent that does not stream: the result only
            kinds = [c.type for c in data.content]
            assert kinds == ["text", "text", "resource", "text", "text"], kinds
            assert data.structured_content == {"echo": "files ?artifacts", "words": 2}
            assert data.content[2].resource.text == "files ?artifacts"


async def test_elicitation_answers_refuses_and_declines():
    async with running_gateway() as gw:
        endpoint = await gw.add_endpoint(settings={"delay": 0})
        answers = [
            types.ElicitResult(action="accept", content={"answer": "not a choice"}),
            types.ElicitResult(action="accept", content={"answer": "any text"}),
        ]
        asked: list[types.ElicitRequestParams] = []

        async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.append(params)
            return answers.pop(0) if answers else types.ElicitResult(action="decline")

        async with mcp_session(mcp_url(gw, endpoint), elicitation=elicit) as session:
            result = await session.call_tool("chat", {"message": "hello ?input"})
            assert not result.is_error, result
            assert [c.text for c in result.content] == ["echo: any text"]
            assert asked[0].message.startswith("What should I echo?")
            assert asked[0].requested_schema["properties"]["answer"]["enum"] == ["any text"]
            assert "refused" in asked[1].message and "not one of" in asked[1].message

            declined = await session.call_tool("chat", {"message": "again ?input"})
            assert declined.is_error and "declined" in declined.content[0].text
            task_id = declined.meta["taskId"]
            task = await stored_task(gw, endpoint, task_id)
            assert task.status.state == TaskState.TASK_STATE_CANCELED


async def test_a_2026_client_is_asked_through_input_required_results():
    async with running_gateway() as gw:
        endpoint = await gw.add_endpoint(settings={"delay": 0})
        answers = [
            types.ElicitResult(action="accept", content={"answer": "not a choice"}),
            types.ElicitResult(action="accept", content={"answer": "any text"}),
            types.ElicitResult(action="cancel"),
        ]
        asked: list[str] = []

        async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.append(params.message)
            return answers.pop(0)

        chunks: list[str] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            chunks.append(message or "")

        async with Client(mcp_url(gw, endpoint), elicitation_callback=elicit) as client:
            assert client.protocol_version == "2026-07-28"  # no session: any replica serves it
            result = await client.call_tool("chat", {"message": "hi ?input"},
                                            progress_callback=progress)
            assert [c.text for c in result.content] == ["echo: any text"]
            assert asked[0].startswith("What should I echo?") and "refused" in asked[1]
            dismissed = await client.call_tool("chat", {"message": "again ?input"})
        assert dismissed.is_error and "canceled" in dismissed.content[0].text
        task = await stored_task(gw, endpoint, dismissed.meta["taskId"])
        assert task.status.state == TaskState.TASK_STATE_CANCELED


async def test_cancelling_the_call_cancels_the_task():
    async with running_gateway() as gw:
        endpoint = await gw.add_endpoint(settings={"delay": 0})
        first_chunk = asyncio.Event()

        async def progress(done: float, total: float | None, message: str | None) -> None:
            first_chunk.set()

        async with mcp_session(mcp_url(gw, endpoint)) as session:
            call = asyncio.create_task(
                session.call_tool("chat", {"message": "long ?slow"}, progress_callback=progress)
            )
            await asyncio.wait_for(first_chunk.wait(), 10)
            call.cancel()  # the client sends notifications/cancelled for its request
            with pytest.raises(asyncio.CancelledError):
                await call
        first_chunk.clear()
        async with Client(mcp_url(gw, endpoint)) as client:  # 2026-07-28: no session
            call = asyncio.create_task(
                client.call_tool("chat", {"message": "long ?slow"}, progress_callback=progress)
            )
            await asyncio.wait_for(first_chunk.wait(), 10)
            call.cancel()  # the client closes the call's response stream
            with pytest.raises(asyncio.CancelledError):
                await call
        page = await gw.store.list_tasks(Scope("default", endpoint), TaskQuery())
        assert len(page.tasks) == 2

        async def all_canceled() -> bool:
            page = await gw.store.list_tasks(Scope("default", endpoint), TaskQuery())
            return all(t.status.state == TaskState.TASK_STATE_CANCELED for t in page.tasks)

        await eventually(all_canceled, timeout=10)


async def test_a_call_the_gateway_shutdown_ends_leaves_its_task_running():
    async with running_gateway() as gw:
        endpoint = await gw.add_endpoint(settings={"delay": 0})
        first_chunk = asyncio.Event()

        async def progress(done: float, total: float | None, message: str | None) -> None:
            first_chunk.set()

        with pytest.raises(BaseException):  # noqa: B017 - the call fails, however it is told
            async with mcp_session(mcp_url(gw, endpoint)) as session:
                call = asyncio.create_task(session.call_tool(
                    "chat", {"message": "long ?slow"}, progress_callback=progress))
                await asyncio.wait_for(first_chunk.wait(), 10)
                await gw.app[MCP_SERVICE].close()  # what the app's shutdown does first
                await call
        page = await gw.store.list_tasks(Scope("default", endpoint), TaskQuery())
        assert [t.status.state for t in page.tasks] == [TaskState.TASK_STATE_WORKING]


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream"}


async def test_without_the_mcp_extra_the_route_says_so(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "mcp.server.streamable_http_manager", None)
    async with running_gateway() as gw:
        endpoint = await gw.add_endpoint(settings={"delay": 0})
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.post(mcp_url(gw, endpoint), json=INIT, headers=ACCEPT)
    assert answer.status_code == 501
    assert "a2a-gateway[mcp]" in answer.json()["error"]["message"]


async def test_keys_sessions_and_opt_out_on_every_store(keyed_every_store: RunningGateway):
    gw = keyed_every_store
    endpoint = await gw.add_endpoint(settings={"delay": 0})
    off = await gw.add_endpoint(settings={"delay": 0, "mcp": False})
    secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
    keys = {}
    for principal in ("alice", "bob"):
        row, keys[principal] = make_key(secret, endpoint_id=endpoint, tenant="default",
                                        principal=principal)
        await gw.store.create_api_key(row)
    url = mcp_url(gw, endpoint)
    async with httpx.AsyncClient(timeout=10) as http:
        for headers in ({}, {"X-API-Key": "a2a_nonsense"}, {"Authorization": "Bearer zz"}):
            answer = await http.post(url, json=INIT, headers={**ACCEPT, **headers})
            assert answer.status_code == 401, answer.text
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
            assert "resource_metadata" not in answer.headers["WWW-Authenticate"]
            assert answer.json()["error"]["code"] == -32001
        opted_out = await http.post(mcp_url(gw, off), json=INIT,
                                    headers={**ACCEPT, "X-API-Key": keys["alice"]})
        assert opted_out.status_code == 404 and opted_out.json()["error"]["code"] == -32601
        metadata = await http.get(
            f"{gw.base_url}/.well-known/oauth-protected-resource/{endpoint}/mcp")
        assert metadata.status_code == 404  # keys only: not an OAuth protected resource
        opened = await http.post(url, json=INIT, headers={**ACCEPT, "X-API-Key": keys["alice"]})
        assert opened.status_code == 200
        session = {"Mcp-Session-Id": opened.headers["Mcp-Session-Id"],
                   "MCP-Protocol-Version": "2025-11-25"}
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        taken = await http.post(url, json=listing,
                                headers={**ACCEPT, **session, "X-API-Key": keys["bob"]})
        assert taken.status_code == 404  # another principal's session does not exist for bob
    async with mcp_session(url, {"X-API-Key": keys["alice"]}) as client:
        result = await client.call_tool("chat", {"message": "with a key ?input"})
        task_id = result.structured_content["taskId"]
        answered = await client.call_tool("chat", {"message": "yes", "taskId": task_id})
        assert [c.text for c in answered.content] == ["echo: yes"]
    async with mcp_session(url, {"Authorization": f"Bearer {keys['bob']}"}) as client:
        foreign = await client.call_tool("chat", {"message": "mine?", "taskId": task_id})
        assert foreign.is_error and "not found" in foreign.content[0].text
    page = await gw.store.list_tasks(Scope("default", endpoint, "alice"), TaskQuery())
    assert [(t.id, t.status.state) for t in page.tasks] == [
        (task_id, TaskState.TASK_STATE_COMPLETED)]


async def test_jwt_callers_and_protected_resource_metadata():
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.public_key().public_bytes(
        Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
    issuer = "https://issuer.example"
    now = int(time.time())
    token = jwt.encode({"iss": issuer, "aud": "mcp-tests", "sub": "carol", "iat": now,
                        "exp": now + 300}, private, algorithm="ES256")
    async with running_gateway(allow_unauthenticated_endpoints=False) as gw:
        endpoint = await gw.add_endpoint(settings={"delay": 0, "auth": {"jwt": {
            "issuer": issuer, "audience": "mcp-tests", "keys": [pem]}}}, name="jwt agent")
        url = mcp_url(gw, endpoint)
        async with httpx.AsyncClient(timeout=10) as http:
            refused = await http.post(url, json=INIT, headers=ACCEPT)
            expected = f"{gw.base_url}/.well-known/oauth-protected-resource/{endpoint}/mcp"
            assert refused.status_code == 401
            assert f'resource_metadata="{expected}"' in refused.headers["WWW-Authenticate"]
            metadata = (await http.get(expected)).json()
        assert metadata == {"resource": url, "authorization_servers": [issuer],
                            "bearer_methods_supported": ["header"], "resource_name": "jwt agent"}
        async with mcp_session(url, {"Authorization": f"Bearer {token}"}) as client:
            result = await client.call_tool("chat", {"message": "signed"})
        assert [c.text for c in result.content] == ["echo: signed"]
        page = await gw.store.list_tasks(Scope("default", endpoint, "carol"), TaskQuery())
        assert len(page.tasks) == 1


async def test_a_real_bridge_streams_its_text_as_progress_and_asks_its_approvals():
    hermes_url = require_env("A2A_TEST_HERMES_URL", "A2A_TEST_HERMES_KEY")
    async with running_gateway() as gw:
        endpoint = await gw.add_endpoint("handlers.hermes:HermesAgentHandler", settings={
            "hermes_api_url": hermes_url, "hermes_api_key": "env:A2A_TEST_HERMES_KEY"})
        chunks: list[str] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            chunks.append(message or "")

        asked: list[types.ElicitRequestParams] = []

        async def deny(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.append(params)
            return types.ElicitResult(action="accept", content={"answer": "deny"})

        async with mcp_session(mcp_url(gw, endpoint), elicitation=deny) as client:
            [tool] = (await client.list_tools()).tools
            result = await client.call_tool(
                tool.name, {"message": "FAKE_SLOW words=6 delay=0.05"}, progress_callback=progress
            )
            assert not asked
            # Hermes asks before its shell tool runs a flagged command: the client is asked
            denied = await client.call_tool(
                tool.name, {"message": "FAKE_TOOL_DANGER path=/nonexistent/mcp-test"})
        assert not result.is_error, result
        text = result.content[0].text
        assert len(text.split()) == 6
        assert len(chunks) > 1 and "".join(chunks) == text
        [question] = asked
        assert "rm -rf /nonexistent/mcp-test" in question.message
        assert "deny" in question.requested_schema["properties"]["answer"]["enum"]
        assert not denied.is_error and "denied" in denied.content[0].text


async def test_the_documented_python_client_runs_as_printed():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text(encoding="utf-8")
    [snippet] = re.findall(r"```python\n(.*?)```", doc, re.DOTALL)
    async with running_gateway(allow_unauthenticated_endpoints=False) as gw:
        endpoint = await gw.add_endpoint(settings={"delay": 0}, card=SKILLS)
        secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
        row, key = make_key(secret, endpoint_id=endpoint, tenant="default")
        await gw.store.create_api_key(row)
        env = {**os.environ, "MCP_URL": mcp_url(gw, endpoint), "API_KEY": key}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", snippet, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()[-2000:]
    assert out.decode().splitlines() == [
        "tools: echo, shout_out", "echo: hello", "result: echo: hello"]


def test_the_opt_out_is_a_boolean_beside_settings_in_the_endpoints_file(tmp_path: Path):
    endpoint_id = "7d0c6c1e-6a57-4b8e-9d43-3f1c2a9e0b12"
    settings = GatewaySettings(store="memory://")
    path = tmp_path / "endpoints.yaml"
    entry = {"id": endpoint_id, "name": "Echo", "handler": "handlers.echo:EchoHandler"}
    path.write_text(yaml.safe_dump({"endpoints": [{**entry, "mcp": False}]}))
    (row,) = load(path, settings)
    assert row.metadata["mcp"] is False and entry_of(row)["mcp"] is False
    assert check_endpoint(row, settings).problems == []
    row.metadata["mcp"] = "no"
    assert check_endpoint(row, settings).problems == ["mcp must be true or false"]
    path.write_text(yaml.safe_dump({"endpoints": [{**entry, "mcp": "no"}]}))
    with pytest.raises(EndpointsFileError, match="mcp"):
        load(path, settings)
