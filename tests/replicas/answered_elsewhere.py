"""Answers sent to a replica that does not run the task, on two in-process replicas ``a`` and
``b`` of one store (``tests.support.harness.running_gateway``), whatever links them: the
in-process hub, PostgreSQL NOTIFY or Redis.

* ``answer_on_b_joins_the_owners_history``: a task runs on A and waits for an approval with
  its handler's iterator open (``AsksTwice``, a backend like Hermes); the answer sent to B
  is in the task's history once, in order, and A's run goes on with it to the end;
* ``two_answers_at_one_generation_one_wins``: A and B answer one idle question with
  ``ifGenerationMatch`` at the same time: one is taken, the other refused.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import httpx
import pytest
from a2a.types import GetTaskRequest, Role, StreamResponse, SubscribeToTaskRequest, TaskState

from a2a_gateway.stores.base import Scope, StoredTask
from a2a_gateway.stores.memory import MemoryStore
from handlers.base import (
    Completed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRequired,
    RunStarted,
    TextDelta,
)
from tests.replicas.scenarios import following
from tests.support.harness import RunningGateway
from tests.support.messages import rpc, send_request, wire_message
from tests.support.streams import final_state
from tests.support.waiting import eventually

ASKS_TWICE = "handlers.echo:AsksTwice"
V11 = {"A2A-Version": "1.1"}


class AsksTwice(Handler):
    """Asks for an approval, then for a confirmation, keeping its run open until ``resume``
    delivers each answer, as a backend like Hermes does (any replica may deliver it); ends
    with the two answers it got."""

    Settings = HandlerSettings
    uses_context: ClassVar[bool] = False
    answers: ClassVar[dict[str, asyncio.Queue[str]]] = {}

    @classmethod
    def _answers(cls, run_ref: str) -> asyncio.Queue[str]:
        return cls.answers.setdefault(run_ref, asyncio.Queue())

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        answers = self._answers(request.task_id)
        yield RunStarted(request.task_id)
        yield InputRequired("approve?", {"choices": ["once", "deny"]})
        approval = await answers.get()
        yield TextDelta("approved ")
        yield InputRequired("sure?", {"choices": ["yes", "no"]})
        confirmation = await answers.get()
        yield Completed(text=f"approved {approval}, {confirmation}")

    async def resume(self, request: HandlerRequest) -> bool:
        self._answers(request.run_ref or "").put_nowait(request.text)
        return True


def serve_asks_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes ``ASKS_TWICE`` loadable by the gateways (an allowlisted module)."""
    import handlers.echo

    monkeypatch.setattr(handlers.echo, "AsksTwice", AsksTwice, raising=False)


async def answer_on_b_joins_the_owners_history(a: RunningGateway, b: RunningGateway) -> None:
    """The approval sent to B is in the history after the question and before the next one,
    WORKING as on the owner; A's follower sees the run go on; the confirmation, sent to A
    (which runs the task), ends it; the stored task holds every message once, in order."""
    ep = await a.add_endpoint(ASKS_TWICE)
    async with a.client(ep, streaming=False) as blocking_a, a.client(ep) as on_a, \
            b.client(ep) as on_b:
        (asked,) = [e async for e in blocking_a.send_message(send_request("do it"))]
        task = asked.task
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert a.gateway.engine.runs[task.id].handler is not None  # its iterator waits on A
        watched: list[StreamResponse] = []
        async with following(on_a.subscribe(SubscribeToTaskRequest(id=task.id)), watched) \
                as follower:
            await eventually(lambda: watched, timeout=10, what="A's follower has the task")
            approval = send_request("once", task_id=task.id, context_id=task.context_id)
            on_b_events = [e async for e in on_b.send_message(approval)]
            assert on_b_events[0].task.history[-1].message_id == approval.message.message_id
            assert on_b_events[0].task.status.state == TaskState.TASK_STATE_WORKING
            assert final_state(on_b_events) == TaskState.TASK_STATE_INPUT_REQUIRED  # "sure?"
            asked_again = await on_b.get_task(GetTaskRequest(id=task.id))
            assert [m.message_id for m in asked_again.history][2:] == [
                approval.message.message_id, asked_again.status.message.message_id]
            confirmation = send_request("yes", task_id=task.id, context_id=task.context_id)
            (done,) = [e async for e in blocking_a.send_message(confirmation)]
            async with asyncio.timeout(10):
                await follower
    assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.id not in b.gateway.engine.runs  # the run stayed at its owner
    states = [e.status_update.status.state for e in watched if e.HasField("status_update")]
    assert states == [  # as if the approval was sent to A
        TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_INPUT_REQUIRED,
        TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED,
    ]
    async with b.client(ep, streaming=False) as reader:
        final = await reader.get_task(GetTaskRequest(id=task.id))
    history = [(m.role, "".join(p.text for p in m.parts), m.message_id) for m in final.history]
    assert [(role, text) for role, text, _ in history] == [
        (Role.ROLE_USER, "do it"), (Role.ROLE_AGENT, "approve?"), (Role.ROLE_USER, "once"),
        (Role.ROLE_AGENT, "sure?"), (Role.ROLE_USER, "yes"),
    ]
    assert history[2][2] == approval.message.message_id  # the client's own message
    assert "".join(p.text for art in final.artifacts for p in art.parts) == "approved once, yes"


async def _call(
    http: httpx.AsyncClient, url: str, method: str, params: dict[str, Any]
) -> dict[str, Any]:
    response = await http.post(url, json=rpc(method, params, str(uuid.uuid4())), headers=V11)
    return response.json()


async def two_answers_at_one_generation_one_wins(
    a: RunningGateway, b: RunningGateway, both_read: Callable[[], None] = lambda: None
) -> None:
    """An idle question (the echo handler's iterator ended), answered on A and on B at once
    with ``ifGenerationMatch`` at its generation: exactly one answer is taken, the other is
    refused with TASK_GENERATION_MISMATCH, and the history holds the winner's alone.
    ``both_read`` is called just before the answers are sent (e.g. to hold each replica's read
    of the task until the other's: ``ReadsTogether``)."""
    ep = await a.add_endpoint(settings={"delay": 0.0})
    async with httpx.AsyncClient(timeout=30) as http:
        on_a, on_b = a.jsonrpc_url(ep), b.jsonrpc_url(ep)
        asked = await _call(http, on_a, "SendMessage", {"message": wire_message("?input please")})
        task = asked["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

        both_read()
        await _one_of_two_answers_wins(http, task, (on_a, "from A"), (on_b, "from B"))
        final = await _call(http, on_b, "GetTask", {"id": task["id"]})
    history = final["result"]["history"]
    texts = [m["parts"][0]["text"] for m in history if m["role"] == "ROLE_USER"]
    assert texts.count("from A") + texts.count("from B") == 1


async def _one_of_two_answers_wins(
    http: httpx.AsyncClient, task: dict[str, Any], *answers: tuple[str, str]
) -> None:
    """Send each (JSON-RPC URL, text) answer to ``task`` at once, with ``ifGenerationMatch`` at
    its generation: exactly one is taken, the other refused with TASK_GENERATION_MISMATCH."""
    def answer(text: str) -> dict[str, Any]:
        return {"message": wire_message(text, taskId=task["id"]),
                "configuration": {"ifGenerationMatch": task["generation"]}}

    replies = await asyncio.gather(
        *(_call(http, url, "SendMessage", answer(text)) for url, text in answers)
    )
    won = [r for r in replies if "result" in r]
    lost = [r for r in replies if "error" in r]
    assert len(won) == 1 and len(lost) == 1, replies
    assert lost[0]["error"]["data"][0]["reason"] == "TASK_GENERATION_MISMATCH"


async def answers_on_the_owner_and_on_b_at_once_one_wins(
    a: RunningGateway, b: RunningGateway, both_read: Callable[[], None] = lambda: None
) -> None:
    """A task runs on A and waits for an approval with its iterator open; A (its run) and B
    (recording it for A's run) get an answer at its generation at the same instant: exactly
    one is taken, the other refused (a late one would answer the next question without
    ``ifGenerationMatch``), and the history holds the winner's alone."""
    ep = await a.add_endpoint(ASKS_TWICE)
    async with httpx.AsyncClient(timeout=30) as http:
        on_a, on_b = a.jsonrpc_url(ep), b.jsonrpc_url(ep)
        asked = await _call(http, on_a, "SendMessage", {"message": wire_message("do it")})
        task = asked["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

        both_read()
        await _one_of_two_answers_wins(http, task, (on_a, "yes on A"), (on_b, "yes on B"))
        final = await _call(http, on_b, "GetTask", {"id": task["id"]})
        await _call(http, on_a, "CancelTask", {"id": task["id"]})
    texts = [m["parts"][0]["text"] for m in final["result"]["history"]]
    assert texts[:2] == ["do it", "approve?"]
    assert texts.count("yes on A") + texts.count("yes on B") == 1


class ReadsTogether(MemoryStore):
    """A memory store whose next two task reads, once ``arm``-ed, each wait for the other:
    two replicas answering at once both read the task before either writes (a store of one
    process never interleaves them by itself)."""

    def __init__(self) -> None:
        super().__init__()
        self._readers: list[asyncio.Event] | None = None

    def arm(self) -> None:
        self._readers = []

    async def get_task(self, scope: Scope, task_id: str) -> StoredTask | None:
        stored = await super().get_task(scope, task_id)
        readers = self._readers
        if readers is not None:
            readers.append(asyncio.Event())
            if len(readers) == 2:
                self._readers = None
                for reader in readers:
                    reader.set()
            async with asyncio.timeout(10):
                await readers[-1].wait()
        return stored
