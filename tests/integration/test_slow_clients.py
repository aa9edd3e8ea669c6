"""A client slower than its stream: the gateway never turns it into an error.

A 20,000-word echo with ``delay: 0`` publishes far more events than a subscriber may hold;
the a2a-sdk client reads the first event and then pauses, so the gateway must hold (or
coalesce) everything that follows. What the client rebuilds must equal the final
artifact, and the stream must end with the task's COMPLETED status, never an error event.
"""

from __future__ import annotations

import asyncio

import httpx
import orjson
from a2a.types import TaskState
from httpx_sse import aconnect_sse

from tests.support.harness import collect, reconstruct, running_gateway
from tests.support.messages import rpc, send_request, wire_message

WORDS = " ".join(f"w{i}" for i in range(20_000))
ANSWER = f"echo: {WORDS}"


async def _slow_reader(stream, pause: float) -> list:
    """Every event of ``stream``, pausing after the first one (the client falls behind)."""
    events = []
    async for event in stream:
        events.append(event)
        if len(events) == 1:
            await asyncio.sleep(pause)
    return events


async def test_a_client_that_pauses_behind_a_20000_word_burst_rebuilds_the_whole_text():
    async with running_gateway() as gw:
        ep = await gw.add_endpoint(
            settings={"delay": 0}, card={"capabilities": {"streaming": True}}
        )
        async with gw.client(ep, timeout=120) as client:
            events = await _slow_reader(client.send_message(send_request(WORDS)), pause=1.0)
    last = events[-1]
    assert last.HasField("status_update"), last
    assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert list(reconstruct(events).values()) == [ANSWER]


async def test_a_slow_client_within_a_small_byte_budget_still_rebuilds_the_text_exactly():
    """A budget far below the text itself: coalescing cannot hold everything, so the
    subscriber starts over from a fresh starting point (the task and the text so far);
    the client still rebuilds the exact text and sees no error."""
    async with running_gateway(stream_subscriber_max_bytes=64 * 1024) as gw:
        ep = await gw.add_endpoint(
            settings={"delay": 0}, card={"capabilities": {"streaming": True}}
        )
        async with gw.client(ep, timeout=120) as client:
            events = await _slow_reader(client.send_message(send_request(WORDS)), pause=1.0)
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert list(reconstruct(events).values()) == [ANSWER]
    assert not any(e.HasField("message") for e in events)


async def test_a_fast_client_of_the_same_burst_gets_the_same_text():
    async with running_gateway() as gw:
        ep = await gw.add_endpoint(
            settings={"delay": 0}, card={"capabilities": {"streaming": True}}
        )
        async with gw.client(ep, timeout=120) as client:
            events = await collect(client.send_message(send_request(WORDS)))
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert list(reconstruct(events).values()) == [ANSWER]


async def test_resuming_after_a_merged_chunk_neither_repeats_nor_loses_text():
    """A burst the client could not take as it came reaches it as one chunk with one id
    (the id of the last delta it holds); the client drops the connection right after that
    chunk and resumes with ``Last-Event-ID``: what follows continues exactly where the
    merged chunk ended (with the id of its first delta, the rest would come again)."""
    words = " ".join(f"v{i}" for i in range(1500))
    answer = f"echo: {words}"
    async with running_gateway() as gw:
        ep = await gw.add_endpoint(
            settings={"delay": 0}, card={"capabilities": {"streaming": True}}
        )
        url, headers = gw.jsonrpc_url(ep), {"A2A-Version": "1.0"}
        before: list[dict] = []
        async with httpx.AsyncClient(timeout=60) as http:
            send = rpc("SendStreamingMessage", {"message": wire_message(words)})
            async with aconnect_sse(http, "POST", url, json=send, headers=headers) as source:
                async for sse in source.aiter_sse():
                    before.append({"id": sse.id, **orjson.loads(sse.data)["result"]})
                    if "artifactUpdate" in before[-1]:
                        break  # drop the connection right after the (merged) chunk
            task_id, last_id = before[0]["task"]["id"], before[-1]["id"]
            after: list[dict] = []
            resume = rpc("SubscribeToTask", {"id": task_id})
            async with aconnect_sse(http, "POST", url, json=resume,
                                    headers={**headers, "Last-Event-ID": last_id}) as source:
                async for sse in source.aiter_sse():
                    after.append({"id": sse.id, **orjson.loads(sse.data)["result"]})
    merged = before[-1]["artifactUpdate"]
    assert len(merged["artifact"]["parts"]) > 1, "the burst's deltas were not merged"
    assert "task" not in after[0], "the resume was a miss (a snapshot), not a replay"
    chunks = [e["artifactUpdate"] for e in before + after if "artifactUpdate" in e]
    assert (
        "".join(p["text"] for c in chunks for p in c["artifact"]["parts"]) == answer
    )  # none twice, none lost
    assert chunks[-1].get("lastChunk") and chunks[-1].get(
        "append"
    )  # the end appends, maybe merged with deltas
    assert after[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
