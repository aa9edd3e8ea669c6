"""The A2A task's ids reach the backend through a running gateway: the chat bridge's call
to the scripted LLM (a real HTTP server that records each request's headers), and the
remote A2A bridge's calls to another running gateway, which records the headers it is sent.
Each request of the task carries ``X-A2A-Task-Id``, ``X-A2A-Context-Id`` and
``X-A2A-Endpoint-Id`` with the ids the caller sees."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import unquote

import pytest
from a2a.types import TaskState
from aiohttp import web

from tests.backends.scripted_llm import ScriptedLLM
from tests.support.harness import RunningGateway, collect, running_gateway
from tests.support.messages import send_request

pytestmark = pytest.mark.timeout(60)

COMPLETED = TaskState.TASK_STATE_COMPLETED
CONTEXT = "ctx-żółw 文脈\r\nX-Injected: yes"
"""A context id of the caller's choosing that is not fit for a header as it is."""


def final_task(events):
    return next(e.task for e in reversed(events) if e.HasField("task"))


def ids_sent(headers: dict[str, str]) -> tuple[str, str, str]:
    """The task, context and endpoint ids one request carried, decoded."""
    lowered = {name.lower(): value for name, value in headers.items()}
    return tuple(unquote(lowered[f"x-a2a-{name}-id"]) for name in ("task", "context", "endpoint"))


async def test_the_chat_bridge_sends_the_ids_to_the_llm() -> None:
    async with ScriptedLLM() as llm, running_gateway() as gw:
        endpoint = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler", settings={
            "base_url": llm.url, "api_key": "llm-key", "model": "fake-model"})
        async with gw.client(endpoint, streaming=False) as client:
            [first] = await collect(client.send_message(send_request("first")))
            [second] = await collect(client.send_message(
                send_request("second", context_id=CONTEXT)))
        async with gw.client(endpoint) as client:
            streamed = await collect(client.send_message(send_request("third")))
    [*_, last] = [e.status_update for e in streamed if e.HasField("status_update")]
    assert [first.task.status.state, second.task.status.state, last.status.state] == [
        COMPLETED] * 3
    assert second.task.context_id == CONTEXT
    sent = {entry["text"]: entry["headers"] for entry in llm.requests}
    ids = [(first.task.id, first.task.context_id), (second.task.id, CONTEXT),
           (last.task_id, last.context_id)]
    for text, (task_id, context_id) in zip(("first", "second", "third"), ids, strict=True):
        assert ids_sent(sent[text]) == (task_id, context_id, endpoint)
        assert "x-injected" not in sent[text]
    assert sent["second"]["x-a2a-context-id"].isascii()
    assert "traceparent" in sent["first"] and "authorization" not in sent["first"]


@asynccontextmanager
async def recording_gateway(seen: list[dict[str, str]]) -> AsyncIterator[RunningGateway]:
    """A running gateway (as ``running_gateway``) that keeps the headers of each request
    to an endpoint's A2A interface in ``seen``."""

    @web.middleware
    async def record(request: web.Request, handler):
        if "/a2a" in request.path:
            seen.append(dict(request.headers))
        return await handler(request)

    async with running_gateway(middlewares=(record,)) as gateway:
        yield gateway


@pytest.mark.parametrize("streaming", [True, False])
async def test_the_remote_a2a_bridge_sends_the_ids_to_the_remote(streaming: bool) -> None:
    seen: list[dict[str, str]] = []
    async with recording_gateway(seen) as remote, running_gateway() as gw:
        echo = await remote.add_endpoint(settings={"delay": 0})
        card_url = f"{remote.endpoint_url(echo)}/.well-known/agent-card.json"
        front = await gw.add_endpoint("handlers.a2a_remote:A2ARemoteHandler", settings={
            "remote_card_url": card_url, "remote_streaming": streaming})
        async with gw.client(front, streaming=False) as client:
            task = final_task(await collect(client.send_message(
                send_request("hello", context_id=CONTEXT))))
    assert task.status.state == COMPLETED and task.context_id == CONTEXT
    assert seen  # the send, and in polling mode the reads of the remote task
    for headers in seen:
        assert ids_sent(headers) == (task.id, CONTEXT, front)
        assert "X-Injected" not in headers and "x-injected" not in headers
