"""The ADK handler against a real ``adk api_server`` (serving tests/backends/adk on the scripted
LLM), through the gateway, with the real a2a-sdk client as the caller.

Needs the services of ``.ci/services`` (10-llm.sh, 50-adk.sh): ``A2A_TEST_ADK_URL`` and
``A2A_TEST_LLM_URL``. Skipped without them, except in CI. Every test marks its message with a
fresh token, so tests can share one server and LLM.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import structlog
from a2a.types import GetTaskRequest, Role, StreamResponse, TaskState
from google.protobuf.json_format import MessageToDict

from a2a_gateway.stores.base import Scope
from tests.handlers.real_streams import (
    cancel_mid_stream,
    completed_with_ids,
    llm_requests,
    six_streamed_tokens,
    state_of,
    streamed_answer,
    structured_approval_after_refusal,
    token,
)
from tests.handlers.test_hermes_real import socket_closed_port
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import handler_request, send_request
from tests.support.waiting import eventually

pytestmark = pytest.mark.adk

HANDLER = "handlers.adk:AdkHandler"
APP = "assistant"
COMPLETED = TaskState.TASK_STATE_COMPLETED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


@pytest.fixture
def adk_url() -> str:
    require_env("A2A_TEST_LLM_URL")
    return require_env("A2A_TEST_ADK_URL")


@pytest.fixture
async def gw(adk_url: str) -> AsyncIterator[RunningGateway]:
    async with running_gateway(cancel_wait_seconds=15.0) as running:
        yield running


async def adk_endpoint(gw: RunningGateway, url: str, **settings: Any) -> str:
    return await gw.add_endpoint(HANDLER, name="adk", settings={
        "adk_api_url": url, "adk_app_name": APP, **settings})


@pytest.fixture
async def endpoint(gw: RunningGateway, adk_url: str) -> str:
    return await adk_endpoint(gw, adk_url)


def final_text(task: Any) -> str:
    return "".join(p.text for p in task.artifacts[-1].parts)


def progress_of(events: list[StreamResponse]) -> list[dict[str, Any]]:
    return [MessageToDict(e.status_update.metadata) for e in events
            if e.HasField("status_update") and e.status_update.metadata]



async def adk_session(url: str, user_id: str, session_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{url}/apps/{APP}/users/{user_id}/sessions/{session_id}")
    response.raise_for_status()
    return response.json()


async def test_streamed_reply_arrives_token_by_token(gw, endpoint):
    async with gw.client(endpoint) as client:
        final = await six_streamed_tokens(client)
    metadata = MessageToDict(final.artifact.metadata)
    assert metadata["usage"]["candidatesTokenCount"] > 0
    assert metadata["adk_session_id"].startswith("a2a-") and metadata["adk_invocation_id"]


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_blocking_send_returns_the_completed_task(gw, endpoint, version):
    mark = token()
    async with gw.client(endpoint, streaming=False, version=version) as client:
        (event,) = [e async for e in client.send_message(send_request(f"hello {mark}"))]
    assert event.task.status.state == COMPLETED
    assert final_text(event.task) == f"Hello from fakellm. You said: hello {mark}"


async def test_second_message_of_a_context_goes_to_the_same_session(gw, endpoint, adk_url):
    mark = token()
    context_id = f"ctx-{mark}"
    sessions = []
    async with gw.client(endpoint, streaming=False) as client:
        for text in (f"first {mark}", f"second {mark}"):
            (event,) = [
                e async for e in client.send_message(send_request(text, context_id=context_id))
            ]
            assert event.task.status.state == COMPLETED
            sessions.append(MessageToDict(event.task.artifacts[-1].metadata)["adk_session_id"])
    assert sessions[0] == sessions[1]
    (second,) = [r for r in await llm_requests(mark) if r["text"] == f"second {mark}"]
    convo = [(m["role"], m["content"]) for m in second["messages"] if m["role"] != "system"]
    assert convo == [("user", f"first {mark}"),
                     ("assistant", f"Hello from fakellm. You said: first {mark}"),
                     ("user", f"second {mark}")]
    session = await adk_session(adk_url, "anonymous", sessions[0])  # the caller is the ADK user
    assert [e["author"] for e in session["events"]] == ["user", "assistant"] * 2


async def test_another_context_gets_another_session(gw, endpoint):
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        tasks = [
            (await anext(client.send_message(send_request(f"alone {mark}", context_id=c)))).task
            for c in (f"a-{mark}", f"b-{mark}")
        ]
    sessions = {MessageToDict(t.artifacts[-1].metadata)["adk_session_id"] for t in tasks}
    assert len(sessions) == 2
    for request in await llm_requests(mark):
        assert [m["role"] for m in request["messages"]] == [
            "system",
            "user",
        ]  # nothing of the other


async def test_a_tool_call_is_progress(gw, endpoint):
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(send_request(f"FAKE_TOOL_SAFE {token()}"))]
    assert state_of(events[-1]) == COMPLETED
    kinds = [(p["kind"], p["tool"]) for p in progress_of(events)]
    assert kinds == [("tool_started", "run_command"), ("tool_completed", "run_command")]
    assert streamed_answer(events) == 'TOOL_RESULT_SEEN: {"result": "would run echo fake-safe-ok"}'


async def ask_for_confirmation(gw, endpoint, mark: str) -> Any:
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(
            send_request(f"FAKE_TOOL_DANGER path=scratch/{mark}"))]
    assert state_of(events[-1]) == INPUT_REQUIRED
    assert progress_of(events)[0]["kind"] == "tool_started"
    task_id = events[0].task.id
    async with gw.client(endpoint, streaming=False) as client:
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == INPUT_REQUIRED
    assert task.status.message.parts[0].text == (
        f'Allow run_command(command="rm -rf scratch/{mark}")? Answer yes or no.')
    (data,) = [MessageToDict(p.data) for p in task.status.message.parts if p.HasField("data")]
    (confirmation,) = data["adk_confirmations"]
    assert confirmation["id"].startswith("adk-") and confirmation["tool"] == "run_command"
    assert confirmation["args"] == {"command": f"rm -rf scratch/{mark}"}
    return task


async def test_confirmation_round_trip_approve(gw, endpoint):
    mark = token()
    task = await ask_for_confirmation(gw, endpoint, mark)
    async with gw.client(endpoint, streaming=False) as client:
        (done,) = [e async for e in client.send_message(
            send_request("yes", task_id=task.id, context_id=task.context_id))]
    assert done.task.status.state == COMPLETED
    assert final_text(done.task) == (
        f'TOOL_RESULT_SEEN: {{"result": "would run rm -rf scratch/{mark}"}}')


async def test_confirmation_round_trip_deny_with_a_data_answer(gw, endpoint):
    mark = token()
    task = await ask_for_confirmation(gw, endpoint, mark)
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(send_request(
            "", data={"confirmed": False}, task_id=task.id, context_id=task.context_id))]
    assert state_of(events[-1]) == COMPLETED
    assert streamed_answer(events) == 'TOOL_RESULT_SEEN: {"error": "This tool call is rejected."}'
    assert [(p["kind"], p["tool"]) for p in progress_of(events)] == [
        ("tool_completed", "run_command")
    ]


TOOL = "run_command"
APPROVED = 'TOOL_RESULT_SEEN: {{"result": "would run rm -rf scratch/{mark}"}}'


async def test_structured_approval_after_a_refused_mismatched_answer(gw, endpoint):
    mark, done = await structured_approval_after_refusal(gw, endpoint, ask_for_confirmation, TOOL)
    assert final_text(done) == APPROVED.format(mark=mark)


async def test_an_unclear_answer_keeps_the_task_waiting(gw, endpoint):
    task = await ask_for_confirmation(gw, endpoint, token())
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(
            send_request("maybe later", task_id=task.id, context_id=task.context_id))]
        assert event.task.status.state == INPUT_REQUIRED
        assert "Answer yes (approve) or no (deny)" in event.task.status.message.parts[0].text
        (done,) = [e async for e in client.send_message(
            send_request("no", task_id=task.id, context_id=task.context_id))]
    assert final_text(done.task) == 'TOOL_RESULT_SEEN: {"error": "This tool call is rejected."}'


async def test_cancel_mid_stream_aborts_the_adk_run(gw, endpoint, adk_url):
    mark = token()
    async with gw.client(endpoint) as client:
        again = await cancel_mid_stream(
            client, send_request(f"FAKE_SLOW words=40 delay=0.2 {mark}"))
    assert again.status.state == TaskState.TASK_STATE_CANCELED
    (llm,) = await eventually(lambda: llm_requests(mark),
                              until=lambda rs: len(rs) == 1 and rs[0]["outcome"] != "in_progress",
                              timeout=15, what="the LLM call of the canceled run ends")
    assert llm["outcome"] == "client_disconnected" and len(llm["chunks"]) < 40
    # the session id is derived from the caller and the context (what the handler sends)
    session_id = handler_request(context_id=again.context_id, endpoint_id=endpoint,
                                 tenant="default").backend_user(per_context=True)
    session = await eventually(lambda: adk_session(adk_url, "anonymous", session_id),
                               until=lambda s: s["events"][-1].get("errorCode"), timeout=15,
                               what="ADK records the aborted run")
    assert session["events"][-1]["errorCode"] == "INVOCATION_ABORTED"
    assert len(await llm_requests(mark)) == 1  # no further LLM call


async def test_backend_error_fails_the_task_without_the_api_key(gw, adk_url, monkeypatch):
    secret = "adk-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("A2A_TEST_ADK_KEY", secret)
    endpoint = await adk_endpoint(gw, adk_url, adk_api_key="env:A2A_TEST_ADK_KEY")
    with structlog.testing.capture_logs() as logs:
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [
                e async for e in client.send_message(send_request(f"FAKE_HTTP_400 {token()}"))
            ]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    reason = event.task.status.message.parts[0].text
    assert reason == ("the ADK run failed: BadRequestError: litellm.BadRequestError: "
                      "OpenAIException - fakellm scripted bad request")
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{gw.endpoint_url(endpoint)}/.well-known/agent-card.json")).text
    stored = await gw.store.get_task(Scope("default", endpoint, "anonymous"), event.task.id)
    for where in (str(event), str(stored.task), repr(logs), card):
        assert secret not in where and "fake-key" not in where


async def test_unknown_app_fails_with_adks_reason(gw, adk_url):
    endpoint = await adk_endpoint(gw, adk_url, adk_app_name="nope")
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    reason = event.task.status.message.parts[0].text
    assert "ADK rejected the request (HTTP 404)" in reason and "Agent not found: 'nope'" in reason


async def test_unreachable_adk_fails_the_task(gw, adk_url):
    with socket_closed_port() as url:
        endpoint = await adk_endpoint(gw, url)
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    assert "cannot reach ADK at" in event.task.status.message.parts[0].text


async def test_message_mode_answers_with_a_message(gw, adk_url):
    endpoint = await adk_endpoint(gw, adk_url, response_mode="message")
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"ping {mark}"))]
    assert event.HasField("message") and event.message.role == Role.ROLE_AGENT
    assert event.message.parts[0].text == f"Hello from fakellm. You said: ping {mark}"


async def test_the_user_id_setting_names_the_adk_user(gw, adk_url):
    endpoint = await adk_endpoint(gw, adk_url, adk_user_id="team-a")
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"hi {token()}"))]
    session_id = MessageToDict(event.task.artifacts[-1].metadata)["adk_session_id"]
    session = await adk_session(adk_url, "team-a", session_id)
    assert session["userId"] == "team-a" and len(session["events"]) == 2


async def test_each_event_of_the_run_carries_the_a2a_ids(gw, endpoint, adk_url):
    task, ids = await completed_with_ids(gw, endpoint)
    session_id = MessageToDict(task.artifacts[-1].metadata)["adk_session_id"]
    session = await adk_session(adk_url, "anonymous", session_id)
    # ADK puts the run's custom_metadata on every event the run adds (the user's message too)
    assert [e.get("customMetadata") for e in session["events"]] == [ids, ids]
