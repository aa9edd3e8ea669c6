"""An open stream whose task is quiet keeps only what it needs to go on: not its request (the
parsed ``SendMessageRequest``, its JSON, or a message of its own: the handler's message is
the task's last), not the Task it started from (the run's starting copy, a SubscribeToTask's
stored copy and snapshot), not the events it already sent (held by no generator between the
hub's subscription and the socket), no coroutine frame that only passes the stream on. Each
protobuf object is about 1.2–1.6 KB of the protobuf runtime's memory per idle stream.

The store is SQLite, which keeps no Task object in memory: while a stream idles, the only
Task of its task alive is the run's.
"""

from __future__ import annotations

import gc
import json
import types
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from a2a.types import SendMessageRequest, SubscribeToTaskRequest, Task, TaskArtifactUpdateEvent

from tests.support.harness import RunningGateway, running_gateway

HEADERS = {"A2A-Version": "1.0", "Accept": "text/event-stream"}


def _message(text: str) -> dict[str, Any]:
    return {"messageId": f"idle-{uuid.uuid4()}", "role": "ROLE_USER", "parts": [{"text": text}]}


async def _until_text(response: aiohttp.ClientResponse) -> list[dict[str, Any]]:
    """The stream's events (their ``result`` for JSON-RPC) up to its first text chunk, which
    the quiet echo follows with nothing; the stream stays open."""
    events = []
    async for line in response.content:
        if line.startswith(b"data: "):
            data = json.loads(line[len(b"data: "):])
            events.append(data.get("result", data))
            if "artifactUpdate" in events[-1]:
                return events
    raise AssertionError(f"the stream ended after {len(events)} events")


def _alive(kind: type, keep: Any) -> list[Any]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, kind) and keep(o)]


def _tasks_kept(gw: RunningGateway, task_id: str) -> list[Task]:
    """The copies of the task alive besides the run's own."""
    run = gw.gateway.engine.runs[task_id]
    return _alive(Task, lambda t: t.id == task_id and t is not run.task)


@asynccontextmanager
async def _quiet_gateway(tmp_path: Path) -> AsyncIterator[tuple[RunningGateway, str]]:
    async with running_gateway(f"sqlite:///{tmp_path / 'gateway.db'}") as gw:
        # the echo sends its first word, then stays quiet for an hour
        endpoint_id = await gw.add_endpoint(
            settings={"delay": 3600}, card={"capabilities": {"streaming": True}}
        )
        yield gw, endpoint_id


async def test_a_jsonrpc_stream_keeps_neither_its_request_nor_its_starting_task(
    tmp_path: Path,
) -> None:
    request_id = f"idle-{uuid.uuid4()}"
    message = _message("quiet now")
    body = {"jsonrpc": "2.0", "id": request_id, "method": "SendStreamingMessage",
            "params": {"message": message}}
    async with _quiet_gateway(tmp_path) as (gw, endpoint_id):
        async with aiohttp.ClientSession() as http, http.post(
            gw.jsonrpc_url(endpoint_id), json=body, headers=HEADERS
        ) as response:
            events = await _until_text(response)
            task_id = events[0]["task"]["id"]

            assert _tasks_kept(gw, task_id) == []  # the run's starting copy went to the stream
            run = gw.gateway.engine.runs[task_id]
            assert run.request.message is run.task.history[-1]  # not a copy of its own
            assert _alive(
                SendMessageRequest, lambda r: r.message.message_id == message["messageId"]
            ) == []
            assert _alive(dict, lambda d: d.get("id") == request_id) == [body]  # no JSON body
            # nor the text chunk it sent, nor an event the run's next chunks are made from
            assert _alive(TaskArtifactUpdateEvent, lambda e: e.task_id == task_id) == []


async def test_a_rest_stream_keeps_no_request(tmp_path: Path) -> None:
    message = _message("quiet now")
    async with _quiet_gateway(tmp_path) as (gw, endpoint_id):
        async with aiohttp.ClientSession() as http, http.post(
            f"{gw.endpoint_url(endpoint_id)}/a2a/rest/message:stream",
            json={"message": message}, headers=HEADERS,
        ) as response:
            events = await _until_text(response)
            assert _tasks_kept(gw, events[0]["task"]["id"]) == []
            assert _alive(
                SendMessageRequest, lambda r: r.message.message_id == message["messageId"]
            ) == []


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_subscription_keeps_neither_its_request_nor_the_stored_task_nor_its_start(
    tmp_path: Path, binding: str
) -> None:
    async with _quiet_gateway(tmp_path) as (gw, endpoint_id):
        url = gw.jsonrpc_url(endpoint_id)
        send = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                "params": {"message": _message("quiet now")}}
        async with aiohttp.ClientSession() as http, http.post(
            url, json=send, headers=HEADERS
        ) as sent:
            task_id = (await _until_text(sent))[0]["task"]["id"]

            def chunks() -> list[Any]:
                return _alive(TaskArtifactUpdateEvent, lambda e: e.task_id == task_id)

            chunks_before = len(chunks())
            if binding == "JSONRPC":
                subscribing = http.post(url, headers=HEADERS, json={
                    "jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask",
                    "params": {"id": task_id}})
            else:
                subscribing = http.get(
                    f"{gw.endpoint_url(endpoint_id)}/a2a/rest/tasks/{task_id}:subscribe",
                    headers=HEADERS,
                )
            async with subscribing as subscribed:
                snapshot, text_so_far = await _until_text(subscribed)
                assert snapshot["task"]["id"] == task_id
                assert text_so_far["artifactUpdate"]["artifact"]["parts"] == [{"text": "echo:"}]

                assert _tasks_kept(gw, task_id) == []
                assert len(chunks()) == chunks_before  # nor the text so far it sent
                assert _alive(SubscribeToTaskRequest, lambda r: r.id == task_id) == []


def _transport_frames() -> list[str]:
    """The suspended coroutines of the transport's code (``a2a_gateway/transport``)."""
    gc.collect()
    return sorted(
        o.__qualname__ for o in gc.get_objects()
        if isinstance(o, types.CoroutineType)
        and o.cr_frame is not None
        and "a2a_gateway/transport/" in o.cr_code.co_filename.replace("\\", "/")
    )


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_an_idle_stream_holds_only_the_transport_frames_it_waits_in(
    tmp_path: Path, binding: str
) -> None:
    async with _quiet_gateway(tmp_path) as (gw, endpoint_id):
        if binding == "JSONRPC":
            url, body = gw.jsonrpc_url(endpoint_id), {
                "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                "params": {"message": _message("quiet now")}}
        else:
            url = f"{gw.endpoint_url(endpoint_id)}/a2a/rest/message:stream"
            body = {"message": _message("quiet now")}
        before = _transport_frames()
        async with aiohttp.ClientSession() as http, http.post(
            url, json=body, headers=HEADERS
        ) as response:
            await _until_text(response)
            held = _transport_frames()
            for name in before:
                held.remove(name)
            # the middleware, the binding's handler (JSON-RPC: handle_jsonrpc and _call_1_0;
            # REST: its view and stream_message), stream_events and the pump, and the one task
            # of every stream's keepalives: no frame in between (each is 0.3–0.4 KB)
            assert len(held) <= 6, held
