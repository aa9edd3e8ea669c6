"""The real a2a-sdk client against a running gateway, A2A 1.0 and 0.3 alike."""

from __future__ import annotations

import uuid

import pytest
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Role,
    SendMessageConfiguration,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError

from tests.support.harness import RunningGateway, collect, reconstruct
from tests.support.held import add_held_echo
from tests.support.messages import send_request
from tests.support.waiting import eventually

VERSIONS = ["1.0", "0.3"]


@pytest.fixture
async def slow_echo_id(gw: RunningGateway) -> str:
    return await gw.add_endpoint(
        "handlers.echo:EchoHandler", settings={"delay": 0.05}, name="slow echo"
    )


async def test_card_discovery_through_sdk_resolver(gw: RunningGateway, echo_id: str):
    card = await gw.card(echo_id)
    assert card.name == "echo"
    bindings = [(i.protocol_binding, i.protocol_version, i.url) for i in card.supported_interfaces]
    assert bindings == [
        ("JSONRPC", "1.0", gw.jsonrpc_url(echo_id)),
        ("JSONRPC", "0.3", gw.jsonrpc_url(echo_id)),
        ("HTTP+JSON", "1.0", gw.rest_url(echo_id)),
    ]
    assert card.capabilities.streaming and card.capabilities.push_notifications


@pytest.mark.parametrize("version", VERSIONS)
async def test_blocking_send_returns_completed_task_with_artifact(gw, echo_id, version):
    async with gw.client(echo_id, version=version, streaming=False) as client:
        (event,) = await collect(client.send_message(send_request("hello world")))
    task = event.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for p in task.artifacts[0].parts] == ["echo: hello world"]
    assert task.history[0].parts[0].text == "hello world"


@pytest.mark.parametrize("version", VERSIONS)
async def test_message_mode_returns_a_message_and_no_task(gw, version):
    ep = await gw.add_endpoint(settings={"delay": 0, "response_mode": "message"})
    async with gw.client(ep, version=version, streaming=False) as client:
        (event,) = await collect(client.send_message(send_request("ping")))
    assert event.HasField("message")
    assert event.message.role == Role.ROLE_AGENT and event.message.parts[0].text == "echo: ping"


@pytest.mark.parametrize("version", VERSIONS)
async def test_stream_delivers_task_then_chunks_then_final(gw, slow_echo_id, version):
    async with gw.client(slow_echo_id, version=version) as client:
        events = await collect(client.send_message(send_request("one two three four")))
    assert events[0].HasField("task")
    chunks = [e for e in events if e.HasField("artifact_update")]
    assert len(chunks) >= 5  # one per word, then the final artifact
    assert not chunks[0].artifact_update.append and chunks[1].artifact_update.append
    assert reconstruct(events) == {
        chunks[0].artifact_update.artifact.artifact_id: "echo: one two three four"
    }
    last = events[-1]
    assert (
        last.HasField("status_update")
        and last.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    )


@pytest.mark.parametrize("version", VERSIONS)
async def test_get_task_after_stream_has_final_result(gw, echo_id, version):
    async with gw.client(echo_id, version=version) as client:
        events = await collect(client.send_message(send_request("keep me")))
        task_id = events[0].task.id
        task = await client.get_task(GetTaskRequest(id=task_id, history_length=0))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "echo: keep me"
    assert len(task.history) == 0


@pytest.mark.parametrize("version", VERSIONS)
async def test_get_unknown_task_is_task_not_found(gw, echo_id, version):
    async with gw.client(echo_id, version=version) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=str(uuid.uuid4())))


async def test_list_tasks_filters_by_context_and_pages(gw, echo_id):
    async with gw.client(echo_id, streaming=False) as client:
        ctx = str(uuid.uuid4())
        ids = []
        for i in range(5):
            (ev,) = await collect(client.send_message(send_request(f"msg {i}", context_id=ctx)))
            ids.append(ev.task.id)
        await collect(client.send_message(send_request("other context")))
        page1 = await client.list_tasks(ListTasksRequest(context_id=ctx, page_size=2))
        page2 = await client.list_tasks(
            ListTasksRequest(context_id=ctx, page_size=2, page_token=page1.next_page_token)
        )
        page3 = await client.list_tasks(
            ListTasksRequest(context_id=ctx, page_size=2, page_token=page2.next_page_token)
        )
        everything = await client.list_tasks(ListTasksRequest())
    listed = [t.id for p in (page1, page2, page3) for t in p.tasks]
    assert listed == list(reversed(ids))  # newest first
    assert page1.total_size == 5 and page3.next_page_token == ""
    assert not page1.tasks[0].artifacts  # includeArtifacts defaults to false
    assert everything.total_size == 6


@pytest.mark.parametrize("version", VERSIONS)
async def test_cancel_running_task(gw, version, monkeypatch):
    # the run waits after its first word until the cancel is answered: it is still running
    # when the cancel arrives, however slow the machine (a 3.2 s run was a time margin)
    ep, release = await add_held_echo(gw, monkeypatch, settings={"delay": 0.2})
    async with gw.client(ep, version=version, streaming=False) as client:
        request = send_request("a b c d e f g h i j k l m n o p")
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        try:
            (ev,) = await collect(client.send_message(request))
            task_id = ev.task.id
            canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
        finally:
            release.set()
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        again = await client.get_task(GetTaskRequest(id=task_id))
        assert again.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task_id))


@pytest.mark.parametrize("version", VERSIONS)
async def test_subscribe_mid_stream_gets_task_text_so_far_then_live_then_final(
    gw, version, monkeypatch
):
    # the run waits after "echo: w0" until the late subscriber has the text so far (a 1.5 s
    # run could end before the subscribe on a loaded machine, and an ended task refuses it)
    held_echo_id, release = await add_held_echo(gw, monkeypatch, words=2,
                                                settings={"delay": 0.05})
    words = " ".join(f"w{i}" for i in range(30))
    async with (
        gw.client(held_echo_id, version=version) as first,
        gw.client(held_echo_id, version=version) as second,
    ):
        stream = first.send_message(send_request(words))
        try:
            head = [await anext(stream)]
            while list(reconstruct(head).values()) != ["echo: w0"]:
                head.append(await anext(stream))
            task_id = head[0].task.id
            following = second.subscribe(SubscribeToTaskRequest(id=task_id))
            late = [await anext(following), await anext(following)]
        finally:
            release.set()
        late += [e async for e in following]
        rest = [e async for e in stream]
    assert late[0].HasField("task") and late[0].task.id == task_id
    assert late[1].HasField("artifact_update") and not late[1].artifact_update.append
    assert late[1].artifact_update.artifact.parts[0].text.startswith("echo: w0")
    texts = reconstruct(late)
    assert list(texts.values()) == [f"echo: {words}"]
    assert late[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert list(reconstruct(head + rest).values()) == [f"echo: {words}"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_subscribe_to_terminal_task_is_rejected(gw, echo_id, version):
    async with gw.client(echo_id, version=version) as client:
        events = await collect(client.send_message(send_request("done soon")))
        with pytest.raises(UnsupportedOperationError):
            await collect(client.subscribe(SubscribeToTaskRequest(id=events[0].task.id)))


@pytest.mark.parametrize("version", VERSIONS)
async def test_input_required_then_follow_up_completes(gw, echo_id, version):
    async with gw.client(echo_id, version=version, streaming=False) as client:
        (ev,) = await collect(client.send_message(send_request("please ?input")))
        task = ev.task
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert task.status.message.parts[0].text.startswith("What should I echo")
        (ev2,) = await collect(
            client.send_message(
                send_request("the answer", task_id=task.id, context_id=task.context_id)
            )
        )
    assert ev2.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert ev2.task.artifacts[-1].parts[0].text == "echo: the answer"
    assert [m.parts[0].text for m in ev2.task.history if m.role == Role.ROLE_USER] == [
        "please ?input",
        "the answer",
    ]


@pytest.mark.parametrize("version", VERSIONS)
async def test_push_config_crud(gw, echo_id, version):
    async with gw.client(echo_id, version=version, streaming=False) as client:
        (ev,) = await collect(client.send_message(send_request("push me")))
        task_id = ev.task.id
        created = await client.create_task_push_notification_config(
            TaskPushNotificationConfig(
                task_id=task_id, id="cfg-1", url="http://127.0.0.1:9/hook", token="t1"
            )
        )
        assert created.id == "cfg-1" and created.url == "http://127.0.0.1:9/hook"
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1")
        )
        assert got.token == "t1"
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert [c.id for c in listed.configs] == ["cfg-1"]
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="cfg-1")
        )
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert list(listed.configs) == []


async def test_rest_binding_send_get_list(gw, slow_echo_id):
    async with gw.client(slow_echo_id, binding="HTTP+JSON") as client:
        events = await collect(client.send_message(send_request("over rest")))
        assert list(reconstruct(events).values()) == ["echo: over rest"]
        task = await client.get_task(GetTaskRequest(id=events[0].task.id))
        listed = await client.list_tasks(ListTasksRequest())
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [t.id for t in listed.tasks] == [task.id]


async def test_closing_the_stream_does_not_cancel_the_task(gw, slow_echo_id):
    async with gw.client(slow_echo_id) as client:
        stream = client.send_message(send_request("a b c d e f g h"))
        first = await anext(stream)
        await anext(stream)
        await stream.aclose()
        task_id = first.task.id
        task = await eventually(lambda: client.get_task(GetTaskRequest(id=task_id)),
                                until=lambda t: t.status.state == TaskState.TASK_STATE_COMPLETED,
                                what="the task completes without its stream")
    assert task.artifacts[0].parts[0].text == "echo: a b c d e f g h"
