"""The AgentCore handler against a real AgentCore Runtime app (a ``BedrockAgentCoreApp`` from
tests/backends/agentcore on the scripted LLM), through the gateway, with the real a2a-sdk
client as the caller: directly (``POST /invocations``) and through a local endpoint shaped like
AgentCore's data plane (``InvokeAgentRuntime`` and ``StopRuntimeSession``), which checks each
call's SigV4 signature with botocore and forwards the invocation to the same app.

Needs the services of ``.ci/services`` (10-llm.sh, 55-agentcore.sh): ``A2A_TEST_AGENTCORE_URL``
and ``A2A_TEST_LLM_URL``. Skipped without them, except in CI. Every test marks its message with
a fresh token, so tests can share one app and LLM.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from secrets import token_hex
from typing import Any

import httpx
import pytest
import structlog
from a2a.types import CancelTaskRequest, GetTaskRequest, StreamResponse, TaskState
from aiohttp import web

from a2a_gateway.stores.base import Scope
from handlers.agentcore import SESSION_HEADER
from tests.handlers.real_streams import (
    llm_requests,
    six_streamed_tokens,
    state_of,
    streamed_answer,
    token,
)
from tests.handlers.test_agentcore_parser import (
    ARN,
    SECRET,
    fake_aws_credentials,
    sigv4_authorization,
)
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually

pytestmark = [pytest.mark.agentcore, pytest.mark.timeout(60)]

HANDLER = "handlers.agentcore:AgentCoreHandler"
COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
FAILED = TaskState.TASK_STATE_FAILED
WORDS = 12
"""Words of the slow answer a test cancels."""


@pytest.fixture
def app_url() -> str:
    require_env("A2A_TEST_LLM_URL")
    return require_env("A2A_TEST_AGENTCORE_URL")


@pytest.fixture
async def gw(app_url: str) -> AsyncIterator[RunningGateway]:
    async with running_gateway(cancel_wait_seconds=15.0) as running:
        yield running


@pytest.fixture
async def endpoint(gw: RunningGateway, app_url: str) -> str:
    return await gw.add_endpoint(HANDLER, name="agentcore", settings={"agentcore_url": app_url})



async def send(gw: RunningGateway, endpoint: str, text: str, **fields: Any) -> Any:
    """The task a blocking send of ``text`` ends with."""
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(text, **fields))]
    return event.task


def final_text(task: Any) -> str:
    return "".join(p.text for p in task.artifacts[-1].parts)


async def test_streamed_reply_arrives_token_by_token(gw, endpoint):
    async with gw.client(endpoint) as client:
        await six_streamed_tokens(client)


async def test_blocking_sends_complete_with_streamed_and_json_answers(gw, endpoint):
    mark = token()
    for text in (f"hello {mark}", f"AGENTCORE_JSON {mark}", f"AGENTCORE_DICTS {mark}"):
        task = await send(gw, endpoint, text)
        assert task.status.state == COMPLETED
        assert final_text(task) == f"Hello from fakellm. You said: {text}"


async def test_two_turns_of_a_context_share_the_runtime_session(gw, endpoint):
    mark = token()
    for text in (f"first {mark}", f"second {mark}"):
        assert (await send(gw, endpoint, text, context_id=f"ctx-{mark}")).status.state == COMPLETED
    assert (await send(gw, endpoint, f"alone {mark}", context_id=f"other-{mark}")).status.state
    by_text = {r["text"]: [(m["role"], m["content"]) for m in r["messages"]]
               for r in await llm_requests(mark)}
    assert by_text[f"second {mark}"] == [
        ("user", f"first {mark}"),
        ("assistant", f"Hello from fakellm. You said: first {mark}"),
        ("user", f"second {mark}")]
    assert by_text[f"alone {mark}"] == [("user", f"alone {mark}")]


async def cancel_mid_stream(gw: RunningGateway, endpoint: str, mark: str) -> list[StreamResponse]:
    """Stream a slow answer, cancel the task after two chunks; the events seen."""
    async with gw.client(endpoint) as client:
        stream = client.send_message(send_request(f"FAKE_SLOW words={WORDS} delay=0.2 {mark}"))
        head = []
        async for event in stream:
            head.append(event)
            if sum(e.HasField("artifact_update") for e in head) >= 2:
                break
        await stream.aclose()
        task_id = head[0].task.id
        assert (await client.cancel_task(CancelTaskRequest(id=task_id))).status.state == CANCELED
        assert (await client.get_task(GetTaskRequest(id=task_id))).status.state == CANCELED
    return head


async def the_llm_call_ended(mark: str) -> dict[str, Any]:
    (llm,) = await eventually(lambda: llm_requests(mark),
                              until=lambda rs: len(rs) == 1 and rs[0]["outcome"] != "in_progress",
                              timeout=15, what="the LLM call of the canceled run ends")
    return llm


async def test_cancel_closes_the_stream_but_the_app_answers_to_the_end(gw, endpoint):
    """bedrock-agentcore 1.25.0 reads an async generator entrypoint through a queue and a
    worker thread: a client that goes away does not stop it, the LLM call runs to its end."""
    mark = token()
    await cancel_mid_stream(gw, endpoint, mark)
    llm = await the_llm_call_ended(mark)
    assert llm["outcome"] == "completed" and len(llm["chunks"]) == WORDS


async def test_an_app_error_fails_the_task(gw, endpoint):
    task = await send(gw, endpoint, f"FAKE_HTTP_500 {token()}")
    assert task.status.state == FAILED
    assert task.status.message.parts[0].text.startswith(
        "the AgentCore app failed: HTTPStatusError: Server error '500 Internal Server Error'")


class FakeAgentCore:
    """AgentCore's data plane on 127.0.0.1: ``InvokeAgentRuntime`` forwarded to the app,
    ``StopRuntimeSession`` recorded; a call whose signature botocore would not compute the
    same way (or without the expected bearer token) is refused with HTTP 403, as AWS does."""

    def __init__(self, app_url: str, bearer: str | None = None) -> None:
        self.app_url = app_url
        self.bearer = bearer
        """Expected instead of a signature (a runtime whose inbound auth is OAuth)."""
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.app = web.Application()
        self.app.router.add_post("/runtimes/{arn}/{action}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        url = f"http://{request.host}{request.raw_path}"
        expected = (f"Bearer {self.bearer}" if self.bearer
                    else sigv4_authorization(url, headers, body, "eu-west-1"))
        if headers.get("authorization") != expected:
            return web.json_response({"message": "signature mismatch"}, status=403)
        self.calls.append((request.match_info["action"] + "?" + request.query_string, headers))
        if request.match_info["action"] == "stopruntimesession":
            # the answer is in the headers; the body is empty
            return web.Response(headers={SESSION_HEADER: headers[SESSION_HEADER.lower()]})
        return await self.forward(request, body, headers[SESSION_HEADER.lower()])

    async def forward(self, request: web.Request, body: bytes,
                      session: str) -> web.StreamResponse:
        async with httpx.AsyncClient(timeout=30) as http, http.stream(
                "POST", f"{self.app_url}/invocations", content=body,
                headers={SESSION_HEADER: session}) as answer:
            response = web.StreamResponse(status=answer.status_code, headers={
                "Content-Type": answer.headers["content-type"]})
            await response.prepare(request)
            async for chunk in answer.aiter_raw():
                await response.write(chunk)
        await response.write_eof()
        return response

    async def __aenter__(self) -> str:
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


async def test_the_aws_path_is_signed_keeps_the_session_and_stops_it_on_cancel(
        gw, app_url, monkeypatch):
    fake_aws_credentials(monkeypatch)
    fake = FakeAgentCore(app_url)
    mark = token()
    with structlog.testing.capture_logs() as logs:
        async with fake as aws_url:
            endpoint = await gw.add_endpoint(HANDLER, name="agentcore-aws", settings={
                "agentcore_runtime_arn": ARN, "agentcore_qualifier": "DEFAULT",
                "agentcore_endpoint_url": aws_url})
            context = f"ctx-{mark}"
            async with gw.client(endpoint) as client:
                events = [e async for e in client.send_message(
                    send_request(f"first {mark}", context_id=context))]
            assert state_of(events[-1]) == COMPLETED
            assert streamed_answer(events) == f"Hello from fakellm. You said: first {mark}"
            second = await send(gw, endpoint, f"second {mark}", context_id=context)
            assert final_text(second) == f"Hello from fakellm. You said: second {mark}"
            await cancel_mid_stream(gw, endpoint, f"cut {mark}")
            stored = await gw.store.get_task(Scope("default", endpoint, "anonymous"), second.id)

    (turn2,) = [r for r in await llm_requests(mark) if r["text"] == f"second {mark}"]
    assert [m["content"] for m in turn2["messages"]][0] == f"first {mark}"  # one session
    path = urllib.parse.quote(ARN, safe="")
    assert [action for action, _ in fake.calls] == [
        "invocations?qualifier=DEFAULT"] * 3 + ["stopruntimesession?qualifier=DEFAULT"]
    sessions = [headers[SESSION_HEADER.lower()] for _, headers in fake.calls]
    assert sessions[0] == sessions[1] != sessions[2] == sessions[3]
    assert path not in sessions[0] and len(sessions[0]) >= 33
    assert not [e for e in logs if e["event"] == "agentcore_stop_session_failed"]
    for where in (str(events), str(stored.task), repr(logs)):
        assert SECRET not in where and "fake-session-token" not in where


async def test_a_bearer_token_from_env_reaches_aws_and_an_app_error_never_shows_it(
        gw, app_url, monkeypatch):
    secret = "jwt-" + token_hex()
    monkeypatch.setenv("A2A_TEST_AGENTCORE_TOKEN", secret)
    fake = FakeAgentCore(app_url, bearer=secret)
    with structlog.testing.capture_logs() as logs:
        async with fake as aws_url:
            endpoint = await gw.add_endpoint(HANDLER, name="agentcore-oauth", settings={
                "agentcore_runtime_arn": ARN, "agentcore_endpoint_url": aws_url,
                "agentcore_bearer_token": "env:A2A_TEST_AGENTCORE_TOKEN"})
            task = await send(gw, endpoint, f"FAKE_HTTP_500 {token()}")
    assert [action for action, _ in fake.calls] == ["invocations?"]
    assert task.status.state == FAILED
    assert task.status.message.parts[0].text.startswith("the AgentCore app failed: ")
    stored = await gw.store.get_task(Scope("default", endpoint, "anonymous"), task.id)
    for where in (str(task), str(stored.task), repr(logs)):
        assert secret not in where
