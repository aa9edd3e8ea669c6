"""AdkHandler on frames recorded from a real ``adk api_server`` (serving tests/backends/adk
against the scripted LLM), through the handler's real HTTP path (``httpx.MockTransport``); no
server needed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from handlers.adk import AdkHandler, AdkSettings, RunEvents
from handlers.base import (
    Completed,
    Failed,
    InputRejectedError,
    InputRequired,
    Progress,
    Rejected,
    Reply,
    SessionUpdate,
    TextDelta,
)
from handlers.upstream import SSEFrame, UnexpectedFrame
from tests.handlers.openai_mock import (
    TrackedStream,
    collect,
    json_response,
    sse_chunks,
    sse_response,
)
from tests.support.messages import handler_request

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "adk"
API_KEY = "adk-secret-key-0123456789abcdef"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def frames(name: str) -> list[dict[str, Any]]:
    return [json.loads(chunk[len(b"data: "):]) for chunk in sse_chunks(fixture(name))]


class AdkBackend:
    """The routes of an ADK server the handler uses: session creation (``sessions`` answers
    in turn, the last one repeats) and ``/run_sse`` (``streams`` in turn)."""

    def __init__(self, *streams: Callable[[], httpx.Response],
                 sessions: tuple[tuple[str, int], ...] = (("session_created.json", 200),)) -> None:
        self.streams = list(streams)
        self.sessions = list(sessions)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/run_sse":
            return self.streams.pop(0)()
        name, status = self.sessions[0] if len(self.sessions) == 1 else self.sessions.pop(0)
        return json_response(fixture(name), status)

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests if r.url.path.endswith(path)]


def recorded(name: str) -> Callable[[], httpx.Response]:
    return lambda: sse_response(fixture(name))


def handler_for(backend: AdkBackend, **settings: Any) -> AdkHandler:
    http = httpx.AsyncClient(transport=httpx.MockTransport(backend))
    return AdkHandler(
        AdkSettings(adk_api_url="http://adk", adk_app_name="assistant", **settings), http
    )


def session_request(text: str = "hello there", **fields: Any) -> Any:
    return handler_request(text, session={"adk_session_id": "a2a-s", "adk_user_id": "anonymous"},
                           **fields)


# -- the answer ----------------------------------------------------------------------------


async def test_partial_events_stream_and_the_final_event_completes_once():
    backend = AdkBackend(recorded("stream_plain.txt"))
    events = await collect(handler_for(backend).run(handler_request("hello there")))
    assert isinstance(events[0], SessionUpdate)
    session_id = events[0].values["adk_session_id"]
    assert session_id.startswith("a2a-") and events[0].values["adk_user_id"] == "anonymous"
    tokens = [e.text for e in events if isinstance(e, TextDelta)]
    partials = [
        f["content"]["parts"][0]["text"] for f in frames("stream_plain.txt") if f.get("partial")
    ]
    assert tokens == partials and len(tokens) == 7
    (done,) = [e for e in events if isinstance(e, Completed)]
    final = frames("stream_plain.txt")[-1]
    assert done.text == "".join(tokens) == final["content"]["parts"][0]["text"]
    assert done.metadata == {"adk_session_id": session_id, "usage": final["usageMetadata"],
                             "adk_invocation_id": final["invocationId"]}
    (created,) = backend.bodies("/sessions")
    assert created == {"session_id": session_id}
    assert backend.requests[0].url.path == "/apps/assistant/users/anonymous/sessions"
    (run,) = backend.bodies("/run_sse")
    assert run == {"app_name": "assistant", "user_id": "anonymous", "session_id": session_id,
                   "new_message": {"role": "user", "parts": [{"text": "hello there"}]},
                   "streaming": True, "custom_metadata": {"a2a_task_id": "task-1",
                                                          "a2a_context_id": "ctx-1",
                                                          "a2a_endpoint_id": "ep-1"}}


async def test_a_known_session_is_reused_and_an_existing_one_taken():
    backend = AdkBackend(recorded("stream_plain.txt"))
    events = await collect(handler_for(backend).run(session_request()))
    assert not any(isinstance(e, SessionUpdate) for e in events)
    assert backend.bodies("/run_sse")[0]["session_id"] == "a2a-s" and not backend.bodies(
        "/sessions"
    )
    backend = AdkBackend(recorded("stream_plain.txt"), sessions=(("session_exists.json", 409),))
    events = await collect(handler_for(backend).run(handler_request("hello there")))
    assert isinstance(events[0], SessionUpdate) and isinstance(events[-1], Completed)


async def test_the_user_id_comes_from_the_setting_or_the_principal():
    backend = AdkBackend(recorded("stream_plain.txt"))
    await collect(handler_for(backend).run(handler_request("hi", principal="alice@example.org")))
    assert backend.requests[0].url.raw_path == b"/apps/assistant/users/alice%40example.org/sessions"
    backend = AdkBackend(recorded("stream_plain.txt"))
    events = await collect(handler_for(backend, adk_user_id="team a").run(handler_request("hi")))
    assert backend.requests[0].url.raw_path == b"/apps/assistant/users/team%20a/sessions"
    assert events[0].values["adk_user_id"] == "team a"
    assert backend.bodies("/run_sse")[0]["user_id"] == "team a"


async def test_tool_calls_and_results_are_progress():
    backend = AdkBackend(recorded("stream_tool.txt"))
    events = await collect(handler_for(backend).run(session_request("FAKE_TOOL_SAFE")))
    progress = [e for e in events if isinstance(e, Progress)]
    call_id = frames("stream_tool.txt")[0]["content"]["parts"][0]["functionCall"]["id"]
    assert progress == [
        Progress("tool_started", data={"tool": "run_command", "tool_call_id": call_id}),
        Progress("tool_completed", data={"tool": "run_command", "tool_call_id": call_id}),
    ]
    assert events[-1].text == 'TOOL_RESULT_SEEN: {"result": "would run echo fake-safe-ok"}'


async def test_a_non_streamed_text_is_sent_as_one_delta():
    final = frames("stream_plain.txt")[-1]
    run = RunEvents()
    events = run.feed(SSEFrame("", json.dumps(final)))
    assert events == [TextDelta("Hello from fakellm. You said: hello there")]
    assert run.outcome({}).text == "Hello from fakellm. You said: hello there"


# -- confirmation --------------------------------------------------------------------------


def confirmation_id() -> str:
    (frame,) = [f for f in frames("stream_confirmation.txt") if f.get("longRunningToolIds")]
    return frame["longRunningToolIds"][0]


async def asked() -> InputRequired:
    backend = AdkBackend(recorded("stream_confirmation.txt"))
    events = await collect(handler_for(backend).run(session_request("FAKE_TOOL_DANGER")))
    assert [type(e) for e in events] == [Progress, InputRequired]
    return events[-1]


async def test_a_confirmation_request_asks_the_client():
    question = await asked()
    assert (
        question.prompt == 'Allow run_command(command="rm -rf scratch/fixture")? Answer yes or no.'
    )
    (pending,) = question.data["adk_confirmations"]
    assert pending["id"] == confirmation_id() and pending["tool"] == "run_command"
    assert pending["args"] == {"command": "rm -rf scratch/fixture"}
    assert "Please approve or reject the tool call run_command()" in pending["hint"]
    assert question.data["choices"] == ["approve", "deny"]


@pytest.mark.parametrize(("text", "data", "confirmed", "fixture_name"), [
    ("yes", None, True, "stream_approved.txt"),
    ("Approve.", None, True, "stream_approved.txt"),
    ("", {"confirmed": False}, False, "stream_denied.txt"),
    ("", {"approved": False}, False, "stream_denied.txt"),
    ("no", None, False, "stream_denied.txt"),
])
async def test_the_answer_is_the_confirmations_function_response(
    text, data, confirmed, fixture_name
):
    question = await asked()
    backend = AdkBackend(recorded(fixture_name))
    handler = handler_for(backend)
    answer = session_request(text, data=[data] if data else [], pending_input=question.data)
    assert await handler.resume(answer) is False
    events = await collect(handler.run(answer))
    (run,) = backend.bodies("/run_sse")
    assert run["new_message"] == {"role": "user", "parts": [{"functionResponse": {
        "id": confirmation_id(), "name": "adk_request_confirmation",
        "response": {"confirmed": confirmed}}}]}
    assert isinstance(events[0], Progress) and events[0].kind == "tool_completed"
    expected = ('TOOL_RESULT_SEEN: {"result": "would run rm -rf scratch/fixture"}' if confirmed
                else 'TOOL_RESULT_SEEN: {"error": "This tool call is rejected."}')
    assert events[-1] == Completed(text=expected, metadata=events[-1].metadata)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == expected


async def test_an_unclear_answer_is_refused():
    question = await asked()
    backend = AdkBackend()
    with pytest.raises(InputRejectedError) as refused:
        await handler_for(backend).resume(session_request("perhaps", pending_input=question.data))
    assert "Answer yes (approve) or no (deny)" in refused.value.prompt
    assert refused.value.data == question.data and not backend.requests


# -- failures ------------------------------------------------------------------------------


async def test_an_llm_error_fails_with_adks_first_error():
    backend = AdkBackend(recorded("stream_llm_error.txt"))
    events = await collect(handler_for(backend).run(session_request("FAKE_HTTP_400")))
    assert events == [Failed("the ADK run failed: BadRequestError: litellm.BadRequestError: "
                             "OpenAIException - fakellm scripted bad request")]


async def test_the_api_key_is_sent_and_never_shown():
    key = "fakellm scripted"  # ADK's error text contains it: the reason must not
    backend = AdkBackend(recorded("stream_llm_error.txt"))
    events = await collect(handler_for(backend, adk_api_key=key).run(session_request("x")))
    assert backend.requests[0].headers["authorization"] == f"Bearer {key}"
    assert events == [Failed("the ADK run failed: BadRequestError: litellm.BadRequestError: "
                             "OpenAIException - *** bad request")]
    backend = AdkBackend(recorded("stream_plain.txt"))
    await collect(handler_for(backend, adk_api_key=API_KEY, adk_api_key_header="X-Api-Key")
                  .run(session_request()))
    assert backend.requests[0].headers["x-api-key"] == API_KEY
    assert "authorization" not in backend.requests[0].headers


async def test_a_lost_session_is_created_again_for_a_new_message():
    backend = AdkBackend(lambda: json_response(fixture("run_missing_session.json"), 404),
                         recorded("stream_plain.txt"))
    events = await collect(handler_for(backend).run(session_request()))
    assert isinstance(events[0], SessionUpdate) and isinstance(events[-1], Completed)
    assert [r.url.path for r in backend.requests] == [
        "/run_sse", "/apps/assistant/users/anonymous/sessions", "/run_sse"]


async def test_a_lost_session_fails_an_answer():
    question = await asked()
    backend = AdkBackend(lambda: json_response(fixture("run_missing_session.json"), 404))
    events = await collect(handler_for(backend).run(
        session_request("yes", pending_input=question.data)))
    assert events == [Failed("ADK no longer knows the session, so its question cannot be answered")]


async def test_a_stream_cut_after_tokens_fails():
    backend = AdkBackend(recorded("stream_slow_cut.txt"))
    events = await collect(handler_for(backend).run(session_request("FAKE_SLOW")))
    assert isinstance(events[0], TextDelta)
    assert events[-1] == Failed("ADK ended the stream before the answer was complete")


@pytest.mark.parametrize(("data", "detail"), [
    ("not json", "data that is not JSON"),
    ('["a"]', "data that is not a JSON object"),
    ('{"content": {"parts": 3}}', "an event whose content has no list of parts"),
    ('{"content": "text"}', "an event whose content has no list of parts"),
])
async def test_a_frame_of_an_unknown_shape_fails(data, detail):
    backend = AdkBackend(lambda: sse_response(f"data: {data}\n\n".encode()))
    events = await collect(handler_for(backend).run(session_request()))
    assert events == [Failed(f"ADK sent an unexpected frame ({detail})")]


async def test_http_errors_and_an_empty_message():
    backend = AdkBackend(sessions=(("run_missing_session.json", 500),))
    events = await collect(handler_for(backend).run(handler_request("hi")))
    (failed,) = events
    assert failed.reason.startswith("ADK failed (HTTP 500): ")
    assert "Session not found: missing" in failed.reason
    events = await collect(handler_for(AdkBackend()).run(handler_request("  ")))
    assert events == [Rejected("the message has no text or data for ADK")]


def test_the_app_name_is_required():
    with pytest.raises(ValidationError, match="adk_app_name"):
        AdkSettings()


# -- cancel and message mode ---------------------------------------------------------------


async def test_closing_the_run_closes_the_stream():
    stream = TrackedStream(sse_chunks(fixture("stream_slow_cut.txt")), hang=True)
    backend = AdkBackend(lambda: sse_response(stream))
    events = handler_for(backend).run(session_request("FAKE_SLOW"))
    assert isinstance(await anext(events), TextDelta)
    assert isinstance(await anext(events), TextDelta)
    await events.aclose()
    assert stream.closed


async def test_message_mode_answers_with_one_message():
    backend = AdkBackend(recorded("stream_plain.txt"))
    events = await collect(handler_for(backend, response_mode="message").run(handler_request("hi")))
    assert [type(e) for e in events] == [SessionUpdate, Reply]
    assert events[-1].text == "Hello from fakellm. You said: hello there"
    backend = AdkBackend(recorded("stream_confirmation.txt"))
    events = await collect(handler_for(backend, response_mode="message").run(session_request("x")))
    assert isinstance(events[-1], Failed) and "use response_mode task" in events[-1].reason


def test_unexpected_frame_names_no_content():
    with pytest.raises(UnexpectedFrame) as error:
        RunEvents().feed(SSEFrame("", '{"content": {"parts": "secret-ish"}}'))
    assert "secret-ish" not in error.value.reason


async def test_a_run_past_its_time_bound_fails_and_closes_the_stream():
    stream = TrackedStream(sse_chunks(fixture("stream_slow_cut.txt"))[:2], hang=True)
    backend = AdkBackend(lambda: sse_response(stream))
    events = await collect(handler_for(backend, run_timeout_seconds=0.3).run(session_request("x")))
    assert [type(e) for e in events] == [TextDelta, TextDelta, Failed]
    assert events[-1].reason == "the ADK run exceeded run_timeout_seconds=0.3"
    assert stream.closed


def test_fields_of_other_types_are_read_as_empty():
    (frame,) = [f for f in frames("stream_confirmation.txt") if f.get("longRunningToolIds")]
    frame["actions"] = "x"
    frame["content"]["parts"][0]["functionCall"]["args"] = {"originalFunctionCall": 5}
    run = RunEvents()
    assert run.feed(SSEFrame("", json.dumps(frame))) == []
    question = run.outcome({})
    assert question.prompt == "Allow a tool()? Answer yes or no."
    assert question.data["adk_confirmations"][0]["args"] == {}
