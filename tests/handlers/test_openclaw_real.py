"""OpenClawHandler against the real OpenClaw gateway, which runs against the
scripted LLM (.ci/services/10-llm.sh and 30-openclaw.sh).

Skipped when A2A_TEST_OPENCLAW_URL / A2A_TEST_OPENCLAW_TOKEN / A2A_TEST_LLM_URL
are unset, except under CI=true, where that is a failure.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    StreamResponse,
    TaskState,
)

from handlers.base import (
    Completed,
    Failed,
    FileInput,
    HandlerEvent,
    HandlerRequest,
    Progress,
    Reply,
    SessionUpdate,
    TextDelta,
)
from handlers.openclaw import OpenClawHandler, OpenClawSettings
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import handler_request, send_request
from tests.support.waiting import eventually

pytestmark = [pytest.mark.openclaw, pytest.mark.timeout(90)]

ENV = ("A2A_TEST_OPENCLAW_URL", "A2A_TEST_OPENCLAW_TOKEN", "A2A_TEST_LLM_URL")


@pytest.fixture
def env() -> dict[str, str]:
    require_env(*ENV)
    return {name: os.environ[name] for name in ENV}


@pytest.fixture
async def http() -> httpx.AsyncClient:
    async with httpx.AsyncClient() as client:
        yield client


def openclaw(env: dict[str, str], http: httpx.AsyncClient, **settings: Any) -> OpenClawHandler:
    values = {"openclaw_api_url": env["A2A_TEST_OPENCLAW_URL"],
              "openclaw_api_key": env["A2A_TEST_OPENCLAW_TOKEN"], **settings}
    return OpenClawHandler(OpenClawSettings(**values), http)


def nonce() -> str:
    return uuid.uuid4().hex[:10]


async def llm_requests(env: dict[str, str], http: httpx.AsyncClient, marker: str) -> list[dict]:
    """What the scripted LLM received for messages whose text contains ``marker``."""
    url = env["A2A_TEST_LLM_URL"].rstrip("/").removesuffix("/v1") + "/_requests"
    entries = (await http.get(url)).json()
    return [e for e in entries if marker in (e.get("text") or "")]


async def ended_request(env: dict[str, str], http: httpx.AsyncClient, marker: str) -> dict:
    """The scripted LLM's last request for ``marker``, once it is no longer in progress."""
    async def last() -> dict:
        return (await llm_requests(env, http, marker))[-1]

    return await eventually(last, until=lambda entry: entry["outcome"] != "in_progress",
                            timeout=15, what=f"the LLM request for {marker} ends")


async def run_all(
    handler: OpenClawHandler, request: HandlerRequest
) -> list[tuple[float, HandlerEvent]]:
    start = time.monotonic()
    return [(time.monotonic() - start, e) async for e in handler.run(request)]


async def test_streamed_reply_tokens_arrive_before_completion(env, http) -> None:
    tag = nonce()
    timed = await run_all(openclaw(env, http), handler_request(
        f"FAKE_SLOW words=6 delay=0.3 {tag}", context_id=f"stream-{tag}"))
    events = [e for _, e in timed]
    assert isinstance(events[0], Progress)
    deltas = [(t, e) for t, e in timed if isinstance(e, TextDelta)]
    done_at, final = timed[-1]
    assert isinstance(final, Completed), final
    assert final.text == "slow0 slow1 slow2 slow3 slow4 slow5"
    assert final.text == "".join(e.text for _, e in deltas)
    assert done_at - deltas[0][0] >= 1.0  # the first token came well before the end
    assert final.metadata["usage"]["total_tokens"] > 0
    assert any(isinstance(e, SessionUpdate) for e in events)


async def test_blocking_reply_and_agent_selection(env, http) -> None:
    tag = nonce()
    events = [e async for e in openclaw(env, http, openclaw_agent_id="main").run(
        handler_request(f"hello {tag}", context_id=f"block-{tag}"))]
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.text == f"Hello from fakellm. You said: hello {tag}"
    assert final.metadata["openclaw"]["model"] == "openclaw/main"


async def test_message_mode_replies_with_one_message(env, http) -> None:
    tag = nonce()
    events = [e async for e in openclaw(env, http, response_mode="message").run(
        handler_request(f"one shot {tag}", context_id=f"msg-{tag}"))]
    assert len(events) == 1 and isinstance(events[0], Reply)
    assert events[0].text == f"Hello from fakellm. You said: one shot {tag}"
    seen = (await llm_requests(env, http, tag))[-1]
    assert seen["stream"] is True  # OpenClaw streams from the LLM either way


async def test_two_messages_in_one_context_share_the_session(env, http) -> None:
    tag = nonce()
    handler = openclaw(env, http)
    context = f"ctx-{tag}"
    first = [e async for e in handler.run(handler_request(f"first {tag}", context_id=context))]
    assert isinstance(first[-1], Completed)
    session: dict[str, Any] = {}
    for event in first:
        if isinstance(event, SessionUpdate):
            session.update(event.values)
    assert session["openclaw_previous_response_id"].startswith("resp_")
    second = [e async for e in handler.run(
        handler_request(f"second {tag}", context_id=context, session=session))]
    assert isinstance(second[-1], Completed)
    assert second[-1].text == f"Hello from fakellm. You said: second {tag}"

    turn2 = (await llm_requests(env, http, f"second {tag}"))[-1]
    contents = [m["content"] for m in turn2["messages"]]
    assert any(f"first {tag}" in c for c in contents)
    assert f"Hello from fakellm. You said: first {tag}" in contents

    # another context starts a fresh session
    other = [e async for e in handler.run(handler_request(f"third {tag}", context_id=f"x-{tag}"))]
    assert isinstance(other[-1], Completed)
    turn3 = (await llm_requests(env, http, f"third {tag}"))[-1]
    assert not any(f"first {tag}" in m["content"] for m in turn3["messages"])


async def test_upstream_error_fails_the_task(env, http) -> None:
    tag = nonce()
    events = [e async for e in openclaw(env, http).run(
        handler_request(f"FAKE_HTTP_400 {tag}", context_id=f"err-{tag}"))]
    assert isinstance(events[-1], Failed)
    assert "400 fakellm scripted bad request" in events[-1].reason
    assert not any(isinstance(e, Completed) for e in events)


async def test_a_run_past_run_timeout_seconds_fails_and_openclaw_aborts_it(env, http) -> None:
    tag = nonce()
    started = time.monotonic()
    events = [e async for e in openclaw(env, http, run_timeout_seconds=3).run(handler_request(
        f"FAKE_SLOW words=100 delay=0.5 {tag}", context_id=f"bound-{tag}"))]
    assert events[-1] == Failed("the OpenClaw run exceeded run_timeout_seconds=3")
    assert any(isinstance(e, TextDelta) for e in events)
    assert 3 <= time.monotonic() - started < 8
    entry = await ended_request(env, http, tag)  # closing the stream aborted the LLM call
    assert entry["outcome"] == "client_disconnected"
    assert len(entry["chunks"]) < 20


async def test_cancel_mid_stream_stops_the_upstream_run(env, http) -> None:
    tag = nonce()
    words = 30
    log_path = os.environ.get("A2A_TEST_OPENCLAW_LOG")
    log_offset = os.path.getsize(log_path) if log_path and os.path.exists(log_path) else None
    events = openclaw(env, http).run(
        handler_request(f"FAKE_SLOW words={words} delay=0.3 {tag}", context_id=f"cancel-{tag}"))
    deltas = 0
    async for event in events:
        if isinstance(event, TextDelta):
            deltas += 1
            if deltas == 3:
                break
    await events.aclose()  # what the gateway does on CancelTask
    closed_at = time.time()

    entry = await ended_request(env, http, tag)  # aborted soon after the client went away
    assert entry["outcome"] == "client_disconnected"
    assert entry["ended"] - closed_at < 5.0
    assert len(entry["chunks"]) < words
    if log_offset is not None:  # OpenClaw's own log tells that it aborted the run
        def logged_since_the_start() -> str:
            with open(log_path, encoding="utf-8", errors="replace") as log:
                log.seek(log_offset)
                return log.read()

        await eventually(logged_since_the_start, until=lambda text: "ClientDisconnectError" in text,
                         timeout=15, what="OpenClaw logs the client disconnect")


async def test_bad_token_fails_without_leaking_it(env, http) -> None:
    bad = f"oc-wrong-token-{uuid.uuid4().hex}"
    events = [e async for e in openclaw(env, http, openclaw_api_key=bad).run(handler_request())]
    [failed] = events
    assert isinstance(failed, Failed) and "401" in failed.reason
    assert bad not in failed.reason and env["A2A_TEST_OPENCLAW_TOKEN"] not in failed.reason


async def test_unknown_agent_fails_with_openclaw_reason(env, http) -> None:
    [failed] = [e async for e in openclaw(env, http, openclaw_agent_id="no-such-agent").run(
        handler_request())]
    assert isinstance(failed, Failed) and "Unknown agent 'no-such-agent'" in failed.reason


# --- through the gateway, with the real a2a-sdk client ------------------------------

HANDLER = "handlers.openclaw:OpenClawHandler"


@pytest.fixture
async def gw(env) -> RunningGateway:
    async with running_gateway() as running:
        yield running


async def openclaw_endpoint(gw: RunningGateway, env: dict[str, str], **settings: Any) -> str:
    values = {"openclaw_api_url": env["A2A_TEST_OPENCLAW_URL"],
              "openclaw_api_key": "env:A2A_TEST_OPENCLAW_TOKEN", **settings}
    return await gw.add_endpoint(HANDLER, settings=values, name="openclaw agent")


def artifact_text(events: list[StreamResponse]) -> str:
    """The answer as a client rebuilds it from artifact updates (append / replace)."""
    text = ""
    for event in events:
        if event.HasField("artifact_update"):
            chunk = "".join(p.text for p in event.artifact_update.artifact.parts)
            text = text + chunk if event.artifact_update.append else chunk
    return text


def status_text(status: Any) -> str:
    return "".join(p.text for p in status.message.parts)


async def test_gateway_streams_tokens_before_completion(gw, env, http) -> None:
    endpoint = await openclaw_endpoint(gw, env)
    t = nonce()
    timed: list[tuple[float, StreamResponse]] = []
    start = time.monotonic()
    async with gw.client(endpoint, timeout=60) as client:
        async for event in client.send_message(send_request(f"FAKE_SLOW words=6 delay=0.3 {t}")):
            timed.append((time.monotonic() - start, event))
    events = [e for _, e in timed]
    assert events[0].HasField("task")
    chunks = [(at, e) for at, e in timed if e.HasField("artifact_update")]
    assert len(chunks) >= 4
    last_at, last = timed[-1]
    assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert last_at - chunks[0][0] >= 1.0  # tokens reached the client before completion
    final = chunks[-1][1].artifact_update
    # the answer is what was streamed: the last chunk appends nothing (no second copy)
    assert final.last_chunk and final.append and [p.text for p in final.artifact.parts] == [""]
    streamed = "".join("".join(p.text for p in e.artifact_update.artifact.parts)
                       for _, e in chunks)
    assert streamed == "slow0 slow1 slow2 slow3 slow4 slow5" == artifact_text(events)


async def test_gateway_blocking_send_completes(gw, env) -> None:
    endpoint = await openclaw_endpoint(gw, env, openclaw_agent_id="main")
    t = nonce()
    async with gw.client(endpoint, streaming=False, timeout=60) as client:
        [event] = [e async for e in client.send_message(send_request(f"block {t}"))]
    task = event.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == f"Hello from fakellm. You said: block {t}"
    assert task.artifacts[0].metadata["usage"]["total_tokens"] > 0


async def test_gateway_message_mode(gw, env) -> None:
    endpoint = await openclaw_endpoint(gw, env, response_mode="message")
    t = nonce()
    async with gw.client(endpoint, streaming=False, timeout=60) as client:
        [event] = [e async for e in client.send_message(send_request(f"msg {t}"))]
    assert event.HasField("message")
    assert event.message.parts[0].text == f"Hello from fakellm. You said: msg {t}"


async def test_gateway_two_messages_in_one_context(gw, env, http) -> None:
    endpoint = await openclaw_endpoint(gw, env)
    t = nonce()
    async with gw.client(endpoint, streaming=False, timeout=60) as client:
        [first] = [e async for e in client.send_message(send_request(f"first {t}"))]
        assert first.task.status.state == TaskState.TASK_STATE_COMPLETED
        context = first.task.context_id
        [second] = [
            e async for e in client.send_message(send_request(f"second {t}", context_id=context))
        ]
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert second.task.context_id == context
    turn2 = (await llm_requests(env, http, f"second {t}"))[-1]
    contents = [m["content"] for m in turn2["messages"]]
    assert any(f"first {t}" in c for c in contents)
    assert f"Hello from fakellm. You said: first {t}" in contents


async def test_gateway_upstream_error_fails_the_task(gw, env) -> None:
    endpoint = await openclaw_endpoint(gw, env)
    async with gw.client(endpoint, timeout=60) as client:
        events = [e async for e in client.send_message(send_request(f"FAKE_HTTP_400 {nonce()}"))]
    status = events[-1].status_update.status
    assert status.state == TaskState.TASK_STATE_FAILED
    assert "400 fakellm scripted bad request" in status_text(status)


async def test_gateway_cancel_mid_stream_stops_the_openclaw_run(gw, env, http) -> None:
    endpoint = await openclaw_endpoint(gw, env)
    t = nonce()
    words = 30
    async with gw.client(endpoint, timeout=60) as client, \
            gw.client(endpoint, streaming=False, timeout=60) as control:
        stream = client.send_message(send_request(f"FAKE_SLOW words={words} delay=0.3 {t}"))
        seen: list[StreamResponse] = []
        async for event in stream:
            seen.append(event)
            if sum(e.HasField("artifact_update") for e in seen) == 2:
                break
        task_id = seen[0].task.id
        canceled = await control.cancel_task(CancelTaskRequest(id=task_id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        rest = [e async for e in stream]
        stored = await control.get_task(GetTaskRequest(id=task_id))
    assert stored.status.state == TaskState.TASK_STATE_CANCELED
    assert rest and rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    entry = await ended_request(env, http, t)
    assert entry["outcome"] == "client_disconnected"  # OpenClaw aborted its LLM call
    assert len(entry["chunks"]) < words


async def test_gateway_bad_token_fails_without_leaking_it(gw, env, http, monkeypatch,
                                                          capsys) -> None:
    bad = f"oc-wrong-token-{uuid.uuid4().hex}"
    monkeypatch.setenv("A2A_TEST_OPENCLAW_BAD_TOKEN", bad)
    endpoint = await openclaw_endpoint(gw, env, openclaw_api_key="env:A2A_TEST_OPENCLAW_BAD_TOKEN")
    async with gw.client(endpoint, streaming=False, timeout=60) as client:
        [event] = [e async for e in client.send_message(send_request("hello"))]
        task = await client.get_task(GetTaskRequest(id=event.task.id))
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert "401" in status_text(task.status)
    card = await http.get(gw.endpoint_url(endpoint) + "/.well-known/agent-card.json")
    assert card.status_code == 200
    logged = capsys.readouterr()
    for secret in (bad, env["A2A_TEST_OPENCLAW_TOKEN"]):
        assert secret not in str(task) and secret not in card.text
        assert secret not in logged.out and secret not in logged.err


# -- inbound files -------------------------------------------------------------------------

RED_DOT = (Path(__file__).parent.parent / "fixtures" / "images" / "red-dot.png").read_bytes()


async def test_a_document_and_an_image_reach_openclaw(env, http) -> None:
    tag = nonce()
    secret_line = f"the document says {nonce()}"
    request = handler_request(f"read this {tag}", context_id=f"files-{tag}")
    request.files = [FileInput("text/plain", "notes.txt", data=secret_line.encode()),
                     FileInput("image/png", "red-dot.png", data=RED_DOT)]
    events = [e async for e in openclaw(env, http).run(request)]
    assert isinstance(events[-1], Completed), events[-1]
    assert events[-1].text == f"Hello from fakellm. You said: read this {tag}"
    [seen] = await llm_requests(env, http, tag)
    system = "\n".join(m["content"] for m in seen["messages"] if m["role"] == "system")
    assert secret_line in system  # OpenClaw put the document's text into the system prompt
