"""Streams as deployed clients read them: httpx-sse 0.4 (the decoder of a2a-sdk 0.2/0.3
clients), a client that joins every text chunk ignoring ``append``, and one that shows the
first event of a follow-up stream — on JSON-RPC 1.0 and 0.3 and on HTTP+JSON."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import EventSource

from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import rpc, wire_message

KEEPALIVE_SECONDS = 0.2


@dataclass(frozen=True)
class Binding:
    name: str
    version: str

    def headers(self) -> dict[str, str]:
        return {"A2A-Version": "1.0"} if self.version == "1.0" else {}

    def send(self, gw: RunningGateway, ep: str, text: str, **fields: Any) -> tuple[str, Any]:
        """URL and JSON body of a streaming send."""
        if self.name == "rest":
            return f"{gw.rest_url(ep)}/message:stream", {"message": wire_message(text, **fields)}
        if self.version == "1.0":
            return gw.jsonrpc_url(ep), rpc("SendStreamingMessage", {"message": wire_message(text, **fields)})
        return gw.jsonrpc_url(ep), rpc("message/stream", {"message": v03_message(text, **fields)})

    def subscribe(self, gw: RunningGateway, ep: str, task_id: str) -> tuple[str, str, Any]:
        """Method, URL and JSON body of a subscription to ``task_id``."""
        if self.name == "rest":
            return "GET", f"{gw.rest_url(ep)}/tasks/{task_id}:subscribe", None
        method = "SubscribeToTask" if self.version == "1.0" else "tasks/resubscribe"
        return "POST", gw.jsonrpc_url(ep), rpc(method, {"id": task_id})

    def event(self, data: str) -> tuple[str, dict[str, Any]]:
        """``(kind, body)`` of one SSE data field: kind is task, status, artifact or message."""
        body = orjson.loads(data)
        if self.name == "jsonrpc":
            assert "result" in body, body
            body = body["result"]
        if self.version == "0.3":
            kinds = {"task": "task", "status-update": "status", "artifact-update": "artifact", "message": "message"}
            return kinds[body["kind"]], body
        (key, value), = body.items()
        kinds = {"task": "task", "statusUpdate": "status", "artifactUpdate": "artifact", "message": "message"}
        return kinds[key], value


BINDINGS = [Binding("jsonrpc", "1.0"), Binding("jsonrpc", "0.3"), Binding("rest", "1.0")]
IDS = [f"{b.name}-{b.version}" for b in BINDINGS]


def v03_message(text: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "message", "messageId": str(uuid.uuid4()), "role": "user",
            "parts": [{"kind": "text", "text": text}], **fields}


async def read_stream(http: httpx.AsyncClient, method: str, url: str, body: Any, headers: dict[str, str]) -> bytes:
    async with http.stream(method, url, json=body, headers={"Accept": "text/event-stream", **headers}) as response:
        assert response.status_code == 200, await response.aread()
        return await response.aread()


def decode(binding: Binding, raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The events httpx-sse 0.4 dispatches for ``raw``: every one must hold an event."""
    response = httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=raw)
    events = list(EventSource(response).iter_sse())
    assert all(e.data for e in events), [e.data for e in events]  # an empty data is a JSON error to SDK clients
    return [binding.event(e.data) for e in events]


def state(kind_body: tuple[str, dict[str, Any]]) -> str:
    kind, body = kind_body
    return body["status"]["state"].removeprefix("TASK_STATE_").replace("_", "-").lower()


def texts(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, bool, bool]]:
    """Each artifact update's text, ``append`` and ``lastChunk``."""
    return [("".join(p.get("text", "") for p in body["artifact"].get("parts", [])),
             bool(body.get("append")), bool(body.get("lastChunk"))) for kind, body in events if kind == "artifact"]


async def stored_text(gw: RunningGateway, ep: str, task_id: str) -> str:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{gw.rest_url(ep)}/tasks/{task_id}", headers={"A2A-Version": "1.0"})
    artifacts = response.json()["artifacts"]
    assert len(artifacts) == 1
    return "".join(p["text"] for p in artifacts[0]["parts"])


@pytest.mark.parametrize("binding", BINDINGS, ids=IDS)
async def test_keepalives_between_events_with_ids_are_no_events_to_httpx_sse(binding: Binding) -> None:
    async with running_gateway(sse_keepalive_seconds=KEEPALIVE_SECONDS) as gw:
        ep = await gw.add_endpoint(settings={"delay": KEEPALIVE_SECONDS * 3})  # silent 3x the interval
        url, body = binding.send(gw, ep, "three silent words")
        async with httpx.AsyncClient(timeout=30) as http:
            raw = await read_stream(http, "POST", url, body, binding.headers())
    assert b"\nid: " in raw or raw.startswith(b"id: ")  # events carry ids ...
    assert b": ping\n" in raw  # ... and keepalives came after them
    events = decode(binding, raw)
    assert events[0][0] == "task" and state(events[-1]) == "completed"


@pytest.mark.parametrize("binding", BINDINGS, ids=IDS)
async def test_a_subscription_silent_longer_than_the_keepalive_is_read_to_its_end(binding: Binding) -> None:
    async with running_gateway(sse_keepalive_seconds=KEEPALIVE_SECONDS) as gw:
        ep = await gw.add_endpoint(settings={"delay": KEEPALIVE_SECONDS * 3})
        url, body = Binding("jsonrpc", "1.0").send(gw, ep, "words to follow from elsewhere")
        body["params"]["configuration"] = {"returnImmediately": True}
        body["method"] = "SendMessage"
        async with httpx.AsyncClient(timeout=30) as http:
            task_id = (await http.post(url, json=body, headers={"A2A-Version": "1.0"})).json()["result"]["task"]["id"]
            method, url, body = binding.subscribe(gw, ep, task_id)
            raw = await read_stream(http, method, url, body, binding.headers())
    assert b": ping\n" in raw
    events = decode(binding, raw)
    assert events[0][0] == "task" and state(events[-1]) == "completed"


@pytest.mark.parametrize("binding", BINDINGS, ids=IDS)
async def test_joining_every_chunk_ignoring_append_gives_the_stored_answer_once(binding: Binding) -> None:
    async with running_gateway() as gw:
        ep = await gw.add_endpoint(settings={"delay": 0.01})
        url, body = binding.send(gw, ep, "say this only once")
        async with httpx.AsyncClient(timeout=30) as http:
            events = decode(binding, await read_stream(http, "POST", url, body, binding.headers()))
        task_id = events[0][1]["id"]
        answer = await stored_text(gw, ep, task_id)
    chunks = texts(events)
    assert answer == "echo: say this only once"
    assert "".join(text for text, _, _ in chunks) == answer  # a naive client
    rebuilt = ""
    for text, append, _ in chunks:  # a client that applies append / replace
        rebuilt = rebuilt + text if append else text
    assert rebuilt == answer
    assert chunks[-1][1:] == (True, True)  # the last chunk appends (nothing), and says so
    assert sum(last for _, _, last in chunks) == 1


@pytest.mark.parametrize("binding", BINDINGS, ids=IDS)
async def test_a_follow_up_stream_starts_from_the_task_with_the_answer_taken(binding: Binding) -> None:
    async with running_gateway() as gw:
        ep = await gw.add_endpoint(settings={"delay": 0})
        async with httpx.AsyncClient(timeout=30) as http:
            url, body = binding.send(gw, ep, "please ?input")
            asked = decode(binding, await read_stream(http, "POST", url, body, binding.headers()))
            assert state(asked[-1]) == "input-required"
            task_id = asked[0][1]["id"]
            url, body = binding.send(gw, ep, "my answer", taskId=task_id)
            events = decode(binding, await read_stream(http, "POST", url, body, binding.headers()))
    kind, first = events[0]
    assert kind == "task" and state(events[0]) == "working"
    history = [("".join(p.get("text", "") for p in m["parts"]), m["role"]) for m in first["history"]]
    question = "What should I echo? Reply with any text."
    user, agent = ("ROLE_USER", "ROLE_AGENT") if binding.version == "1.0" else ("user", "agent")
    assert history == [("please ?input", user), (question, agent), ("my answer", user)]
    assert "message" not in first["status"]  # no longer the question
    assert state(events[-1]) == "completed"
