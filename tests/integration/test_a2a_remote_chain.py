"""The remote A2A handler against another instance of this gateway (a chain): gateway B
serves the echo agent, gateway A serves B's endpoint through ``handlers.a2a_remote``, and
the real a2a-sdk client calls A."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from a2a.client import ClientCallContext
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    TaskState,
)
from aiohttp import web

from a2a_gateway.auth.api_keys import make_key
from a2a_gateway.stores.base import Scope, TaskQuery
from tests.support.harness import RunningGateway, collect, reconstruct, running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually

REMOTE = "handlers.a2a_remote:A2ARemoteHandler"
COMPLETED = TaskState.TASK_STATE_COMPLETED


def card_url(gw: RunningGateway, endpoint_id: str) -> str:
    return f"{gw.endpoint_url(endpoint_id)}/.well-known/agent-card.json"


@asynccontextmanager
async def chain(delay: float = 0.0, *, b_settings: dict | None = None,
                a_settings: dict | None = None, **b_options) -> AsyncIterator[tuple]:
    """Gateway B with an echo endpoint, gateway A with a remote endpoint in front of it."""
    async with running_gateway(**b_options) as gw_b, running_gateway() as gw_a:
        echo = await gw_b.add_endpoint(settings={"delay": delay, **(b_settings or {})})
        front = await gw_a.add_endpoint(REMOTE, settings={
            "remote_card_url": card_url(gw_b, echo), **(a_settings or {})})
        yield gw_a, front, gw_b, echo


async def remote_tasks(gw_b: RunningGateway, echo: str, principal: str = "anonymous") -> list:
    page = await gw_b.store.list_tasks(Scope("default", echo, principal), TaskQuery())
    return page.tasks


def final_task(events):
    return next(e.task for e in reversed(events) if e.HasField("task"))


async def test_streamed_reply_passes_tokens_through_before_completion():
    async with chain(delay=0.02) as (gw_a, front, gw_b, echo):
        async with gw_a.client(front) as client:
            events = await collect(client.send_message(send_request("one two three four")))
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    chunks = [e for e in events if e.HasField("artifact_update")]
    assert states[-1] == COMPLETED
    completed_at = next(i for i, e in enumerate(events) if e.HasField("status_update")
                        and e.status_update.status.state == COMPLETED)
    appended = [
        i
        for i, e in enumerate(events)
        if e.HasField("artifact_update") and e.artifact_update.append
    ]
    assert len(appended) >= 3 and max(appended) < completed_at  # tokens came before the end
    assert list(reconstruct(chunks).values()) == ["echo: one two three four"]
    [remote] = await remote_tasks(gw_b, echo)
    assert remote.status.state == COMPLETED


async def test_the_callers_trace_goes_on_to_the_remote(capsys):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    context = ClientCallContext(service_parameters={
        "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    async with chain() as (gw_a, front, gw_b, echo):
        async with gw_a.client(front, streaming=False) as client:
            await collect(client.send_message(send_request("traced"), context=context))
    remote_lines = [line for line in capsys.readouterr().out.splitlines()
                    if f"path=/{echo}/a2a " in line]
    assert remote_lines and all(f"trace_id={trace_id}" in line for line in remote_lines)


async def test_the_card_is_read_once_then_again_after_its_refresh_interval(capsys):
    # 2 s: the two chained sends fit in the interval on a loaded machine too (0.5 s did not
    # leave them much)
    async with chain(a_settings={"card_refresh_seconds": 2.0}) as (gw_a, front, gw_b, echo):
        async with gw_a.client(front, streaming=False) as client:
            for text in ("one", "two"):
                await collect(client.send_message(send_request(text)))
            reads = capsys.readouterr().out.count(f"path=/{echo}/.well-known/agent-card.json")
            await asyncio.sleep(2.1)
            await collect(client.send_message(send_request("three")))
            again = capsys.readouterr().out.count(f"path=/{echo}/.well-known/agent-card.json")
    assert (reads, again) == (1, 1)


async def test_a_message_answer_completes_the_task_or_is_the_reply_in_message_mode():
    async with chain(b_settings={"response_mode": "message"}) as (gw_a, front, gw_b, echo):
        replier = await gw_a.add_endpoint(REMOTE, settings={
            "remote_card_url": card_url(gw_b, echo), "response_mode": "message"})
        async with gw_a.client(front, streaming=False) as client:
            [task] = await collect(client.send_message(send_request("as a task")))
        async with gw_a.client(replier, streaming=False) as client:
            [reply] = await collect(client.send_message(send_request("as a message")))
    assert task.task.status.state == COMPLETED
    assert [p.text for a in task.task.artifacts for p in a.parts] == ["echo: as a task"]
    assert reply.HasField("message") and [p.text for p in reply.message.parts] == [
        "echo: as a message"
    ]


async def test_blocking_send_returns_the_completed_task_with_the_remote_artifact():
    async with chain() as (gw_a, front, gw_b, echo):
        async with gw_a.client(front, streaming=False) as client:
            [event] = await collect(client.send_message(send_request("hello there")))
    task = event.task
    assert task.status.state == COMPLETED
    assert ["".join(p.text for p in a.parts) for a in task.artifacts] == ["echo: hello there"]


async def test_two_turns_in_one_context_are_one_remote_context():
    async with chain() as (gw_a, front, gw_b, echo):
        async with gw_a.client(front, streaming=False) as client:
            [first] = await collect(client.send_message(send_request("first")))
            context = first.task.context_id
            [second] = await collect(
                client.send_message(send_request("second", context_id=context))
            )
            [other] = await collect(client.send_message(send_request("elsewhere")))
        assert second.task.context_id == context and second.task.status.state == COMPLETED
        remote = await remote_tasks(gw_b, echo)
    contexts = {}
    for task in remote:
        contexts.setdefault(task.context_id, []).append(task.history[0].parts[0].text)
    assert sorted(sorted(texts) for texts in contexts.values()) == [
        ["elsewhere"],
        ["first", "second"],
    ]
    assert context not in contexts  # the remote chose its own context ids
    assert other.task.context_id != context


async def test_input_required_round_trip_answers_the_same_remote_task():
    async with chain() as (gw_a, front, gw_b, echo):
        async with gw_a.client(front) as client:
            asked = await collect(client.send_message(send_request("please ?input")))
            task = final_status_task(asked)
            assert task[1] == TaskState.TASK_STATE_INPUT_REQUIRED
            prompt = task[2]
            assert "What should I echo?" in "".join(p.text for p in prompt.parts)
            assert any(p.HasField("data") for p in prompt.parts)  # the remote's choices
            answered = await collect(client.send_message(
                send_request("the answer", task_id=task[0], context_id=task[3])))
            done = await client.get_task(GetTaskRequest(id=task[0]))
        remote = await remote_tasks(gw_b, echo)
    assert done.status.state == COMPLETED
    assert list(reconstruct([e for e in answered if e.HasField("artifact_update")]).values()) == [
        "echo: the answer"]
    [one] = remote  # the answer went to the same remote task
    assert one.status.state == COMPLETED
    assert [m.parts[0].text for m in one.history if m.role == 1] == ["please ?input", "the answer"]


def final_status_task(events):
    """(task id, state, status message, context id) of the last status seen."""
    for event in reversed(events):
        if event.HasField("status_update"):
            u = event.status_update
            return u.task_id, u.status.state, u.status.message, u.context_id
        if event.HasField("task"):
            t = event.task
            return t.id, t.status.state, t.status.message, t.context_id
    raise AssertionError("no status")


async def test_auth_required_round_trip_and_every_part_kind_pass_through():
    async with chain() as (gw_a, front, gw_b, echo):
        async with gw_a.client(front, streaming=False) as client:
            [asked] = await collect(client.send_message(send_request("?auth ?artifacts")))
            task = asked.task
            assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
            [data] = [p for p in task.status.message.parts if p.HasField("data")]
            assert data.data.struct_value["auth_url"] == "https://example.com/echo/authorize"
            [done] = await collect(client.send_message(
                send_request("?artifacts authorized", task_id=task.id, context_id=task.context_id)))
    artifacts = {a.artifact_id: a for a in done.task.artifacts}
    assert done.task.status.state == COMPLETED
    assert "".join(p.text for p in artifacts["notes"].parts) == "first second"
    assert artifacts["file"].parts[0].raw == b"?artifacts authorized"
    assert artifacts["file"].parts[0].filename == "echo.txt"
    assert artifacts["data"].parts[0].data.struct_value["words"] == 2
    [answer] = [a for a in done.task.artifacts if a.artifact_id not in ("notes", "file", "data")]
    assert "".join(p.text for p in answer.parts) == "echo: ?artifacts authorized"


async def test_cancel_mid_stream_cancels_the_remote_task_too():
    async with chain(delay=0.3) as (gw_a, front, gw_b, echo):
        async with gw_a.client(front) as client:
            stream = client.send_message(send_request(" ".join(f"w{i}" for i in range(40))))
            seen = []
            async for event in stream:
                seen.append(event)
                if sum(e.HasField("artifact_update") for e in seen) >= 2:
                    break
            task_id = final_status_task(seen)[0] if any(
                e.HasField("status_update") or e.HasField("task") for e in seen) else \
                seen[-1].artifact_update.task_id
            canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        [remote] = await remote_tasks(gw_b, echo)
        assert remote.status.state == TaskState.TASK_STATE_CANCELED


async def test_remote_failure_fails_the_task_with_the_remote_reason(capsys):
    async with running_gateway() as gw_b, running_gateway() as gw_a:
        broken = await gw_b.add_endpoint("handlers.openai_chat:OpenAIChatHandler",
                                         settings={"base_url": "http://127.0.0.1:9/v1"})
        front = await gw_a.add_endpoint(REMOTE, settings={
            "remote_card_url": card_url(gw_b, broken), "remote_api_key": "tok-never-shown-1234",
            "remote_api_key_header": "X-Upstream-Token"})
        async with gw_a.client(front, streaming=False) as client:
            [event] = await collect(client.send_message(send_request("hi")))
    status = event.task.status
    assert status.state == TaskState.TASK_STATE_FAILED
    reason = status.message.parts[0].text
    assert reason.startswith("the remote agent failed: cannot reach the chat backend")
    assert "tok-never-shown-1234" not in str(event)
    logged = capsys.readouterr()
    assert "tok-never-shown-1234" not in logged.out + logged.err


@pytest.fixture
def secured_b():
    @asynccontextmanager
    async def start():
        async with running_gateway(allow_unauthenticated_endpoints=False,
                                   api_key_cache_seconds=0) as gw_b:
            echo = await gw_b.add_endpoint(settings={"delay": 0})
            secret = gw_b.gateway.settings.api_key_secret.get_secret_value().encode()
            row, key = make_key(secret, endpoint_id=echo, tenant="default", principal="gateway-a")
            await gw_b.store.create_api_key(row)
            yield gw_b, echo, key
    return start


async def test_api_key_made_on_the_remote_authenticates_the_chain(secured_b, monkeypatch, capsys):
    async with secured_b() as (gw_b, echo, key), running_gateway() as gw_a:
        monkeypatch.setenv("REMOTE_ECHO_KEY", key)
        good = await gw_a.add_endpoint(REMOTE, settings={
            "remote_card_url": card_url(gw_b, echo), "remote_api_key": "env:REMOTE_ECHO_KEY"})
        wrong = key[:-4] + ("aaaa" if not key.endswith("aaaa") else "bbbb")
        bad = await gw_a.add_endpoint(REMOTE, settings={
            "remote_card_url": card_url(gw_b, echo), "remote_bearer_token": wrong})
        async with gw_a.client(good, streaming=False) as client:
            [ok] = await collect(client.send_message(send_request("with a key")))
        async with gw_a.client(bad, streaming=False) as client:
            [refused] = await collect(client.send_message(send_request("with a wrong key")))
        [remote] = await remote_tasks(gw_b, echo, principal="gateway-a")
    assert ok.task.status.state == COMPLETED
    assert remote.history[0].parts[0].text == "with a key"
    assert refused.task.status.state == TaskState.TASK_STATE_FAILED
    reason = refused.task.status.message.parts[0].text
    assert "HTTP 401" in reason
    assert wrong not in str(refused) and key not in str(refused)
    logged = capsys.readouterr()
    assert "remote_call_failed" in logged.out  # the failure is logged, the key is not
    assert wrong not in logged.out + logged.err and key not in logged.out + logged.err


async def test_the_card_is_read_again_after_a_failed_call(secured_b, capsys):
    async with secured_b() as (gw_b, echo, key), running_gateway() as gw_a:
        front = await gw_a.add_endpoint(REMOTE, settings={
            "remote_card_url": card_url(gw_b, echo), "remote_api_key": f"{key}-revoked"})
        async with gw_a.client(front, streaming=False) as client:
            for text in ("one", "two"):
                [event] = await collect(client.send_message(send_request(text)))
                assert event.task.status.state == TaskState.TASK_STATE_FAILED
    assert capsys.readouterr().out.count(f"path=/{echo}/.well-known/agent-card.json") == 2


async def test_oauth2_client_credentials_token_is_fetched_once_and_sent(secured_b):
    requests: list[dict] = []

    async def token(request: web.Request) -> web.Response:
        form = dict(await request.post())
        requests.append({"form": form, "auth": request.headers.get("Authorization", "")})
        return web.json_response(
            {"access_token": issued, "token_type": "Bearer", "expires_in": 3600}
        )

    app = web.Application()
    app.router.add_post("/token", token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with secured_b() as (gw_b, echo, issued), running_gateway() as gw_a:
            front = await gw_a.add_endpoint(REMOTE, settings={
                "remote_card_url": card_url(gw_b, echo),
                "oauth2_token_url": f"http://127.0.0.1:{port}/token",
                "oauth2_client_id": "gateway-a", "oauth2_client_secret": "client-secret-5678",
                "oauth2_scope": "a2a"})
            async with gw_a.client(front, streaming=False) as client:
                [first] = await collect(client.send_message(send_request("one")))
                [second] = await collect(client.send_message(send_request("two")))
    finally:
        await runner.cleanup()
    assert first.task.status.state == COMPLETED and second.task.status.state == COMPLETED
    assert len(requests) == 1  # cached until it expires
    assert requests[0]["form"] == {"grant_type": "client_credentials", "scope": "a2a"}
    assert requests[0]["auth"].startswith("Basic ")
    assert "client-secret-5678" not in str(first)


async def test_the_run_time_bound_cancels_the_remote_task():
    async with chain(delay=0.5, a_settings={"run_timeout_seconds": 1.0}) as (
        gw_a,
        front,
        gw_b,
        echo,
    ):
        async with gw_a.client(front, streaming=False) as client:
            [event] = await collect(client.send_message(send_request("a b c d e f g h i j")))
        status = event.task.status
        assert status.state == TaskState.TASK_STATE_FAILED
        assert status.message.parts[0].text == \
            "the remote agent's task exceeded run_timeout_seconds=1"
        [remote] = await remote_tasks(gw_b, echo)
        assert remote.status.state == TaskState.TASK_STATE_CANCELED


async def test_card_from_remote_takes_skills_and_modes_but_keeps_the_gateways_interfaces():
    skills = [{"id": "echo", "name": "Echo", "description": "echoes words", "tags": ["echo"]}]
    async with running_gateway() as gw_b, running_gateway() as gw_a:
        echo = await gw_b.add_endpoint(card={"skills": skills, "defaultInputModes": ["text/plain"]})
        front = await gw_a.add_endpoint(REMOTE, settings={
            "remote_card_url": card_url(gw_b, echo), "card_from_remote": True,
            "remote_api_key": "key-not-in-card-9876"})
        card = await gw_a.card(front)
        raw = str(card)
    assert [s.id for s in card.skills] == ["echo"]
    assert list(card.default_input_modes) == ["text/plain"]
    assert all(i.url.startswith(gw_a.base_url) for i in card.supported_interfaces)
    assert "key-not-in-card-9876" not in raw


async def test_a_gateway_restart_reattaches_to_the_running_remote_task(tmp_path: Path):
    store = f"sqlite:///{tmp_path / 'a.db'}"
    words = " ".join(f"w{i}" for i in range(25))
    async with running_gateway() as gw_b:
        echo = await gw_b.add_endpoint(settings={"delay": 0.15})
        async with running_gateway(store, lease_seconds=0.6, replica_id="replica-a") as gw_a:
            front = await gw_a.add_endpoint(
                REMOTE, settings={"remote_card_url": card_url(gw_b, echo)}
            )
            async with gw_a.client(front) as client:
                seen = []
                async for event in client.send_message(send_request(words)):
                    seen.append(event)
                    if sum(e.HasField("artifact_update") for e in seen) >= 3:
                        break
            task_id = next(e.artifact_update.task_id for e in seen if e.HasField("artifact_update"))
        async with running_gateway(store, lease_seconds=0.6, replica_id="replica-b") as gw_a2:
            async with gw_a2.client(front) as client:
                async def completed():
                    task = await client.get_task(GetTaskRequest(id=task_id))
                    return task if task.status.state == COMPLETED else None
                task = await eventually(completed, timeout=60)
        [remote] = await remote_tasks(gw_b, echo)
    assert ["".join(p.text for p in a.parts) for a in task.artifacts] == [f"echo: {words}"]
    assert remote.status.state == COMPLETED
