"""OpenAIChatHandler on recorded chat-completion frames of OpenClaw and Hermes."""

from __future__ import annotations

import json

import httpx
import pytest

from handlers.base import Completed, Failed, Progress, Rejected, Reply, TextDelta, Turn
from handlers.openai_chat import OpenAIChatHandler, OpenAIChatSettings
from tests.handlers.openai_mock import (
    Backend,
    TrackedStream,
    collect,
    fixture,
    json_response,
    sse_chunks,
    sse_response,
)
from tests.support.messages import handler_request

KEY = "chat-secret-key-0123456789abcdef"


def handler(http: httpx.AsyncClient, **settings: object) -> OpenAIChatHandler:
    values = {"base_url": "http://chat.test/v1", "api_key": KEY, "model": "m1", **settings}
    return OpenAIChatHandler(OpenAIChatSettings(**values), http)


async def run_raw(raw: bytes, request=None, **settings: object) -> tuple[list, Backend]:
    backend = Backend(lambda r: sse_response(raw))
    async with backend.client() as http:
        events = await collect(handler(http, **settings).run(request or handler_request()))
    return events, backend


@pytest.mark.parametrize(("name", "text"), [
    ("oc_chat_stream.txt", "Hello from fakellm. You said: ping oc chat stream"),
    ("h_chat_stream.txt", "Hello from fakellm. You said: ping two"),
])
async def test_recorded_streams_complete_with_the_concatenated_text(name: str, text: str) -> None:
    events, backend = await run_raw(fixture(name))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 3
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.text == text == "".join(deltas)
    assert final.metadata["finish_reason"] == "stop"
    if name.startswith("h_"):
        assert final.metadata["usage"]["total_tokens"] == 15
    body = backend.bodies[0]
    assert body["stream"] is True and body["model"] == "m1"
    assert backend.requests[0].url == "http://chat.test/v1/chat/completions"
    assert backend.requests[0].headers["authorization"] == f"Bearer {KEY}"


async def test_messages_are_system_prompt_history_then_the_new_message() -> None:
    request = handler_request("third", history=[Turn("user", "first"), Turn("agent", "answer one")])
    _, backend = await run_raw(fixture("oc_chat_stream.txt"), request, system_prompt="Be brief.",
                               extra_headers={"x-route": "blue"})
    assert backend.bodies[0]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer one"},
        {"role": "user", "content": "third"},
    ]
    assert backend.requests[0].headers["x-route"] == "blue"
    assert backend.bodies[0]["stream_options"] == {"include_usage": True}


async def test_stream_usage_can_be_turned_off() -> None:
    _, backend = await run_raw(fixture("oc_chat_stream.txt"), stream_usage=False)
    assert "stream_options" not in backend.bodies[0]


async def test_usage_only_chunk_is_kept() -> None:
    raw = fixture("oc_chat_stream.txt").replace(
        b"data: [DONE]",
        b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}'
        b"\n\ndata: [DONE]")
    events, _ = await run_raw(raw)
    assert events[-1].metadata["usage"]["total_tokens"] == 3


async def test_missing_done_after_finish_reason_still_completes() -> None:
    raw = fixture("h_chat_stream.txt").replace(b"data: [DONE]", b"")
    events, _ = await run_raw(raw)
    assert isinstance(events[-1], Completed)


async def test_stream_cut_before_finish_fails() -> None:
    chunks = sse_chunks(fixture("h_chat_stream.txt"))[:4]
    events, _ = await run_raw(b"".join(chunks))
    assert isinstance(events[-1], Failed)
    assert "closed the stream before the answer was complete" in events[-1].reason


async def test_error_chunk_fails_with_its_message() -> None:
    raw = (b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
           b'data: {"error":{"message":"400 fakellm scripted bad request","type":"x"}}\n\n'
           b"data: [DONE]\n\n")
    events, _ = await run_raw(raw)
    assert isinstance(events[-1], Failed)
    assert events[-1].reason.endswith("400 fakellm scripted bad request")


async def test_hermes_tool_progress_events_become_progress() -> None:
    tool = {"tool": "terminal", "emoji": "x", "label": "echo hi", "toolCallId": "c1",
            "status": "running"}
    done = {**tool, "status": "completed"}
    raw = (f"event: hermes.tool.progress\ndata: {json.dumps(tool)}\n\n"
           f"event: hermes.tool.progress\ndata: {json.dumps(done)}\n\n").encode()
    events, _ = await run_raw(raw + fixture("h_chat_stream.txt"))
    progress = [e for e in events if isinstance(e, Progress)]
    assert [p.kind for p in progress] == ["tool_started", "tool_completed"]
    assert progress[0].text == "echo hi" and progress[0].data["tool"]["tool"] == "terminal"
    assert isinstance(events[-1], Completed)


@pytest.mark.parametrize("name", ["oc_chat_nonstream.json", "h_chat_nonstream.json"])
async def test_message_mode_replies_once(name: str) -> None:
    backend = Backend(lambda r: json_response(fixture(name)))
    async with backend.client() as http:
        events = await collect(handler(http, response_mode="message").run(handler_request()))
    [reply] = events
    assert isinstance(reply, Reply) and reply.text.startswith("Hello from fakellm. You said: ping")
    assert reply.metadata["usage"]["total_tokens"] == 15
    assert backend.bodies[0]["stream"] is False and "stream_options" not in backend.bodies[0]


async def test_http_errors_fail_without_leaking_secrets() -> None:
    body = {"error": {"message": f"key {KEY} and header s3cr3t-h are wrong"}}
    backend = Backend(lambda r: json_response(body, 502))
    async with backend.client() as http:
        [event] = await collect(handler(
            http, extra_headers={"x-api-secret": "s3cr3t-h"}).run(handler_request()))
    assert isinstance(event, Failed) and "HTTP 502" in event.reason
    assert KEY not in event.reason and "s3cr3t-h" not in event.reason

    backend = Backend(lambda r: json_response({"error": {"message": "Invalid API key"}}, 401))
    async with backend.client() as http:
        [event] = await collect(handler(http).run(handler_request()))
    assert isinstance(event, Failed) and "HTTP 401" in event.reason and KEY not in event.reason


async def test_unreachable_backend_fails() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    async with Backend(refuse).client() as http:
        [event] = await collect(handler(http).run(handler_request()))
    assert isinstance(event, Failed)
    assert event.reason == "cannot reach the chat backend at http://chat.test/v1/chat/completions"


async def test_empty_message_is_rejected() -> None:
    events, backend = await run_raw(fixture("h_chat_stream.txt"), handler_request(""))
    assert isinstance(events[-1], Rejected) and not backend.requests


async def test_closing_the_iterator_closes_the_upstream_stream() -> None:
    stream = TrackedStream(sse_chunks(fixture("h_chat_stream.txt"))[:4], hang=True)
    async with Backend(lambda r: sse_response(stream)).client() as http:
        events = handler(http).run(handler_request())
        async for event in events:
            if isinstance(event, TextDelta):
                break
        await events.aclose()
    assert stream.closed


# -- frames of a shape the bridge does not know: a protocol error of the backend -------

UNEXPECTED = [
    pytest.param(b'data: {"choices": 7}\n\n', "'choices' is not a list of objects", id="choices-7"),
    pytest.param(b'data: {"choices": [7]}\n\n', "'choices' is not a list of objects",
                 id="choice-7"),
    pytest.param(b'data: {"choices": [{"index": 0, "delta": "hi"}]}\n\n',
                 "'delta' is not an object", id="delta-text"),
    pytest.param(b'data: {"choices": [{"index": 0, "delta": {"content": 7}}]}\n\n',
                 "'content' is neither text nor a list of parts", id="content-7"),
    pytest.param(b"data: [1, 2]\n\n", "data that is not a JSON object", id="json-list"),
    pytest.param(b"data: {not json\n\n", "data that is not JSON", id="not-json"),
    pytest.param(b"event: hermes.tool.progress\ndata: 7\n\n", "data that is not a JSON object",
                 id="tool-progress-7"),
]


@pytest.mark.parametrize(("frame", "detail"), UNEXPECTED)
async def test_a_frame_of_an_unexpected_shape_fails_the_task_clearly(frame: bytes,
                                                                      detail: str) -> None:
    head = sse_chunks(fixture("oc_chat_stream.txt"))[:2]
    events, _ = await run_raw(b"".join(head) + frame + b"data: [DONE]\n\n")
    assert events[-1] == Failed(f"the chat backend sent an unexpected frame ({detail})")
    assert [type(e) for e in events[:-1]] == [TextDelta]  # what came before still streamed


async def test_an_unexpected_frame_is_not_echoed() -> None:
    events, _ = await run_raw(f'data: {{"choices": "{KEY}"}}\n\n'.encode())
    assert isinstance(events[-1], Failed) and KEY not in events[-1].reason


async def test_message_mode_answer_of_an_unexpected_shape_fails_clearly() -> None:
    backend = Backend(lambda r: json_response({"choices": 7}))
    async with backend.client() as http:
        [event] = await collect(handler(http, response_mode="message").run(handler_request()))
    assert event == Failed("the chat backend sent an unexpected frame "
                           "('choices' is not a list of objects)")


async def test_each_caller_is_its_own_end_user_at_the_backend() -> None:
    users = []
    for principal in ("alice", "bob", "alice"):
        request = handler_request("hi")
        request.principal = principal
        _, backend = await run_raw(fixture("oc_chat_stream.txt"), request)
        users.append(backend.bodies[0]["user"])
    assert users[0] == users[2] != users[1]
    assert not any("alice" in u or "bob" in u for u in users)
