"""OpenClawHandler against the real OpenClaw gateway, which runs against the
scripted LLM (.ci/services/10-llm.sh and 30-openclaw.sh).

Skipped when A2A_TEST_OPENCLAW_URL / A2A_TEST_OPENCLAW_TOKEN / A2A_TEST_LLM_URL
are unset, except under CI=true, where that is a failure.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import httpx
import pytest

from handlers.base import (
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    Progress,
    Reply,
    SessionUpdate,
    TextDelta,
)
from handlers.openclaw import OpenClawHandler, OpenClawSettings
from tests.handlers.openai_mock import make_request

pytestmark = [pytest.mark.openclaw, pytest.mark.timeout(90)]

ENV = ("A2A_TEST_OPENCLAW_URL", "A2A_TEST_OPENCLAW_TOKEN", "A2A_TEST_LLM_URL")


@pytest.fixture
def env() -> dict[str, str]:
    missing = [name for name in ENV if not os.environ.get(name)]
    if missing:
        message = f"real OpenClaw not configured: {', '.join(missing)} unset"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
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


async def run_all(handler: OpenClawHandler, request: HandlerRequest) -> list[tuple[float, HandlerEvent]]:
    start = time.monotonic()
    return [(time.monotonic() - start, e) async for e in handler.run(request)]


async def test_streamed_reply_tokens_arrive_before_completion(env, http) -> None:
    tag = nonce()
    timed = await run_all(openclaw(env, http), make_request(
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
        make_request(f"hello {tag}", context_id=f"block-{tag}"))]
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.text == f"Hello from fakellm. You said: hello {tag}"
    assert final.metadata["openclaw"]["model"] == "openclaw/main"


async def test_message_mode_replies_with_one_message(env, http) -> None:
    tag = nonce()
    events = [e async for e in openclaw(env, http, response_mode="message").run(
        make_request(f"one shot {tag}", context_id=f"msg-{tag}"))]
    assert len(events) == 1 and isinstance(events[0], Reply)
    assert events[0].text == f"Hello from fakellm. You said: one shot {tag}"
    [seen] = await llm_requests(env, http, tag)
    assert seen["stream"] is True  # OpenClaw streams from the LLM either way


async def test_two_messages_in_one_context_share_the_session(env, http) -> None:
    tag = nonce()
    handler = openclaw(env, http)
    context = f"ctx-{tag}"
    first = [e async for e in handler.run(make_request(f"first {tag}", context_id=context))]
    assert isinstance(first[-1], Completed)
    session: dict[str, Any] = {}
    for event in first:
        if isinstance(event, SessionUpdate):
            session.update(event.values)
    assert session["openclaw_previous_response_id"].startswith("resp_")
    second = [e async for e in handler.run(
        make_request(f"second {tag}", context_id=context, session=session))]
    assert isinstance(second[-1], Completed)
    assert second[-1].text == f"Hello from fakellm. You said: second {tag}"

    [turn2] = await llm_requests(env, http, f"second {tag}")
    contents = [m["content"] for m in turn2["messages"]]
    assert any(f"first {tag}" in c for c in contents)
    assert f"Hello from fakellm. You said: first {tag}" in contents

    # another context starts a fresh session
    other = [e async for e in handler.run(make_request(f"third {tag}", context_id=f"x-{tag}"))]
    assert isinstance(other[-1], Completed)
    [turn3] = await llm_requests(env, http, f"third {tag}")
    assert not any(f"first {tag}" in m["content"] for m in turn3["messages"])


async def test_upstream_error_fails_the_task(env, http) -> None:
    tag = nonce()
    events = [e async for e in openclaw(env, http).run(
        make_request(f"FAKE_HTTP_400 {tag}", context_id=f"err-{tag}"))]
    assert isinstance(events[-1], Failed)
    assert "400 fakellm scripted bad request" in events[-1].reason
    assert not any(isinstance(e, Completed) for e in events)


async def test_cancel_mid_stream_stops_the_upstream_run(env, http) -> None:
    tag = nonce()
    words = 30
    log_path = os.environ.get("A2A_TEST_OPENCLAW_LOG")
    log_offset = os.path.getsize(log_path) if log_path and os.path.exists(log_path) else None
    events = openclaw(env, http).run(
        make_request(f"FAKE_SLOW words={words} delay=0.3 {tag}", context_id=f"cancel-{tag}"))
    deltas = 0
    async for event in events:
        if isinstance(event, TextDelta):
            deltas += 1
            if deltas == 3:
                break
    await events.aclose()  # what the gateway does on CancelTask
    closed_at = time.time()

    entry: dict[str, Any] = {}
    for _ in range(50):  # OpenClaw aborts its LLM call soon after the client went away
        [entry] = await llm_requests(env, http, tag)
        if entry["outcome"] != "in_progress":
            break
        await asyncio.sleep(0.1)
    assert entry["outcome"] == "client_disconnected"
    assert entry["ended"] - closed_at < 3.0
    assert len(entry["chunks"]) < words
    if log_offset is not None:  # OpenClaw's own log tells that it aborted the run
        for _ in range(30):
            with open(log_path, encoding="utf-8", errors="replace") as log:
                log.seek(log_offset)
                if "ClientDisconnectError" in log.read():
                    break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("OpenClaw did not log the client disconnect")


async def test_bad_token_fails_without_leaking_it(env, http) -> None:
    bad = f"oc-wrong-token-{uuid.uuid4().hex}"
    events = [e async for e in openclaw(env, http, openclaw_api_key=bad).run(make_request())]
    [failed] = events
    assert isinstance(failed, Failed) and "401" in failed.reason
    assert bad not in failed.reason and env["A2A_TEST_OPENCLAW_TOKEN"] not in failed.reason


async def test_unknown_agent_fails_with_openclaw_reason(env, http) -> None:
    [failed] = [e async for e in openclaw(env, http, openclaw_agent_id="no-such-agent").run(
        make_request())]
    assert isinstance(failed, Failed) and "Unknown agent 'no-such-agent'" in failed.reason
