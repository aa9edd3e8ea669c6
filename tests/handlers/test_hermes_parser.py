"""Hermes event mapping and handler logic on frames recorded from hermes-agent 0.19.0.

No network: the mapper is fed the recorded events, and the handler talks to an
``httpx.MockTransport`` that replays them.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from email.utils import formatdate
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from handlers.base import (
    Canceled,
    Completed,
    Failed,
    HandlerRequest,
    InputRejectedError,
    InputRequired,
    Progress,
    Reply,
    RunStarted,
    SessionUpdate,
    TextDelta,
    Turn,
)
from handlers.hermes import HermesAgentHandler, HermesSettings
from handlers.hermes_events import HERMES_CHOICES, RunEventMapper, parse_frames
from handlers.openai_chat import OpenAIChatHandler, OpenAIChatSettings
from handlers.upstream import UnexpectedFrame
from tests.support.messages import handler_request
from tests.support.waiting import eventually

FIXTURES = Path(__file__).parent.parent / "fixtures" / "hermes"
KEY = "hermes-unit-test-key-0123456789"
_OFFSET = re.compile(r"^\[\s*[\d.]+s\] ?")


class Recording:
    """A recorded run: the POST answer, the event stream and the final GET snapshot."""

    def __init__(self, name: str) -> None:
        sse: list[str] = []
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        heading = ""
        for raw in (FIXTURES / name).read_text().splitlines():
            line = _OFFSET.sub("", raw)
            if line.startswith("# "):
                heading = line
            elif line.startswith("{"):
                self.bodies.append((heading, json.loads(line)))
            else:
                sse.append(line)
        self.sse = "\n".join(sse) + "\n"
        self.events = list(parse_frames(self.sse.splitlines()))
        self.run_id = self.events[0]["run_id"]
        snapshots = [b for h, b in self.bodies if h.startswith("# GET")]
        self.snapshot = snapshots[-1] if snapshots else None


def feed_all(name: str, choices: tuple[str, ...] = HERMES_CHOICES) -> tuple[Recording, list[Any]]:
    rec = Recording(name)
    mapper = RunEventMapper(rec.run_id, choices)
    out: list[Any] = []
    for event in rec.events:
        out += mapper.feed(event)
    return rec, out


def text_of(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


# -- the mapper on recorded streams ---------------------------------------------------


def test_parse_frames_reads_data_lines_and_skips_comments() -> None:
    rec = Recording("runs_plain.txt")
    assert [e["event"] for e in rec.events][-2:] == ["reasoning.available", "run.completed"]
    assert all("run_id" in e and "timestamp" in e for e in rec.events)


def test_plain_run_streams_deltas_whose_concatenation_is_the_output() -> None:
    rec, events = feed_all("runs_plain.txt")
    final = events[-1]
    assert isinstance(final, Completed)
    assert text_of(events) == final.text == "Hello from fakellm. You said: hello runs"
    assert final.metadata["usage"] == {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    assert final.metadata["hermes_run_id"] == rec.run_id


def test_reasoning_available_never_reaches_the_answer() -> None:
    _, events = feed_all("runs_plain.txt")
    assert [type(e) for e in events].count(Completed) == 1
    assert not any(isinstance(e, Progress) for e in events)


def test_safe_tool_reports_tool_progress_and_drops_the_leading_newlines() -> None:
    _, events = feed_all("runs_safe_tool.txt")
    progress = [e for e in events if isinstance(e, Progress)]
    assert [p.kind for p in progress] == ["tool_started", "tool_completed"]
    assert progress[0].data == {"tool": "terminal", "preview": "echo fake-safe-ok"}
    assert progress[1].data == {"tool": "terminal", "duration": 0.011, "error": False}
    assert text_of(events) == events[-1].text
    assert events[-1].text.startswith("TOOL_RESULT_SEEN:")


def test_approval_request_becomes_input_required_with_command_and_choices() -> None:
    _, events = feed_all("runs_approve_once_manual.txt")
    asks = [e for e in events if isinstance(e, InputRequired)]
    assert len(asks) == 1
    assert asks[0].data["command"] == "rm -rf /tmp/realbk/x"
    assert asks[0].data["description"] == "delete in root path"
    assert asks[0].data["choices"] == ["once", "session", "always", "deny"]
    assert "rm -rf /tmp/realbk/x" in asks[0].prompt
    kinds = [e.kind for e in events if isinstance(e, Progress)]
    assert kinds == ["tool_started", "approval_responded", "tool_completed"]
    assert isinstance(events[-1], Completed)


def test_approval_choices_are_narrowed_to_the_allowed_ones() -> None:
    _, events = feed_all("runs_approve_once_manual.txt", ("once", "deny"))
    ask = next(e for e in events if isinstance(e, InputRequired))
    assert ask.data["choices"] == ["once", "deny"]
    assert "once, deny" in ask.prompt


def test_deny_marks_the_tool_failed_and_the_run_still_completes() -> None:
    _, events = feed_all("runs_deny.txt")
    done = [e for e in events if isinstance(e, Progress) and e.kind == "tool_completed"]
    assert done[0].data["error"] is True
    assert isinstance(events[-1], Completed)


def test_run_failed_carries_the_error_text() -> None:
    _, events = feed_all("runs_failed.txt")
    assert events == [Failed("Hermes run failed: HTTP 400: fakellm scripted bad request")]


def test_stop_during_approval_expires_the_approval_then_cancels() -> None:
    _, events = feed_all("runs_stop_at_approval.txt")
    kinds = [getattr(e, "kind", type(e).__name__) for e in events]
    assert kinds == ["tool_started", "InputRequired", "approval_expired", "tool_completed",
                     "Canceled"]


def test_stop_while_streaming_cancels() -> None:
    _, events = feed_all("runs_stop_slow.txt")
    assert text_of(events) == "slow0 slow1 slow2"
    assert isinstance(events[-1], Canceled)


def test_approval_timeout_expires_the_approval_and_completes() -> None:
    _, events = feed_all("runs_approval_timeout.txt")
    kinds = [e.kind for e in events if isinstance(e, Progress)]
    assert kinds == ["tool_started", "approval_expired", "tool_completed"]
    assert "timed out" in events[-1].text


def test_nothing_is_emitted_after_the_terminal_event() -> None:
    rec = Recording("runs_plain.txt")
    mapper = RunEventMapper(rec.run_id)
    for event in rec.events:
        mapper.feed(event)
    assert mapper.feed(rec.events[0]) == []
    assert mapper.feed_status(rec.snapshot) == []


@pytest.mark.parametrize(("name", "expected"), [
    ("runs_plain.txt", Completed), ("runs_stop_at_approval.txt", Canceled),
    ("runs_approval_timeout.txt", Completed),
])
def test_run_snapshots_map_to_terminal_events(name: str, expected: type) -> None:
    rec = Recording(name)
    events = RunEventMapper(rec.run_id).feed_status(rec.snapshot)
    assert len(events) == 1 and isinstance(events[0], expected)
    if expected is Completed:
        assert events[0].text == rec.snapshot["output"]


def test_waiting_for_approval_snapshot_asks_once_and_running_resumes() -> None:
    mapper = RunEventMapper("run_x", ("once", "deny"))
    ask = mapper.feed_status({"status": "waiting_for_approval"})
    assert isinstance(ask[0], InputRequired) and ask[0].data["choices"] == ["once", "deny"]
    assert mapper.feed_status({"status": "waiting_for_approval"}) == []
    assert [e.kind for e in mapper.feed_status({"status": "running"})] == ["approval_resolved"]
    assert isinstance(mapper.feed_status({"status": "failed", "error": "x"})[0], Failed)


# -- the handler against a replaying transport ----------------------------------------


class FakeHermes:
    """Replays a recording; records what the handler sent."""

    def __init__(self, recording: str | None = "runs_plain.txt", *, cut_stream: bool = False):
        self.rec = Recording(recording) if recording else None
        self.cut_stream = cut_stream
        self.calls: list[httpx.Request] = []
        self.responses: dict[tuple[str, str], list[httpx.Response]] = {}

    def queue(self, method: str, path: str, *responses: httpx.Response) -> None:
        self.responses.setdefault((method, path), []).extend(responses)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request)
        key = (request.method, request.url.path)
        if self.responses.get(key):
            return self.responses[key].pop(0)
        run_id = self.rec.run_id if self.rec else "run_none"
        if key == ("POST", "/v1/runs"):
            return httpx.Response(202, json={"run_id": run_id, "status": "started"})
        if key == ("GET", f"/v1/runs/{run_id}/events"):
            sse = self.rec.sse
            if self.cut_stream:
                sse = (
                    sse[: sse.index('"event": "message.delta"', 600)].rsplit("\n\n", 1)[0] + "\n\n"
                )
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  content=sse.encode())
        if key == ("GET", f"/v1/runs/{run_id}"):
            return httpx.Response(200, json=self.rec.snapshot)
        if request.url.path.endswith(("/approval", "/stop")):
            return httpx.Response(200, json={"run_id": run_id, "choice": "once", "resolved": 1})
        return httpx.Response(
            404, json={"error": {"message": "not found", "code": "run_not_found"}}
        )

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [json.loads(c.content) for c in self.calls if c.url.path == path and c.content]


HELLO = "hello runs"
"""The text the recorded Hermes frames answer."""


async def collect(fake: FakeHermes, request: HandlerRequest | None = None, **settings: Any):
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
        handler = HermesAgentHandler(
            HermesSettings(hermes_api_url="http://hermes.test/v1", hermes_api_key=KEY,
                           poll_interval_seconds=0.01, retry_backoff_seconds=0.0, **settings),
            http)
        return [e async for e in handler.run(request or handler_request(HELLO))]


async def test_run_posts_the_turn_with_history_and_a_stable_session() -> None:
    fake = FakeHermes()
    request = handler_request(HELLO, history=[Turn("user", "first"), Turn("agent", "first answer")])
    events = await collect(fake, request, instructions="be brief")
    session_id = request.backend_user(per_context=True)
    assert events[0] == RunStarted(fake.rec.run_id)
    assert events[1] == SessionUpdate({"hermes_session_id": session_id})
    assert isinstance(events[-1], Completed)
    body = fake.bodies("/v1/runs")[0]
    assert body["input"] == "hello runs"
    assert body["session_id"] == session_id
    assert body["instructions"] == "be brief"
    assert body["conversation_history"] == [{"role": "user", "content": "first"},
                                            {"role": "assistant", "content": "first answer"}]
    assert all(c.headers["authorization"] == f"Bearer {KEY}" for c in fake.calls)


async def test_trace_context_goes_with_every_call_of_the_run() -> None:
    fake = FakeHermes()
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    request = handler_request(
        HELLO, headers={"traceparent": trace, "authorization": "Bearer caller"}
    )
    events = await collect(fake, request)
    assert isinstance(events[-1], Completed)
    assert [(c.method, c.url.path) for c in fake.calls] == [
        ("POST", "/v1/runs"), ("GET", f"/v1/runs/{fake.rec.run_id}/events")]
    assert all(c.headers["traceparent"] == trace for c in fake.calls)
    assert all(c.headers.get_list("authorization") == [f"Bearer {KEY}"] for c in fake.calls)
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
        handler = HermesAgentHandler(HermesSettings(hermes_api_key=KEY), http)
        assert await handler.cancel(
            handler_request(run_ref="run_a", headers={"traceparent": trace})
        )
    assert fake.calls[-1].url.path == "/v1/runs/run_a/stop"
    assert fake.calls[-1].headers["traceparent"] == trace


async def test_two_callers_with_the_same_context_id_get_two_hermes_sessions() -> None:
    fake = FakeHermes()
    await collect(fake, handler_request(HELLO, principal="alice"))
    await collect(fake, handler_request(HELLO, principal="bob"))
    alice, bob = (b["session_id"] for b in fake.bodies("/v1/runs"))
    assert alice != bob and "ctx-1" not in alice + bob and "alice" not in alice
    assert alice == handler_request(principal="alice").backend_user(per_context=True)


async def test_a_known_session_is_not_rewritten() -> None:
    events = await collect(
        FakeHermes(), handler_request(HELLO, session={"hermes_session_id": "a2a-ctx-1"})
    )
    assert not any(isinstance(e, SessionUpdate) for e in events)


async def test_stream_ending_without_a_terminal_event_completes_by_polling() -> None:
    fake = FakeHermes("runs_approve_once_manual.txt", cut_stream=True)
    events = await collect(fake)
    assert isinstance(events[-1], Completed)
    assert events[-1].text == fake.rec.snapshot["output"]
    assert any(c.url.path == f"/v1/runs/{fake.rec.run_id}" for c in fake.calls)


async def test_unauthorized_fails_with_a_clear_reason_without_the_key() -> None:
    fake = FakeHermes()
    fake.queue("POST", "/v1/runs", httpx.Response(401, json={"error": {
        "message": f"Invalid API key {KEY}", "code": "invalid_api_key"}}))
    events = await collect(fake)
    assert len(events) == 1 and isinstance(events[0], Failed)
    assert "rejected the API key" in events[0].reason and KEY not in events[0].reason


async def test_server_error_message_is_redacted() -> None:
    fake = FakeHermes()
    fake.queue("POST", "/v1/runs", httpx.Response(500, json={"error": {"message": f"down {KEY}"}}))
    (event,) = await collect(fake)
    assert "HTTP 500" in event.reason and KEY not in event.reason and "***" in event.reason


async def test_503_is_retried_then_gives_up_with_the_redacted_reason() -> None:
    fake = FakeHermes()
    down = {"error": {"message": f"starting {KEY}"}}
    fake.queue("POST", "/v1/runs", httpx.Response(503, json=down))
    assert isinstance((await collect(fake))[-1], Completed)  # the second try got through
    fake = FakeHermes()
    fake.queue("POST", "/v1/runs", *[httpx.Response(503, json=down) for _ in range(3)])
    (event,) = await collect(fake, retry_attempts=2)
    assert event == Failed("Hermes is unavailable (HTTP 503, 3 attempt(s)): starting ***")


async def test_unreachable_hermes_fails_clearly() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as http:
        handler = HermesAgentHandler(HermesSettings(hermes_api_key=KEY), http)
        (event,) = [e async for e in handler.run(handler_request(HELLO))]
    assert event == Failed("cannot reach Hermes at http://127.0.0.1:8642/v1/runs")


async def test_timeout_fails_clearly() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(slow)) as http:
        handler = HermesAgentHandler(HermesSettings(hermes_timeout=7), http)
        (event,) = [e async for e in handler.run(handler_request(HELLO))]
    assert event == Failed("Hermes sent nothing for 7 s (timeout)")


async def test_429_is_retried_then_succeeds() -> None:
    fake = FakeHermes()
    busy = {"error": {"message": "Too many concurrent runs", "code": "rate_limit_exceeded"}}
    fake.queue("POST", "/v1/runs", httpx.Response(429, json=busy), httpx.Response(429, json=busy))
    events = await collect(fake)
    assert isinstance(events[-1], Completed)
    assert len(fake.bodies("/v1/runs")) == 3


async def test_429_gives_up_after_the_bounded_retries() -> None:
    fake = FakeHermes()
    busy = {"error": {"message": "Too many concurrent runs", "code": "rate_limit_exceeded"}}
    fake.queue("POST", "/v1/runs", *[httpx.Response(429, json=busy) for _ in range(5)])
    (event,) = await collect(fake, retry_attempts=2)
    assert isinstance(event, Failed) and "HTTP 429" in event.reason and "3 attempt" in event.reason
    assert len(fake.bodies("/v1/runs")) == 3


async def test_unknown_run_while_polling_fails() -> None:
    fake = FakeHermes(cut_stream=True)
    fake.queue("GET", f"/v1/runs/{fake.rec.run_id}", httpx.Response(
        404, json={"error": {"message": "Run not found", "code": "run_not_found"}}))
    events = await collect(fake)
    assert isinstance(events[-1], Failed) and "no longer knows" in events[-1].reason


async def test_message_mode_answers_with_one_reply() -> None:
    fake = FakeHermes(None)
    answer = json.loads((FIXTURES / "chat_nonstream.json").read_text())
    fake.queue("POST", "/v1/chat/completions", httpx.Response(200, json=answer))
    events = await collect(
        fake,
        handler_request(HELLO, history=[Turn("user", "a"), Turn("agent", "b")]),
        response_mode="message",
    )
    assert events == [Reply(text="Hello from fakellm. You said: ping one", metadata={
        "usage": answer["usage"], "finish_reason": "stop", "model": "hermes-agent"})]
    body = fake.bodies("/v1/chat/completions")[0]
    assert body["stream"] is False and body["model"] == "hermes-agent"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


# -- resume and cancel ----------------------------------------------------------------


async def answer(fake: FakeHermes, request: HandlerRequest, **settings: Any) -> bool:
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
        handler = HermesAgentHandler(HermesSettings(hermes_api_key=KEY, **settings), http)
        return await handler.resume(request)


PENDING = {"type": "hermes.approval", "command": "rm -rf /x", "choices": ["once", "deny"]}


@pytest.mark.parametrize(("text", "data", "choice"), [
    ("", [{"choice": "once"}], "once"), ("", [{"choice": "deny"}], "deny"),
    ("approve", [], "once"), ("Yes.", [], "once"), ("no", [], "deny"), ("deny", [], "deny"),
])
async def test_answers_are_posted_as_hermes_choices(text: str, data: list, choice: str) -> None:
    fake = FakeHermes()
    request = handler_request(text, data=data, run_ref="run_a", pending_input=PENDING)
    assert await answer(fake, request) is True
    assert fake.bodies("/v1/runs/run_a/approval") == [{"choice": choice}]


@pytest.mark.parametrize(("text", "data"), [("maybe", []), ("", [{"choice": "always"}]),
                                            ("", [{"approved": True}])])
async def test_invalid_answers_list_the_valid_choices(text: str, data: list) -> None:
    fake = FakeHermes()
    request = handler_request(text, data=data, run_ref="run_a", pending_input=PENDING)
    with pytest.raises(InputRejectedError) as caught:
        await answer(fake, request)
    assert "once, deny" in caught.value.prompt
    assert fake.calls == []


async def test_widened_choices_are_accepted_when_configured() -> None:
    fake = FakeHermes()
    pending = {**PENDING, "choices": ["once", "session", "always", "deny"]}
    request = handler_request(
        "", data=[{"choice": "session"}], run_ref="run_a", pending_input=pending
    )
    assert await answer(fake, request, approval_choices=["once", "session", "deny"])
    assert fake.bodies("/v1/runs/run_a/approval") == [{"choice": "session"}]


async def test_approval_not_active_is_reported() -> None:
    fake = FakeHermes()
    fake.queue("POST", "/v1/runs/run_a/approval", httpx.Response(409, json={"error": {
        "message": "Run is not active", "code": "approval_not_active"}}))
    request = handler_request("yes", run_ref="run_a", pending_input=PENDING)
    with pytest.raises(InputRejectedError) as caught:
        await answer(fake, request)
    assert "approval_not_active" in caught.value.prompt


async def test_cancel_posts_stop() -> None:
    fake = FakeHermes()
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
        handler = HermesAgentHandler(HermesSettings(hermes_api_key=KEY), http)
        assert await handler.cancel(handler_request(run_ref="run_a")) is True
        assert await handler.cancel(handler_request()) is False
    assert [(c.method, c.url.path) for c in fake.calls] == [("POST", "/v1/runs/run_a/stop")]


async def test_reattach_follows_the_run_by_polling() -> None:
    fake = FakeHermes()
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
        handler = HermesAgentHandler(HermesSettings(poll_interval_seconds=0.01), http)
        events = [e async for e in handler.reattach(handler_request(run_ref=fake.rec.run_id))]
    assert events == [Completed(text=fake.rec.snapshot["output"], metadata={
        "hermes_run_id": fake.rec.run_id, "usage": fake.rec.snapshot["usage"]})]
    assert all(not c.url.path.endswith("/events") for c in fake.calls)


def test_the_key_never_prints() -> None:
    settings = HermesSettings(hermes_api_key=KEY)
    assert KEY not in repr(settings) and KEY not in str(settings.model_dump())


# -- the run's time bound, on every path ----------------------------------------------


class KeptAlive(httpx.AsyncByteStream):
    """An event stream that sends ``head`` and then only keepalive comments, as Hermes
    does while the model hangs."""

    def __init__(self, head: str = "") -> None:
        self.head = head
        self.closed = False

    async def __aiter__(self):
        if self.head:
            yield self.head.encode()
        while True:
            await asyncio.sleep(0.05)
            yield b": keepalive\n\n"

    async def aclose(self) -> None:
        self.closed = True


def running(run_id: str) -> httpx.Response:
    return httpx.Response(200, json={"object": "hermes.run", "run_id": run_id, "status": "running"})


def stops(fake: FakeHermes) -> list[str]:
    return [c.url.path for c in fake.calls if c.url.path.endswith("/stop")]


async def test_a_hung_model_behind_keepalives_fails_at_run_timeout_seconds() -> None:
    fake = FakeHermes()
    run_id = fake.rec.run_id
    delta = json.dumps({"event": "message.delta", "run_id": run_id, "delta": "slow0"})
    stream = KeptAlive(f"data: {delta}\n\n")
    fake.queue("GET", f"/v1/runs/{run_id}/events", httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=stream))
    started = time.monotonic()
    events = await collect(fake, run_timeout_seconds=1)
    assert events[-1] == Failed("the Hermes run exceeded run_timeout_seconds=1")
    assert TextDelta("slow0") in events
    assert 0.9 <= time.monotonic() - started < 3
    assert stops(fake) == [f"/v1/runs/{run_id}/stop"]  # the run is stopped at Hermes too
    assert stream.closed


async def follow_and_stop(
    stop_through_the_follower: bool, run_timeout_seconds: float = 3
) -> tuple[list, float]:
    """Follow a run whose stream only keeps alive, stop it through the instance that
    follows it or through another one; the run's events and seconds after the stop."""
    fake = FakeHermes()
    run_id = fake.rec.run_id
    fake.queue("GET", f"/v1/runs/{run_id}/events", httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=KeptAlive()))
    settings = HermesSettings(hermes_api_key=KEY, stop_wait_seconds=0.3,
                              run_timeout_seconds=run_timeout_seconds)
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
        follower, other = HermesAgentHandler(settings, http), HermesAgentHandler(settings, http)
        run = asyncio.create_task(collect_events(follower.run(handler_request(HELLO))))
        await eventually(lambda: any(c.url.path.endswith("/events") for c in fake.calls),
                         interval=0.01, what="the follower subscribes to the run's events")
        stopper = follower if stop_through_the_follower else other
        assert await stopper.cancel(handler_request(run_ref=run_id)) is True
        stopped = time.monotonic()
        events = await run
    return events, time.monotonic() - stopped


async def collect_events(events) -> list:
    return [event async for event in events]


async def test_a_stop_through_the_instance_following_the_run_ends_it_canceled() -> None:
    events, took = await follow_and_stop(stop_through_the_follower=True)
    assert events[-1] == Canceled("stopped; Hermes did not confirm the stop in time")
    assert took < 2.5  # stop_wait_seconds, not the run's bound


async def test_each_instance_tracks_only_the_runs_it_follows() -> None:
    # a stop through another handler instance (another endpoint) never reaches this run: it
    # ends at its bound (1 s, past the 0.3 s a stop would take), not canceled
    events, _ = await follow_and_stop(stop_through_the_follower=False, run_timeout_seconds=1)
    assert events[-1] == Failed("the Hermes run exceeded run_timeout_seconds=1")


async def test_a_run_followed_by_polling_fails_at_run_timeout_seconds() -> None:
    fake = FakeHermes(cut_stream=True)
    run_id = fake.rec.run_id
    fake.queue("GET", f"/v1/runs/{run_id}", *[running(run_id) for _ in range(1000)])
    events = await collect(fake, run_timeout_seconds=0.5)
    assert events[-1] == Failed("the Hermes run exceeded run_timeout_seconds=0.5")
    assert stops(fake) == [f"/v1/runs/{run_id}/stop"]


async def test_a_reattached_run_fails_at_run_timeout_seconds() -> None:
    fake = FakeHermes()
    fake.queue("GET", "/v1/runs/run_a", *[running("run_a") for _ in range(1000)])
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
        handler = HermesAgentHandler(HermesSettings(
            poll_interval_seconds=0.01, run_timeout_seconds=0.5), http)
        events = [e async for e in handler.reattach(handler_request(run_ref="run_a"))]
    assert events == [Failed("the Hermes run exceeded run_timeout_seconds=0.5")]
    assert stops(fake) == ["/v1/runs/run_a/stop"]


async def test_a_429_is_not_retried_past_the_run_deadline() -> None:
    fake = FakeHermes()
    busy = httpx.Response(429, headers={"retry-after": "30"}, json={"error": {
        "message": "Too many concurrent runs", "code": "rate_limit_exceeded"}})
    fake.queue("POST", "/v1/runs", busy)
    started = time.monotonic()
    (event,) = await collect(fake, run_timeout_seconds=2)
    assert isinstance(event, Failed) and "HTTP 429" in event.reason and "1 attempt" in event.reason
    assert time.monotonic() - started < 1


async def test_a_429_retry_after_http_date_is_honoured() -> None:
    fake = FakeHermes()
    when = formatdate(time.time() + 2, usegmt=True)
    fake.queue("POST", "/v1/runs", httpx.Response(429, headers={"retry-after": when}, json={}))
    started = time.monotonic()
    events = await collect(fake)
    assert isinstance(events[-1], Completed) and len(fake.bodies("/v1/runs")) == 2
    assert time.monotonic() - started >= 0.9


# -- frames of a shape the bridge does not know: a protocol error of Hermes ------------


@pytest.mark.parametrize(("frame", "detail"), [
    pytest.param({"event": "approval.request", "command": "rm -rf /x", "choices": 7},
                 "approval choices that are not a list of names", id="choices-7"),
    pytest.param({"event": "message.delta", "delta": {"text": KEY}}, "'delta' is not text",
                 id="delta-object"),
    pytest.param({"event": "run.completed", "output": ["a"]}, "'output' is not text",
                 id="output-list"),
    pytest.param({"delta": "x"}, "an event without a name", id="no-name"),
    pytest.param([1, 2], "data that is not a JSON object", id="json-list"),
    pytest.param("{oops", "data that is not JSON", id="not-json"),
])
async def test_an_unexpected_frame_fails_the_task_and_stops_the_run(frame: Any,
                                                                     detail: str) -> None:
    fake = FakeHermes()
    run_id = fake.rec.run_id
    data = frame if isinstance(frame, str) else json.dumps(frame)
    first = json.dumps({"event": "message.delta", "run_id": run_id, "delta": "hi"})
    fake.queue("GET", f"/v1/runs/{run_id}/events", httpx.Response(
        200, headers={"content-type": "text/event-stream"},
        content=f"data: {first}\n\ndata: {data}\n\n: keepalive\n\n".encode()))
    events = await collect(fake)
    assert events[-1] == Failed(f"Hermes sent an unexpected frame ({detail})")
    assert TextDelta("hi") in events
    assert stops(fake) == [f"/v1/runs/{run_id}/stop"]
    assert KEY not in events[-1].reason


def test_the_mapper_rejects_a_snapshot_of_an_unexpected_shape() -> None:
    with pytest.raises(UnexpectedFrame, match=r"'output' is not text"):
        RunEventMapper("run_x").feed_status({"status": "completed", "output": 7})


async def test_message_mode_answer_whose_content_is_not_text_fails_clearly() -> None:
    fake = FakeHermes(None)
    fake.queue("POST", "/v1/chat/completions", httpx.Response(200, json={
        "choices": [{"index": 0, "message": {"role": "assistant", "content": {"k": KEY}}}]}))
    events = await collect(fake, response_mode="message")
    assert events == [Failed("Hermes sent an unexpected frame "
                             "('content' is neither text nor a list of parts)")]


# -- a failed call is logged as the chat bridge logs one --------------------------------


async def chat_bridge_failure_log() -> dict[str, Any]:
    """The log record of the chat bridge (a ``StreamingBridge``) for a failed call."""
    down = httpx.Response(502, json={"error": {"message": "upstream down"}})
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: down)) as http:
        chat = OpenAIChatHandler(OpenAIChatSettings(base_url="http://chat.test/v1"), http)
        with structlog.testing.capture_logs() as logs:
            [event] = [e async for e in chat.run(handler_request(HELLO))]
    (record,) = [r for r in logs if r["log_level"] == "warning"]
    assert record["reason"] == event.reason
    return record


def failing_post(fake: FakeHermes) -> None:
    fake.queue("POST", "/v1/runs", httpx.Response(500, json={"error": {"message": f"down {KEY}"}}))


def failing_chat(fake: FakeHermes) -> None:
    fake.queue("POST", "/v1/chat/completions",
               httpx.Response(503, json={"error": {"message": "starting"}}))


def lost_run(fake: FakeHermes) -> None:
    fake.cut_stream = True
    fake.queue("GET", f"/v1/runs/{fake.rec.run_id}", httpx.Response(
        404, json={"error": {"message": "Run not found", "code": "run_not_found"}}))


def unexpected_frame(fake: FakeHermes) -> None:
    fake.queue("GET", f"/v1/runs/{fake.rec.run_id}/events", httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=b"data: {oops\n\n"))


@pytest.mark.parametrize(("break_hermes", "settings"), [
    pytest.param(failing_post, {}, id="starting-the-run"),
    pytest.param(failing_chat, {"response_mode": "message", "retry_attempts": 0},
                 id="message-mode"),
    pytest.param(lost_run, {}, id="polling-a-run-hermes-forgot"),
    pytest.param(unexpected_frame, {}, id="an-unexpected-frame"),
])
async def test_a_failed_call_is_logged_as_the_chat_bridge_logs_one(break_hermes, settings) -> None:
    fake = FakeHermes()
    break_hermes(fake)
    request = handler_request(HELLO, endpoint_id="ep-hermes", task_id="task-hermes")
    with structlog.testing.capture_logs() as logs:
        events = await collect(fake, request, **settings)
    failed = events[-1]
    assert isinstance(failed, Failed)
    (record,) = [r for r in logs if r["event"].endswith("_request_failed")]
    assert record == {"event": "hermes_request_failed", "log_level": "warning",
                      "endpoint_id": "ep-hermes", "task_id": "task-hermes",
                      "reason": failed.reason}
    chat = await chat_bridge_failure_log()
    assert chat["event"] == "chat_backend_request_failed"
    assert set(record) == set(chat) and record["log_level"] == chat["log_level"]
    assert KEY not in repr(logs)
