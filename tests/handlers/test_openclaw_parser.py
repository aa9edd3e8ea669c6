"""OpenClawHandler on recorded OpenClaw frames (no server needed)."""

from __future__ import annotations

import json

import httpx
import pytest

from handlers.base import Completed, Failed, Progress, Rejected, Reply, SessionUpdate, TextDelta
from handlers.openclaw import OpenClawHandler, OpenClawSettings, ResponsesStream
from handlers.upstream import SSEFrame
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

TOKEN = "oc-secret-token-0123456789abcdef"
ACCEPTED_KEYS = {"model", "input", "instructions", "tools", "tool_choice", "stream",
                 "max_output_tokens", "max_tool_calls", "user", "temperature", "top_p",
                 "metadata", "store", "previous_response_id", "reasoning", "truncation"}


def handler(http: httpx.AsyncClient, **settings: object) -> OpenClawHandler:
    values = {"openclaw_api_url": "http://openclaw.test", "openclaw_api_key": TOKEN, **settings}
    return OpenClawHandler(OpenClawSettings(**values), http)


def frames(raw: str) -> list[SSEFrame]:
    out = []
    for block in raw.strip().split("\n\n"):
        event, data = "", []
        for line in block.splitlines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        out.append(SSEFrame(event, "\n".join(data)))
    return out


def events_of(kind: type, events: list[object]) -> list:
    return [e for e in events if isinstance(e, kind)]


async def run_recorded(name: str, **settings: object) -> tuple[list[object], Backend]:
    backend = Backend(lambda request: sse_response(fixture(name)))
    async with backend.client() as http:
        events = await collect(handler(http, **settings).run(handler_request("ping oc stream")))
    return events, backend


async def test_stream_maps_to_progress_deltas_and_completed() -> None:
    events, backend = await run_recorded("oc_responses_stream.txt")
    assert isinstance(events[0], Progress) and events[0].kind == "working"
    assert events[0].data["openclaw"]["response_id"].startswith("resp_")
    deltas = events_of(TextDelta, events)
    assert len(deltas) > 3
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.text == "Hello from fakellm. You said: ping oc stream"
    assert final.text == "".join(d.text for d in deltas)
    assert final.metadata["usage"]["total_tokens"] == 15
    assert final.metadata["openclaw"]["response_id"] == "resp_7232a334-9b5f-4093-b8b5-aec4093a9bd9"
    session = events_of(SessionUpdate, events)
    assert session == [SessionUpdate(
        {"openclaw_previous_response_id": "resp_7232a334-9b5f-4093-b8b5-aec4093a9bd9"})]
    assert events.index(session[0]) < len(events) - 1  # the terminal event is last
    assert backend.bodies[0]["stream"] is True


async def test_request_carries_only_accepted_keys_and_agent_selection() -> None:
    _, backend = await run_recorded("oc_responses_stream.txt", openclaw_agent_id="Ops-Agent",
                                    openclaw_model="fakellm/other")
    body = backend.bodies[0]
    assert set(body) <= ACCEPTED_KEYS
    assert body["model"] == "openclaw/ops-agent"
    assert body["input"] == "ping oc stream"
    request = backend.requests[0]
    assert request.url == "http://openclaw.test/v1/responses"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["x-openclaw-model"] == "fakellm/other"
    assert (
        "x-openclaw-model"
        not in (await run_recorded("oc_responses_stream.txt"))[1].requests[0].headers
    )


async def test_default_agent_and_url_with_v1_suffix() -> None:
    _, backend = await run_recorded("oc_responses_stream.txt",
                                    openclaw_api_url="http://openclaw.test/v1/")
    assert backend.bodies[0]["model"] == "openclaw"
    assert backend.requests[0].url == "http://openclaw.test/v1/responses"


def test_invalid_agent_id_is_a_settings_error() -> None:
    with pytest.raises(ValueError):
        OpenClawSettings(openclaw_agent_id="bad agent!")


async def test_session_user_is_per_context_and_previous_response_id_is_sent() -> None:
    backend = Backend(lambda request: sse_response(fixture("oc_responses_stream.txt")))
    async with backend.client() as http:
        h = handler(http)
        await collect(h.run(handler_request("one", context_id="A")))
        await collect(h.run(handler_request(
            "two", context_id="A", session={"openclaw_previous_response_id": "resp_1"})))
        await collect(h.run(handler_request("three", context_id="B")))
        await collect(h.run(handler_request("four", context_id="A", tenant="other")))
    one, two, three, four = backend.bodies
    assert one["user"] == two["user"]
    assert len({one["user"], three["user"], four["user"]}) == 3
    assert "previous_response_id" not in one
    assert two["previous_response_id"] == "resp_1"
    assert "ctx" not in one["user"] and one["user"].startswith("a2a-")


async def test_data_parts_are_sent_as_json_lines() -> None:
    backend = Backend(lambda request: sse_response(fixture("oc_responses_stream.txt")))
    async with backend.client() as http:
        await collect(handler(http).run(handler_request("look", data=[{"a": 1}])))
    assert backend.bodies[0]["input"] == 'look\n{"a": 1}'


async def test_empty_message_is_rejected_without_a_call() -> None:
    backend = Backend(lambda request: sse_response(fixture("oc_responses_stream.txt")))
    async with backend.client() as http:
        events = await collect(handler(http).run(handler_request("  ")))
    assert isinstance(events[-1], Rejected) and not backend.requests


async def test_upstream_failure_in_stream_is_failed_with_the_error() -> None:
    events, _ = await run_recorded("oc_responses_stream_upstream400.txt")
    assert isinstance(events[-1], Failed)
    assert events[-1].reason == "OpenClaw run failed: 400 fakellm scripted bad request"
    assert not events_of(Completed, events) and not events_of(SessionUpdate, events)


async def test_stream_that_ends_without_terminal_event_fails() -> None:
    events, _ = await run_recorded("oc_responses_stream_slow_disconnect.txt")
    assert len(events_of(TextDelta, events)) == 6
    assert isinstance(events[-1], Failed)
    assert "closed the stream before the run finished" in events[-1].reason


def test_done_without_terminal_event_fails() -> None:
    parser = ResponsesStream()
    raw = fixture("oc_responses_stream.txt").decode()
    for frame in frames(raw):
        if '"response.completed"' in frame.data:
            continue
        parser.feed(frame)
    [final] = parser.finish()
    assert isinstance(final, Failed) and "[DONE]" in final.reason


def test_first_terminal_event_wins() -> None:
    failed = fixture("oc_responses_stream_upstream400.txt").decode()
    late_completed = frames(fixture("oc_responses_stream.txt").decode())[-2]
    parser = ResponsesStream()
    for frame in frames(failed)[:-1] + [late_completed, SSEFrame("", "[DONE]")]:
        parser.feed(frame)
    [final] = parser.finish()
    assert isinstance(final, Failed) and "400 fakellm" in final.reason


@pytest.mark.parametrize(("status", "expected"), [
    ("failed", "OpenClaw run failed: boom"),
    ("incomplete", "OpenClaw returned an incomplete response"),
])
def test_completed_event_with_non_completed_status_fails(status: str, expected: str) -> None:
    response = {"id": "resp_x", "status": status, "output": [],
                "error": {"code": "x", "message": "boom"} if status == "failed" else None}
    parser = ResponsesStream()
    parser.feed(SSEFrame("response.completed",
                         json.dumps({"type": "response.completed", "response": response})))
    [final] = parser.finish()
    assert isinstance(final, Failed) and final.reason.startswith(expected)


def test_completed_text_falls_back_to_deltas_when_output_is_empty() -> None:
    parser = ResponsesStream()
    parser.feed(SSEFrame("", json.dumps({"type": "response.output_text.delta", "delta": "ab"})))
    parser.feed(SSEFrame("", json.dumps({"type": "response.completed",
                                          "response": {"id": "r", "status": "completed"}})))
    assert isinstance(parser.finish()[-1], Completed) and parser.finish()[-1].text == "ab"


async def test_tool_run_is_invisible_and_final_text_is_the_answer() -> None:
    events, _ = await run_recorded("oc_responses_stream_safe_tool.txt")
    assert isinstance(events[-1], Completed)
    assert events[-1].text == "TOOL_RESULT_SEEN: fake-safe-ok"


async def test_message_mode_replies_with_joined_output_text() -> None:
    backend = Backend(lambda request: json_response(fixture("oc_responses_nonstream.json")))
    async with backend.client() as http:
        events = await collect(handler(http, response_mode="message").run(handler_request()))
    assert backend.bodies[0]["stream"] is False
    assert set(backend.bodies[0]) <= ACCEPTED_KEYS
    [reply] = events
    assert isinstance(reply, Reply)
    assert reply.text == "Hello from fakellm. You said: ping oc four"
    assert reply.metadata["usage"]["output_tokens"] == 5


async def test_message_mode_upstream_400_fails_with_the_error() -> None:
    backend = Backend(lambda r: json_response(fixture("oc_responses_upstream400.json"), 400))
    async with backend.client() as http:
        [event] = await collect(handler(http, response_mode="message").run(handler_request()))
    assert isinstance(event, Failed)
    assert "HTTP 400" in event.reason and "400 fakellm scripted bad request" in event.reason


async def test_unauthorized_fails_without_leaking_the_token() -> None:
    body = {"error": {"message": f"Unauthorized Bearer {TOKEN}", "type": "unauthorized"}}
    backend = Backend(lambda request: json_response(body, 401))
    async with backend.client() as http:
        [event] = await collect(handler(http).run(handler_request()))
    assert isinstance(event, Failed) and "401" in event.reason
    assert TOKEN not in event.reason


async def test_error_body_echoing_the_token_is_redacted() -> None:
    body = {"error": {"message": f"bad header Bearer {TOKEN}", "type": "invalid_request_error"}}
    backend = Backend(lambda request: json_response(body, 500))
    async with backend.client() as http:
        [event] = await collect(handler(http).run(handler_request()))
    assert isinstance(event, Failed) and "HTTP 500" in event.reason
    assert TOKEN not in event.reason and "***" in event.reason


@pytest.mark.parametrize(("exc", "text"), [
    (httpx.ConnectError("refused"), "cannot reach OpenClaw at http://openclaw.test/v1/responses"),
    (httpx.ReadTimeout("slow"), "sent nothing for 600 s"),
])
async def test_transport_errors_fail_clearly(exc: Exception, text: str) -> None:
    def boom(request: httpx.Request) -> httpx.Response:
        raise exc

    async with Backend(boom).client() as http:
        [event] = await collect(handler(http).run(handler_request()))
    assert isinstance(event, Failed) and text in event.reason


async def test_closing_the_iterator_closes_the_upstream_stream() -> None:
    chunks = sse_chunks(fixture("oc_responses_stream_slow_disconnect.txt"))
    stream = TrackedStream(chunks, hang=True)
    backend = Backend(lambda request: sse_response(stream))
    async with backend.client() as http:
        events = handler(http).run(handler_request("FAKE_SLOW"))
        seen = []
        async for event in events:
            seen.append(event)
            if isinstance(event, TextDelta) and event.text == " slow2":
                break
        assert not stream.closed
        await events.aclose()  # what the gateway does on CancelTask
    assert stream.closed
    assert stream.sent < len(chunks)


# -- frames of a shape the bridge does not know: a protocol error of the backend -------

CREATED = ('event: response.created\n'
           'data: {"type":"response.created","response":{"id":"resp_1"}}\n\n')


@pytest.mark.parametrize(("frame", "detail"), [
    pytest.param('data: {"type": "response.created", "response": 7}', "'response' is not an object",
                 id="response-7"),
    pytest.param('data: {"type": "response.output_text.delta", "delta": 7}',
                 "a text delta without text", id="delta-7"),
    pytest.param('data: {"type": "response.completed", "response": {"status": "completed", '
                 '"output": 7}}', "'output' is not a list of objects", id="output-7"),
    pytest.param('data: {"type": "response.completed", "response": {"output": [{"type": '
                 '"message", "content": [{"type": "output_text", "text": 7}]}]}}',
                 "an output_text without text", id="text-7"),
    pytest.param("data: [1]", "data that is not a JSON object", id="json-list"),
    pytest.param("data: {oops", "data that is not JSON", id="not-json"),
])
async def test_a_frame_of_an_unexpected_shape_fails_the_task_clearly(frame: str,
                                                                      detail: str) -> None:
    raw = (CREATED + frame + "\n\ndata: [DONE]\n\n").encode()
    backend = Backend(lambda request: sse_response(raw))
    async with backend.client() as http:
        events = await collect(handler(http).run(handler_request("ping")))
    assert events[-1] == Failed(f"OpenClaw sent an unexpected frame ({detail})")
    assert isinstance(events[0], Progress)


async def test_an_error_event_with_a_text_error_fails_with_it() -> None:
    raw = (CREATED + 'data: {"type": "error", "error": "model overloaded"}\n\n').encode()
    backend = Backend(lambda request: sse_response(raw))
    async with backend.client() as http:
        events = await collect(handler(http).run(handler_request("ping")))
    assert events[-1] == Failed("OpenClaw run failed: model overloaded")


async def test_an_unexpected_frame_is_not_echoed() -> None:
    raw = (CREATED + f'data: {{"type": "response.created", "response": "{TOKEN}"}}\n\n').encode()
    backend = Backend(lambda request: sse_response(raw))
    async with backend.client() as http:
        events = await collect(handler(http).run(handler_request("ping")))
    assert isinstance(events[-1], Failed) and TOKEN not in events[-1].reason


async def test_message_mode_answer_of_an_unexpected_shape_fails_clearly() -> None:
    backend = Backend(lambda r: json_response({"status": "completed", "output": [7]}))
    async with backend.client() as http:
        [event] = await collect(handler(http, response_mode="message").run(handler_request("ping")))
    assert event == Failed("OpenClaw sent an unexpected frame ('output' is not a list of objects)")
