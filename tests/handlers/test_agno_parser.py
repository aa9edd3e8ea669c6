"""AgnoHandler on frames recorded from a real Agno AgentOS (tests/backends/agno on the scripted
LLM, recorded with tests/backends/agno/record_fixtures.py), through the handler's real HTTP
path (``httpx.MockTransport``); no server needed."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from handlers.agno import AgnoHandler, AgnoRun, AgnoSettings
from handlers.base import (
    Canceled,
    Completed,
    Failed,
    InputRejectedError,
    InputRequired,
    Progress,
    Rejected,
    Reply,
    RunStarted,
    SessionUpdate,
    TextDelta,
)
from handlers.upstream import SSEFrame, UnexpectedFrame
from tests.handlers.openai_mock import TrackedStream, collect, json_response, sse_response
from tests.support.messages import handler_request

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agno"
API_KEY = "agno-secret-key-0123456789abcdef"
RUN_PATH = re.compile(r"^/agents/assistant/runs/([^/]+)$")


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def fixture_json(name: str) -> dict[str, Any]:
    return json.loads(fixture(name))


def frames(name: str) -> list[SSEFrame]:
    """A recorded stream as the upstream layer reads it."""
    out = []
    for block in fixture(name).decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields:
            out.append(SSEFrame(fields.get("event", ""), fields.get("data", "")))
    return out


def run_id_of(name: str) -> str:
    return frames(name)[0].object("Agno")["run_id"]


PAUSED_TOOLS = [{"tool_call_id": "call_1", "tool_name": "shell",
                 "tool_args": {"command": "rm -rf scratch/fixture"}}]


class AgnoBackend:
    """The AgentOS routes the handler uses, answered from recordings: ``stream`` answers
    ``POST .../runs`` and ``/continue``, ``states`` the run GETs in turn (the last repeats)."""

    def __init__(self, stream: Callable[[], httpx.Response], states: list[str] | None = None,
                 joins: list[str] | None = None) -> None:
        self.stream = stream
        self.states = list(states or ["run_completed.json"])
        self.joins = list(joins or ["resume_unknown_run.txt"])
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path, method = request.url.path, request.method
        if method == "POST" and path.endswith("/cancel"):
            return json_response({})
        if method == "POST" and path.endswith("/resume"):
            return sse_response(
                fixture(self.joins.pop(0) if len(self.joins) > 1 else self.joins[0])
            )
        if method == "POST" and (path.endswith("/runs") or path.endswith("/continue")):
            return self.stream()
        if method == "GET" and RUN_PATH.match(path):
            name = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            return json_response(fixture(name))
        return json_response({"detail": "Not Found"}, 404)

    def calls(self, method: str, suffix: str = "") -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path.endswith(suffix)]

    def forms(self, suffix: str) -> list[dict[str, str]]:
        return [dict(urllib.parse.parse_qsl(r.content.decode()))
                for r in self.calls("POST", suffix)]

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


def recorded(name: str) -> Callable[[], httpx.Response]:
    return lambda: sse_response(fixture(name))


def handler(http: httpx.AsyncClient, **settings: Any) -> AgnoHandler:
    values = {"agno_api_url": "http://agno.test", "agno_agent_id": "assistant",
              "poll_interval_seconds": 0.01, **settings}
    return AgnoHandler(AgnoSettings(**values), http)


async def run_on(backend: AgnoBackend, text: str = "hello agno", **fields: Any) -> list[Any]:
    settings = fields.pop("settings", {})
    async with backend.client() as http:
        return await collect(handler(http, **settings).run(handler_request(text, **fields)))


def of(kind: type, events: list[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


async def test_a_first_message_starts_a_background_run_in_the_context_session() -> None:
    backend = AgnoBackend(recorded("stream_plain.txt"))
    events = await run_on(backend, principal="alice")
    session = handler_request(principal="alice").backend_user(per_context=True)
    run_id = run_id_of("stream_plain.txt")
    assert events[:2] == [SessionUpdate({"agno_session_id": session}), RunStarted(run_id)]
    deltas = of(TextDelta, events)
    final = events[-1]
    assert isinstance(final, Completed) and len(deltas) == 5
    assert final.text == "".join(d.text for d in deltas) == "slow0 slow1 slow2 slow3 slow4"
    assert final.metadata == {"agno_run_id": run_id, "agno_session_id": session,
                              "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}
    (form,) = backend.forms("/agents/assistant/runs")
    assert form == {
        "message": "hello agno",
        "stream": "true",
        "background": "true",
        "session_id": session,
        "user_id": handler_request(principal="alice").backend_user(),
        "metadata": json.dumps({"a2a_task_id": "task-1", "a2a_context_id": "ctx-1",
                                "a2a_endpoint_id": "ep-1"}),
    }
    assert "alice" not in session
    assert not backend.calls("GET")  # the stream said it all


async def test_a_later_message_goes_to_the_session_in_memory_with_the_key() -> None:
    backend = AgnoBackend(recorded("stream_plain.txt"))
    events = await run_on(backend, session={"agno_session_id": "s-7"},
                          settings={"agno_api_key": API_KEY, "agno_agent_id": "helper"})
    assert not of(SessionUpdate, events)
    (call,) = backend.calls("POST", "/agents/helper/runs")
    assert call.headers["authorization"] == f"Bearer {API_KEY}"
    assert call.headers["content-type"] == "application/x-www-form-urlencoded"
    assert backend.forms("/runs")[0]["session_id"] == "s-7"


async def test_data_parts_go_with_the_text() -> None:
    backend = AgnoBackend(recorded("stream_plain.txt"))
    await run_on(backend, "look", data=[{"k": 1}])
    assert backend.forms("/runs")[0]["message"] == 'look\n{"k": 1}'


async def test_an_empty_message_is_rejected_without_a_call() -> None:
    backend = AgnoBackend(recorded("stream_plain.txt"))
    events = await run_on(backend, "")
    assert isinstance(events[-1], Rejected) and not backend.requests


async def test_a_paused_run_asks_to_confirm_its_tools() -> None:
    backend = AgnoBackend(recorded("stream_paused.txt"))
    events = await run_on(backend, "FAKE_TOOL_DANGER path=scratch/fixture")
    ask = events[-1]
    assert isinstance(ask, InputRequired)
    assert ask.prompt == ('Confirm the tool call shell(command="rm -rf scratch/fixture")? '
                          "Answer yes or no.")
    (tool,) = ask.data["tools"]
    assert tool["tool_name"] == "shell" and tool["tool_call_id"].startswith("call_")
    assert tool["tool_args"] == {"command": "rm -rf scratch/fixture"}
    assert ask.data["run_id"] == run_id_of("stream_paused.txt") and ask.data["choices"] == [
        "yes",
        "no",
    ]
    assert not of(TextDelta, events)


@pytest.mark.parametrize(
    ("text", "data", "confirmed"),
    [
        ("yes", [], True),
        ("Approve.", [], True),
        ("no", [], False),
        ("", [{"confirmed": False}], False),
        ("", [{"approved": True}], True),
        ("", [{"confirmed": {"call_1": True}}], True),
    ],
)
async def test_the_answer_continues_the_run_with_the_tool_confirmed_or_not(
    text, data, confirmed
) -> None:
    backend = AgnoBackend(recorded("stream_continue_confirmed.txt"))
    pending = {"run_id": "run-9", "tools": PAUSED_TOOLS, "choices": ["yes", "no"]}
    async with backend.client() as http:
        bridge = handler(http)
        request = handler_request(text, data=data, run_ref="run-9", pending_input=pending,
                                  session={"agno_session_id": "s-7"})
        assert await bridge.resume(request) is False
        events = await collect(bridge.run(request))
    (form,) = backend.forms("/agents/assistant/runs/run-9/continue")
    assert json.loads(form.pop("tools")) == [{**PAUSED_TOOLS[0], "requires_confirmation": True,
                                              "confirmed": confirmed}]
    assert form == {"stream": "true", "background": "true", "session_id": "s-7",
                    "user_id": request.backend_user()}
    assert not of(RunStarted, events)  # the same run, already known
    assert [(p.kind, p.data["tool"]) for p in of(Progress, events)] == [
        ("tool_started", "shell"), ("tool_completed", "shell")]
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.text == "TOOL_RESULT_SEEN: would run rm -rf scratch/fixture"
    assert final.text == "".join(d.text for d in of(TextDelta, events))


async def test_a_rejected_tool_is_reported_by_the_model() -> None:
    backend = AgnoBackend(recorded("stream_continue_rejected.txt"))
    events = await run_on(backend, "no", run_ref="run-9", pending_input={"tools": PAUSED_TOOLS})
    assert not of(Progress, events)  # the tool never ran
    assert events[-1].text == "TOOL_RESULT_SEEN: Function call was rejected by the user"


@pytest.mark.parametrize(("text", "data"), [("maybe", []), ("", [{"confirmed": "perhaps"}]),
                                            ("", [{"confirmed": {"other": True}}]), ("", [])])
async def test_an_unclear_answer_is_refused(text, data) -> None:
    backend = AgnoBackend(recorded("stream_continue_confirmed.txt"))
    pending = {"tools": PAUSED_TOOLS}
    async with backend.client() as http:
        with pytest.raises(InputRejectedError) as refused:
            await handler(http).resume(handler_request(text, data=data, run_ref="r",
                                                       pending_input=pending))
    assert "Answer yes or no" in refused.value.prompt and refused.value.data == pending
    assert not backend.requests


async def test_run_cancelled_ends_the_task_and_the_run_completed_after_it_is_ignored() -> None:
    assert [f.event for f in frames("stream_cancelled.txt")[-2:]] == [
        "RunCancelled",
        "RunCompleted",
    ]
    backend = AgnoBackend(recorded("stream_cancelled.txt"))
    events = await run_on(backend, "FAKE_SLOW stop me")
    assert events[-1] == Canceled("the Agno run was cancelled")
    assert not of(Completed, events)
    assert "".join(d.text for d in of(TextDelta, events)) == "slow0 slow1 slow2"
    assert not backend.calls("GET")


async def test_cancel_posts_the_cancel_route_of_the_run() -> None:
    backend = AgnoBackend(recorded("stream_plain.txt"))
    async with backend.client() as http:
        assert await handler(http).cancel(handler_request(run_ref="run-9",
                                                          session={"agno_session_id": "s-7"}))
        assert not await handler(http).cancel(handler_request())
    (call,) = backend.calls("POST", "/cancel")
    assert call.url.path == "/agents/assistant/runs/run-9/cancel"
    assert call.url.params["session_id"] == "s-7"


async def test_a_run_error_fails_with_its_message() -> None:
    backend = AgnoBackend(recorded("stream_error.txt"))
    events = await run_on(backend, "FAKE_HTTP_400 broken")
    assert events[-1] == Failed("the Agno run failed: fakellm scripted bad request")


@pytest.mark.parametrize(("name", "reason"), [
    ("error_unknown_agent.json", "Agno rejected the request (HTTP 404): Agent not found"),
    ("error_no_key.json",
     "Agno rejected the API key (HTTP 401); check the endpoint's API key setting"),
])
async def test_http_errors_fail_with_a_reason_without_the_key(name, reason) -> None:
    recorded_error = fixture_json(name)
    backend = AgnoBackend(lambda: json_response(recorded_error["body"], recorded_error["status"]))
    events = await run_on(backend, settings={"agno_api_key": API_KEY})
    assert events[-1] == Failed(reason)
    assert API_KEY not in repr(events)


async def test_a_broken_stream_is_joined_again_after_the_last_event_seen() -> None:
    head = fixture("resume_ended.txt").split(b"event: RunContent")[0]  # replay, RunStarted, ...
    head = head.split(b"\n\n", 1)[1]  # as the run's own stream: no replay note
    backend = AgnoBackend(lambda: sse_response(TrackedStream([head])), ["run_running.json"],
                          joins=["resume_running.txt"])
    events = await run_on(backend)
    (join,) = backend.forms("/resume")
    assert join == {"session_id": handler_request().backend_user(per_context=True),
                    "last_event_index": "1"}
    assert backend.calls("POST", "/resume")[0].url.path.endswith(
        f"/runs/{run_id_of('resume_ended.txt')}/resume")
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.text == "".join(d.text for d in of(TextDelta, events))
    assert final.text.endswith(" slow7")
    assert len(of(RunStarted, events)) == 1


async def test_a_run_that_cannot_be_replayed_is_read_until_it_ended() -> None:
    head = fixture("stream_plain.txt").split(b"event: RunContent")[0]  # RunStarted, ModelRequest
    backend = AgnoBackend(lambda: sse_response(TrackedStream([head])),
                          ["run_running.json", "run_completed.json"])
    events = await run_on(backend)
    final = events[-1]
    assert (
        isinstance(final, Completed) and final.text == fixture_json("run_completed.json")["content"]
    )
    reads = backend.calls("GET")
    assert len(reads) == 2 and reads[0].url.params["session_id"]
    assert len(backend.calls("POST", "/resume")) == 1  # answered with Agno's error frame


async def test_reattach_replays_the_whole_run() -> None:
    backend = AgnoBackend(recorded("stream_plain.txt"), joins=["resume_ended.txt"])
    async with backend.client() as http:
        events = await collect(handler(http).reattach(
            handler_request(run_ref=run_id_of("resume_ended.txt"),
                            session={"agno_session_id": "s-7"})))
    assert backend.forms("/resume") == [{"session_id": "s-7"}]  # from the first event
    assert not of(RunStarted, events) and not backend.calls("GET")
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.text == "".join(d.text for d in of(TextDelta, events)) == " ".join(
        f"slow{i}" for i in range(8))


@pytest.mark.parametrize(("state", "expected"), [
    ("run_completed.json", Completed), ("run_paused.json", InputRequired),
    ("run_cancelled.json", Canceled), ("run_error.json", Failed),
])
async def test_reattach_reads_a_run_it_cannot_join_until_it_ended(state, expected) -> None:
    backend = AgnoBackend(recorded("stream_plain.txt"), ["run_running.json", state])
    async with backend.client() as http:
        events = await collect(handler(http).reattach(
            handler_request(run_ref="run-9", session={"agno_session_id": "s-7"})))
    (event,) = events
    assert isinstance(event, expected)
    assert [r.url.path for r in backend.calls("GET")] == ["/agents/assistant/runs/run-9"] * 2
    if expected is Failed:
        assert event.reason == "the Agno run failed: fakellm scripted bad request"
    if expected is InputRequired:
        assert event.data["tools"][0]["tool_args"] == {"command": "rm -rf scratch/fixture"}


async def test_a_run_the_server_forgot_fails_the_reattached_task() -> None:
    gone = fixture_json("error_unknown_run.json")
    async with httpx.AsyncClient(transport=httpx.MockTransport(
            lambda request: json_response(gone["body"], gone["status"]))) as http:
        events = await collect(handler(http).reattach(handler_request(run_ref="gone")))
    assert events == [Failed("Agno no longer knows run gone")]


async def test_message_mode_answers_with_a_reply() -> None:
    backend = AgnoBackend(recorded("stream_plain.txt"))
    events = await run_on(backend, settings={"response_mode": "message"})
    assert [type(e) for e in events] == [SessionUpdate, Reply]
    assert events[-1].text == "slow0 slow1 slow2 slow3 slow4"


async def test_frames_of_unknown_shapes_fail_and_cancel_the_run() -> None:
    head = fixture("stream_plain.txt").split(b"event: RunContent")[0]
    backend = AgnoBackend(
        lambda: sse_response(TrackedStream([head, b"event: RunContent\ndata: [1]\n\n"]))
    )
    events = await run_on(backend)
    assert events[-1] == Failed("Agno sent an unexpected frame (data that is not a JSON object)")
    assert backend.calls("POST", "/cancel")
    with pytest.raises(UnexpectedFrame):
        AgnoRun("s").feed(SSEFrame("RunStarted", "{}"))
    with pytest.raises(UnexpectedFrame):
        AgnoRun("s").feed(SSEFrame("RunPaused", '{"tools": 3}'))


@pytest.mark.parametrize("tool", [
    {"requires_user_input": True},
    {"external_execution_required": True},
    {"requires_confirmation": True, "confirmed": None, "approval_type": "required"},
])
def test_a_run_paused_for_anything_but_a_confirmation_cannot_be_answered(tool) -> None:
    run = AgnoRun("s", run_id="r")
    run.feed(SSEFrame("RunPaused", json.dumps({"tools": [
        {"tool_call_id": "c", "tool_name": "ask", **tool}]})))
    assert isinstance(run.terminal, Failed) and "only confirmations" in run.terminal.reason


def test_the_agent_id_is_required() -> None:
    with pytest.raises(ValidationError):
        AgnoSettings()


async def test_a_run_past_its_time_bound_is_canceled_and_fails() -> None:
    head = fixture("stream_plain.txt").split(b"event: RunContent")[0]
    backend = AgnoBackend(lambda: sse_response(TrackedStream([head], hang=True)))
    events = await run_on(backend, settings={"run_timeout_seconds": 0.3})
    assert events[-1] == Failed("the Agno run exceeded run_timeout_seconds=0.3")
    (cancel,) = backend.calls("POST", "/cancel")
    assert cancel.url.path == f"/agents/assistant/runs/{run_id_of('stream_plain.txt')}/cancel"


async def test_the_agent_id_is_one_path_segment() -> None:
    backend = AgnoBackend(recorded("stream_plain.txt"))
    await run_on(backend, settings={"agno_agent_id": "team/a b"})
    (call,) = backend.calls("POST")
    assert call.url.raw_path == b"/agents/team%2Fa%20b/runs"


async def test_a_failure_reason_never_shows_the_key() -> None:
    leaky = fixture("stream_error.txt").replace(b"fakellm scripted bad request", API_KEY.encode())
    backend = AgnoBackend(lambda: sse_response(leaky))
    events = await run_on(backend, settings={"agno_api_key": API_KEY})
    assert events[-1] == Failed("the Agno run failed: ***")
