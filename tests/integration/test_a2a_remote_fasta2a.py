"""The remote A2A handler against fasta2a (another project's A2A 1.0 server): a worker of its
own that streams the answer word by word, served by fasta2a's app, reached through the
gateway by the real a2a-sdk client.

fasta2a 2.1.1's ``InMemoryStorage`` stamps task statuses without a UTC offset
(``datetime.now().isoformat()``), which is not an RFC 3339 timestamp and which the a2a-sdk
client refuses to parse; ``UtcStorage`` stamps them in UTC, and one test shows what a
gateway task says when a remote sends such a timestamp."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import uvicorn
from a2a.types import TaskState
from fasta2a import FastA2A, Worker
from fasta2a.broker import InMemoryBroker
from fasta2a.storage import InMemoryStorage

from tests.integration.test_a2a_remote_v03 import free_port
from tests.support.harness import collect, reconstruct, running_gateway
from tests.support.messages import send_request

REMOTE = "handlers.a2a_remote:A2ARemoteHandler"


class UtcStorage(InMemoryStorage):
    """fasta2a's in-memory storage with RFC 3339 status timestamps."""

    async def submit_task(self, context_id: str, message: Any) -> Any:
        return self._in_utc(await super().submit_task(context_id, message))

    async def update_task(self, task_id: str, state: Any, new_artifacts: Any = None,
                          new_messages: Any = None) -> Any:
        return self._in_utc(await super().update_task(task_id, state, new_artifacts, new_messages))

    @staticmethod
    def _in_utc(task: Any) -> Any:
        task["status"]["timestamp"] = datetime.now(UTC).isoformat()
        return task


class WordsWorker(Worker[Any]):
    """``heard: <text>`` word by word as chunks of one artifact; ``?fail`` fails the task."""

    async def run_task(self, params: Any) -> None:
        task_id, context_id = params["id"], params["context_id"]
        text = " ".join(p.get("text", "") for p in params["message"]["parts"])
        await self.storage.update_task(task_id, state="working")
        await self.publish_status(task_id, context_id, "working")
        if "?fail" in text:
            raise RuntimeError("the words worker gave up")
        artifact_id = str(uuid.uuid4())
        words = f"heard: {text}".split(" ")
        for i, word in enumerate(words):
            await self.publish_artifact(
                task_id, context_id, {"artifact_id": artifact_id, "name": "answer",
                                      "parts": [{"text": word if i == 0 else f" {word}"}]},
                append=i > 0, last_chunk=False)
            await asyncio.sleep(0.01)
        whole = {"artifact_id": artifact_id, "name": "answer", "parts": [{"text": " ".join(words)}]}
        await self.storage.update_task(task_id, state="completed", new_artifacts=[whole])

    async def cancel_task(self, params: Any) -> None:
        await self.storage.update_task(params["id"], state="canceled")

    def build_message_history(self, history: list[Any]) -> list[Any]:
        return history

    def build_artifacts(self, result: Any) -> list[Any]:
        return []


@asynccontextmanager
async def fasta2a_agent(storage: InMemoryStorage | None = None) -> AsyncIterator[str]:
    """fasta2a on a free port; yields its card URL."""
    port = free_port()
    storage, broker = storage or UtcStorage(), InMemoryBroker()
    worker = WordsWorker(broker=broker, storage=storage)

    @asynccontextmanager
    async def lifespan(app: FastA2A) -> AsyncIterator[None]:
        async with app.task_manager, worker.run():
            yield

    app = FastA2A(storage=storage, broker=broker, name="words", url=f"http://127.0.0.1:{port}/",
                  lifespan=lifespan)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/.well-known/agent-card.json"
    finally:
        server.should_exit = True
        await serving


async def test_fasta2a_streams_through_the_gateway():
    async with fasta2a_agent() as card_url, running_gateway() as gw:
        front = await gw.add_endpoint(REMOTE, settings={"remote_card_url": card_url})
        async with gw.client(front) as client:
            events = await collect(client.send_message(send_request("one two three")))
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert list(reconstruct(events).values()) == ["heard: one two three"]
    assert sum(e.HasField("artifact_update") and e.artifact_update.append for e in events) >= 2


async def test_a_failed_fasta2a_task_fails_the_gateway_task():
    async with fasta2a_agent() as card_url, running_gateway() as gw:
        front = await gw.add_endpoint(REMOTE, settings={"remote_card_url": card_url})
        async with gw.client(front, streaming=False) as client:
            [event] = await collect(client.send_message(send_request("please ?fail")))
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    assert event.task.status.message.parts[0].text.startswith("the remote agent failed")


async def test_a_remote_timestamp_without_offset_fails_the_task_with_a_clear_reason():
    async with fasta2a_agent(InMemoryStorage()) as card_url, running_gateway() as gw:
        front = await gw.add_endpoint(REMOTE, settings={"remote_card_url": card_url})
        async with gw.client(front, streaming=False) as client:
            [event] = await collect(client.send_message(send_request("hi")))
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    reason = event.task.status.message.parts[0].text
    assert reason.startswith("the remote agent sent an answer that is not valid A2A")
    assert "timestamp" in reason
