"""What the real-backend tests of every bridge share: a unique token for a prompt, the state
an event carries, the streamed-reply check each bridge must pass, a cancel in mid-stream, the
scripted LLM's record of what it was sent, and the task whose A2A ids a backend must get
back."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
)

from tests.support.harness import RunningGateway, require_env
from tests.support.messages import send_request

COMPLETED = TaskState.TASK_STATE_COMPLETED


def token() -> str:
    return uuid.uuid4().hex[:10]


async def llm_requests(mark: str, *, last_only: bool = False,
                       role: str | None = None) -> list[dict[str, Any]]:
    """The scripted LLM's requests (its ``/_requests``) whose conversation carries ``mark``: in
    any message (of ``role``, when given), or in the last one only (``last_only``)."""
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{require_env('A2A_TEST_LLM_URL')}/_requests")

    def carries(r: dict[str, Any]) -> bool:
        if last_only:
            return mark in (r["last_text"] or "")
        return any(mark in str(m.get("content") or "") and role in (None, m["role"])
                   for m in r["messages"])

    return [r for r in response.json() if carries(r)]


async def cancel_mid_stream(client: Any, request: SendMessageRequest, *,
                            chunks: int = 2) -> Task:
    """Streams ``request`` until ``chunks`` artifact chunks arrived, closes the stream and
    cancels the task (CancelTask must answer CANCELED); the task as GetTask then answers."""
    stream = client.send_message(request)
    head: list[StreamResponse] = []
    async for event in stream:
        head.append(event)
        if sum(e.HasField("artifact_update") for e in head) >= chunks:
            break
    await stream.aclose()
    task_id = head[0].task.id
    canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    return await client.get_task(GetTaskRequest(id=task_id))


def streamed_answer(events: list[StreamResponse]) -> str:
    """The text of the task's artifact as a client rebuilds it from the stream's chunks: an
    ``append`` chunk adds its text, any other replaces what came before (the last chunk of a
    streamed answer appends nothing)."""
    text = ""
    for event in events:
        if event.HasField("artifact_update"):
            update = event.artifact_update
            chunk = "".join(p.text for p in update.artifact.parts)
            text = text + chunk if update.append else chunk
    return text


def state_of(event: StreamResponse) -> int | None:
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return None


async def six_streamed_tokens(client: Any) -> TaskArtifactUpdateEvent:
    """Stream the scripted LLM's six slow tokens through ``client``; check they arrived as
    they were made and add up to the final artifact, which is returned.

    A short message goes first: a backend's first model call can stall for seconds (lazy
    imports, cold connections) while the LLM writes every token, which then arrive at once."""
    async for _ in client.send_message(send_request(f"hello {token()}")):
        pass
    seen: list[tuple[float, StreamResponse]] = []
    async for event in client.send_message(send_request(f"FAKE_SLOW words=6 delay=0.25 {token()}")):
        seen.append((time.monotonic(), event))
    events = [e for _, e in seen]
    assert events[0].HasField("task")
    assert state_of(events[-1]) == COMPLETED
    chunks = [(t, e.artifact_update) for t, e in seen if e.HasField("artifact_update")]
    streamed = [u for _, u in chunks if not u.last_chunk]
    final = chunks[-1][1]
    # the answer is what was streamed: the last chunk's own part is empty (no second copy);
    # a final chunk without metadata may carry tokens the client had not read yet, merged
    assert final.last_chunk and final.artifact.parts[-1].text == ""
    # six tokens as six parts; tokens a lagging client had not read yet arrive merged in one chunk
    assert sum(len(u.artifact.parts) for _, u in chunks) == 7 and len(streamed) >= 2
    assert not chunks[0][1].append and all(u.append for _, u in chunks[1:])
    # a backend that repeats the whole text in its final event (ADK): the answer is said once
    text = "".join(p.text for _, u in chunks for p in u.artifact.parts)
    assert text == "slow0 slow1 slow2 slow3 slow4 slow5"
    assert (
        chunks[-1][0] - chunks[0][0] > 0.6
    )  # the first token came well before the end (5 gaps of 0.25 s)
    return final


async def completed_with_ids(gw: Any, endpoint: str) -> tuple[Task, dict[str, str]]:
    """A blocking message in a context whose id is not ASCII, completed; the task and the A2A
    ids the bridge passes to its backend's run (``a2a_task_id``, ``a2a_context_id``,
    ``a2a_endpoint_id``)."""
    context_id = f"ctx-{token()}-żółw"
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(
            send_request(f"hello {token()}", context_id=context_id))]
    assert event.task.status.state == COMPLETED
    ids = {"a2a_task_id": event.task.id, "a2a_context_id": context_id,
           "a2a_endpoint_id": endpoint}
    return event.task, ids


async def structured_approval_after_refusal(
    gw: RunningGateway, endpoint: str, ask: Any, tool_name: str
) -> tuple[str, Task]:
    """A confirmation round trip in the kagent HITL shape on a bridge that cannot edit
    arguments: the card declares it, the request names the tool and its arguments, an answer
    without approvals is refused with the reason, the approval then runs the tool. ``ask(gw,
    endpoint, mark)`` makes the backend ask to run ``rm -rf scratch/<mark>``. Returns the mark
    and the completed task."""
    from google.protobuf.json_format import MessageToDict

    from handlers.approvals import HITL_URI

    (declared,) = (await gw.card(endpoint)).capabilities.extensions
    assert declared.uri == HITL_URI and MessageToDict(declared.params) == {"editableArgs": False}
    mark = token()
    task = await ask(gw, endpoint, mark)
    (data,) = [MessageToDict(p.data) for p in task.status.message.parts if p.HasField("data")]
    (tool,) = data[HITL_URI]["tools"]
    assert (tool["name"], tool["args"], tool["editable"]) == (
        tool_name, {"command": f"rm -rf scratch/{mark}"}, False)
    ids = {"task_id": task.id, "context_id": task.context_id}
    async with gw.client(endpoint, streaming=False) as client:
        (wrong,) = [e async for e in client.send_message(send_request("", data={
            "type": "tool_approval_response", "approvals": []}, **ids))]
        assert wrong.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert "approvals must be a non-empty list" in wrong.task.status.message.parts[0].text
        (done,) = [e async for e in client.send_message(send_request("", data={
            "type": "tool_approval_response",
            "approvals": [{"id": tool["id"], "approved": True}]}, **ids))]
    assert done.task.status.state == COMPLETED
    return mark, done.task
