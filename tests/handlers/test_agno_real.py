"""The Agno handler against a real Agno AgentOS (``uvicorn app:app`` serving the agent of
tests/backends/agno on the scripted LLM), through the gateway, with the real a2a-sdk client as
the caller.

Needs the services of ``.ci/services`` (10-llm.sh, 60-agno.sh): ``A2A_TEST_AGNO_URL``,
``A2A_TEST_AGNO_KEY`` (the server's ``OS_SECURITY_KEY``) and ``A2A_TEST_LLM_URL``. Skipped
without them, except in CI. Every test marks its message with a fresh token, so tests can share
one server and LLM.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import structlog
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from a2a_gateway.stores.base import Scope
from a2a_gateway.stores.memory import MemoryStore
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

pytestmark = pytest.mark.agno

HANDLER = "handlers.agno:AgnoHandler"
AGENT = "assistant"
COMPLETED = TaskState.TASK_STATE_COMPLETED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
FAILED = TaskState.TASK_STATE_FAILED


@pytest.fixture
def agno_url() -> str:
    require_env("A2A_TEST_LLM_URL", "A2A_TEST_AGNO_KEY")
    return require_env("A2A_TEST_AGNO_URL")


@pytest.fixture
async def gw(agno_url: str) -> AsyncIterator[RunningGateway]:
    async with running_gateway(cancel_wait_seconds=15.0) as running:
        yield running


async def agno_endpoint(gw: RunningGateway, url: str, **settings: Any) -> str:
    return await gw.add_endpoint(HANDLER, name="agno", settings={
        "agno_api_url": url, "agno_agent_id": AGENT, "agno_api_key": "env:A2A_TEST_AGNO_KEY",
        "poll_interval_seconds": 0.2, **settings})


@pytest.fixture
async def endpoint(gw: RunningGateway, agno_url: str) -> str:
    return await agno_endpoint(gw, agno_url)


def final_text(task: Any) -> str:
    return "".join(p.text for p in task.artifacts[-1].parts)


def progress_of(events: list[StreamResponse]) -> list[dict[str, Any]]:
    return [MessageToDict(e.status_update.metadata) for e in events
            if e.HasField("status_update") and e.status_update.metadata]



async def agno_run(url: str, run_id: str, session_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await http.get(
            f"{url}/agents/{AGENT}/runs/{run_id}", params={"session_id": session_id},
            headers={"Authorization": f"Bearer {require_env('A2A_TEST_AGNO_KEY')}"})
    response.raise_for_status()
    return response.json()


async def stored(gw: RunningGateway, endpoint: str, task_id: str) -> Any:
    found = await gw.store.get_task(Scope("default", endpoint, "anonymous"), task_id)
    assert found is not None
    return found


async def test_streamed_reply_arrives_token_by_token(gw, endpoint):
    async with gw.client(endpoint) as client:
        final = await six_streamed_tokens(client)
    metadata = MessageToDict(final.artifact.metadata)
    assert metadata["usage"]["output_tokens"] > 0
    assert metadata["agno_run_id"] and metadata["agno_session_id"].startswith("a2a-")


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_blocking_send_returns_the_completed_task(gw, endpoint, version):
    mark = token()
    async with gw.client(endpoint, streaming=False, version=version) as client:
        (event,) = [e async for e in client.send_message(send_request(f"hello {mark}"))]
    assert event.task.status.state == COMPLETED
    assert final_text(event.task) == f"Hello from fakellm. You said: hello {mark}"


async def test_second_message_of_a_context_continues_the_agno_session(gw, endpoint):
    mark = token()
    context_id = f"ctx-{mark}"
    sessions = []
    async with gw.client(endpoint, streaming=False) as client:
        for text in (f"first {mark}", f"second {mark}"):
            (event,) = [
                e async for e in client.send_message(send_request(text, context_id=context_id))
            ]
            assert event.task.status.state == COMPLETED
            sessions.append(MessageToDict(event.task.artifacts[-1].metadata)["agno_session_id"])
    assert sessions[0] == sessions[1]
    (second,) = [r for r in await llm_requests(mark, role="user") if r["text"] == f"second {mark}"]
    convo = [(m["role"], m["content"]) for m in second["messages"] if m["role"] != "system"]
    assert convo == [("user", f"first {mark}"),
                     ("assistant", f"Hello from fakellm. You said: first {mark}"),
                     ("user", f"second {mark}")]


async def test_another_context_gets_another_session(gw, endpoint):
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        tasks = [
            (await anext(client.send_message(send_request(f"alone {mark}", context_id=c)))).task
            for c in (f"a-{mark}", f"b-{mark}")
        ]
    sessions = {MessageToDict(t.artifacts[-1].metadata)["agno_session_id"] for t in tasks}
    assert len(sessions) == 2
    for request in await llm_requests(mark, role="user"):
        assert [m["role"] for m in request["messages"] if m["role"] != "system"] == ["user"]


async def ask_for_confirmation(gw, endpoint, mark: str) -> Any:
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(
            send_request(f"FAKE_TOOL_DANGER path=scratch/{mark}"))]
    assert state_of(events[-1]) == INPUT_REQUIRED
    task_id = events[0].task.id
    async with gw.client(endpoint, streaming=False) as client:
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == INPUT_REQUIRED
    assert task.status.message.parts[0].text == (
        f'Confirm the tool call shell(command="rm -rf scratch/{mark}")? Answer yes or no.')
    (data,) = [MessageToDict(p.data) for p in task.status.message.parts if p.HasField("data")]
    (tool,) = data["tools"]
    assert tool["tool_name"] == "shell" and tool["tool_args"] == {
        "command": f"rm -rf scratch/{mark}"
    }
    assert data["choices"] == ["yes", "no"] and data["run_id"]
    return task


async def test_confirmation_round_trip_approve(gw, endpoint, agno_url):
    mark = token()
    task = await ask_for_confirmation(gw, endpoint, mark)
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(
            send_request("yes", task_id=task.id, context_id=task.context_id))]
    assert state_of(events[-1]) == COMPLETED
    final = [e for e in events if e.HasField("artifact_update")][-1].artifact_update.artifact
    assert streamed_answer(events) == f"TOOL_RESULT_SEEN: would run rm -rf scratch/{mark}"
    assert [(p["kind"], p["tool"]) for p in progress_of(events)] == [
        ("tool_started", "shell"), ("tool_completed", "shell")]
    metadata = MessageToDict(final.metadata)
    run = await agno_run(agno_url, metadata["agno_run_id"], metadata["agno_session_id"])
    assert run["status"] == "COMPLETED" and run["tools"][0]["confirmed"] is True


async def test_confirmation_round_trip_deny_with_a_data_answer(gw, endpoint):
    mark = token()
    task = await ask_for_confirmation(gw, endpoint, mark)
    async with gw.client(endpoint, streaming=False) as client:
        (done,) = [e async for e in client.send_message(send_request(
            "", data={"confirmed": False}, task_id=task.id, context_id=task.context_id))]
    assert done.task.status.state == COMPLETED
    assert final_text(done.task) == "TOOL_RESULT_SEEN: Function call was rejected by the user"


TOOL = "shell"
APPROVED = "TOOL_RESULT_SEEN: would run rm -rf scratch/{mark}"


async def test_structured_approval_after_a_refused_mismatched_answer(gw, endpoint):
    mark, done = await structured_approval_after_refusal(gw, endpoint, ask_for_confirmation, TOOL)
    assert final_text(done) == APPROVED.format(mark=mark)


async def test_an_unclear_answer_keeps_the_task_waiting(gw, endpoint):
    mark = token()
    task = await ask_for_confirmation(gw, endpoint, mark)
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(
            send_request("perhaps", task_id=task.id, context_id=task.context_id))]
        assert event.task.status.state == INPUT_REQUIRED
        assert "Answer yes or no" in event.task.status.message.parts[0].text
        (done,) = [e async for e in client.send_message(
            send_request("no", task_id=task.id, context_id=task.context_id))]
    assert final_text(done.task) == "TOOL_RESULT_SEEN: Function call was rejected by the user"


async def test_cancel_mid_stream_cancels_the_agno_run(gw, endpoint, agno_url):
    mark = token()
    async with gw.client(endpoint) as client:
        again = await cancel_mid_stream(
            client, send_request(f"FAKE_SLOW words=40 delay=0.2 {mark}"))
    assert again.status.state == TaskState.TASK_STATE_CANCELED
    row = await stored(gw, endpoint, again.id)
    session_id = handler_request(context_id=again.context_id, endpoint_id=endpoint,
                                 tenant="default").backend_user(per_context=True)
    run = await agno_run(agno_url, row.run_ref, session_id)
    assert run["status"] == "CANCELLED"
    assert len(run["content"].split()) < 40  # the run stopped before the model's answer ended
    # Agno reads the model call it was in to its end (and drops it), but asks nothing more
    (llm,) = await llm_requests(mark, role="user")
    assert llm["text"].endswith(mark)


async def test_backend_error_fails_the_task_without_the_api_key(gw, agno_url):
    with structlog.testing.capture_logs() as logs:
        endpoint = await agno_endpoint(gw, agno_url)
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [
                e async for e in client.send_message(send_request(f"FAKE_HTTP_400 {token()}"))
            ]
    assert event.task.status.state == FAILED
    assert (
        event.task.status.message.parts[0].text
        == "the Agno run failed: fakellm scripted bad request"
    )
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{gw.endpoint_url(endpoint)}/.well-known/agent-card.json")).text
    row = await stored(gw, endpoint, event.task.id)
    secret = require_env("A2A_TEST_AGNO_KEY")
    for where in (str(event), str(row.task), repr(logs), card):
        assert secret not in where and "fake-key" not in where


async def test_a_wrong_api_key_fails_without_echoing_it(gw, agno_url, monkeypatch):
    wrong = "agno-wrong-" + uuid.uuid4().hex
    monkeypatch.setenv("A2A_TEST_AGNO_WRONG_KEY", wrong)
    with structlog.testing.capture_logs() as logs:
        endpoint = await agno_endpoint(gw, agno_url, agno_api_key="env:A2A_TEST_AGNO_WRONG_KEY")
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    assert event.task.status.state == FAILED
    reason = event.task.status.message.parts[0].text
    assert reason == "Agno rejected the API key (HTTP 401); check the endpoint's API key setting"
    assert wrong not in str(event) and wrong not in repr(logs)


async def test_unknown_agent_fails_with_agnos_reason(gw, agno_url):
    endpoint = await agno_endpoint(gw, agno_url, agno_agent_id="nope")
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    assert event.task.status.state == FAILED
    assert event.task.status.message.parts[0].text == (
        "Agno rejected the request (HTTP 404): Agent not found")


async def test_unreachable_agno_fails_the_task(gw, agno_url):
    with socket_closed_port() as url:
        endpoint = await agno_endpoint(gw, url)
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    assert event.task.status.state == FAILED
    assert "cannot reach Agno at" in event.task.status.message.parts[0].text


async def test_message_mode_answers_with_a_message(gw, agno_url):
    endpoint = await agno_endpoint(gw, agno_url, response_mode="message")
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"ping {mark}"))]
    assert event.HasField("message") and event.message.role == Role.ROLE_AGENT
    assert event.message.parts[0].text == f"Hello from fakellm. You said: ping {mark}"


async def test_a_run_outlives_a_gateway_restart_and_streams_on_from_the_next_replica(agno_url):
    store = MemoryStore()
    mark = token()
    words = " ".join(f"slow{i}" for i in range(24))
    async with running_gateway(store=store, lease_seconds=120, replica_id="replica-a") as a:
        endpoint = await agno_endpoint(a, agno_url)
        async with a.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(
                send_request(f"FAKE_SLOW words=24 delay=0.25 {mark}", immediately=True))]
        task_id = event.task.id
        scope = Scope("default", endpoint, "anonymous")
        first = await eventually(lambda: store.get_task(scope, task_id),
                                 until=lambda s: s is not None and s.run_ref, timeout=15,
                                 what="the Agno run started")
    # gateway A is gone, the run goes on in AgentOS (a background run); B takes the task over
    # and joins the run's stream, so a client following the task on B still gets tokens
    async with running_gateway(store=store, lease_seconds=120, replica_id="replica-b") as b:
        async with b.client(endpoint) as client:
            followed = [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id))]
        done = await eventually(lambda: store.get_task(scope, task_id),
                                until=lambda s: s.task.status.state in (COMPLETED, FAILED),
                                timeout=30, what="the re-attached task ends")
    assert done.task.status.state == COMPLETED
    assert final_text(done.task) == words
    assert done.run_ref == first.run_ref
    streamed = [e.artifact_update for e in followed
                if e.HasField("artifact_update") and not e.artifact_update.last_chunk]
    assert streamed and state_of(followed[-1]) == COMPLETED
    # the same run finished it, none was started again
    assert len(await llm_requests(mark, role="user")) == 1


async def test_cancel_while_waiting_for_confirmation_cancels_the_task(gw, endpoint, agno_url):
    mark = token()
    task = await ask_for_confirmation(gw, endpoint, mark)
    async with gw.client(endpoint, streaming=False) as client:
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    (data,) = [MessageToDict(p.data) for p in task.status.message.parts if p.HasField("data")]
    session_id = handler_request(context_id=task.context_id, endpoint_id=endpoint,
                                 tenant="default").backend_user(per_context=True)
    run = await agno_run(agno_url, data["run_id"], session_id)
    assert run["status"] == "PAUSED"  # Agno's cancel stops running runs only (docs/handlers.md)
    async with gw.client(endpoint, streaming=False) as client:
        again = await client.get_task(GetTaskRequest(id=task.id))
        assert again.status.state == TaskState.TASK_STATE_CANCELED
        (next_turn,) = [e async for e in client.send_message(
            send_request(f"after {mark}", context_id=task.context_id))]
    assert next_turn.task.status.state == COMPLETED  # a new run in the same session
    assert final_text(next_turn.task) == f"Hello from fakellm. You said: after {mark}"


async def test_the_run_carries_the_a2a_ids_in_its_metadata(gw, endpoint, agno_url):
    task, ids = await completed_with_ids(gw, endpoint)
    metadata = MessageToDict(task.artifacts[-1].metadata)
    run = await agno_run(agno_url, metadata["agno_run_id"], metadata["agno_session_id"])
    assert run["metadata"] == ids
