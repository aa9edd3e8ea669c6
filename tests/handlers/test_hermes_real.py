"""The Hermes handler against the real Hermes API server, through the gateway, with
the real a2a-sdk client as the caller.

Needs the services of ``.ci/services`` (10-llm.sh, 20-hermes.sh): ``A2A_TEST_HERMES_URL``,
``A2A_TEST_HERMES_KEY`` and ``A2A_TEST_LLM_URL``. Skipped without them, except in CI.
Every test marks its message with a fresh token, so runs can share one Hermes and LLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import structlog
from a2a.types import CancelTaskRequest, GetTaskRequest, Role, StreamResponse, TaskState
from google.protobuf.json_format import MessageToDict

from a2a_gateway.stores.base import Scope
from handlers.approvals import HITL_URI
from handlers.base import Completed, FileInput, InputRejectedError
from handlers.hermes import HermesAgentHandler, HermesSettings
from tests.handlers.real_streams import (
    cancel_mid_stream,
    six_streamed_tokens,
    state_of,
    streamed_answer,
    token,
)
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import handler_request, send_request
from tests.support.waiting import eventually

pytestmark = pytest.mark.hermes

HANDLER = "handlers.hermes:HermesAgentHandler"
COMPLETED = TaskState.TASK_STATE_COMPLETED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


@pytest.fixture
def hermes_url() -> str:
    require_env("A2A_TEST_HERMES_KEY")
    require_env("A2A_TEST_LLM_URL")
    return require_env("A2A_TEST_HERMES_URL")


@pytest.fixture
async def gw(hermes_url: str) -> AsyncIterator[RunningGateway]:
    async with running_gateway(cancel_wait_seconds=10.0) as running:
        yield running


async def hermes_endpoint(gw: RunningGateway, url: str, **settings: Any) -> str:
    return await gw.add_endpoint(HANDLER, name="hermes", settings={
        "hermes_api_url": url, "hermes_api_key": "env:A2A_TEST_HERMES_KEY",
        "poll_interval_seconds": 0.2, **settings})


@pytest.fixture
async def hermes_id(gw: RunningGateway, hermes_url: str) -> str:
    return await hermes_endpoint(gw, hermes_url)


def final_text(task: Any) -> str:
    return "".join(p.text for p in task.artifacts[-1].parts)


async def llm_requests() -> list[dict[str, Any]]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{require_env('A2A_TEST_LLM_URL')}/_requests")
        return response.json()


async def until_input_required(stream: Any) -> list[StreamResponse]:
    events = []
    try:
        async for event in stream:
            events.append(event)
            if state_of(event) == INPUT_REQUIRED:
                break
    finally:
        await stream.aclose()
    return events


def approval_data(event: StreamResponse) -> dict[str, Any]:
    status = event.task.status if event.HasField("task") else event.status_update.status
    (data,) = [MessageToDict(p.data) for p in status.message.parts if p.HasField("data")]
    return data


async def test_streamed_reply_arrives_token_by_token(gw, hermes_id):
    async with gw.client(hermes_id) as client:
        final = await six_streamed_tokens(client)
    assert final.artifact.metadata["usage"]["output_tokens"] > 0


async def test_blocking_send_returns_the_completed_task(gw, hermes_id):
    mark = token()
    async with gw.client(hermes_id, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"hello {mark}"))]
    assert event.task.status.state == COMPLETED
    assert final_text(event.task) == f"Hello from fakellm. You said: hello {mark}"


async def test_safe_tool_call_reports_tool_status_updates(gw, hermes_id):
    async with gw.client(hermes_id) as client:
        events = [e async for e in client.send_message(send_request(f"FAKE_TOOL_SAFE {token()}"))]
    progress = [MessageToDict(e.status_update.metadata) for e in events
                if e.HasField("status_update") and e.status_update.metadata]
    kinds = [p["kind"] for p in progress]
    assert kinds == ["tool_started", "tool_completed"]
    assert progress[0]["tool"] == "terminal" and progress[0]["preview"] == "echo fake-safe-ok"
    assert progress[1]["error"] is False
    assert state_of(events[-1]) == COMPLETED
    assert streamed_answer(events).startswith('TOOL_RESULT_SEEN: {"output": "fake-safe-ok"')


async def test_dangerous_command_runs_after_approve_once(gw, hermes_id, tmp_path: Path):
    target = tmp_path / "danger-target"
    target.mkdir()
    async with gw.client(hermes_id) as client, gw.client(hermes_id, streaming=False) as blocking:
        head = await until_input_required(
            client.send_message(send_request(f"FAKE_TOOL_DANGER path={target} {token()}")))
        ask = approval_data(head[-1])
        assert ask["command"] == f"rm -rf {target}"
        assert ask["description"] == "delete in root path"
        assert ask["choices"] == ["once", "deny"]
        assert target.exists()
        task_id, context_id = head[0].task.id, head[0].task.context_id
        (done,) = [e async for e in blocking.send_message(
            send_request("", data={"choice": "once"}, task_id=task_id, context_id=context_id))]
    assert done.task.status.state == COMPLETED
    assert not target.exists()
    assert '"exit_code": 0' in final_text(done.task)


async def test_dangerous_command_is_not_run_after_deny(gw, hermes_id, tmp_path: Path):
    target = tmp_path / "danger-target"
    target.mkdir()
    async with gw.client(hermes_id, streaming=False) as client:
        (first,) = [e async for e in client.send_message(
            send_request(f"FAKE_TOOL_DANGER path={target} {token()}"))]
        task = first.task
        assert task.status.state == INPUT_REQUIRED
        ids = {"task_id": task.id, "context_id": task.context_id}
        (wrong,) = [e async for e in client.send_message(send_request("maybe later", **ids))]
        assert wrong.task.status.state == INPUT_REQUIRED
        assert "Valid choices: once, deny" in wrong.task.status.message.parts[0].text
        (done,) = [e async for e in client.send_message(send_request("no", **ids))]
    assert done.task.status.state == COMPLETED
    assert target.exists()
    assert "BLOCKED: Command denied by user" in final_text(done.task)


def approval_answer(ask: dict[str, Any], task: Any, **approval: Any) -> Any:
    """A kagent-style answer: a text part for display, the tool_approval_response in the
    message's metadata under the extension's URI, and the message declaring the extension."""
    (tool,) = ask[HITL_URI]["tools"]
    shown = "Approved" if approval["approved"] else "Rejected"
    request = send_request(shown, task_id=task.id, context_id=task.context_id)
    request.message.metadata.update({HITL_URI: {
        "type": "tool_approval_response", "approvals": [{"id": tool["id"], **approval}]}})
    request.message.extensions.append(HITL_URI)
    return request


async def test_structured_approval_runs_the_command_after_refusing_edited_args(
        gw, hermes_id, tmp_path: Path):
    (declared,) = (await gw.card(hermes_id)).capabilities.extensions
    assert declared.uri == HITL_URI and not declared.required
    assert MessageToDict(declared.params) == {"editableArgs": False}
    target = tmp_path / "danger-target"
    target.mkdir()
    async with gw.client(hermes_id, streaming=False) as client:
        (first,) = [e async for e in client.send_message(
            send_request(f"FAKE_TOOL_DANGER path={target} {token()}"))]
        ask = approval_data(first)
        assert ask[HITL_URI] == {
            "type": "tool_approval_request",
            "hint": "Hermes asks for approval to run a command flagged as delete in root path",
            "tools": [{"id": f"{ask['run_id']}/approval-1",
                       "call_id": f"{ask['run_id']}/approval-1", "name": "terminal",
                       "args": {"command": f"rm -rf {target}"}, "editable": False}],
            "answers": ["once", "deny"]}
        asked = first.task.status.message  # where kagent clients read it, too
        assert list(asked.extensions) == [HITL_URI]
        assert MessageToDict(asked.metadata)[HITL_URI] == ask[HITL_URI]
        (edited,) = [e async for e in client.send_message(approval_answer(
            ask, first.task, approved=True, args={"command": "true"}))]
        assert edited.task.status.state == INPUT_REQUIRED
        assert "cannot run terminal with edited arguments" in (
            edited.task.status.message.parts[0].text)
        assert target.exists()
        (done,) = [e async for e in client.send_message(
            approval_answer(ask, first.task, approved=True))]
    assert done.task.status.state == COMPLETED
    assert not target.exists()


async def test_structured_denial_keeps_the_command_from_running(gw, hermes_id, tmp_path: Path):
    target = tmp_path / "danger-target"
    target.mkdir()
    async with gw.client(hermes_id, streaming=False) as client:
        (first,) = [e async for e in client.send_message(
            send_request(f"FAKE_TOOL_DANGER path={target} {token()}"))]
        ask = approval_data(first)
        (done,) = [e async for e in client.send_message(approval_answer(
            ask, first.task, approved=False, rejection_reason="keep it"))]
    assert done.task.status.state == COMPLETED
    assert target.exists()
    assert "BLOCKED: Command denied by user" in final_text(done.task)


async def test_cancel_while_streaming(gw, hermes_id):
    async with gw.client(hermes_id) as client:
        again = await cancel_mid_stream(
            client, send_request(f"FAKE_SLOW words=40 delay=0.2 {token()}"))
    assert again.status.state == TaskState.TASK_STATE_CANCELED


async def test_cancel_while_waiting_for_approval(gw, hermes_id, tmp_path: Path):
    target = tmp_path / "danger-target"
    target.mkdir()
    async with gw.client(hermes_id, streaming=False) as client:
        (first,) = [e async for e in client.send_message(
            send_request(f"FAKE_TOOL_DANGER path={target} {token()}"))]
        assert first.task.status.state == INPUT_REQUIRED
        started = time.monotonic()
        canceled = await client.cancel_task(CancelTaskRequest(id=first.task.id))
        waited = time.monotonic() - started
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert waited < 8  # Hermes confirmed the stop; the gateway did not just give up
    await asyncio.sleep(0.5)  # a short while in which the denied command must not run
    assert target.exists()


async def test_upstream_llm_error_fails_the_task(gw, hermes_id):
    async with gw.client(hermes_id, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"FAKE_HTTP_400 {token()}"))]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    reason = event.task.status.message.parts[0].text
    assert "HTTP 400" in reason and "fakellm scripted bad request" in reason


async def test_message_mode_answers_with_a_message(gw, hermes_url):
    endpoint = await hermes_endpoint(gw, hermes_url, response_mode="message")
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"ping {mark}"))]
    assert event.HasField("message") and event.message.role == Role.ROLE_AGENT
    assert event.message.parts[0].text == f"Hello from fakellm. You said: ping {mark}"


async def test_second_message_of_a_context_carries_the_first_turn(gw, hermes_id):
    mark = token()
    context_id = f"ctx-{mark}"
    async with gw.client(hermes_id, streaming=False) as client:
        for text in (f"first {mark}", f"second {mark}"):
            (event,) = [
                e async for e in client.send_message(send_request(text, context_id=context_id))
            ]
            assert event.task.status.state == COMPLETED
    (second,) = [r for r in await llm_requests() if r["text"] == f"second {mark}"]
    convo = [(m["role"], m["content"]) for m in second["messages"] if m["role"] != "system"]
    assert convo == [("user", f"first {mark}"),
                     ("assistant", f"Hello from fakellm. You said: first {mark}"),
                     ("user", f"second {mark}")]


class CuttableProxy:
    """A loopback TCP proxy whose open connections can be cut at once."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.pipes: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> CuttableProxy:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self.writers |= {writer, up_writer}
        pipes = [asyncio.create_task(self._pipe(reader, up_writer)),
                 asyncio.create_task(self._pipe(up_reader, writer))]
        self.pipes.update(pipes)
        await asyncio.gather(*pipes, return_exceptions=True)
        self.pipes.difference_update(pipes)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.writers.discard(writer)
            writer.transport.abort()

    def cut(self) -> None:
        for writer in list(self.writers):
            writer.transport.abort()
        self.writers.clear()

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        for pipe in list(self.pipes):
            pipe.cancel()
        for pipe in list(self.pipes):
            with contextlib.suppress(asyncio.CancelledError):
                await pipe
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def test_dropped_event_stream_completes_from_polling(gw, hermes_url):
    async with CuttableProxy(hermes_url) as proxy:
        endpoint = await hermes_endpoint(gw, proxy.url)
        async with gw.client(endpoint) as client:
            events = []
            async for event in client.send_message(
                send_request(f"FAKE_SLOW words=12 delay=0.2 {token()}")
            ):
                events.append(event)
                if sum(e.HasField("artifact_update") for e in events) == 2:
                    proxy.cut()  # kills the handler's SSE connection to Hermes mid-run
            task = await client.get_task(GetTaskRequest(id=events[0].task.id))
    assert state_of(events[-1]) == COMPLETED
    streamed = [
        e for e in events if e.HasField("artifact_update") and not e.artifact_update.last_chunk
    ]
    assert len(streamed) < 12  # the tokens after the cut never arrived live
    expected = " ".join(f"slow{i}" for i in range(12))
    assert task.status.state == COMPLETED and final_text(task) == expected


async def test_unanswered_approval_is_denied_after_the_bridge_bound(gw, hermes_url, tmp_path: Path):
    target = tmp_path / "danger-target"
    target.mkdir()
    endpoint = await hermes_endpoint(gw, hermes_url, approval_wait_seconds=1.0)
    async with gw.client(endpoint) as client:
        head = await until_input_required(
            client.send_message(send_request(f"FAKE_TOOL_DANGER path={target} {token()}")))
        task_id = head[0].task.id
        task = await eventually(lambda: client.get_task(GetTaskRequest(id=task_id)),
                                until=lambda t: t.status.state == COMPLETED, timeout=15,
                                what="the unanswered approval is denied")
    assert "BLOCKED: Command denied by user" in final_text(task)
    assert target.exists()


async def test_wrong_key_fails_without_revealing_it(gw, hermes_url, monkeypatch):
    wrong = "wrong-key-" + uuid.uuid4().hex
    monkeypatch.setenv("A2A_TEST_WRONG_HERMES_KEY", wrong)
    endpoint = await hermes_endpoint(gw, hermes_url, hermes_api_key="env:A2A_TEST_WRONG_HERMES_KEY")
    with structlog.testing.capture_logs() as logs:
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    reason = event.task.status.message.parts[0].text
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    assert "rejected the API key (HTTP 401)" in reason
    async with httpx.AsyncClient() as http:
        card = (await http.get(f"{gw.endpoint_url(endpoint)}/.well-known/agent-card.json")).text
    stored = await gw.store.get_task(Scope("default", endpoint, "anonymous"), event.task.id)
    for where in (str(event), str(stored.task), repr(logs), card):  # the task, logs and card
        assert wrong not in where


async def test_unreachable_hermes_fails_the_task(gw, hermes_url):
    with socket_closed_port() as url:
        endpoint = await hermes_endpoint(gw, url)
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    assert "cannot reach Hermes at" in event.task.status.message.parts[0].text


@contextlib.contextmanager
def socket_closed_port() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening


# -- the handler alone against real Hermes: re-attach and answers to a finished run ---------


@pytest.fixture
async def handler(hermes_url: str) -> AsyncIterator[HermesAgentHandler]:
    async with httpx.AsyncClient() as http:
        yield HermesAgentHandler(HermesSettings(
            hermes_api_url=hermes_url, hermes_api_key=require_env("A2A_TEST_HERMES_KEY"),
            poll_interval_seconds=0.1), http)


async def test_reattach_follows_a_run_started_earlier(handler, hermes_url):
    mark = token()
    async with httpx.AsyncClient() as http:
        created = await http.post(
            f"{hermes_url}/v1/runs", json={"input": f"FAKE_SLOW words=5 delay=0.1 {mark}"},
            headers={"Authorization": f"Bearer {require_env('A2A_TEST_HERMES_KEY')}"})
    run_id = created.json()["run_id"]
    events = [e async for e in handler.reattach(handler_request(run_ref=run_id))]
    final = events[-1]
    assert isinstance(final, Completed) and final.text == "slow0 slow1 slow2 slow3 slow4"
    assert final.metadata["hermes_run_id"] == run_id
    assert final.metadata["usage"]["output_tokens"] > 0  # Hermes' own count of the run


async def test_answer_to_a_finished_run_reports_approval_not_active(handler):
    events = [e async for e in handler.run(handler_request(f"hello {token()}"))]
    assert isinstance(events[-1], Completed)
    run_id = events[-1].metadata["hermes_run_id"]
    request = handler_request("yes", run_ref=run_id, pending_input={"choices": ["once", "deny"]})
    with pytest.raises(InputRejectedError) as caught:
        await handler.resume(request)
    assert "approval_not_active" in caught.value.prompt


# -- a hung model: the run's time bound ends the task and stops the Hermes run ------------


@pytest.mark.parametrize("text", [
    pytest.param("FAKE_HANG", id="no-answer-at-all"),
    pytest.param("FAKE_SLOW words=3 delay=600", id="hangs-mid-answer"),
])
async def test_a_hung_model_fails_the_task_at_run_timeout_seconds(gw, hermes_url, text):
    endpoint = await hermes_endpoint(gw, hermes_url, run_timeout_seconds=3)
    started = time.monotonic()
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"{text} {token()}"))]
    took = time.monotonic() - started
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    reason = event.task.status.message.parts[0].text
    assert reason == "the Hermes run exceeded run_timeout_seconds=3"
    assert 3 <= took < 10  # Hermes' keepalives (every 30 s) did not keep it WORKING
    stored = await gw.store.get_task(Scope("default", endpoint, "anonymous"), event.task.id)
    async with httpx.AsyncClient() as http:
        async def the_run() -> dict:
            return (await http.get(f"{hermes_url}/v1/runs/{stored.run_ref}", headers={
                "Authorization": f"Bearer {require_env('A2A_TEST_HERMES_KEY')}"})).json()

        await eventually(the_run, until=lambda run: run["status"] == "cancelled", timeout=10,
                         what="the bridge stops the run at Hermes")


# -- inbound images ------------------------------------------------------------------------

RED_DOT = (Path(__file__).parent.parent / "fixtures" / "images" / "red-dot.png").read_bytes()


@pytest.mark.parametrize("mode", ["task", "message"])
async def test_an_image_reaches_hermes_vision(hermes_url, mode):
    mark = token()
    async with httpx.AsyncClient() as http:
        handler = HermesAgentHandler(HermesSettings(
            hermes_api_url=hermes_url, hermes_api_key=require_env("A2A_TEST_HERMES_KEY"),
            response_mode=mode), http)
        request = handler_request(f"what is this {mark}",
                                  files=[FileInput("image/png", "red-dot.png", data=RED_DOT)])
        events = [e async for e in handler.run(request)]
    assert events[-1].text.startswith(  # Hermes describes the image, then answers
        "Hello from fakellm. You said: [The user attached an image. Here's what it contains:")
    [seen] = [e for e in await llm_requests() if mark in (e.get("text") or "")]
    turn = seen["messages"][-1]["content"]  # what the model answered: the image, described
    assert turn.startswith("[The user attached an image.") and turn.endswith(f"what is this {mark}")
