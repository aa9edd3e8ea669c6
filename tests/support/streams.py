"""What a client holds after reading a task's stream: as a2a-sdk events (``StreamResponse``) or
as raw SSE (for ``Last-Event-ID``, which the SDK does not send): the answer text it rebuilds
and the last state it saw."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from a2a.types import StreamResponse
from httpx_sse import aconnect_sse


def rebuild(events: list[StreamResponse]) -> str:
    """The answer text a client rebuilds: the task's artifacts, then each update (append or
    replace)."""
    text = ""
    for event in events:
        if event.HasField("task"):
            text = "".join(p.text for a in event.task.artifacts for p in a.parts)
        elif event.HasField("artifact_update"):
            update = event.artifact_update
            chunk = "".join(p.text for p in update.artifact.parts)
            text = text + chunk if update.append else chunk
    return text


def final_state(events: list[StreamResponse]) -> int | None:
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    return states[-1] if states else None


@dataclass
class SseEvent:
    """One SSE event: its id and its result (``{"task": …}``, ``{"artifactUpdate": …}``, …)."""

    id: str
    result: dict[str, Any]

    @property
    def kind(self) -> str:
        (kind,) = self.result
        return kind

    @property
    def body(self) -> dict[str, Any]:
        return self.result[self.kind]


def jsonrpc_result(data: dict[str, Any]) -> dict[str, Any]:
    assert "result" in data, data
    return data["result"]


async def read_sse(
    http: httpx.AsyncClient,
    method: str,
    url: str,
    body: dict[str, Any] | None,
    headers: dict[str, str],
    *,
    result: Callable[[dict[str, Any]], dict[str, Any]] = jsonrpc_result,
    last_event_id: str | None = None,
    limit: int | None = None,
) -> list[SseEvent]:
    """The events of one SSE response (the first ``limit``, then the connection is dropped);
    ``result`` takes an event's result out of its JSON (a binding's envelope)."""
    if last_event_id is not None:
        headers = {**headers, "Last-Event-ID": last_event_id}
    events: list[SseEvent] = []
    kwargs: dict[str, Any] = {"json": body} if method == "POST" else {}
    async with aconnect_sse(http, method, url, headers=headers, **kwargs) as source:
        assert source.response.status_code == 200, await source.response.aread()
        async for sse in source.aiter_sse():
            assert sse.event == "message", sse.data
            events.append(SseEvent(sse.id, result(orjson.loads(sse.data))))
            if limit is not None and len(events) >= limit:
                break
    return events


def sse_text(events: list[SseEvent]) -> str:
    """The answer text a client rebuilds from raw SSE events (as ``rebuild``)."""
    text = ""
    for event in events:
        if event.kind == "task":
            text = "".join(p["text"] for a in event.body.get("artifacts", []) for p in a["parts"])
        elif event.kind == "artifactUpdate":
            chunk = "".join(p["text"] for p in event.body["artifact"]["parts"])
            text = text + chunk if event.body.get("append") else chunk
    return text


def sse_final_state(events: list[SseEvent]) -> str:
    return [e.body["status"]["state"] for e in events if e.kind == "statusUpdate"][-1]
