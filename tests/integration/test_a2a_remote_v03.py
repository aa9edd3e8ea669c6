"""The remote A2A handler across protocol versions: a 0.3-only agent served by the a2a-sdk's
own server code (its 0.3 JSON-RPC compat dispatcher, a card that names protocol 0.3 only)
reaches 1.0 clients through the gateway, and a 1.0 remote (another gateway) reaches a 0.3
client through the gateway's 0.3 binding."""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    GetTaskRequest,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

from tests.support.harness import collect, reconstruct, running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually

REMOTE = "handlers.a2a_remote:A2ARemoteHandler"
COMPLETED = TaskState.TASK_STATE_COMPLETED


class WordsAgent(AgentExecutor):
    """Streams ``said: <text>`` word by word as one artifact, ``delay`` seconds per word;
    ``?input`` asks first."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        if context.current_task is None:
            await event_queue.enqueue_event(Task(
                id=task_id, context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED), history=[context.message]))
        updater = TaskUpdater(event_queue, task_id, context_id)
        text = context.get_user_input()
        if "?input" in text:
            await updater.requires_input(updater.new_agent_message([Part(text="Say more.")]))
            return
        await updater.start_work()
        artifact_id = str(uuid.uuid4())
        for i, word in enumerate(f"said: {text}".split(" ")):
            await updater.add_artifact([Part(text=word if i == 0 else f" {word}")],
                                       artifact_id=artifact_id, name="answer", append=i > 0)
            await asyncio.sleep(self.delay)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class MethodLog:
    """ASGI wrapper: the JSON-RPC method of every POST, then the app as it is."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.methods: list[str] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        self.methods.append(json.loads(body).get("method", ""))
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@asynccontextmanager
async def v03_agent(*, streaming: bool = True,
                    delay: float = 0.01) -> AsyncIterator[tuple[str, MethodLog]]:
    """The 0.3 agent on a free port: (its card URL, the methods it was called with)."""
    port = free_port()
    card = AgentCard(
        name="words",
        description="a 0.3 agent that says your words",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="say", name="Say", description="says your words", tags=["say"])],
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC", protocol_version="0.3"
            )
        ],
    )
    handler = DefaultRequestHandler(WordsAgent(delay), InMemoryTaskStore(), card)
    app = MethodLog(
        Starlette(
            routes=[
                *create_agent_card_routes(card),
                *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
            ]
        )
    )
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/.well-known/agent-card.json", app
    finally:
        server.should_exit = True
        await serving


async def test_a_v03_only_agent_streams_to_a_v10_client_through_the_gateway():
    async with v03_agent() as (card_url, calls), running_gateway() as gw:
        front = await gw.add_endpoint(REMOTE, settings={"remote_card_url": card_url})
        async with gw.client(front, version="1.0") as client:
            events = await collect(client.send_message(send_request("one two three")))
    assert events[-1].status_update.status.state == COMPLETED
    assert list(reconstruct(events).values()) == ["said: one two three"]
    assert sum(e.HasField("artifact_update") and e.artifact_update.append for e in events) >= 2
    assert calls.methods == ["message/stream"]  # the 0.3 method: the compat transport was chosen


async def test_a_v03_agent_asks_for_input_and_the_answer_goes_back_to_its_task():
    async with v03_agent() as (card_url, calls), running_gateway() as gw:
        front = await gw.add_endpoint(REMOTE, settings={"remote_card_url": card_url})
        async with gw.client(front, streaming=False) as client:
            [asked] = await collect(client.send_message(send_request("tell ?input")))
            task = asked.task
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert task.status.message.parts[0].text == "Say more."
            [done] = await collect(client.send_message(
                send_request("more words", task_id=task.id, context_id=task.context_id)))
    assert done.task.status.state == COMPLETED
    assert ["".join(p.text for p in a.parts) for a in done.task.artifacts] == ["said: more words"]
    assert calls.methods == ["message/stream", "message/stream"]


async def test_a_remote_without_streaming_is_sent_the_message_then_polled():
    async with v03_agent(streaming=False, delay=0.1) as (card_url, calls), running_gateway() as gw:
        front = await gw.add_endpoint(REMOTE, settings={"remote_card_url": card_url,
                                                        "poll_interval_seconds": 0.1})
        async with gw.client(front) as client:
            events = await collect(client.send_message(send_request("all at once")))
    assert events[-1].status_update.status.state == COMPLETED
    assert list(reconstruct(events).values()) == ["said: all at once"]
    assert calls.methods[0] == "message/send" and len(calls.methods) >= 3
    assert set(calls.methods[1:]) == {"tasks/get"}


async def test_a_restarted_gateway_polls_the_task_of_a_remote_without_streaming(tmp_path):
    store = f"sqlite:///{tmp_path / 'a.db'}"
    words = " ".join(f"w{i}" for i in range(20))
    settings = {"poll_interval_seconds": 0.1}
    async with v03_agent(streaming=False, delay=0.1) as (card_url, calls):
        async with running_gateway(store, lease_seconds=0.6, replica_id="replica-a") as gw:
            front = await gw.add_endpoint(
                REMOTE, settings={"remote_card_url": card_url, **settings}
            )
            async with gw.client(front, streaming=False) as client:
                [started] = await collect(
                    client.send_message(send_request(words, immediately=True))
                )
            await eventually(lambda: calls.methods.count("tasks/get") >= 2)
        async with running_gateway(store, lease_seconds=0.6, replica_id="replica-b") as gw2:
            async with gw2.client(front) as client:
                task = await eventually(lambda: client.get_task(GetTaskRequest(id=started.task.id)),
                                        until=lambda t: t.status.state == COMPLETED, timeout=60)
    assert ["".join(p.text for p in a.parts) for a in task.artifacts] == [f"said: {words}"]
    assert calls.methods.count("message/send") == 1  # re-attached, not sent again


async def test_the_gateway_card_from_a_v03_card_keeps_its_own_interfaces():
    async with v03_agent() as (card_url, _), running_gateway() as gw:
        front = await gw.add_endpoint(REMOTE, settings={"remote_card_url": card_url,
                                                        "card_from_remote": True})
        card = await gw.card(front)
    assert card.description == "a 0.3 agent that says your words"
    assert [s.id for s in card.skills] == ["say"]
    assert {(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces} >= {
        ("JSONRPC", "1.0"), ("JSONRPC", "0.3")}


async def test_a_v10_remote_reaches_a_v03_client_through_the_gateway():
    async with running_gateway() as gw_b, running_gateway() as gw_a:
        echo = await gw_b.add_endpoint(settings={"delay": 0})
        front = await gw_a.add_endpoint(REMOTE, settings={
            "remote_card_url": f"{gw_b.endpoint_url(echo)}/.well-known/agent-card.json"})
        async with gw_a.client(front, version="0.3") as client:
            events = await collect(client.send_message(send_request("from an old client")))
            task_id = next(
                e.artifact_update.task_id for e in events if e.HasField("artifact_update")
            )
            task = await client.get_task(GetTaskRequest(id=task_id))
    assert list(reconstruct(events).values()) == ["echo: from an old client"]
    assert task.status.state == COMPLETED

