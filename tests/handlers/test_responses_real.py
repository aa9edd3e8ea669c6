"""ResponsesHandler against real OpenAI Responses servers, through the gateway, with the real
a2a-sdk client as the caller: Microsoft Agent Framework DevUI (serving tests/backends/devui on
the scripted LLM; continuity by the Conversations API, approvals, cancel route) and OpenClaw
(a second server of the API; continuity by ``previous_response_id``).

Needs the services of ``.ci/services`` (10-llm.sh, 30-openclaw.sh, 48-devui.sh):
``A2A_TEST_LLM_URL``, ``A2A_TEST_DEVUI_URL``, ``A2A_TEST_DEVUI_TOKEN``,
``A2A_TEST_OPENCLAW_URL``, ``A2A_TEST_OPENCLAW_TOKEN``. Skipped without them, except in CI.
Every test marks its message with a fresh token, so tests can share one server and LLM.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import structlog
from a2a.types import CancelTaskRequest, GetTaskRequest, TaskState
from google.protobuf.json_format import MessageToDict

from a2a_gateway.stores.base import Scope
from handlers.approvals import HITL_URI
from tests.handlers.real_streams import (
    llm_requests,
    six_streamed_tokens,
    state_of,
    streamed_answer,
    token,
)
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually

pytestmark = [pytest.mark.devui, pytest.mark.timeout(90)]

HANDLER = "handlers.responses:ResponsesHandler"
COMPLETED = TaskState.TASK_STATE_COMPLETED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
DENIED = "Error: Tool call invocation was rejected by user."


@pytest.fixture
async def gw() -> AsyncIterator[RunningGateway]:
    require_env("A2A_TEST_LLM_URL")
    async with running_gateway(cancel_wait_seconds=15.0) as running:
        yield running


async def devui_endpoint(gw: RunningGateway, **settings: Any) -> str:
    """An endpoint on the DevUI entity ``assistant``, its token read from the environment."""
    require_env("A2A_TEST_DEVUI_TOKEN")
    return await gw.add_endpoint(HANDLER, name="devui", settings={
        "responses_api_url": require_env("A2A_TEST_DEVUI_URL"),
        "responses_api_key": "env:A2A_TEST_DEVUI_TOKEN", "responses_model": "assistant",
        "responses_metadata": {"entity_id": "assistant"}, "responses_continuity": "conversation",
        "responses_name": "DevUI", **settings})


@pytest.fixture
async def endpoint(gw: RunningGateway) -> str:
    return await devui_endpoint(gw)


def final_text(task: Any) -> str:
    return "".join(p.text for p in task.artifacts[-1].parts)


def status_text(task: Any) -> str:
    return "".join(p.text for p in task.status.message.parts)



async def two_turns(gw: RunningGateway, endpoint: str) -> tuple[str, list[tuple[str, str]]]:
    """Two blocking messages in one context: their mark, and the second LLM request's user and
    assistant messages."""
    mark = token()
    context_id = f"ctx-{mark}"
    async with gw.client(endpoint, streaming=False) as client:
        for text in (f"first {mark}", f"second {mark}"):
            (event,) = [e async for e in client.send_message(
                send_request(text, context_id=context_id))]
            assert event.task.status.state == COMPLETED, status_text(event.task)
            assert final_text(event.task).endswith(f"You said: {text}")
    second = [r for r in await llm_requests(mark) if f"second {mark}" in r["text"]][-1]
    return mark, [(m["role"], m["content"]) for m in second["messages"]
                  if m["role"] in ("user", "assistant")]


# -- DevUI -----------------------------------------------------------------------------------

async def test_devui_streams_token_by_token_with_usage(gw, endpoint):
    async with gw.client(endpoint) as client:
        final = await six_streamed_tokens(client)
    metadata = MessageToDict(final.artifact.metadata)
    assert metadata["usage"]["input_tokens"] > 0 and metadata["usage"]["output_tokens"] > 0
    assert metadata["responses"]["response_id"].startswith("resp_")


async def test_devui_blocking_sends_of_one_context_share_a_conversation(gw, endpoint):
    mark, convo = await two_turns(gw, endpoint)
    assert convo == [("user", f"first {mark}"),
                     ("assistant", f"Hello from fakellm. You said: first {mark}"),
                     ("user", f"second {mark}")]


async def test_devui_message_mode_replies_and_keeps_the_conversation(gw):
    endpoint = await devui_endpoint(gw, response_mode="message")
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        for text in (f"first {mark}", f"second {mark}"):
            (event,) = [e async for e in client.send_message(
                send_request(text, context_id=f"ctx-{mark}"))]
            assert event.message.parts[0].text == f"Hello from fakellm. You said: {text}"
    second = [r for r in await llm_requests(mark) if f"second {mark}" in r["text"]][-1]
    assert [m["content"] for m in second["messages"] if m["role"] == "user"] == [
        f"first {mark}", f"second {mark}"]


async def ask_for_approval(gw: RunningGateway, endpoint: str, mark: str) -> Any:
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(
            send_request(f"FAKE_TOOL_DANGER path=scratch/{mark}"))]
    assert state_of(events[-1]) == INPUT_REQUIRED
    async with gw.client(endpoint, streaming=False) as client:
        task = await client.get_task(GetTaskRequest(id=events[0].task.id))
    assert task.status.state == INPUT_REQUIRED
    assert task.status.message.parts[0].text == (
        f'Allow bash(command="rm -rf scratch/{mark}")? Answer approve or deny.')
    (data,) = [MessageToDict(p.data) for p in task.status.message.parts if p.HasField("data")]
    assert data["choices"] == ["approve", "deny"]
    approval = data["responses_approval"]
    assert approval["request_id"].startswith("af-call-") and approval["name"] == "bash"
    assert approval["arguments"] == {"command": f"rm -rf scratch/{mark}"}
    return task


async def test_devui_approval_approved_in_words_runs_the_tool(gw, endpoint):
    mark = token()
    task = await ask_for_approval(gw, endpoint, mark)
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(
            send_request("maybe", task_id=task.id, context_id=task.context_id))]
        assert event.task.status.state == INPUT_REQUIRED  # neither approve nor deny
        assert "Answer approve or deny" in status_text(event.task)
        (done,) = [e async for e in client.send_message(
            send_request("approve", task_id=task.id, context_id=task.context_id))]
    assert done.task.status.state == COMPLETED
    assert final_text(done.task) == f"TOOL_RESULT_SEEN: would run rm -rf scratch/{mark}"


async def test_devui_approval_denied_with_a_structured_answer(gw, endpoint):
    task = await ask_for_approval(gw, endpoint, token())
    (data,) = [MessageToDict(p.data) for p in task.status.message.parts if p.HasField("data")]
    (tool,) = data[HITL_URI]["tools"]
    assert tool["id"] == data["responses_approval"]["request_id"]
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(send_request(
            "", data={"type": "tool_approval_response", "approvals": [
                {"id": tool["id"], "approved": False}]},
            task_id=task.id, context_id=task.context_id))]
    assert state_of(events[-1]) == COMPLETED
    assert streamed_answer(events) == f"TOOL_RESULT_SEEN: {DENIED}"


async def test_devui_cancel_goes_through_the_cancel_route_and_aborts_the_llm(gw, endpoint):
    mark = token()
    async with gw.client(endpoint) as client, \
            gw.client(endpoint, streaming=False) as control:
        stream = client.send_message(send_request(f"FAKE_SLOW words=40 delay=0.2 {mark}"))
        head = []
        async for event in stream:
            head.append(event)
            if sum(e.HasField("artifact_update") for e in head) >= 2:
                break
        task_id = head[0].task.id
        canceled = await control.cancel_task(CancelTaskRequest(id=task_id))
        rest = [e async for e in stream]
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    # the reason is DevUI's response.cancelled, not the gateway closing the stream
    assert status_text(canceled) == "DevUI canceled the response"
    assert state_of(rest[-1]) == TaskState.TASK_STATE_CANCELED
    (llm,) = await eventually(lambda: llm_requests(mark),
                              until=lambda rs: len(rs) == 1 and rs[0]["outcome"] != "in_progress",
                              timeout=15, what="the LLM call of the canceled response ends")
    assert llm["outcome"] == "client_disconnected" and len(llm["chunks"]) < 40


async def test_devui_llm_error_fails_the_task_without_the_token(gw, endpoint):
    secret = require_env("A2A_TEST_DEVUI_TOKEN")
    with structlog.testing.capture_logs() as logs:
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(
                send_request(f"FAKE_HTTP_500 {token()}"))]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    reason = status_text(event.task)
    assert reason.startswith("DevUI run failed: Agent execution error")
    assert "Error code: 500" in reason
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{gw.endpoint_url(endpoint)}/.well-known/agent-card.json")).text
    stored = await gw.store.get_task(Scope("default", endpoint, "anonymous"), event.task.id)
    for where in (str(event), str(stored.task), repr(logs), card):
        assert secret not in where


async def test_devui_refuses_a_wrong_token_from_env(gw, monkeypatch):
    monkeypatch.setenv("A2A_TEST_DEVUI_WRONG_TOKEN", "wrong-" + token())
    endpoint = await devui_endpoint(gw, responses_api_key="env:A2A_TEST_DEVUI_WRONG_TOKEN")
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    assert "401" in status_text(event.task) and "wrong-" not in status_text(event.task)


# -- OpenClaw, a second Responses server -----------------------------------------------------

@pytest.fixture
async def openclaw(gw: RunningGateway) -> str:
    require_env("A2A_TEST_OPENCLAW_TOKEN")
    return await gw.add_endpoint(HANDLER, name="openclaw", settings={
        "responses_api_url": require_env("A2A_TEST_OPENCLAW_URL"),
        "responses_api_key": "env:A2A_TEST_OPENCLAW_TOKEN", "responses_model": "openclaw",
        "responses_user": "context", "responses_cancel": False, "responses_name": "OpenClaw"})


async def test_openclaw_streams_token_by_token(gw, openclaw):
    async with gw.client(openclaw) as client:
        final = await six_streamed_tokens(client)
    assert MessageToDict(final.artifact.metadata)["usage"]["total_tokens"] > 0


async def test_openclaw_continues_a_context_by_previous_response_id(gw, openclaw):
    mark, convo = await two_turns(gw, openclaw)
    assert any(f"first {mark}" in content for role, content in convo if role == "user")
    assert ("assistant", f"Hello from fakellm. You said: first {mark}") in convo
