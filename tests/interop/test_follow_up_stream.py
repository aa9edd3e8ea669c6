"""A streamed answer to a task that asked for input opens with the task as it stands once the
answer is taken (issue 22, item 3).

The echo agent asks a question (``?input``: INPUT_REQUIRED); the answer is a streaming
message with the task's id. Its first event must be the task WORKING, the question in its
history and the answer appended as the last history message; a first event that still shows
INPUT_REQUIRED with the question as ``status.message`` makes clients show the question again.

Read with a2a-sdk 0.3.22, @a2a-js/sdk 0.3.1, httpx-sse on JSON-RPC 1.0/0.3 and HTTP+JSON,
and the project's a2a-sdk over gRPC.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from google.protobuf.json_format import MessageToDict

from tests.interop.legacy import JS, SDK03, Client, installed, run_client
from tests.interop.wire import (
    BINDINGS,
    V10,
    Binding,
    completed,
    decoded,
    kind,
    message_0_3,
    naive_texts,
    read_sse,
    text_of,
)
from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import rpc, send_params, send_request

ANSWER = "the answer"


async def question(gw: RunningGateway, endpoint_id: str) -> dict[str, Any]:
    """A task of the echo agent waiting for input (JSON-RPC 1.0 SendMessage, 1.0 JSON)."""
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(gw.jsonrpc_url(endpoint_id), headers=V10,
                                   json=rpc("SendMessage", send_params("please ?input")))
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    assert text_of(task["status"]["message"]), task
    return task


def assert_opens_with_the_answered_task(events: list[dict[str, Any]], asked: dict[str, Any],
                                        answer_id: str) -> None:
    assert events and kind(events[0]) == "task", events[:1]
    first = events[0]["task"]
    the_question = text_of(asked["status"]["message"])
    assert first["id"] == asked["id"]
    assert first["status"]["state"] in ("working", "TASK_STATE_WORKING"), first["status"]
    assert text_of(first["status"].get("message", {})) != the_question, first["status"]
    history = first.get("history", [])
    assert history and history[-1]["messageId"] == answer_id, history
    assert the_question in [text_of(message) for message in history[:-1]], history
    assert completed(events), events[-1]
    assert list(naive_texts(events).values()) == [f"echo: {ANSWER}"]


@pytest.mark.parametrize("binding", BINDINGS, ids=lambda b: b.name)
async def test_an_answer_stream_opens_with_the_answered_task(binding: Binding) -> None:
    async with running_gateway() as gw, httpx.AsyncClient(timeout=30) as http:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0.0})
        asked = await question(gw, endpoint_id)
        answer = binding.message(ANSWER, taskId=asked["id"], contextId=asked["contextId"])
        read = await read_sse(http, binding.stream(gw, endpoint_id, answer))
    assert_opens_with_the_answered_task(decoded(read, binding), asked, answer["messageId"])


@pytest.mark.parametrize("client", [pytest.param(SDK03, id="a2a-sdk-0.3.22"),
                                    pytest.param(JS, id="a2a-js-sdk-0.3.1")])
async def test_a_deployed_clients_answer_stream_opens_with_the_answered_task(
    client: Client,
) -> None:
    installed(client)
    async with running_gateway() as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0.0})
        asked = await question(gw, endpoint_id)
        answer = message_0_3(ANSWER, taskId=asked["id"], contextId=asked["contextId"])
        run = await run_client(
            client,
            {
                "action": "stream",
                "base_url": gw.endpoint_url(endpoint_id),
                "card_path": ".well-known/agent-card.json",
                "message": answer,
            },
        )
    run.assert_ended()
    assert_opens_with_the_answered_task(run.events, asked, answer["messageId"])


async def test_a_grpc_answer_stream_opens_with_the_answered_task() -> None:
    async with running_gateway(grpc=True) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0.0})
        asked = await question(gw, endpoint_id)
        request = send_request(ANSWER, task_id=asked["id"], context_id=asked["contextId"])
        async with gw.client(endpoint_id, binding="GRPC") as client:
            events = [MessageToDict(event) async for event in client.send_message(request)]
    assert_opens_with_the_answered_task(events, asked, request.message.message_id)
