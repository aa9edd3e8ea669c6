"""The wire as the interop tests read it without an SDK: each binding's requests, a raw SSE
read through httpx-sse (the decoder of a2a-sdk 0.2 and 0.3 clients, at the 0.4 release they
resolve to) that also keeps the bytes as sent, and the texts a client makes of the artifact
updates it got.

Events of every binding and version are put in one shape, 1.0's: ``{"task" | "statusUpdate" |
"artifactUpdate" | "message": body}``; parts keep their ``text``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from httpx_sse import ServerSentEvent, aconnect_sse

from tests.support.harness import RunningGateway
from tests.support.messages import rpc, wire_message

V10 = {"A2A-Version": "1.0"}
V03 = {"A2A-Version": "0.3"}
_KINDS_0_3 = {"task": "task", "status-update": "statusUpdate", "artifact-update": "artifactUpdate",
              "message": "message"}


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    body: dict[str, Any] | None
    headers: dict[str, str]


@dataclass(frozen=True)
class Binding:
    """A binding at one protocol version (HTTP+JSON is served at 1.0 only)."""

    name: str
    version: str
    rest: bool = False

    def message(self, text: str, **fields: Any) -> dict[str, Any]:
        """A user message of ``text`` in this version's JSON; ``fields``: taskId, contextId,
        messageId."""
        if self.version == "0.3":
            return message_0_3(text, **fields)
        return wire_message(text, **fields)

    def stream(self, gw: RunningGateway, endpoint_id: str, message: dict[str, Any]) -> Request:
        if self.rest:
            return Request(
                "POST", gw.rest_url(endpoint_id) + "/message:stream", {"message": message}, V10
            )
        method = "message/stream" if self.version == "0.3" else "SendStreamingMessage"
        return self._rpc(gw, endpoint_id, method, {"message": message})

    def subscribe(self, gw: RunningGateway, endpoint_id: str, task_id: str) -> Request:
        if self.rest:
            return Request(
                "GET", gw.rest_url(endpoint_id) + f"/tasks/{task_id}:subscribe", None, V10
            )
        method = "tasks/resubscribe" if self.version == "0.3" else "SubscribeToTask"
        return self._rpc(gw, endpoint_id, method, {"id": task_id})

    def result(self, data: dict[str, Any]) -> dict[str, Any]:
        """The event of one ``data:`` payload, in the common shape."""
        if self.rest:
            return data
        assert "result" in data, data
        return from_0_3(data["result"]) if self.version == "0.3" else data["result"]

    def _rpc(
        self, gw: RunningGateway, endpoint_id: str, method: str, params: dict[str, Any]
    ) -> Request:
        headers = V03 if self.version == "0.3" else V10
        return Request(
            "POST", gw.jsonrpc_url(endpoint_id), rpc(method, params, str(uuid.uuid4())), headers
        )


JSONRPC_1_0 = Binding("jsonrpc-1.0", "1.0")
JSONRPC_0_3 = Binding("jsonrpc-0.3", "0.3")
REST_1_0 = Binding("rest-1.0", "1.0", rest=True)
BINDINGS = [JSONRPC_1_0, JSONRPC_0_3, REST_1_0]


def message_0_3(text: str, **fields: Any) -> dict[str, Any]:
    """A user message of protocol 0.3 (``kind``, lowercase role, ``kind`` on each part)."""
    return {"kind": "message", "messageId": str(uuid.uuid4()), "role": "user",
            "parts": [{"kind": "text", "text": text}], **fields}


def from_0_3(result: dict[str, Any]) -> dict[str, Any]:
    """A 0.3 stream event (``kind`` inside) in the common shape."""
    body = dict(result)
    return {_KINDS_0_3[body.pop("kind")]: body}


@dataclass
class SSERead:
    events: list[ServerSentEvent]
    """What httpx-sse dispatched, in order."""
    raw: bytes
    """The response body as it came."""

    def comment_lines(self) -> int:
        """Lines of the body that are SSE comments (keepalives)."""
        return sum(1 for line in self.raw.split(b"\n") if line.startswith(b":"))


class _Recorded(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, chunks: list[bytes]) -> None:
        self._stream = stream
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._chunks.append(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


async def read_sse(http: httpx.AsyncClient, request: Request) -> SSERead:
    """Every event httpx-sse dispatches for ``request``'s response, read to its end."""
    kwargs: dict[str, Any] = {"json": request.body} if request.body is not None else {}
    chunks: list[bytes] = []
    async with aconnect_sse(http, request.method, request.url, headers=dict(request.headers),
                            **kwargs) as source:
        response = source.response
        assert response.status_code == 200, await response.aread()
        response.stream = _Recorded(response.stream, chunks)  # type: ignore[arg-type]
        events = [sse async for sse in source.aiter_sse()]
    return SSERead(events, b"".join(chunks))


def decoded(read: SSERead, binding: Binding) -> list[dict[str, Any]]:
    """The events of ``read`` in the common shape; each dispatched event's data must be the
    JSON of one event, as every SDK client expects (an empty one is what fails them)."""
    out = []
    for sse in read.events:
        assert sse.data, (
            f"httpx-sse dispatched an event with empty data (id {sse.id!r}, event {sse.event!r}): "
            "a2a-sdk 0.2/0.3 clients fail on it with 'JSON Error: Expecting value'")
        out.append(binding.result(orjson.loads(sse.data)))
    return out


def completed(events: list[dict[str, Any]]) -> bool:
    """Whether the last event says the task completed."""
    last = events[-1] if events else {}
    return kind(last) == "statusUpdate" and last["statusUpdate"]["status"]["state"] in (
        "completed", "TASK_STATE_COMPLETED")


# texts of artifact updates ------------------------------------------------------------------


def kind(event: dict[str, Any]) -> str:
    (name,) = event
    return name


def artifact_updates(events: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """(artifact id, text of its parts, append) of each artifact update, in order."""
    return [
        (body["artifact"]["artifactId"], text_of(body["artifact"]), bool(body.get("append")))
        for body in (e["artifactUpdate"] for e in events if kind(e) == "artifactUpdate")
    ]


def naive_texts(events: list[dict[str, Any]]) -> dict[str, str]:
    """Text per artifact as a client that ignores ``append`` shows it: every chunk added."""
    texts: dict[str, str] = {}
    for artifact_id, text, _ in artifact_updates(events):
        texts[artifact_id] = texts.get(artifact_id, "") + text
    return texts


def applied_texts(events: list[dict[str, Any]]) -> dict[str, str]:
    """Text per artifact as a client that applies ``append`` (true: add, false: replace) has it."""
    texts: dict[str, str] = {}
    for artifact_id, text, append in artifact_updates(events):
        texts[artifact_id] = texts.get(artifact_id, "") + text if append else text
    return texts


def text_of(holder: dict[str, Any]) -> str:
    """The text parts of an artifact or a message, joined."""
    return "".join(part["text"] for part in holder.get("parts", []) if "text" in part)


async def get_task(
    http: httpx.AsyncClient, gw: RunningGateway, endpoint_id: str, task_id: str
) -> dict[str, Any]:
    """The stored task (JSON-RPC 1.0 GetTask), in 1.0 JSON."""
    response = await http.post(
        gw.jsonrpc_url(endpoint_id), json=rpc("GetTask", {"id": task_id}), headers=V10
    )
    return response.json()["result"]


def stored_texts(task: dict[str, Any]) -> dict[str, str]:
    return {artifact["artifactId"]: text_of(artifact) for artifact in task.get("artifacts", [])}
