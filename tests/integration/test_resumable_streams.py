"""Resumable streams: every SSE event of a task stream has an ``id:``; a client that lost
its stream sends ``SubscribeToTask`` with ``Last-Event-ID`` and gets exactly the events it
missed, then the live ones — over JSON-RPC 1.0, HTTP+JSON and JSON-RPC 0.3, on every store.

Raw SSE (httpx + httpx-sse) against a real gateway with the slow echo handler: a client
reads a few events, drops the connection, waits (bounded) until it has missed some, and
reconnects. What it then holds is compared event by event with an uninterrupted stream.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.stores.pg_support import fresh_database
from tests.support.harness import RunningGateway, running_gateway
from tests.support.held import add_held_echo
from tests.support.messages import rpc, wire_message
from tests.support.streams import SseEvent, read_sse, sse_final_state, sse_text
from tests.support.waiting import eventually

WORDS = " ".join(f"w{i}" for i in range(40))
ANSWER = f"echo: {WORDS}"
WORD_DELAY = 0.05
"""Seconds per echoed word: the stream runs about two seconds."""
READ_BEFORE_DROP = 6
MISS_AT_LEAST = 5
"""Events the task publishes while the client is away, before it reconnects."""
HELD_WORDS = 15
"""Words after which a held run waits (past READ_BEFORE_DROP + MISS_AT_LEAST events)."""


# the three bindings ------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    name: str
    send: Callable[[RunningGateway, str, str], tuple[str, str, dict[str, Any], dict[str, str]]]
    subscribe: Callable[[RunningGateway, str, str], tuple[str, str, dict[str, Any], dict[str, str]]]
    result: Callable[[dict[str, Any]], dict[str, Any]]
    """The stream response of a ``data:`` payload, as
    ``{"task"|"statusUpdate"|"artifactUpdate": …}``."""


def _jsonrpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return rpc(method, params, rid=str(uuid.uuid4()))


V10 = {"A2A-Version": "1.0"}
V03 = {"A2A-Version": "0.3"}
_KINDS_0_3 = {"task": "task", "status-update": "statusUpdate", "artifact-update": "artifactUpdate"}


def _from_0_3(data: dict[str, Any]) -> dict[str, Any]:
    result = dict(data["result"])
    kind = _KINDS_0_3[result.pop("kind")]
    if kind == "artifactUpdate":
        for part in result["artifact"]["parts"]:
            part.pop("kind", None)
    return {kind: result}


JSONRPC_1_0 = Binding(
    "jsonrpc-1.0",
    lambda gw, ep, text: (
        "POST",
        gw.jsonrpc_url(ep),
        _jsonrpc("SendStreamingMessage", {"message": wire_message(text)}),
        V10,
    ),
    lambda gw, ep, tid: ("POST", gw.jsonrpc_url(ep), _jsonrpc("SubscribeToTask", {"id": tid}), V10),
    lambda data: data["result"],
)
REST = Binding(
    "rest",
    lambda gw, ep, text: (
        "POST",
        gw.rest_url(ep) + "/message:stream",
        {"message": wire_message(text)},
        V10,
    ),
    lambda gw, ep, tid: ("GET", gw.rest_url(ep) + f"/tasks/{tid}:subscribe", {}, V10),
    lambda data: data,
)
JSONRPC_0_3 = Binding(
    "jsonrpc-0.3",
    lambda gw, ep, text: (
        "POST",
        gw.jsonrpc_url(ep),
        _jsonrpc(
            "message/stream",
            {
                "message": {
                    "kind": "message",
                    "messageId": str(uuid.uuid4()),
                    "role": "user",
                    "parts": [{"kind": "text", "text": text}],
                }
            },
        ),
        V03,
    ),
    lambda gw, ep, tid: (
        "POST",
        gw.jsonrpc_url(ep),
        _jsonrpc("tasks/resubscribe", {"id": tid}),
        V03,
    ),
    _from_0_3,
)
BINDINGS = [JSONRPC_1_0, REST, JSONRPC_0_3]


# reading streams ---------------------------------------------------------------------------


async def read(
    http: httpx.AsyncClient,
    request: tuple[str, str, dict[str, Any], dict[str, str]],
    binding: Binding,
    *,
    last_event_id: str | None = None,
    limit: int | None = None,
) -> list[SseEvent]:
    """The events of one SSE response of ``binding`` (the first ``limit``, then the connection
    is dropped)."""
    method, url, body, headers = request
    return await read_sse(http, method, url, body, headers, result=binding.result,
                          last_event_id=last_event_id, limit=limit)


def shape(events: list[SseEvent]) -> list[tuple[Any, ...]]:
    """What a client sees, without ids and timestamps: kinds, states, chunk texts and flags."""
    out: list[tuple[Any, ...]] = []
    for event in events:
        body = event.body
        if event.kind == "artifactUpdate":
            text = "".join(p["text"] for p in body["artifact"]["parts"])
            out.append(("artifact", text, bool(body.get("append")), bool(body.get("lastChunk"))))
        else:
            out.append((event.kind, body["status"]["state"]))
    return out


def is_completed(state: str) -> bool:
    return state in ("TASK_STATE_COMPLETED", "completed")


def position(event_id: str) -> int:
    return int(event_id.rpartition(".")[2])


def published(gw: RunningGateway, task_id: str) -> int:
    """The number (the task's generation) of the last event of ``task_id`` the gateway's
    replay log holds."""
    log = gw.gateway.hub._logs.get(task_id)
    return log.last if log is not None else 0


def ended(gw: RunningGateway, task_id: str) -> bool:
    log = gw.gateway.hub._logs.get(task_id)
    return log is not None and log.ended


def report(what: str, **figures: Any) -> None:
    print(f"\nresume figures [{what}]: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


# fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def gw(every_store: RunningGateway) -> RunningGateway:
    """The gateway, on each store in turn (tests/integration/conftest.py)."""
    return every_store


@pytest.fixture
async def slow_echo(gw: RunningGateway) -> str:
    return await gw.add_endpoint(settings={"delay": WORD_DELAY})


# reconnect on the same replica -------------------------------------------------------------


@pytest.mark.parametrize("binding", BINDINGS, ids=lambda b: b.name)
async def test_a_dropped_stream_resumes_with_nothing_lost_and_nothing_twice(
    gw, http, binding, monkeypatch
):
    # the runs wait after HELD_WORDS words until the missed events are counted: the task is
    # still running then (a 2 s run could end before the count on a loaded machine, and the
    # tail would be only the replayed events)
    slow_echo, release = await add_held_echo(gw, monkeypatch, words=HELD_WORDS,
                                             settings={"delay": WORD_DELAY})
    reference_stream = asyncio.create_task(read(http, binding.send(gw, slow_echo, WORDS), binding))
    try:
        head = await read(http, binding.send(gw, slow_echo, WORDS), binding,
                          limit=READ_BEFORE_DROP)
        task_id = head[0].body["id"]
        last = position(head[-1].id)
        await eventually(
            lambda: published(gw, task_id) >= last + MISS_AT_LEAST,
            interval=0.02,
            what="events missed while away",
        )
        missed = published(gw, task_id) - last
    finally:
        release.set()
    tail = await read(
        http, binding.subscribe(gw, slow_echo, task_id), binding, last_event_id=head[-1].id
    )
    resumed = head + tail
    reference = await reference_stream

    ids = [e.id for e in resumed]
    token = ids[0].rpartition(".")[0]
    # numbered by the task's generation: the Task at 1, then one per event
    assert ids == [f"{token}.{n}" for n in range(1, len(ids) + 1)], "an event lost or twice"
    assert shape(resumed) == shape(reference)
    assert sse_text(resumed) == ANSWER == sse_text(reference)
    assert is_completed(sse_final_state(resumed))
    assert [e.kind for e in tail].count("task") == 0  # a hit: no snapshot, just the events
    assert missed < len(tail)  # the task was still running: replayed, then live
    report(binding.name, read_before_drop=len(head), missed_while_away=missed,
           after_reconnect=len(tail), lost=0, duplicated=0, events=len(resumed))


@pytest.mark.parametrize("binding", BINDINGS, ids=lambda b: b.name)
async def test_a_stale_or_unknown_id_starts_from_the_task_snapshot(gw, slow_echo, http, binding):
    async def resumed_from(stale: str) -> None:
        head = await read(http, binding.send(gw, slow_echo, WORDS), binding, limit=READ_BEFORE_DROP)
        task_id = head[0].body["id"]
        events = await read(
            http, binding.subscribe(gw, slow_echo, task_id), binding, last_event_id=stale
        )
        assert events[0].kind == "task" and events[0].body["id"] == task_id
        assert sse_text(events) == ANSWER
        assert is_completed(sse_final_state(events))
        assert all(e.id for e in events)

    # two tasks at once, each on its own streams; the second id well formed, another log's token
    await asyncio.gather(resumed_from("not-an-id"), resumed_from("0123456789ab.5"))


@pytest.mark.parametrize("binding", BINDINGS, ids=lambda b: b.name)
async def test_a_reconnect_after_the_task_ended_gets_the_remaining_events(
    gw, slow_echo, http, binding
):
    reference, head = await asyncio.gather(
        read(http, binding.send(gw, slow_echo, WORDS), binding),
        read(http, binding.send(gw, slow_echo, WORDS), binding, limit=READ_BEFORE_DROP),
    )
    task_id = head[0].body["id"]
    await eventually(lambda: ended(gw, task_id), interval=0.02, what="the task to end")
    tail = await read(
        http, binding.subscribe(gw, slow_echo, task_id), binding, last_event_id=head[-1].id
    )
    resumed = head + tail
    assert shape(resumed) == shape(reference)
    assert tail[-2].body.get("lastChunk") and is_completed(sse_final_state(tail))
    assert sse_text(resumed) == ANSWER
    report(
        f"{binding.name}, after the end",
        read_before_drop=len(head),
        replayed=len(tail),
        lost=0,
        duplicated=0,
    )


async def test_after_the_keep_time_an_ended_task_answers_as_the_spec_says(http):
    async with running_gateway(stream_replay_keep_seconds=0.5) as gw:
        ep = await gw.add_endpoint(settings={"delay": 0.0})
        events = await read(http, JSONRPC_1_0.send(gw, ep, "short"), JSONRPC_1_0)
        task_id, first_id = events[0].body["id"], events[0].id
        method, url, body, headers = JSONRPC_1_0.subscribe(gw, ep, task_id)
        replay = await read(http, (method, url, body, headers), JSONRPC_1_0, last_event_id=first_id)
        # within the keep time: the remainder (as logged, where the live stream, which came
        # faster than it was read, merged the text deltas into one chunk)
        assert sse_text(replay) == sse_text(events) == "echo: short"
        assert [e for e in shape(replay) if e[0] != "artifact"] == [
            e for e in shape(events[1:]) if e[0] != "artifact"
        ]
        answer = await eventually(
            lambda: http.post(url, json=body, headers={**headers, "Last-Event-ID": first_id}),
            until=lambda r: r.headers["content-type"].startswith("application/json"),
            timeout=20, interval=0.1, what="the ended task's events dropped")
        error = answer.json()["error"]
        assert error["code"] == -32004 and "terminal" in error["message"]
        assert answer.json()["id"] == body["id"]
        assert gw.gateway.hub.replay_stats()["logs"] == 0


async def test_a_message_answer_has_no_event_id(http):
    async with running_gateway() as gw:
        ep = await gw.add_endpoint(settings={"delay": 0.0, "response_mode": "message"})
        (event,) = await read(http, JSONRPC_1_0.send(gw, ep, "hello"), JSONRPC_1_0)
        assert event.kind == "message" and event.id == ""


async def test_replay_off_every_reconnect_starts_from_the_snapshot(http):
    async with running_gateway(stream_replay_events=0) as gw:
        ep = await gw.add_endpoint(settings={"delay": WORD_DELAY})
        head = await read(
            http, JSONRPC_1_0.send(gw, ep, WORDS), JSONRPC_1_0, limit=READ_BEFORE_DROP
        )
        assert all(e.id for e in head)
        events = await read(http, JSONRPC_1_0.subscribe(gw, ep, head[0].body["id"]), JSONRPC_1_0,
                            last_event_id=head[-1].id)
        assert events[0].kind == "task" and sse_text(events) == ANSWER


# reconnect to another replica --------------------------------------------------------------


async def test_a_reconnect_to_another_replica_gets_the_snapshot_then_live_events(http):
    async with fresh_database() as url, running_gateway(url, replica_id="a") as a, \
            running_gateway(url, replica_id="b") as b:
        ep = await a.add_endpoint(settings={"delay": WORD_DELAY})
        head = await read(http, JSONRPC_1_0.send(a, ep, WORDS), JSONRPC_1_0, limit=READ_BEFORE_DROP)
        task_id = head[0].body["id"]
        on_b = await read(
            http,
            JSONRPC_1_0.subscribe(b, ep, task_id),
            JSONRPC_1_0,
            last_event_id=head[-1].id,
            limit=READ_BEFORE_DROP,
        )
        assert (
            on_b[0].kind == "task" and on_b[0].body["id"] == task_id
        )  # a miss there: the snapshot
        assert all(e.id for e in on_b)
        # B's ids are its own and not replayable: back on B, the snapshot again, then live to the
        # end
        again = await read(
            http, JSONRPC_1_0.subscribe(b, ep, task_id), JSONRPC_1_0, last_event_id=on_b[-1].id
        )
        assert again[0].kind == "task"
        assert is_completed(sse_final_state(again)) and sse_text(again) == ANSWER
        # A, which ran the task, still replays from its own id
        tail = await read(
            http, JSONRPC_1_0.subscribe(a, ep, task_id), JSONRPC_1_0, last_event_id=head[-1].id
        )
    assert [e.kind for e in tail].count("task") == 0
    assert sse_text(head + tail) == ANSWER and is_completed(sse_final_state(tail))
    report("another replica", snapshot_first=True, replayed_on_owner=len(tail))


async def test_a_hostile_last_event_id_is_a_miss_never_a_server_error(http):
    async with running_gateway() as gw:
        ep = await gw.add_endpoint(settings={"delay": 0.0})
        events = await read(http, JSONRPC_1_0.send(gw, ep, "short"), JSONRPC_1_0)
        token = events[0].id.rpartition(".")[0]
        method, url, body, headers = JSONRPC_1_0.subscribe(gw, ep, events[0].body["id"])
        for hostile in (f"{token}." + "9" * 5000, f"{token}.\u0661", "."):  # ١, an Arabic-Indic 1
            answer = await http.post(
                url, json=body, headers={**headers, "Last-Event-ID": hostile.encode()}
            )
            assert answer.status_code == 200
            assert answer.json()["error"]["code"] == -32004  # ended, and nothing to replay
