"""OpenAIChatHandler against the real chat endpoints of OpenClaw and Hermes,
both running against the scripted LLM (.ci/services/*.sh).

A backend whose environment is unset is skipped, except under CI=true, where
that is a failure.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import TaskState

from handlers.base import Completed, Failed, FileInput, Reply, TextDelta, Turn
from handlers.openai_chat import OpenAIChatHandler, OpenAIChatSettings
from tests.handlers.real_streams import streamed_answer
from tests.support.harness import require_env, running_gateway
from tests.support.messages import handler_request, send_request
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(90)

BACKENDS: dict[str, dict[str, str]] = {
    "openclaw": {"url": "A2A_TEST_OPENCLAW_URL", "key": "A2A_TEST_OPENCLAW_TOKEN",
                 "model": "openclaw/main"},
    "hermes": {"url": "A2A_TEST_HERMES_URL", "key": "A2A_TEST_HERMES_KEY",
               "model": "hermes-agent"},
}


@pytest.fixture(params=[pytest.param("openclaw", marks=pytest.mark.openclaw),
                        pytest.param("hermes", marks=pytest.mark.hermes)])
def backend(request: pytest.FixtureRequest) -> dict[str, str]:
    spec = BACKENDS[request.param]
    require_env(spec["url"], spec["key"], "A2A_TEST_LLM_URL")
    return {"name": request.param, "base_url": os.environ[spec["url"]].rstrip("/") + "/v1",
            "api_key": os.environ[spec["key"]], "model": spec["model"],
            "llm": os.environ["A2A_TEST_LLM_URL"].rstrip("/").removesuffix("/v1")}


@pytest.fixture
async def http() -> httpx.AsyncClient:
    async with httpx.AsyncClient() as client:
        yield client


def chat(backend: dict[str, str], http: httpx.AsyncClient, **settings: Any) -> OpenAIChatHandler:
    values = {k: backend[k] for k in ("base_url", "api_key", "model")}
    return OpenAIChatHandler(OpenAIChatSettings(**{**values, **settings}), http)


async def llm_requests(backend: dict[str, str], http: httpx.AsyncClient, marker: str) -> list[dict]:
    entries = (await http.get(backend["llm"] + "/_requests")).json()
    return [e for e in entries if marker in (e.get("text") or "")]


def tag() -> str:
    return uuid.uuid4().hex[:10]


async def test_streamed_reply(backend, http) -> None:
    t = tag()
    start = time.monotonic()
    timed = [(time.monotonic() - start, e) async for e in chat(backend, http).run(
        handler_request(f"FAKE_SLOW words=5 delay=0.3 {t}"))]
    deltas = [(at, e.text) for at, e in timed if isinstance(e, TextDelta)]
    done_at, final = timed[-1]
    assert isinstance(final, Completed), final
    assert final.text == "slow0 slow1 slow2 slow3 slow4" == "".join(text for _, text in deltas)
    assert done_at - deltas[0][0] >= 0.8
    assert final.metadata["finish_reason"] == "stop"


async def test_history_reaches_the_llm(backend, http) -> None:
    t = tag()
    request = handler_request(f"second {t}", history=[
        Turn("user", f"first {t}"), Turn("agent", f"answer one {t}")])
    events = [e async for e in chat(backend, http, system_prompt=f"rules {t}").run(request)]
    assert isinstance(events[-1], Completed)
    # OpenClaw flattens earlier turns into one message ("… User: second …")
    assert events[-1].text.startswith("Hello from fakellm. You said: ")
    assert events[-1].text.endswith(f"second {t}")
    seen = (await llm_requests(backend, http, f"second {t}"))[-1]
    everything = "\n".join(m["content"] for m in seen["messages"])
    assert f"first {t}" in everything and f"answer one {t}" in everything
    assert f"rules {t}" in everything


async def test_message_mode(backend, http) -> None:
    t = tag()
    events = [e async for e in chat(backend, http, response_mode="message").run(
        handler_request(f"once {t}"))]
    assert len(events) == 1 and isinstance(events[0], Reply)
    assert events[0].text == f"Hello from fakellm. You said: once {t}"


async def test_upstream_error_fails(backend, http) -> None:
    events = [e async for e in chat(backend, http).run(handler_request(f"FAKE_HTTP_400 {tag()}"))]
    assert isinstance(events[-1], Failed)
    assert "fakellm scripted bad request" in events[-1].reason


async def test_bad_key_fails_without_leaking_it(backend, http) -> None:
    bad = f"wrong-key-{uuid.uuid4().hex}"
    [failed] = [e async for e in chat(backend, http, api_key=bad).run(handler_request())]
    assert isinstance(failed, Failed) and "401" in failed.reason
    assert bad not in failed.reason and backend["api_key"] not in failed.reason


# OpenClaw only: Hermes' chat endpoint finishes its run after the client left (a documented
# limit; stopping a Hermes run needs the /v1/runs handler's /stop), so nothing to assert there
@pytest.mark.parametrize("backend", ["openclaw"], indirect=True)
async def test_cancel_closes_the_upstream_stream(backend, http) -> None:
    t = tag()
    events = chat(backend, http).run(handler_request(f"FAKE_SLOW words=30 delay=0.3 {t}"))
    async for event in events:
        if isinstance(event, TextDelta):
            break
    await events.aclose()
    async def last_request() -> dict:
        return (await llm_requests(backend, http, t))[-1]

    entry = await eventually(last_request, until=lambda e: e["outcome"] != "in_progress",
                             timeout=15, what="the LLM request ends")
    assert entry["outcome"] == "client_disconnected"
    assert len(entry["chunks"]) < 30


# --- directly against the scripted LLM: a 429 with Retry-After is retried ------------


@pytest.mark.parametrize("retry", ["retry_after=1", "retry_after=2 retry_date=1"],
                         ids=["retry-after-seconds", "retry-after-http-date"])
async def test_a_429_with_retry_after_is_retried(http, retry: str) -> None:
    llm = require_env("A2A_TEST_LLM_URL").rstrip("/")
    text = f"FAKE_RATE_LIMIT times=2 {retry} {tag()}"
    handler = OpenAIChatHandler(OpenAIChatSettings(base_url=f"{llm}/v1", model="fake-model"), http)
    events = [e async for e in handler.run(handler_request(text))]
    assert isinstance(events[-1], Completed), events[-1]
    assert events[-1].text == f"Hello from fakellm. You said: {text}"
    entries = [e for e in (await http.get(f"{llm}/_requests")).json() if e["text"] == text]
    assert [e["outcome"] for e in entries] == ["http_429", "http_429", "completed"]
    waits = [later["ts"] - earlier["ts"] for earlier, later in zip(entries, entries[1:])]
    assert all(w >= 0.9 for w in waits), waits  # Retry-After was honoured (a date: 1-2 s)


# --- through the gateway, with the real a2a-sdk client ------------------------------


async def test_gateway_stream_then_follow_up_in_the_same_context(backend, http) -> None:
    t = tag()
    async with running_gateway() as gw:
        endpoint = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler", settings={
            "base_url": backend["base_url"], "api_key": backend["api_key"],
            "model": backend["model"]})
        async with gw.client(endpoint, timeout=60) as client:
            events = [
                e
                async for e in client.send_message(send_request(f"FAKE_SLOW words=4 delay=0.2 {t}"))
            ]
            assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
            chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
            assert len(chunks) >= 3 and chunks[-1].last_chunk
            assert streamed_answer(events) == "slow0 slow1 slow2 slow3"
            context = events[0].task.context_id
            follow = [
                e async for e in client.send_message(send_request(f"again {t}", context_id=context))
            ]
    assert follow[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    seen = (await llm_requests(backend, http, f"again {t}"))[-1]
    everything = "\n".join(m["content"] for m in seen["messages"])
    assert f"FAKE_SLOW words=4 delay=0.2 {t}" in everything  # the first turn came along
    assert "slow0 slow1 slow2 slow3" in everything


RED_DOT = (Path(__file__).parent.parent / "fixtures" / "images" / "red-dot.png").read_bytes()


async def test_an_image_part_is_taken_by_the_backend(backend, http) -> None:
    t = tag()
    request = handler_request(f"what is this {t}")
    request.principal = f"caller-{t}"  # a session of its own at OpenClaw
    request.files = [FileInput("image/png", "red-dot.png", data=RED_DOT)]
    events = [e async for e in chat(backend, http).run(request)]
    assert isinstance(events[-1], Completed), events[-1]
    [seen] = await llm_requests(backend, http, f"what is this {t}")
    if backend["name"] == "hermes":  # Hermes describes the image with its vision tool
        assert seen["messages"][-1]["content"].startswith("[The user attached an image.")
    else:
        assert events[-1].text == f"Hello from fakellm. You said: what is this {t}"
