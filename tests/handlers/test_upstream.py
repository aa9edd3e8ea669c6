"""The shared HTTP layer (handlers.upstream) through the streaming bridges that use it:
retries of HTTP 429 and 503 (Retry-After in seconds or as an HTTP date, capped, bounded in
attempts and by the run's deadline) and the bound on a run's total time.

The backends are ``httpx.MockTransport`` fakes at the transport seam; real OpenClaw
does not pass an upstream 429 to its client (it retries the model itself), so its
bridge's retry is proven here, and the chat bridge's also against the scripted LLM
(tests/handlers/test_openai_chat_real.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from handlers.base import Completed, Failed, Handler
from handlers.openai_chat import OpenAIChatHandler, OpenAIChatSettings
from handlers.openclaw import OpenClawHandler, OpenClawSettings
from handlers.upstream import Deadline, Retry, retry_after
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

pytestmark = pytest.mark.timeout(20)

KEY = "bridge-secret-key-0123456789abcdef"
BUSY = {"error": {"message": "slow down", "type": "rate_limit_error"}}


def chat(http: httpx.AsyncClient, **settings: Any) -> Handler:
    return OpenAIChatHandler(OpenAIChatSettings(
        base_url="http://backend.test/v1", api_key=KEY, **settings), http)


def openclaw(http: httpx.AsyncClient, **settings: Any) -> Handler:
    return OpenClawHandler(OpenClawSettings(
        openclaw_api_url="http://backend.test", openclaw_api_key=KEY, **settings), http)


BRIDGES = {
    "chat": (chat, "oc_chat_stream.txt", "the chat backend", "the chat completion"),
    "openclaw": (openclaw, "oc_responses_stream.txt", "OpenClaw", "the OpenClaw run"),
}


@pytest.fixture(params=sorted(BRIDGES))
def bridge(request: pytest.FixtureRequest) -> tuple[Callable[..., Handler], bytes, str, str]:
    make, recording, backend, run = BRIDGES[request.param]
    return make, fixture(recording), backend, run


def busy(retry: str | None = None, status: int = 429) -> httpx.Response:
    response = json_response(BUSY, status=status)
    if retry is not None:
        response.headers["Retry-After"] = retry
    return response


async def run_against(bridge, answers: list[httpx.Response | Callable[[], Any]],
                      **settings: Any) -> tuple[list, Backend, float]:
    """Run one task against a backend that gives ``answers`` in turn (the last one
    again and again); the events, the backend and the seconds it took."""
    make, _, _, _ = bridge

    async def respond(request: httpx.Request) -> httpx.Response:
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return answer if isinstance(answer, httpx.Response) else await answer()

    backend = Backend(respond)
    started = time.monotonic()
    async with backend.client() as http:
        events = await collect(make(http, **settings).run(handler_request()))
    return events, backend, time.monotonic() - started


# -- Retry-After and the retry policy ---------------------------------------------------


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("7") == 7.0
    assert 28 <= retry_after(formatdate(time.time() + 30, usegmt=True)) <= 30
    assert retry_after(formatdate(time.time() - 30, usegmt=True)) == 0.0
    assert retry_after("soon") is None and retry_after(None) is None and retry_after("-3") is None


def test_retry_waits_as_asked_capped_and_gives_up_after_the_attempts() -> None:
    retry = Retry(attempts=2, backoff=0.5, max_wait=10.0)
    far = Deadline.start(3600, "the run")
    assert retry.wait(busy("3"), 0, far) == 3.0
    assert retry.wait(busy("120"), 0, far) == 10.0  # capped
    assert [retry.wait(busy(), n, far) for n in (0, 1)] == [0.5, 1.0]  # backoff without header
    assert retry.wait(busy("1"), 2, far) is None  # attempts used up
    assert retry.wait(json_response({}, status=503), 0, far) == 0.5  # unavailable for now
    assert retry.wait(json_response({}, status=500), 0, far) is None  # only 429 and 503


def test_retry_never_waits_past_the_deadline() -> None:
    retry = Retry(attempts=5, backoff=0.5, max_wait=60.0)
    assert retry.wait(busy("5"), 0, Deadline.start(4, "the run")) is None
    assert retry.wait(busy("5"), 0, Deadline.start(6, "the run")) == 5.0


# -- both bridges -----------------------------------------------------------------------


async def test_a_429_is_retried_after_retry_after_seconds(bridge) -> None:
    _, recording, _, _ = bridge
    events, backend, took = await run_against(bridge, [busy("1"), sse_response(recording)])
    assert isinstance(events[-1], Completed), events[-1]
    assert len(backend.requests) == 2
    assert backend.bodies[0] == backend.bodies[1]
    assert took >= 0.95  # Retry-After was honoured


async def test_a_503_is_retried_after_retry_after_seconds(bridge) -> None:
    _, recording, _, _ = bridge
    events, backend, took = await run_against(bridge, [busy("1", 503), sse_response(recording)])
    assert isinstance(events[-1], Completed), events[-1]
    assert len(backend.requests) == 2 and took >= 0.95


async def test_503_retries_end_after_the_attempts(bridge) -> None:
    _, _, backend_name, _ = bridge
    events, backend, _ = await run_against(
        bridge, [busy("0", 503)], retry_attempts=1, retry_backoff_seconds=0)
    assert events == [Failed(f"{backend_name} is unavailable (HTTP 503, 2 attempt(s)): slow down")]
    assert len(backend.requests) == 2


async def test_a_500_is_not_retried(bridge) -> None:
    events, backend, _ = await run_against(bridge, [busy("0", 500)])
    assert isinstance(events[-1], Failed) and "HTTP 500" in events[-1].reason
    assert len(backend.requests) == 1


async def test_a_retry_after_http_date_is_honoured(bridge) -> None:
    _, recording, _, _ = bridge
    when = formatdate(time.time() + 2, usegmt=True)  # whole seconds: 1 to 2 s from now
    events, backend, took = await run_against(bridge, [busy(when), sse_response(recording)])
    assert isinstance(events[-1], Completed) and len(backend.requests) == 2
    assert took >= 0.9


async def test_the_wait_is_capped(bridge) -> None:
    _, recording, _, _ = bridge
    events, backend, took = await run_against(
        bridge, [busy("600"), sse_response(recording)], retry_max_wait_seconds=0.2)
    assert isinstance(events[-1], Completed) and len(backend.requests) == 2
    assert took < 5


async def test_retries_end_after_the_attempts_with_the_429_reason(bridge) -> None:
    _, _, backend_name, _ = bridge
    events, backend, _ = await run_against(
        bridge, [busy("0")], retry_attempts=2, retry_backoff_seconds=0)
    (failed,) = events
    assert isinstance(failed, Failed)
    assert failed.reason == (f"{backend_name} is rate limiting requests (HTTP 429, 3 attempt(s)):"
                             " slow down")
    assert len(backend.requests) == 3


async def test_no_retry_past_the_run_deadline(bridge) -> None:
    events, backend, took = await run_against(bridge, [busy("30")], run_timeout_seconds=2)
    (failed,) = events
    assert isinstance(failed, Failed) and "HTTP 429, 1 attempt(s)" in failed.reason
    assert len(backend.requests) == 1 and took < 1  # failed at once, did not sleep 30 s


async def test_message_mode_retries_too(bridge) -> None:
    make, _, _, _ = bridge
    answer = (json_response(fixture("oc_chat_nonstream.json")) if make is chat
              else json_response(fixture("oc_responses_nonstream.json")))
    events, backend, _ = await run_against(bridge, [busy("0"), answer], response_mode="message")
    assert events[-1].text.startswith("Hello from fakellm") and len(backend.requests) == 2


# -- the run's time bound ---------------------------------------------------------------


async def test_a_stream_that_goes_silent_ends_at_run_timeout_seconds(bridge) -> None:
    _, recording, _, run = bridge
    first_chunks = sse_chunks(recording)[:3]
    hung = TrackedStream(first_chunks, hang=True)  # keeps the connection, sends nothing more
    events, _, took = await run_against(bridge, [sse_response(hung)], run_timeout_seconds=1)
    assert events[-1] == Failed(f"{run} exceeded run_timeout_seconds=1")
    assert 0.9 <= took < 3
    assert hung.closed  # the upstream stream was closed, so the backend sees the client leave


async def test_a_backend_that_never_answers_ends_at_run_timeout_seconds(bridge) -> None:
    _, _, _, run = bridge

    async def never() -> httpx.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    events, _, took = await run_against(bridge, [never], run_timeout_seconds=0.5)
    assert events == [Failed(f"{run} exceeded run_timeout_seconds=0.5")]
    assert took < 2


async def test_a_stream_that_never_ends_is_cut_at_the_bound(bridge) -> None:
    _, recording, _, run = bridge
    head = sse_chunks(recording)[:3]

    class Endless(TrackedStream):
        async def __aiter__(self):
            for chunk in head:
                yield chunk
            while True:  # a backend that keeps sending comments, never an answer
                await asyncio.sleep(0.05)
                yield b": keepalive\n\n"

    events, _, took = await run_against(bridge, [sse_response(Endless([]))],
                                        run_timeout_seconds=1)
    assert events[-1] == Failed(f"{run} exceeded run_timeout_seconds=1")
    assert took < 3


# -- the caller's context ---------------------------------------------------------------

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_trace_context_goes_upstream_and_the_callers_credentials_do_not(bridge) -> None:
    make, recording, _, _ = bridge
    backend = Backend(lambda request: sse_response(recording))
    request = handler_request()
    request.headers = {"traceparent": TRACEPARENT, "tracestate": "gw=1",
                       "Authorization": "Bearer the-callers-gateway-key", "cookie": "s=1"}
    async with backend.client() as http:
        events = await collect(make(http).run(request))
    assert isinstance(events[-1], Completed)
    [sent] = backend.requests
    assert sent.headers["traceparent"] == TRACEPARENT and sent.headers["tracestate"] == "gw=1"
    assert sent.headers.get_list("authorization") == [f"Bearer {KEY}"]
    assert "cookie" not in sent.headers


# -- metrics ------------------------------------------------------------------------------


def backend_calls(backend: str, outcome: str) -> float:
    labels = {"backend": backend, "outcome": outcome}
    return REGISTRY.get_sample_value("a2a_gateway_backend_call_seconds_count", labels) or 0.0


async def test_backend_calls_are_timed_by_backend_and_outcome(bridge) -> None:
    _, recording, name, _ = bridge
    ok, failed = backend_calls(name, "ok"), backend_calls(name, "http_error")
    events, _, _ = await run_against(bridge, [sse_response(recording)])
    assert isinstance(events[-1], Completed)
    events, _, _ = await run_against(bridge, [busy("0", 500)])
    assert isinstance(events[-1], Failed)
    assert backend_calls(name, "ok") == ok + 1
    assert backend_calls(name, "http_error") == failed + 1
