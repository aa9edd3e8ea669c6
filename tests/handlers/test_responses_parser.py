"""ResponsesHandler on frames recorded from a real DevUI server (Microsoft Agent Framework,
tests/fixtures/responses/), through the handler's real HTTP path (``httpx.MockTransport``);
no server needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from handlers.approvals import HITL_URI
from handlers.base import (
    Canceled,
    Completed,
    Failed,
    InputRejectedError,
    InputRequired,
    Progress,
    RunStarted,
    SessionUpdate,
    TextDelta,
    Turn,
)
from handlers.openclaw import ResponsesStream
from handlers.responses import ResponsesHandler, ResponsesSettings
from handlers.responses_events import ResponsesEvents
from handlers.upstream import SSEFrame
from tests.handlers.openai_mock import Backend, collect, json_response, sse_chunks, sse_response
from tests.support.messages import handler_request

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "responses"
TOKEN = "devui-secret-token-0123456789abcdef"
CONVERSATION = "conv_c80f24669855429a924e0577e32e2de7"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def frames(name: str) -> list[dict[str, Any]]:
    return [json.loads(chunk[len(b"data: "):]) for chunk in sse_chunks(fixture(name))
            if chunk.startswith(b"data: {")]


class DevUI:
    """The routes the handler uses: conversation creation, ``/v1/responses`` (``streams`` in
    turn, recorded fixture names) and the cancel route."""

    def __init__(self, *streams: str, cancel: tuple[int, bytes] = (404, b"{}")) -> None:
        self.streams = list(streams)
        self.cancel = cancel
        self.backend = Backend(self.answer)

    def answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/conversations":
            return json_response(fixture("devui_conversation_created.json"))
        if path.endswith("/cancel"):
            return json_response(self.cancel[1], self.cancel[0])
        return sse_response(fixture(self.streams.pop(0)))

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.backend.requests if r.url.path == path]


def devui(backend: DevUI, **settings: Any) -> ResponsesHandler:
    values = {"responses_api_url": "http://devui.test/v1", "responses_api_key": TOKEN,
              "responses_model": "assistant", "responses_metadata": {"entity_id": "assistant"},
              "responses_continuity": "conversation", "responses_name": "DevUI", **settings}
    http = httpx.AsyncClient(transport=httpx.MockTransport(backend.backend))
    return ResponsesHandler(ResponsesSettings(**values), http)


def of(kind: type, events: list[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


async def test_a_streamed_answer_makes_the_conversation_once_and_completes_with_usage():
    backend = DevUI("devui_plain.txt", "devui_plain.txt")
    handler = devui(backend)
    events = await collect(handler.run(handler_request("hello there")))
    assert events[0] == SessionUpdate({"responses_conversation": CONVERSATION})
    assert events[1] == RunStarted("resp_36f9bfa3")
    assert isinstance(events[2], Progress)
    assert events[2].data == {"responses": {"response_id": "resp_36f9bfa3"}}
    deltas = [f["delta"] for f in frames("devui_plain.txt")
              if f["type"] == "response.output_text.delta"]
    assert [e.text for e in of(TextDelta, events)] == deltas and len(deltas) == 7
    (done,) = of(Completed, events)
    final = frames("devui_plain.txt")[-1]["response"]
    assert done.text == "".join(deltas) == "Hello from fakellm. You said: hello there"
    assert done.metadata["usage"] == final["usage"] and final["usage"]["input_tokens"] == 10
    (created,) = backend.bodies("/v1/conversations")
    assert created == {"metadata": {"entity_id": "assistant"}}
    (sent,) = backend.bodies("/v1/responses")
    assert sent == {"input": "hello there", "stream": True, "model": "assistant",
                    "metadata": {"entity_id": "assistant"}, "conversation": CONVERSATION,
                    "user": handler_request().backend_user()}
    assert backend.backend.requests[1].headers["authorization"] == f"Bearer {TOKEN}"
    # the second turn of the context reuses the remembered conversation
    again = await collect(handler.run(handler_request(
        "again", session={"responses_conversation": CONVERSATION})))
    assert not of(SessionUpdate, again) and of(Completed, again)
    assert len(backend.bodies("/v1/conversations")) == 1
    assert backend.bodies("/v1/responses")[1]["conversation"] == CONVERSATION


@pytest.mark.parametrize(("continuity", "session", "expected"), [
    ("previous_response_id", {"responses_previous_response_id": "resp_1"},
     {"previous_response_id": "resp_1", "input": "two"}),
    ("none", {}, {"input": [
        {"type": "message", "role": "user", "content": "one"},
        {"type": "message", "role": "assistant", "content": "answer one"},
        {"type": "message", "role": "user", "content": "two"}]}),
])
async def test_continuity_without_conversations(continuity, session, expected):
    backend = DevUI("devui_plain.txt")
    request = handler_request("two", session=session,
                              history=[Turn("user", "one"), Turn("agent", "answer one")])
    events = await collect(devui(backend, responses_continuity=continuity,
                                 responses_metadata={}).run(request))
    assert not backend.bodies("/v1/conversations")
    (sent,) = backend.bodies("/v1/responses")
    assert {k: sent[k] for k in expected} == expected and "metadata" not in sent
    remembered = of(SessionUpdate, events)
    if continuity == "previous_response_id":
        assert remembered == [SessionUpdate({"responses_previous_response_id": "resp_36f9bfa3"})]
    else:
        assert remembered == []


async def test_an_approval_request_asks_and_the_answer_goes_as_an_approval_item():
    backend = DevUI("devui_approval_request.txt", "devui_approved.txt")
    handler = devui(backend)
    session = {"responses_conversation": CONVERSATION}
    events = await collect(handler.run(handler_request("FAKE_TOOL_DANGER", session=session)))
    (question,) = of(InputRequired, events)
    assert not of(Completed, events) and events[-1] is question
    assert question.prompt == ('Allow bash(command="rm -rf /srv/danger-target")? '
                               "Answer approve or deny.")
    call_id = "af-call-fcc14cb6df02484e8c09bdbd8de67710"
    assert question.data == {"responses_approval": {
        "request_id": call_id, "name": "bash",
        "arguments": {"command": "rm -rf /srv/danger-target"}}, "choices": ["approve", "deny"],
        HITL_URI: {"type": "tool_approval_request",
                   "hint": 'Allow bash(command="rm -rf /srv/danger-target")?',
                   "tools": [{"id": call_id, "call_id": call_id, "name": "bash",
                              "args": {"command": "rm -rf /srv/danger-target"},
                              "editable": False}],
                   "answers": ["approve", "deny"]}}

    unclear = handler_request("maybe", session=session, pending_input=question.data)
    with pytest.raises(InputRejectedError):
        await handler.resume(unclear)
    edited = handler_request("", session=session, pending_input=question.data, data=[{
        "type": "tool_approval_response",
        "approvals": [{"id": call_id, "approved": True, "args": {"command": "true"}}]}])
    with pytest.raises(InputRejectedError, match="cannot run bash with edited arguments"):
        await handler.resume(edited)
    answer = handler_request("no", session=session, pending_input=question.data, data=[{
        "type": "tool_approval_response", "approvals": [{"id": call_id, "approved": True}]}])
    assert await handler.resume(answer) is False  # answered by a fresh run
    events = await collect(handler.run(answer))
    assert backend.bodies("/v1/responses")[1]["input"] == [{"type": "message", "role": "user",
        "content": [{"type": "function_approval_response",
                     "request_id": "af-call-fcc14cb6df02484e8c09bdbd8de67710", "approved": True}]}]
    (done,) = of(Completed, events)
    assert done.text == "TOOL_RESULT_SEEN: (pretend) ran: rm -rf /srv/danger-target"


async def test_a_deny_in_words_is_sent_as_not_approved():
    backend = DevUI("devui_denied.txt")
    pending = {"responses_approval": {"request_id": "af-call-1", "name": "bash",
                                      "arguments": {}}, "choices": ["approve", "deny"]}
    request = handler_request("No.", session={"responses_conversation": CONVERSATION},
                              pending_input=pending)
    events = await collect(devui(backend).run(request))
    item = backend.bodies("/v1/responses")[0]["input"][0]["content"][0]
    assert item == {"type": "function_approval_response", "request_id": "af-call-1",
                    "approved": False}
    assert "rejected by user" in of(Completed, events)[0].text


async def test_an_llm_error_fails_with_the_servers_reason_and_the_first_terminal_wins():
    backend = DevUI("devui_llm_error.txt")
    events = await collect(devui(backend).run(handler_request(
        "FAKE_HTTP_500", session={"responses_conversation": CONVERSATION})))
    (failed,) = of(Failed, events)
    assert failed.reason.startswith("DevUI run failed: Agent execution error")
    assert "Error code: 500" in failed.reason and events[-1] is failed


async def test_an_error_event_before_a_completed_response_fails_the_task():
    backend = DevUI("devui_first_call_error.txt")
    events = await collect(devui(backend).run(handler_request(
        "hello", session={"responses_conversation": CONVERSATION})))
    assert events[-1] == Failed("DevUI run failed: generator didn't stop after throw()")
    assert not of(Completed, events)


def test_devuis_and_openais_cancelled_events_both_end_as_canceled():
    devui_shape = [SSEFrame("", json.dumps(f)) for f in frames("devui_cancelled.txt")]
    parser = ResponsesEvents("DevUI", metadata_key="responses", session_key=None)
    streamed = [e for frame in devui_shape for e in parser.feed(frame)]
    assert parser.ended and parser.finish() == [Canceled("DevUI canceled the response")]
    assert [e.text for e in of(TextDelta, streamed)][:2] == ["slow0", " slow1"]
    openai = ResponsesEvents("OpenAI", metadata_key="responses", session_key=None)
    openai.feed(SSEFrame("", json.dumps({"type": "response.cancelled", "response": {
        "id": "resp_9", "status": "cancelled"}})))
    assert openai.finish() == [Canceled("OpenAI canceled the response")]


@pytest.mark.parametrize(("answer", "asked"), [
    ((200, b'{"status":"cancelled","response_id":"resp_9fac6cb9"}'), True),
    ((200, b'{"status":"not_found"}'), False),
    ((404, b'{"detail":"Not Found"}'), False),
])
async def test_cancel_asks_the_server_and_falls_back_to_closing(answer, asked):
    backend = DevUI(cancel=answer)
    request = handler_request("x", run_ref="resp_9fac6cb9")
    assert await devui(backend).cancel(request) is asked
    (call,) = backend.backend.requests
    assert call.url.path == "/v1/responses/resp_9fac6cb9/cancel"
    assert await devui(backend, responses_cancel=False).cancel(request) is False


@pytest.mark.parametrize(("raw", "detail"), [
    (b"data: [1, 2]\n\n", "DevUI sent an unexpected frame"),
    (b'data: {"type": "response.output_text.delta", "delta": 5}\n\n', "a text delta without"),
    (b'data: {"type": "response.function_approval.requested"}\n\n', "approval request without"),
    (b'data: {"type": "response.created", "response": "x"}\n\n', "'response' is not an object"),
])
async def test_a_frame_of_an_unknown_shape_fails_the_task(raw, detail):
    backend = Backend(lambda request: sse_response(raw))
    async with backend.client() as http:
        handler = ResponsesHandler(ResponsesSettings(responses_name="DevUI"), http)
        events = await collect(handler.run(handler_request("hi")))
    (failed,) = of(Failed, events)
    assert failed.reason.startswith("DevUI sent an unexpected frame") and detail in failed.reason


async def test_a_failed_conversation_fails_without_the_token():
    def refuse(request: httpx.Request) -> httpx.Response:
        return json_response({"error": {"message": f"bad token Bearer {TOKEN}"}}, 401)

    backend = Backend(refuse)
    async with backend.client() as http:
        handler = ResponsesHandler(ResponsesSettings(
            responses_api_key=TOKEN, responses_continuity="conversation"), http)
        events = await collect(handler.run(handler_request("hi")))
    (failed,) = events
    assert isinstance(failed, Failed) and "401" in failed.reason and TOKEN not in failed.reason


async def test_message_mode_replies_once_and_cannot_ask_for_an_approval():
    answers = [
        {"id": "resp_1", "status": "completed", "usage": {"input_tokens": 3}, "output": [
            {"type": "message", "content": [{"type": "output_text", "text": "hi there"}]}]},
        {"id": "resp_2", "status": "completed", "output": [
            {"type": "function_call", "name": "bash", "arguments": "{}", "call_id": "c1"}]},
    ]
    backend = Backend(lambda request: json_response(answers.pop(0)))
    async with backend.client() as http:
        handler = ResponsesHandler(ResponsesSettings(
            responses_name="DevUI", response_mode="message"), http)
        replied = await collect(handler.run(handler_request("hi")))
        asked = await collect(handler.run(handler_request("FAKE_TOOL_DANGER")))
    remembered, reply = replied  # the reply's response id continues the context
    assert remembered == SessionUpdate({"responses_previous_response_id": "resp_1"})
    assert reply.text == "hi there" and reply.metadata["usage"] == {"input_tokens": 3}
    assert json.loads(backend.requests[0].content)["stream"] is False
    assert asked == [Failed("DevUI wants a tool call approved, which a reply "
                            "(response_mode: message) cannot ask")]


async def test_an_event_over_max_event_bytes_fails_the_task():
    big = b'data: {"type": "response.output_text.delta", "delta": "' + b"x" * 4096 + b'"}\n\n'
    backend = Backend(lambda request: sse_response(big))
    async with backend.client() as http:
        handler = ResponsesHandler(ResponsesSettings(responses_name="DevUI",
                                                     max_event_bytes=1024), http)
        events = await collect(handler.run(handler_request("hi")))
    (failed,) = of(Failed, events)
    assert "DevUI" in failed.reason and not of(TextDelta, events)


def test_openclaws_parser_keeps_its_names_and_fails_a_run_openclaw_canceled():
    parser = ResponsesStream()
    started = parser.feed(SSEFrame("", json.dumps({"type": "response.created",
                                                   "response": {"id": "resp_1"}})))
    assert started == [Progress("working", data={"openclaw": {"response_id": "resp_1"}})]
    parser.feed(SSEFrame("", json.dumps({"type": "response.cancelled", "response_id": "resp_1"})))
    assert parser.finish() == [Failed("OpenClaw canceled the run")]


async def test_a_background_response_is_rejoined_from_its_first_event():
    backend = Backend(lambda request: sse_response(fixture("devui_plain.txt")))
    async with backend.client() as http:
        handler = ResponsesHandler(ResponsesSettings(responses_background=True), http)
        assert handler.supports_reattach
        started = await collect(handler.run(handler_request("hi")))
        rejoined = await collect(handler.reattach(handler_request("hi", run_ref="resp_36f9bfa3")))
        assert not ResponsesHandler(ResponsesSettings(), http).supports_reattach
    assert json.loads(backend.requests[0].content)["background"] is True
    assert of(RunStarted, started) == [RunStarted("resp_36f9bfa3")]
    rejoin = backend.requests[1]
    assert rejoin.method == "GET" and rejoin.url.path == "/v1/responses/resp_36f9bfa3"
    assert rejoin.url.params["stream"] == "true"
    assert not of(RunStarted, rejoined)  # the task has the id already
    assert of(Completed, rejoined)[0].text == of(Completed, started)[0].text


async def test_a_response_the_server_no_longer_has_fails_the_rejoin():
    backend = Backend(lambda request: json_response({"detail": "Not Found"}, 404))
    async with backend.client() as http:
        handler = ResponsesHandler(ResponsesSettings(responses_background=True,
                                                     responses_name="DevUI"), http)
        events = await collect(handler.reattach(handler_request("hi", run_ref="resp_gone")))
    (failed,) = events
    assert isinstance(failed, Failed) and "404" in failed.reason and "DevUI" in failed.reason
