"""The n8n handler against a real n8n serving the chat workflow of tests/backends/n8n on the
scripted LLM, through the gateway, with the real a2a-sdk client as the caller.

Needs the services of ``.ci/services`` (10-llm.sh, 65-n8n.sh): ``A2A_TEST_N8N_CHAT_URL``
(the workflow's Chat Trigger webhook), ``A2A_TEST_N8N_URL``, ``A2A_TEST_N8N_OWNER_EMAIL`` and
``A2A_TEST_N8N_OWNER_PASSWORD`` (n8n's owner account, for cancel) and ``A2A_TEST_LLM_URL``.
Skipped without them, except in CI. Every test marks its message with a fresh token, so tests
can share one server and LLM.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, StreamResponse, TaskState

from handlers.n8n import N8nHandler, N8nSettings
from tests.handlers.real_streams import state_of, streamed_answer, token
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import handler_request, send_request
from tests.support.waiting import eventually

pytestmark = [pytest.mark.n8n, pytest.mark.timeout(60)]

HANDLER = "handlers.n8n:N8nHandler"
COMPLETED = TaskState.TASK_STATE_COMPLETED
WORKING = TaskState.TASK_STATE_WORKING
FAILED = TaskState.TASK_STATE_FAILED
CANCELED = TaskState.TASK_STATE_CANCELED


@pytest.fixture
def chat_url() -> str:
    require_env("A2A_TEST_LLM_URL", "A2A_TEST_N8N_URL", "A2A_TEST_N8N_OWNER_EMAIL",
                "A2A_TEST_N8N_OWNER_PASSWORD")
    return require_env("A2A_TEST_N8N_CHAT_URL")


@pytest.fixture
async def gw(chat_url: str) -> AsyncIterator[RunningGateway]:
    async with running_gateway(cancel_wait_seconds=15.0) as running:
        yield running


async def n8n_endpoint(gw: RunningGateway, chat_url: str, **settings: Any) -> str:
    return await gw.add_endpoint(HANDLER, name="n8n", settings={"n8n_chat_url": chat_url,
                                                                **settings})


async def llm_requests(mark: str) -> list[dict[str, Any]]:
    """The scripted LLM's requests whose last message carries ``mark``."""
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{require_env('A2A_TEST_LLM_URL')}/_requests")
    return [r for r in response.json() if mark in (r.get("text") or "")]


async def canceled_executions() -> set[str]:
    """The ids of the executions n8n lists as canceled, read as its owner."""
    async with httpx.AsyncClient(base_url=require_env("A2A_TEST_N8N_URL")) as rest:
        login = await rest.post("/rest/login", json={
            "emailOrLdapLoginId": require_env("A2A_TEST_N8N_OWNER_EMAIL"),
            "password": require_env("A2A_TEST_N8N_OWNER_PASSWORD")})
        login.raise_for_status()
        found = await rest.get("/rest/executions",
                               params={"filter": json.dumps({"status": ["canceled"]}),
                                       "limit": "100"})
    found.raise_for_status()
    return {str(e["id"]) for e in found.json()["data"]["results"]}


def answer(task: Any) -> str:
    return "".join(p.text for p in task.artifacts[-1].parts)


async def test_streamed_and_blocking_answers(gw, chat_url):
    endpoint = await n8n_endpoint(gw, chat_url)
    mark = token()
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(send_request(f"hello {mark}"))]
    assert events[0].HasField("task")
    assert WORKING in [state_of(e) for e in events]
    assert state_of(events[-1]) == COMPLETED
    # n8n's seven items, one text part each; the chunks a client had not read yet arrive
    # merged, with the last (empty) chunk too when it lagged behind all of them
    parts = [p for e in events if e.HasField("artifact_update")
             for p in e.artifact_update.artifact.parts]
    assert len([p for p in parts if p.text]) == 7
    assert streamed_answer(events) == f"Hello from fakellm. You said: hello {mark}"

    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"block {mark}"))]
    assert event.task.status.state == COMPLETED
    assert answer(event.task) == f"Hello from fakellm. You said: block {mark}"


async def test_two_turns_of_one_context_share_n8n_memory(gw, chat_url):
    endpoint = await n8n_endpoint(gw, chat_url)
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        (first,) = [e async for e in client.send_message(send_request(f"first {mark}"))]
        context_id = first.task.context_id
        (second,) = [e async for e in client.send_message(
            send_request(f"second {mark}", context_id=context_id))]
        (other,) = [e async for e in client.send_message(send_request(f"third {mark}"))]
    assert [t.task.status.state for t in (first, second, other)] == [COMPLETED] * 3
    (turn2,) = await llm_requests(f"second {mark}")
    convo = [(m["role"], m["content"]) for m in turn2["messages"] if m["role"] != "system"]
    assert convo == [("user", f"first {mark}"),
                     ("assistant", f"Hello from fakellm. You said: first {mark}"),
                     ("user", f"second {mark}")]
    (turn3,) = await llm_requests(f"third {mark}")  # another context: a fresh conversation
    assert [m["content"] for m in turn3["messages"] if m["role"] != "system"] == [
        f"third {mark}"]


async def test_cancel_with_owner_credentials_stops_the_execution(gw, chat_url):
    endpoint = await n8n_endpoint(gw, chat_url,
                                  n8n_owner_email="env:A2A_TEST_N8N_OWNER_EMAIL",
                                  n8n_owner_password="env:A2A_TEST_N8N_OWNER_PASSWORD")
    mark = token()
    words = 40
    canceled_before = await canceled_executions()
    async with gw.client(endpoint) as client, \
            gw.client(endpoint, streaming=False) as control:
        stream = client.send_message(send_request(f"FAKE_SLOW words={words} delay=0.25 {mark}"))
        seen: list[StreamResponse] = []
        async for event in stream:
            seen.append(event)
            if state_of(event) == WORKING:  # n8n's "begin": the execution runs
                break
        await eventually(lambda: llm_requests(mark), what="n8n's model call started")
        canceled = await control.cancel_task(CancelTaskRequest(id=seen[0].task.id))
        canceled_at = time.time()
        assert canceled.status.state == CANCELED
        rest = [e async for e in stream]
        stored = await control.get_task(GetTaskRequest(id=seen[0].task.id))
    assert stored.status.state == CANCELED
    assert rest and state_of(rest[-1]) == CANCELED
    # n8n stopped the execution, which aborted its model call (a closed stream alone does not)
    (call,) = await eventually(
        lambda: llm_requests(mark), until=lambda calls: calls[0]["outcome"] != "in_progress",
        timeout=15, what="n8n's model call ends")
    assert call["outcome"] == "client_disconnected"
    assert call["ended"] - canceled_at < 5 and len(call["chunks"]) < words
    assert len(await canceled_executions() - canceled_before) == 1


async def test_a_failed_model_call_fails_the_task(gw, chat_url):
    endpoint = await n8n_endpoint(gw, chat_url)
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(send_request(f"FAKE_HTTP_500 {token()}"))]
    status = events[-1].status_update.status
    assert status.state == FAILED
    assert "".join(p.text for p in status.message.parts) == (
        "the n8n execution failed: fakellm scripted HTTP 500")


async def test_a_refused_stop_is_logged_without_the_password(chat_url, capsys):
    wrong = f"Wrong-{token()}-1"
    settings = N8nSettings(n8n_chat_url=chat_url, n8n_owner_password=wrong,
                           n8n_owner_email=require_env("A2A_TEST_N8N_OWNER_EMAIL"))
    async with httpx.AsyncClient() as http:
        # the stream is closed either way: False has the gateway close it
        assert await N8nHandler(settings, http).cancel(handler_request("hi")) is False
    logged = capsys.readouterr()
    assert "n8n_stop_failed" in logged.out and "HTTP 401 to POST login" in logged.out
    assert wrong not in logged.out + logged.err


async def test_an_execution_past_run_timeout_seconds_fails_and_is_stopped(gw, chat_url):
    endpoint = await n8n_endpoint(gw, chat_url, run_timeout_seconds=2,
                                  n8n_owner_email="env:A2A_TEST_N8N_OWNER_EMAIL",
                                  n8n_owner_password="env:A2A_TEST_N8N_OWNER_PASSWORD")
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(
            send_request(f"FAKE_SLOW words=40 delay=0.25 {mark}"))]
    status = event.task.status
    assert status.state == FAILED
    assert "".join(p.text for p in status.message.parts) == (
        "the n8n execution exceeded run_timeout_seconds=2")
    (call,) = await eventually(
        lambda: llm_requests(mark), until=lambda calls: calls[0]["outcome"] != "in_progress",
        timeout=15, what="n8n's model call ends")
    assert call["outcome"] == "client_disconnected" and len(call["chunks"]) < 40
