"""LangGraphHandler on frames recorded from a real LangGraph Agent Server (``langgraph dev``
serving tests/backends/langgraph against the scripted LLM), through the handler's real HTTP
path (``httpx.MockTransport``); no server needed."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

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
from handlers.langgraph import LangGraphHandler, LangGraphSettings, RunStream
from handlers.upstream import SSEFrame, UnexpectedFrame
from tests.handlers.openai_mock import TrackedStream, collect, json_response, sse_response
from tests.support.messages import handler_request

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "langgraph"
API_KEY = "lsv2-secret-key-0123456789abcdef"
RUN_PATH = re.compile(r"^/threads/([^/]+)/runs/([^/]+)$")


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def fixture_json(name: str) -> dict[str, Any]:
    return json.loads(fixture(name))


CREATED = fixture_json("thread_created.json")["thread_id"]


def sse_events(raw: bytes) -> list[bytes]:
    """A recorded stream cut into its events (LangGraph ends lines with CRLF)."""
    return [event + b"\r\n\r\n" for event in raw.split(b"\r\n\r\n") if event.strip()]


def run_id_of(stream_name: str) -> str:
    return re.search(rb'"run_id":"([^"]+)"', fixture(stream_name)).group(1).decode()


class LangGraphBackend:
    """The routes of a LangGraph server the handler uses, answered from recordings;
    ``stream`` answers ``POST /threads/{id}/runs/stream``, ``statuses`` the run status GETs
    in turn (the last one repeats)."""

    def __init__(self, stream: Callable[[], httpx.Response], statuses: list[str] | None = None, *,
                 join: Callable[[httpx.Request], httpx.Response] | None = None,
                 thread: str = "thread_completed.json") -> None:
        self.stream = stream
        self.statuses = list(statuses or ["run_success.json"])
        self.join = join
        self.thread = thread
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path, method = request.url.path, request.method
        if method == "POST" and path == "/threads":
            return json_response(fixture("thread_created.json"))
        if method == "POST" and path.endswith("/runs/stream"):
            return self.stream()
        if method == "POST" and path.endswith("/cancel"):
            return httpx.Response(202)
        if method == "GET" and path.endswith("/stream"):
            assert self.join is not None, "the handler joined a run it should not have"
            return self.join(request)
        if method == "GET" and RUN_PATH.match(path):
            name = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
            return json_response(fixture(name))
        if method == "GET" and path.startswith("/threads/"):
            return json_response(fixture(self.thread))
        return json_response({"detail": "Not Found"}, 404)

    def calls(self, method: str, suffix: str = "") -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path.endswith(suffix)]

    def bodies(self, suffix: str) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.calls("POST", suffix)]

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


def recorded(name: str) -> Callable[[], httpx.Response]:
    return lambda: sse_response(fixture(name))


def handler(http: httpx.AsyncClient, **settings: Any) -> LangGraphHandler:
    values = {"langgraph_api_url": "http://langgraph.test", "poll_interval_seconds": 0.01,
              **settings}
    return LangGraphHandler(LangGraphSettings(**values), http)


async def run_on(
    backend: LangGraphBackend, text: str = "hello langgraph", **fields: Any
) -> list[Any]:
    settings = fields.pop("settings", {})
    async with backend.client() as http:
        return await collect(handler(http, **settings).run(handler_request(text, **fields)))


def of(kind: type, events: list[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


async def test_a_first_message_creates_a_thread_and_streams_the_answer() -> None:
    backend = LangGraphBackend(recorded("stream_plain.txt"))
    events = await run_on(backend, principal="alice")
    run_id = run_id_of("stream_plain.txt")
    assert events[:2] == [SessionUpdate({"langgraph_thread_id": CREATED}),
                          RunStarted(f"{CREATED}:{run_id}")]
    deltas = of(TextDelta, events)
    final = events[-1]
    assert isinstance(final, Completed) and len(deltas) == 7
    assert (
        final.text
        == "".join(d.text for d in deltas)
        == "Hello from fakellm. You said: hello langgraph"
    )
    assert final.metadata == {"langgraph_thread_id": CREATED, "langgraph_run_id": run_id,
                              "usage": {"input_tokens": 10, "output_tokens": 7, "total_tokens": 17}}
    (thread,) = backend.bodies("/threads")
    owner = thread["metadata"]["a2a_owner"]
    assert owner.startswith("a2a-") and "alice" not in owner
    (body,) = backend.bodies("/runs/stream")
    assert body == {"assistant_id": "agent", "stream_mode": ["messages-tuple", "updates"],
                    "stream_resumable": True, "on_disconnect": "continue",
                    "metadata": {"a2a_task_id": "task-1", "a2a_context_id": "ctx-1",
                                 "a2a_endpoint_id": "ep-1"},
                    "input": {"messages": [{"role": "user", "content": "hello langgraph"}]}}
    assert backend.calls("GET", f"/runs/{run_id}")  # the outcome was read from the run's status


async def test_a_later_message_goes_to_the_context_thread() -> None:
    backend = LangGraphBackend(recorded("stream_plain.txt"))
    events = await run_on(
        backend,
        session={"langgraph_thread_id": "thread-7"},
        settings={
            "langgraph_assistant_id": "support",
            "langgraph_stream_mode": ["messages-tuple", "updates", "custom"],
        },
    )
    assert not of(SessionUpdate, events) and not backend.calls("POST", "/threads")
    (stream,) = backend.calls("POST", "/runs/stream")
    assert stream.url.path == "/threads/thread-7/runs/stream"
    body = json.loads(stream.content)
    assert body["assistant_id"] == "support"
    assert body["stream_mode"] == ["messages-tuple", "updates", "custom"]
    assert isinstance(events[-1], Completed)


async def test_an_interrupt_asks_for_input_with_its_id() -> None:
    backend = LangGraphBackend(recorded("stream_interrupt.txt"))
    events = await run_on(backend, "FAKE_TOOL_DANGER path=scratch/target")
    ask = events[-1]
    assert isinstance(ask, InputRequired)
    assert ask.prompt == "Run `rm -rf scratch/target`?"
    (interrupt,) = ask.data["interrupts"]
    assert re.fullmatch(r"[0-9a-f]{32}", interrupt["id"])
    assert interrupt["value"] == {"question": "Run `rm -rf scratch/target`?",
                                  "command": "rm -rf scratch/target"}
    (tool,) = of(Progress, events)
    assert tool.kind == "tool_started" and tool.data["tool"] == "shell"
    assert not of(TextDelta, events)


async def test_the_answer_resumes_the_thread_with_a_command() -> None:
    pending = {"interrupts": [{"id": "5e91efdb23b0a7d819a350ac9f86e3d0", "value": {}}]}
    backend = LangGraphBackend(recorded("stream_resume_denied.txt"))
    events = await run_on(backend, "no", session={"langgraph_thread_id": "thread-7"},
                          pending_input=pending)
    (body,) = backend.bodies("/runs/stream")
    assert body["command"] == {"resume": "no"} and "input" not in body
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.text == "TOOL_RESULT_SEEN: denied by the user: rm -rf scratch/target"
    assert final.text == "".join(d.text for d in of(TextDelta, events))
    (done,) = of(Progress, events)
    assert done.kind == "tool_completed" and done.data["tool"] == "shell"
    assert done.data["status"] == "success"


async def test_a_data_answer_resumes_with_the_object_and_several_interrupts_by_id() -> None:
    one = {"interrupts": [{"id": "a", "value": "ok?"}]}
    two = {"interrupts": [{"id": "a", "value": "ok?"}, {"id": "b", "value": "sure?"}]}
    backend = LangGraphBackend(recorded("stream_resume_denied.txt"))
    await run_on(backend, "", data=[{"approved": True}], session={"langgraph_thread_id": "t"},
                 pending_input=one)
    await run_on(backend, "yes", session={"langgraph_thread_id": "t"}, pending_input=two)
    await run_on(backend, "", data=[{"a": 1, "b": 2}], session={"langgraph_thread_id": "t"},
                 pending_input=two)
    resumes = [b["command"]["resume"] for b in backend.bodies("/runs/stream")]
    assert resumes == [{"approved": True}, {"a": "yes", "b": "yes"}, {"a": 1, "b": 2}]


async def test_an_error_event_fails_the_task() -> None:
    backend = LangGraphBackend(recorded("stream_error.txt"), ["run_error.json"])
    events = await run_on(backend, "FAKE_HTTP_400")
    assert events[-1] == Failed(
        "the LangGraph run failed: OpenAIInvalidRequestError: An internal error occurred")


async def test_a_failed_run_without_its_error_event_reads_the_thread_error() -> None:
    metadata_only = sse_events(fixture("stream_error.txt"))[0]
    backend = LangGraphBackend(lambda: sse_response(metadata_only), ["run_error.json"],
                               thread="thread_error.json")
    events = await run_on(backend, "FAKE_HTTP_400")
    assert events[-1] == Failed(
        "the LangGraph run failed: OpenAIInvalidRequestError: An internal error occurred")


async def test_a_stream_that_just_closes_after_a_cancel_ends_canceled() -> None:
    backend = LangGraphBackend(recorded("stream_canceled.txt"), ["run_interrupted.json"])
    events = await run_on(backend, "FAKE_SLOW words=20 delay=0.2")
    assert len(of(TextDelta, events)) == 4  # what streamed before the cancel
    assert events[-1] == Canceled("the LangGraph run was interrupted")


async def test_a_stream_cut_mid_run_is_joined_after_its_last_event() -> None:
    chunks = sse_events(fixture("stream_plain.txt"))
    head, tail = chunks[:5], chunks[5:]
    last_id = re.search(rb"\nid: (\S+)", head[-1]).group(1).decode()
    joined: list[httpx.Request] = []

    def join(request: httpx.Request) -> httpx.Response:
        joined.append(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=TrackedStream(tail))

    backend = LangGraphBackend(lambda: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=TrackedStream(head)),
        ["run_running.json", "run_success.json"], join=join)
    events = await run_on(backend)
    (request,) = joined
    assert request.headers["last-event-id"] == last_id
    assert json.loads(request.url.params["stream_mode"]) == ["messages-tuple", "updates"]
    final = events[-1]
    # the in-memory server numbers events per millisecond, so a resumed stream may skip some:
    # the answer comes from the thread
    assert isinstance(final, Completed)
    assert final.text == "Hello from fakellm. You said: hello langgraph"
    assert backend.calls("GET", f"/threads/{CREATED}")


async def test_reattach_replays_the_run_from_its_first_event() -> None:
    backend = LangGraphBackend(recorded("stream_plain.txt"),
                               join=lambda request: sse_response(fixture("join_replay.txt")))
    run_id = run_id_of("stream_plain.txt")
    async with backend.client() as http:
        events = await collect(
            handler(http).reattach(handler_request(run_ref=f"{CREATED}:{run_id}"))
        )
    (join,) = backend.calls("GET", "/stream")
    assert join.url.path == f"/threads/{CREATED}/runs/{run_id}/stream"
    assert join.headers["last-event-id"] == "0"
    assert not of(RunStarted, events) and not backend.calls("POST")
    final = events[-1]
    assert (
        isinstance(final, Completed)
        and final.text == "Hello from fakellm. You said: hello langgraph"
    )
    assert final.text == "".join(d.text for d in of(TextDelta, events))


@pytest.mark.parametrize(("thread", "expected"), [
    ("thread_completed.json", Completed),
    ("thread_interrupted.json", InputRequired),
])
async def test_reattach_without_replayed_events_reads_the_thread(thread, expected) -> None:
    backend = LangGraphBackend(recorded("stream_plain.txt"), thread=thread,
                               join=lambda request: sse_response(b""))
    async with backend.client() as http:
        events = await collect(handler(http).reattach(handler_request(run_ref="t-1:r-1")))
    final = events[-1]
    assert isinstance(final, expected)
    if expected is Completed:
        assert final.text == "Hello from fakellm. You said: hello langgraph"
    else:
        assert final.prompt == "Run `rm -rf scratch/target`?"


async def test_a_thread_the_server_lost_is_replaced() -> None:
    lost = {"n": 0}

    def stream() -> httpx.Response:
        lost["n"] += 1
        if lost["n"] == 1:
            return json_response(fixture("runs_stream_missing_thread.json"), 404)
        return sse_response(fixture("stream_plain.txt"))

    backend = LangGraphBackend(stream, thread="thread_missing.json")
    backend_thread = backend.__call__

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/threads/gone":
            backend.requests.append(request)
            return json_response(fixture("thread_missing.json"), 404)
        return backend_thread(request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        events = await collect(handler(http).run(handler_request(
            "hello", session={"langgraph_thread_id": "gone"})))
    assert of(SessionUpdate, events) == [SessionUpdate({"langgraph_thread_id": CREATED})]
    paths = [r.url.path for r in backend.calls("POST", "/runs/stream")]
    assert paths == ["/threads/gone/runs/stream", f"/threads/{CREATED}/runs/stream"]
    assert isinstance(events[-1], Completed)


async def test_an_answer_to_a_lost_thread_fails() -> None:
    backend = LangGraphBackend(
        lambda: json_response(fixture("runs_stream_missing_thread.json"), 404)
    )

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/threads/gone":
            return json_response(fixture("thread_missing.json"), 404)
        return backend(request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        events = await collect(handler(http).run(handler_request(
            "yes", session={"langgraph_thread_id": "gone"},
            pending_input={"interrupts": [{"id": "a", "value": "ok?"}]})))
    assert events == [
        Failed("LangGraph no longer knows thread gone, so its question cannot be answered")
    ]


async def test_an_unknown_assistant_fails_with_the_servers_detail() -> None:
    backend = LangGraphBackend(lambda: json_response(
        {"detail": "Invalid assistant: 'nope'. Must be either a valid assistant UUID or one of "
                   "the registered graphs: agent"}, 422))
    events = await run_on(backend, settings={"langgraph_assistant_id": "nope"})
    (failed,) = of(Failed, events)
    assert "LangGraph rejected the request (HTTP 422)" in failed.reason
    assert "Invalid assistant: 'nope'" in failed.reason


async def test_the_api_key_is_sent_and_never_shown() -> None:
    backend = LangGraphBackend(lambda: json_response({"detail": f"bad key {API_KEY}"}, 500))
    events = await run_on(backend, settings={"langgraph_api_key": API_KEY})
    assert all(r.headers["x-api-key"] == API_KEY for r in backend.requests)
    (failed,) = of(Failed, events)
    assert "LangGraph failed (HTTP 500)" in failed.reason and API_KEY not in failed.reason


async def test_a_frame_of_an_unknown_shape_fails_and_cancels_the_run() -> None:
    head = sse_events(fixture("stream_plain.txt"))[0]
    bad = head + b'event: messages\r\ndata: {"not": "a tuple"}\r\n\r\n'
    backend = LangGraphBackend(lambda: sse_response(bad))
    events = await run_on(backend)
    assert events[-1] == Failed(
        "LangGraph sent an unexpected frame (a messages event that is not [message, metadata])")
    (cancel,) = backend.calls("POST", "/cancel")
    assert cancel.url.params["action"] == "interrupt"


async def test_a_run_past_its_time_bound_fails_and_is_canceled() -> None:
    head = sse_events(fixture("stream_plain.txt"))[:2]
    backend = LangGraphBackend(lambda: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=TrackedStream(head, hang=True)))
    events = await asyncio.wait_for(run_on(backend, settings={"run_timeout_seconds": 0.5}), 10)
    assert events[-1] == Failed("the LangGraph run exceeded run_timeout_seconds=0.5")
    assert len(backend.calls("POST", "/cancel")) == 1


async def test_cancel_interrupts_the_run_and_says_so() -> None:
    backend = LangGraphBackend(recorded("stream_plain.txt"))
    async with backend.client() as http:
        lg = handler(http)
        assert await lg.cancel(handler_request(run_ref="t-1:r-1")) is True
        assert await lg.cancel(handler_request(run_ref=None)) is False
    (cancel,) = backend.calls("POST", "/cancel")
    assert cancel.url.path == "/threads/t-1/runs/r-1/cancel"
    assert cancel.url.params["action"] == "interrupt"


async def test_cancel_of_a_run_the_server_does_not_know_lets_the_gateway_end_the_task() -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(
            lambda request: json_response({"detail": "Run not found"}, 404))) as http:
        assert await handler(http).cancel(handler_request(run_ref="t-1:r-1")) is False


async def test_an_empty_answer_is_refused_and_an_empty_message_rejected() -> None:
    backend = LangGraphBackend(recorded("stream_plain.txt"))
    async with backend.client() as http:
        lg = handler(http)
        with pytest.raises(InputRejectedError):
            await lg.resume(handler_request("  ", pending_input={"interrupts": []}))
        assert await lg.resume(handler_request("yes")) is False
        events = await collect(lg.run(handler_request("")))
    assert events == [Rejected("the message has no text or data for LangGraph")]
    assert not backend.requests


async def test_message_mode_replies_with_the_answer_only() -> None:
    backend = LangGraphBackend(recorded("stream_plain.txt"))
    events = await run_on(backend, settings={"response_mode": "message"})
    assert events[0] == SessionUpdate({"langgraph_thread_id": CREATED})
    assert isinstance(events[1], Reply) and len(events) == 2
    assert events[1].text == "Hello from fakellm. You said: hello langgraph"
    asked = await run_on(LangGraphBackend(recorded("stream_interrupt.txt")),
                         settings={"response_mode": "message"})
    assert isinstance(asked[-1], Failed) and "response_mode message" in asked[-1].reason


@pytest.mark.parametrize(
    "modes", [["messages-tuple"], ["messages", "updates"], ["updates", "nope"]]
)
def test_stream_modes_without_updates_or_unknown_are_refused(modes) -> None:
    with pytest.raises(ValidationError):
        LangGraphSettings(langgraph_stream_mode=modes)


def test_parser_ignores_tool_messages_and_the_whole_message_after_its_tokens() -> None:
    stream = RunStream("t")
    meta = {"langgraph_node": "chat"}

    def frame(chunk: dict[str, Any]) -> SSEFrame:
        return SSEFrame("messages", json.dumps([chunk, meta]))

    assert stream.feed(frame({"type": "tool", "content": "result", "id": "m0"})) == []
    assert stream.feed(frame({"type": "AIMessageChunk", "content": "Hi", "id": "m1"})) == [
        TextDelta("Hi")
    ]
    assert stream.feed(frame({"type": "ai", "content": "Hi", "id": "m1"})) == []
    assert stream.feed(frame({"type": "ai", "content": [{"type": "text", "text": "Yo"}],
                              "id": "m2"})) == [TextDelta("Yo")]
    assert stream.final_text == "Yo"
    with pytest.raises(UnexpectedFrame):
        stream.feed(SSEFrame("metadata", json.dumps({"run_id": 7})))
    assert stream.feed(SSEFrame("custom", json.dumps(["step", 1]))) == [
        Progress("custom", data={"value": ["step", 1]})]
