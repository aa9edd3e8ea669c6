"""The LangGraph handler against a real LangGraph Agent Server (``langgraph dev`` serving the
graph of tests/backends/langgraph on the scripted LLM), through the gateway, with the real
a2a-sdk client as the caller.

Needs the services of ``.ci/services`` (10-llm.sh, 40-langgraph.sh): ``A2A_TEST_LANGGRAPH_URL``
and ``A2A_TEST_LLM_URL``. Skipped without them, except in CI. Every test marks its message
with a fresh token, so tests can share one server and LLM.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import structlog
from a2a.types import GetTaskRequest, Role, TaskState
from google.protobuf.json_format import MessageToDict

from a2a_gateway.stores.base import Scope
from a2a_gateway.stores.memory import MemoryStore
from handlers.approvals import HITL_URI
from tests.handlers.real_streams import (
    cancel_mid_stream,
    completed_with_ids,
    llm_requests,
    six_streamed_tokens,
    state_of,
    streamed_answer,
    token,
)
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually

pytestmark = pytest.mark.langgraph

HANDLER = "handlers.langgraph:LangGraphHandler"
COMPLETED = TaskState.TASK_STATE_COMPLETED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


@pytest.fixture
def langgraph_url() -> str:
    require_env("A2A_TEST_LLM_URL")
    return require_env("A2A_TEST_LANGGRAPH_URL")


@pytest.fixture
async def gw(langgraph_url: str) -> AsyncIterator[RunningGateway]:
    async with running_gateway(cancel_wait_seconds=15.0) as running:
        yield running


async def langgraph_endpoint(gw: RunningGateway, url: str, **settings: Any) -> str:
    return await gw.add_endpoint(HANDLER, name="langgraph", settings={
        "langgraph_api_url": url, "poll_interval_seconds": 0.2, **settings})


@pytest.fixture
async def endpoint(gw: RunningGateway, langgraph_url: str) -> str:
    return await langgraph_endpoint(gw, langgraph_url)


def final_text(task: Any) -> str:
    return "".join(p.text for p in task.artifacts[-1].parts)


def question_data(status: Any) -> dict[str, Any]:
    (data,) = [MessageToDict(p.data) for p in status.message.parts if p.HasField("data")]
    return data



async def langgraph_run(url: str, run_ref: str) -> dict[str, Any]:
    thread_id, run_id = run_ref.split(":")
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{url}/threads/{thread_id}/runs/{run_id}")
    response.raise_for_status()
    return response.json()


async def stored_run_ref(gw: RunningGateway, endpoint: str, task_id: str) -> str:
    stored = await gw.store.get_task(Scope("default", endpoint, "anonymous"), task_id)
    assert stored is not None and stored.run_ref
    return stored.run_ref


async def test_streamed_reply_arrives_token_by_token(gw, endpoint):
    async with gw.client(endpoint) as client:
        final = await six_streamed_tokens(client)
    metadata = MessageToDict(final.artifact.metadata)
    assert metadata["usage"]["output_tokens"] > 0
    assert metadata["langgraph_thread_id"] and metadata["langgraph_run_id"]


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_blocking_send_returns_the_completed_task(gw, endpoint, version):
    mark = token()
    async with gw.client(endpoint, streaming=False, version=version) as client:
        (event,) = [e async for e in client.send_message(send_request(f"hello {mark}"))]
    assert event.task.status.state == COMPLETED
    assert final_text(event.task) == f"Hello from fakellm. You said: hello {mark}"


async def test_second_message_of_a_context_goes_to_the_same_thread(gw, endpoint):
    mark = token()
    context_id = f"ctx-{mark}"
    threads = []
    async with gw.client(endpoint, streaming=False) as client:
        for text in (f"first {mark}", f"second {mark}"):
            (event,) = [
                e async for e in client.send_message(send_request(text, context_id=context_id))
            ]
            assert event.task.status.state == COMPLETED
            threads.append(MessageToDict(event.task.artifacts[-1].metadata)["langgraph_thread_id"])
    assert threads[0] == threads[1]
    (second,) = [r for r in await llm_requests(mark, last_only=True)
                 if r["text"] == f"second {mark}"]
    convo = [(m["role"], m["content"]) for m in second["messages"]]
    assert convo == [("user", f"first {mark}"),
                     ("assistant", f"Hello from fakellm. You said: first {mark}"),
                     ("user", f"second {mark}")]


async def test_another_context_gets_another_thread(gw, endpoint):
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        tasks = [e.task for c in (f"a-{mark}", f"b-{mark}")
                 async for e in client.send_message(send_request(f"alone {mark}", context_id=c))]
    threads = {MessageToDict(t.artifacts[-1].metadata)["langgraph_thread_id"] for t in tasks}
    assert len(threads) == 2
    for request in await llm_requests(mark, last_only=True):
        assert [m["role"] for m in request["messages"]] == ["user"]  # nothing of the other


async def ask_for_approval(gw, endpoint, mark: str) -> Any:
    async with gw.client(endpoint) as client:
        events = []
        async for event in client.send_message(
            send_request(f"FAKE_TOOL_DANGER path=scratch/{mark}")
        ):
            events.append(event)
    assert state_of(events[-1]) == INPUT_REQUIRED
    progress = [MessageToDict(e.status_update.metadata) for e in events
                if e.HasField("status_update") and e.status_update.metadata]
    assert {"kind": "tool_started", "tool": "shell"}.items() <= progress[0].items()
    task_id = events[0].task.id
    async with gw.client(endpoint, streaming=False) as client:
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == INPUT_REQUIRED
    assert task.status.message.parts[0].text == f"Run `rm -rf scratch/{mark}`?"
    data = question_data(task.status)
    (interrupt,) = data["interrupts"]
    assert interrupt["value"]["action_requests"] == [{
        "name": "shell", "args": {"command": f"rm -rf scratch/{mark}"},
        "description": f"Run `rm -rf scratch/{mark}`?"}]
    assert data[HITL_URI] == {
        "type": "tool_approval_request", "hint": f"Run `rm -rf scratch/{mark}`?",
        "tools": [{"id": f"{interrupt['id']}/0", "call_id": interrupt["id"], "name": "shell",
                   "args": {"command": f"rm -rf scratch/{mark}"}, "editable": True}],
        "answers": ["approve", "deny"]}
    return task


def approval_answer(task: Any, *approvals: dict[str, Any]) -> Any:
    """The answer data part approving (or not) the task's pending tool call."""
    (tool,) = question_data(task.status)[HITL_URI]["tools"]
    return send_request("", data={"type": "tool_approval_response", "approvals": [
        {"id": tool["id"], **a} for a in approvals]},
        task_id=task.id, context_id=task.context_id)


async def test_approval_round_trip_approve(gw, endpoint):
    mark = token()
    task = await ask_for_approval(gw, endpoint, mark)
    async with gw.client(endpoint, streaming=False) as client:
        (done,) = [e async for e in client.send_message(
            send_request("yes", task_id=task.id, context_id=task.context_id))]
    assert done.task.status.state == COMPLETED
    assert final_text(done.task) == f"TOOL_RESULT_SEEN: approved: rm -rf scratch/{mark}"


async def test_approval_round_trip_deny_with_a_data_answer(gw, endpoint):
    mark = token()
    task = await ask_for_approval(gw, endpoint, mark)
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(send_request(
            "", data={"approved": False}, task_id=task.id, context_id=task.context_id))]
    assert state_of(events[-1]) == COMPLETED
    assert streamed_answer(events) == f"TOOL_RESULT_SEEN: denied by the user: rm -rf scratch/{mark}"
    progress = [MessageToDict(e.status_update.metadata) for e in events
                if e.HasField("status_update") and e.status_update.metadata]
    assert [p["kind"] for p in progress] == ["tool_completed"]


async def test_structured_approval_approves_the_call(gw, endpoint):
    (declared,) = (await gw.card(endpoint)).capabilities.extensions
    assert declared.uri == HITL_URI and not declared.required
    assert MessageToDict(declared.params) == {"editableArgs": True}
    mark = token()
    task = await ask_for_approval(gw, endpoint, mark)
    async with gw.client(endpoint, streaming=False) as client:
        (done,) = [e async for e in client.send_message(approval_answer(task, {"approved": True}))]
    assert done.task.status.state == COMPLETED
    assert final_text(done.task) == f"TOOL_RESULT_SEEN: approved: rm -rf scratch/{mark}"


async def test_structured_denial_carries_its_reason_to_the_graph(gw, endpoint):
    mark = token()
    task = await ask_for_approval(gw, endpoint, mark)
    async with gw.client(endpoint, streaming=False) as client:
        (done,) = [e async for e in client.send_message(approval_answer(
            task, {"approved": False, "rejection_reason": "not on a Friday"}))]
    assert done.task.status.state == COMPLETED
    assert final_text(done.task) == (
        f"TOOL_RESULT_SEEN: denied by the user: rm -rf scratch/{mark} (not on a Friday)")


async def test_edited_arguments_run_after_a_refused_mismatched_answer(gw, endpoint):
    mark = token()
    task = await ask_for_approval(gw, endpoint, mark)
    ids = {"task_id": task.id, "context_id": task.context_id}
    async with gw.client(endpoint, streaming=False) as client:
        (wrong,) = [e async for e in client.send_message(send_request("", data={
            "type": "tool_approval_response",
            "approvals": [{"id": "not-asked", "approved": True}]}, **ids))]
        assert wrong.task.status.state == INPUT_REQUIRED
        assert "'not-asked' is not a pending approval" in wrong.task.status.message.parts[0].text
        (done,) = [e async for e in client.send_message(approval_answer(
            task, {"approved": True, "args": {"command": f"ls scratch/{mark}"}}))]
    assert done.task.status.state == COMPLETED
    assert final_text(done.task) == f"TOOL_RESULT_SEEN: approved: ls scratch/{mark}"


async def test_cancel_mid_stream_interrupts_the_langgraph_run(gw, endpoint, langgraph_url):
    mark = token()
    async with gw.client(endpoint) as client:
        again = await cancel_mid_stream(
            client, send_request(f"FAKE_SLOW words=40 delay=0.2 {mark}"))
    assert again.status.state == TaskState.TASK_STATE_CANCELED
    run = await langgraph_run(langgraph_url, await stored_run_ref(gw, endpoint, again.id))
    assert run["status"] == "interrupted"
    (llm,) = await eventually(lambda: llm_requests(mark, last_only=True),
                              until=lambda rs: len(rs) == 1 and rs[0]["outcome"] != "in_progress",
                              timeout=15, what="the LLM call of the canceled run ends")
    assert llm["outcome"] == "client_disconnected" and len(llm["chunks"]) < 40


async def test_backend_error_fails_the_task_without_the_api_key(gw, langgraph_url, monkeypatch):
    secret = "lsv2-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("A2A_TEST_LANGGRAPH_KEY", secret)
    endpoint = await langgraph_endpoint(
        gw, langgraph_url, langgraph_api_key="env:A2A_TEST_LANGGRAPH_KEY"
    )
    with structlog.testing.capture_logs() as logs:
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [
                e async for e in client.send_message(send_request(f"FAKE_HTTP_400 {token()}"))
            ]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    reason = event.task.status.message.parts[0].text
    assert (
        reason == "the LangGraph run failed: OpenAIInvalidRequestError: An internal error occurred"
    )
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{gw.endpoint_url(endpoint)}/.well-known/agent-card.json")).text
    stored = await gw.store.get_task(Scope("default", endpoint, "anonymous"), event.task.id)
    for where in (str(event), str(stored.task), repr(logs), card):
        assert secret not in where and "fake-key" not in where


async def test_unknown_assistant_fails_with_langgraphs_reason(gw, langgraph_url):
    endpoint = await langgraph_endpoint(gw, langgraph_url, langgraph_assistant_id="nope")
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    reason = event.task.status.message.parts[0].text
    assert "LangGraph rejected the request (HTTP 422)" in reason and "'nope'" in reason


async def test_unreachable_langgraph_fails_the_task(gw, langgraph_url):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening
        endpoint = await langgraph_endpoint(gw, f"http://127.0.0.1:{sock.getsockname()[1]}")
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    assert "cannot reach LangGraph at" in event.task.status.message.parts[0].text


async def test_message_mode_answers_with_a_message(gw, langgraph_url):
    endpoint = await langgraph_endpoint(gw, langgraph_url, response_mode="message")
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"ping {mark}"))]
    assert event.HasField("message") and event.message.role == Role.ROLE_AGENT
    assert event.message.parts[0].text == f"Hello from fakellm. You said: ping {mark}"


async def test_a_run_outlives_a_gateway_restart_and_completes_the_task(langgraph_url):
    store = MemoryStore()
    mark = token()
    async with running_gateway(store=store, lease_seconds=120, replica_id="replica-a") as a:
        endpoint = await langgraph_endpoint(a, langgraph_url)
        async with a.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(
                send_request(f"FAKE_SLOW words=12 delay=0.25 {mark}", immediately=True))]
        task_id = event.task.id
        scope = Scope("default", endpoint, "anonymous")
        stored = await eventually(lambda: store.get_task(scope, task_id),
                                  until=lambda s: s is not None and s.run_ref, timeout=15,
                                  what="the LangGraph run started")
    # gateway A is gone, the run goes on in LangGraph; B takes the task over at once
    run = await langgraph_run(langgraph_url, stored.run_ref)
    assert run["status"] in ("pending", "running")
    async with running_gateway(store=store, lease_seconds=120, replica_id="replica-b"):
        done = await eventually(
            lambda: store.get_task(scope, task_id),
            until=lambda s: s.task.status.state in (COMPLETED, TaskState.TASK_STATE_FAILED),
            timeout=30,
            what="the re-attached task ends",
        )
    assert done.task.status.state == COMPLETED
    assert final_text(done.task) == " ".join(f"slow{i}" for i in range(12))
    assert done.run_ref == stored.run_ref
    # the same run finished it, none was started again
    assert len(await llm_requests(mark, last_only=True)) == 1


async def test_a_context_whose_thread_was_deleted_goes_on_in_a_new_thread(
    gw, endpoint, langgraph_url
):
    mark = token()
    context_id = f"ctx-{mark}"
    async with gw.client(endpoint, streaming=False) as client:
        (first,) = [
            e
            async for e in client.send_message(send_request(f"first {mark}", context_id=context_id))
        ]
        thread_id = MessageToDict(first.task.artifacts[-1].metadata)["langgraph_thread_id"]
        async with httpx.AsyncClient() as http:
            (await http.delete(f"{langgraph_url}/threads/{thread_id}")).raise_for_status()
        (second,) = [
            e
            async for e in client.send_message(
                send_request(f"second {mark}", context_id=context_id)
            )
        ]
        (third,) = [
            e
            async for e in client.send_message(send_request(f"third {mark}", context_id=context_id))
        ]
    assert second.task.status.state == COMPLETED
    assert final_text(second.task) == f"Hello from fakellm. You said: second {mark}"
    new_thread = MessageToDict(second.task.artifacts[-1].metadata)["langgraph_thread_id"]
    assert new_thread != thread_id
    assert MessageToDict(third.task.artifacts[-1].metadata)["langgraph_thread_id"] == new_thread
    (last,) = [r for r in await llm_requests(mark, last_only=True) if r["text"] == f"third {mark}"]
    assert [m["content"] for m in last["messages"] if m["role"] == "user"] == [
        f"second {mark}",
        f"third {mark}",
    ]


async def test_the_run_carries_the_a2a_ids_in_its_metadata(gw, endpoint, langgraph_url):
    task, ids = await completed_with_ids(gw, endpoint)
    run = await langgraph_run(langgraph_url, await stored_run_ref(gw, endpoint, task.id))
    assert {k: run["metadata"].get(k) for k in ids} == ids  # next to the thread's a2a_owner
