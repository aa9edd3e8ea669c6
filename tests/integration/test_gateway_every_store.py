"""What a user does with the gateway, on every store: the real a2a-sdk client against a
running gateway on ``memory://``, SQLite, PostgreSQL and DynamoDB (moto), each on a fresh store.

The store contract suite (``tests/stores``) calls stores directly; this one finds what only
shows through the engine, such as a store write the engine makes in one state and not another.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from a2a.client import Client
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Role,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError

from tests.support.harness import RunningGateway, collect, reconstruct
from tests.support.held import add_held_echo
from tests.support.messages import send_request
from tests.support.waiting import eventually

COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
WORD_DELAY = 0.05
"""The slow echo's seconds per word: long enough to act while a reply streams."""


@pytest.fixture
def gw(every_store: RunningGateway) -> RunningGateway:
    """The gateway, on each store in turn (tests/integration/conftest.py)."""
    return every_store


@pytest.fixture
async def echo(gw: RunningGateway) -> str:
    return await gw.add_endpoint(settings={"delay": 0.0})


@pytest.fixture
async def slow_echo(gw: RunningGateway) -> str:
    return await gw.add_endpoint(settings={"delay": WORD_DELAY})


def user_texts(task: Task) -> list[str]:
    return [m.parts[0].text for m in task.history if m.role == Role.ROLE_USER]


async def until_terminal(client: Client, task_id: str, timeout: float = 10.0) -> Task:
    """GetTask until the task is completed or canceled (at most ``timeout`` seconds)."""
    return await eventually(lambda: client.get_task(GetTaskRequest(id=task_id)),
                            until=lambda task: task.status.state in (COMPLETED, CANCELED),
                            timeout=timeout, what=f"task {task_id} ends")


async def test_blocking_send_returns_the_completed_task_get_task_reads_it_back(gw, echo):
    async with gw.client(echo, streaming=False) as client:
        (event,) = await collect(client.send_message(send_request("hello store")))
        got = await client.get_task(GetTaskRequest(id=event.task.id))
    for task in (event.task, got):
        assert task.status.state == COMPLETED
        assert [p.text for p in task.artifacts[0].parts] == ["echo: hello store"]
        assert user_texts(task) == ["hello store"]


async def test_streaming_send_delivers_task_chunks_final_and_stores_the_text(gw, slow_echo):
    words = "one two three four"
    async with gw.client(slow_echo) as client:
        events = await collect(client.send_message(send_request(words)))
        stored = await client.get_task(GetTaskRequest(id=events[0].task.id))
    assert events[0].HasField("task")
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert len(chunks) >= 5  # one per word, then the final artifact
    assert not chunks[0].append and chunks[1].append and chunks[-1].last_chunk
    artifact_id = chunks[0].artifact.artifact_id
    assert reconstruct(events) == {artifact_id: f"echo: {words}"}
    assert events[-1].status_update.status.state == COMPLETED
    assert stored.status.state == COMPLETED
    assert stored.artifacts[0].artifact_id == artifact_id
    assert stored.artifacts[0].parts[0].text == f"echo: {words}"


async def test_input_required_then_the_answer_completes_the_same_task(gw, echo):
    async with gw.client(echo, streaming=False) as client:
        (asked,) = await collect(client.send_message(send_request("please ?input")))
        task = asked.task
        assert task.status.state == INPUT_REQUIRED
        waiting = await client.get_task(GetTaskRequest(id=task.id))
        listed = await client.list_tasks(ListTasksRequest(status=INPUT_REQUIRED))
        (answered,) = await collect(
            client.send_message(
                send_request("the answer", task_id=task.id, context_id=task.context_id)
            )
        )
        done = await client.get_task(GetTaskRequest(id=task.id))
        still_waiting = await client.list_tasks(ListTasksRequest(status=INPUT_REQUIRED))
    assert task.status.message.parts[0].text.startswith("What should I echo")
    assert waiting.status.state == INPUT_REQUIRED
    assert [t.id for t in listed.tasks] == [task.id]
    for final in (answered.task, done):
        assert final.id == task.id and final.status.state == COMPLETED
        assert final.artifacts[-1].parts[0].text == "echo: the answer"
        assert user_texts(final) == ["please ?input", "the answer"]
    assert list(still_waiting.tasks) == []


async def test_input_required_round_trip_over_streams(gw, echo):
    async with gw.client(echo) as client:
        asked = await collect(client.send_message(send_request("?input over a stream")))
        task = asked[0].task
        answered = await collect(
            client.send_message(
                send_request("streamed answer", task_id=task.id, context_id=task.context_id)
            )
        )
    assert asked[-1].status_update.status.state == INPUT_REQUIRED
    assert answered[0].task.id == task.id
    assert list(reconstruct(answered).values()) == ["echo: streamed answer"]
    assert answered[-1].status_update.status.state == COMPLETED


async def test_cancel_stops_a_slow_stream_and_the_task_stays_canceled(gw, slow_echo):
    async with gw.client(slow_echo) as streaming, gw.client(slow_echo, streaming=False) as client:
        stream = streaming.send_message(
            send_request(" ".join(["word"] * 100))
        )  # 5 s if not stopped
        first = await anext(stream)
        await anext(stream)
        canceled = await client.cancel_task(CancelTaskRequest(id=first.task.id))
        rest = await asyncio.wait_for(collect(stream), timeout=5)
        final = await client.get_task(GetTaskRequest(id=first.task.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=first.task.id))
    assert canceled.status.state == CANCELED
    assert rest[-1].status_update.status.state == CANCELED
    assert final.status.state == CANCELED and not final.artifacts


async def test_subscribe_mid_stream_rebuilds_the_exact_text(gw, monkeypatch):
    # the run waits after "echo: w0" until the late subscriber has the text so far (a 1 s run
    # could end before the subscribe on a loaded machine, and an ended task refuses it)
    slow_echo, release = await add_held_echo(gw, monkeypatch, words=2,
                                             settings={"delay": WORD_DELAY})
    words = " ".join(f"w{i}" for i in range(20))
    async with gw.client(slow_echo) as first, gw.client(slow_echo) as second:
        stream = first.send_message(send_request(words))
        try:
            head = [await anext(stream)]
            while list(reconstruct(head).values()) != ["echo: w0"]:
                head.append(await anext(stream))
            following = second.subscribe(SubscribeToTaskRequest(id=head[0].task.id))
            late = [await anext(following), await anext(following)]
        finally:
            release.set()
        late += await collect(following)
        rest = await collect(stream)
    assert late[0].HasField("task") and late[0].task.id == head[0].task.id
    assert late[1].HasField("artifact_update") and not late[1].artifact_update.append
    assert late[1].artifact_update.artifact.parts[0].text.startswith("echo: w0")
    assert list(reconstruct(late).values()) == [f"echo: {words}"]
    assert late[-1].status_update.status.state == COMPLETED
    assert list(reconstruct(head + rest).values()) == [f"echo: {words}"]


async def test_get_task_and_list_tasks_by_context_state_and_pages(gw, echo):
    ctx_a, ctx_b = f"ctx-a-{uuid.uuid4()}", f"ctx-b-{uuid.uuid4()}"
    async with gw.client(echo, streaming=False) as client:
        sent_a = []
        for i in range(5):
            (event,) = await collect(client.send_message(send_request(f"a{i}", context_id=ctx_a)))
            sent_a.append(event.task.id)
        for i in range(2):
            await collect(client.send_message(send_request(f"b{i}", context_id=ctx_b)))
        got = await client.get_task(GetTaskRequest(id=sent_a[0], history_length=0))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=str(uuid.uuid4())))

        pages, token = [], ""
        for _ in range(10):  # bounded: 3 pages expected
            page = await client.list_tasks(
                ListTasksRequest(context_id=ctx_a, page_size=2, page_token=token)
            )
            pages.append(page)
            token = page.next_page_token
            if not token:
                break
        everything = await client.list_tasks(ListTasksRequest(page_size=50))
        completed = await client.list_tasks(ListTasksRequest(status=COMPLETED, page_size=50))
        third = await client.get_task(GetTaskRequest(id=sent_a[2]))
        since_third = await client.list_tasks(
            ListTasksRequest(
                context_id=ctx_a, status_timestamp_after=third.status.timestamp,
                include_artifacts=True,
            )
        )
        token = pages[0].next_page_token
        middle = len(token) // 2
        forged = token[:middle] + ("B" if token[middle] == "A" else "A") + token[middle + 1 :]
        with pytest.raises(InvalidParamsError):
            await client.list_tasks(
                ListTasksRequest(context_id=ctx_a, page_size=2, page_token=forged)
            )

    assert got.status.state == COMPLETED and got.context_id == ctx_a and not got.history
    assert [len(p.tasks) for p in pages] == [2, 2, 1]
    assert {p.total_size for p in pages} == {5}
    assert [t.id for p in pages for t in p.tasks] == list(reversed(sent_a))  # newest first
    assert all(t.context_id == ctx_a for p in pages for t in p.tasks)
    assert everything.total_size == 7 and len(everything.tasks) == 7
    assert completed.total_size == 7
    assert [t.id for t in since_third.tasks] == list(reversed(sent_a[2:]))
    assert since_third.tasks[-1].artifacts[0].parts[0].text == "echo: a2"
    assert not pages[0].tasks[0].artifacts  # includeArtifacts defaults to false


async def test_push_config_create_get_list_delete(gw, echo):
    async with gw.client(echo, streaming=False) as client:
        (event,) = await collect(client.send_message(send_request("push me")))
        task_id = event.task.id
        for config_id in ("cfg-2", "cfg-1"):
            created = await client.create_task_push_notification_config(
                TaskPushNotificationConfig(
                    task_id=task_id, id=config_id, url=f"http://127.0.0.1:9/{config_id}",
                    token=f"token-{config_id}",
                )
            )
            assert created.id == config_id and created.url == f"http://127.0.0.1:9/{config_id}"
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1")
        )
        both = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1")
        )
        left = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
    assert got.url == "http://127.0.0.1:9/cfg-1" and got.token == "token-cfg-1"
    assert [c.id for c in both.configs] == ["cfg-1", "cfg-2"]
    assert [c.id for c in left.configs] == ["cfg-2"]


async def test_a_client_that_drops_its_stream_finds_the_full_result_with_get_task(gw, slow_echo):
    words = "a b c d e f g h"
    async with gw.client(slow_echo) as leaving:
        stream = leaving.send_message(send_request(words))
        first = await anext(stream)
        await anext(stream)
        await stream.aclose()
    async with gw.client(slow_echo, streaming=False) as returning:
        task = await until_terminal(returning, first.task.id)
    assert task.status.state == COMPLETED
    assert task.artifacts[0].parts[0].text == f"echo: {words}"
