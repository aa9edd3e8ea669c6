"""A2A 1.1 task generations through a running gateway, on every store: the numbers a 1.1
client reads on every event and task, the SSE ids made of them, the long-poll GetTask, the
``ifGenerationMatch`` precondition, and a 1.0 client that sees none of it."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import aiohttp
import httpx
import orjson
import pytest
from httpx_sse import aconnect_sse

from tests.support.harness import RunningGateway
from tests.support.messages import rpc, wire_message

V11 = {"A2A-Version": "1.1"}
V10 = {"A2A-Version": "1.0"}
WORDS = 1000


@pytest.fixture
def gw(every_store: RunningGateway) -> RunningGateway:
    return every_store


@pytest.fixture
async def http() -> Any:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


async def stream(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
) -> list[tuple[str, dict[str, Any]]]:
    """(SSE id, JSON-RPC result) of every event of a streaming call, read to its end."""
    out = []
    async with aconnect_sse(http, "POST", url, json=body, headers=headers) as source:
        async for sse in source.aiter_sse():
            out.append((sse.id, orjson.loads(sse.data)["result"]))
    return out


def body_of(result: dict[str, Any]) -> dict[str, Any]:
    (body,) = result.values()
    return body


def generation_in_id(event_id: str) -> int:
    return int(event_id.rpartition(".")[2])


async def call(
    http: httpx.AsyncClient, url: str, method: str, params: dict[str, Any],
    headers: dict[str, str] = V11,
) -> dict[str, Any]:
    rid = str(uuid.uuid4())
    response = await http.post(url, json=rpc(method, params, rid), headers=headers)
    answer = response.json()
    assert answer["id"] == rid
    return answer


async def input_required_task(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    answer = await call(http, url, "SendMessage", {"message": wire_message("?input please")})
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


async def test_every_event_of_a_long_reply_has_the_next_generation_and_its_id_says_it(gw, http):
    """1,000 text deltas: the Task at 1, then every event one more, each SSE id ending with it;
    the stored task ends at the last; a reconnect after any event goes on at the next one."""
    echo = await gw.add_endpoint(settings={"delay": 0.0})
    url = gw.jsonrpc_url(echo)
    text = " ".join(f"w{i}" for i in range(WORDS))
    events = await stream(http, url, rpc("SendStreamingMessage",
                                         {"message": wire_message(text)}), V11)

    first_id, first = events[0]
    assert body_of(first)["generation"] == 1 == generation_in_id(first_id)
    generations = [body_of(result)["generation"] for _, result in events]
    assert all(b > a for a, b in zip(generations, generations[1:], strict=False))
    assert [generation_in_id(i) for i, _ in events] == generations
    assert generations[-1] >= WORDS + 3  # WORKING, every word, the last chunk, COMPLETED

    task_id = body_of(first)["id"]
    got = await call(http, url, "GetTask", {"id": task_id})
    assert got["result"]["generation"] == generations[-1]

    middle_id = events[len(events) // 2][0]
    async with aconnect_sse(
        http, "POST", url, json=rpc("SubscribeToTask", {"id": task_id}),
        headers={**V11, "Last-Event-ID": middle_id},
    ) as source:
        resumed = [orjson.loads(sse.data)["result"] async for sse in source.aiter_sse()]
    after = [body_of(r)["generation"] for r in resumed]
    assert after == list(range(generation_in_id(middle_id) + 1, generations[-1] + 1))


async def test_a_1_0_client_reads_no_generation_anywhere(gw, http):
    echo = await gw.add_endpoint(settings={"delay": 0.0})
    url = gw.jsonrpc_url(echo)
    events = await stream(http, url, rpc("SendStreamingMessage",
                                         {"message": wire_message("a b c")}), V10)
    task_id = body_of(events[0][1])["id"]
    got = await call(http, url, "GetTask", {"id": task_id}, V10)
    rest = await http.get(f"{gw.rest_url(echo)}/tasks/{task_id}", headers=V10)
    for seen in [r for _, r in events] + [got["result"], rest.json()]:
        assert b"generation" not in orjson.dumps(seen)
    rest_11 = await http.get(f"{gw.rest_url(echo)}/tasks/{task_id}", headers=V11)
    assert rest_11.json()["generation"] == got_generation(events)


def got_generation(events: list[tuple[str, dict[str, Any]]]) -> int:
    return generation_in_id(events[-1][0])


async def test_a_long_poll_answers_when_the_task_changes_and_at_its_bound(gw, http):
    echo = await gw.add_endpoint(settings={"delay": 0.0})
    url = gw.jsonrpc_url(echo)
    task = await input_required_task(http, url)
    seen = task["generation"]

    poll = asyncio.create_task(call(http, url, "GetTask",
                                    {"id": task["id"], "currentGeneration": seen}))
    await asyncio.sleep(0.3)
    assert not poll.done(), "a long-poll answered although the task did not change"
    await call(http, url, "SendMessage", {
        "message": wire_message("the answer", taskId=task["id"]),
        "configuration": {"returnImmediately": True},
    })
    answered_at = time.monotonic()
    woken = (await asyncio.wait_for(poll, 5))["result"]
    assert time.monotonic() - answered_at < 1.0
    assert woken["generation"] > seen
    assert woken["status"]["state"] != "TASK_STATE_INPUT_REQUIRED"

    # already past: at once; a generation not reached yet on an ended task: at once too
    done = await call(http, url, "GetTask", {"id": task["id"], "currentGeneration": 0})
    assert done["result"]["generation"] >= woken["generation"]


async def test_a_long_poll_on_a_quiet_task_answers_it_as_it_stands_at_the_bound(http):
    from tests.support.harness import running_gateway

    async with running_gateway(long_poll_seconds=0.5) as gw:
        echo = await gw.add_endpoint(settings={"delay": 0.0})
        url = gw.jsonrpc_url(echo)
        task = await input_required_task(http, url)
        started = time.monotonic()
        got = await call(http, url, "GetTask",
                         {"id": task["id"], "currentGeneration": task["generation"]})
        assert 0.45 <= time.monotonic() - started < 3
        assert got["result"]["generation"] == task["generation"]
        rest = await http.get(f"{gw.rest_url(echo)}/tasks/{task['id']}",
                              params={"currentGeneration": str(task["generation"])}, headers=V11)
        assert rest.status_code == 200 and rest.json()["generation"] == task["generation"]


async def test_two_clients_answering_one_question_at_its_generation_one_wins(gw, http):
    echo = await gw.add_endpoint(settings={"delay": 0.0})
    url = gw.jsonrpc_url(echo)
    task = await input_required_task(http, url)

    def answer(text: str) -> dict[str, Any]:
        return {"message": wire_message(text, taskId=task["id"]),
                "configuration": {"ifGenerationMatch": task["generation"]}}

    first, second = await asyncio.gather(call(http, url, "SendMessage", answer("from A")),
                                         call(http, url, "SendMessage", answer("from B")))
    won = [a for a in (first, second) if "result" in a]
    lost = [a for a in (first, second) if "error" in a]
    assert len(won) == 1 and len(lost) == 1, (first, second)
    error = lost[0]["error"]
    assert error["code"] == -32010
    info = error["data"][0]
    assert info["reason"] == "TASK_GENERATION_MISMATCH"
    assert info["metadata"]["taskId"] == task["id"]
    assert info["metadata"]["expectedGeneration"] == str(task["generation"])

    stored = (await call(http, url, "GetTask", {"id": task["id"]}))["result"]
    user_texts = [m["parts"][0]["text"] for m in stored["history"] if m["role"] == "ROLE_USER"]
    assert user_texts.count("from A") + user_texts.count("from B") == 1

    stale = await http.post(f"{gw.rest_url(echo)}/message:send", headers=V11,
                            json=answer("late"))
    assert stale.status_code == 409
    assert stale.json()["error"]["status"] == "ABORTED"


@pytest.mark.parametrize("value", [-1, "abc", 2**60, 1.5, True, [3], {"n": 1}])
async def test_a_generation_that_is_not_one_is_refused_naming_the_field(http, value):
    from tests.support.harness import running_gateway

    async with running_gateway() as gw:
        echo = await gw.add_endpoint(settings={"delay": 0.0})
        url = gw.jsonrpc_url(echo)
        task = await input_required_task(http, url)
        got = await call(http, url, "GetTask", {"id": task["id"], "currentGeneration": value})
        assert got["error"]["code"] == -32602
        assert "currentGeneration" in got["error"]["message"]
        sent = await call(http, url, "SendMessage", {
            "message": wire_message("x", taskId=task["id"]),
            "configuration": {"ifGenerationMatch": value}})
        assert sent["error"]["code"] == -32602
        assert "ifGenerationMatch" in sent["error"]["message"]
        after = (await call(http, url, "GetTask", {"id": task["id"]}))["result"]
        assert after["generation"] == task["generation"]  # nothing written
        # to a 1.0 client they are unknown fields: ignored
        plain = await call(http, url, "GetTask", {"id": task["id"], "currentGeneration": value},
                           V10)
        assert plain["result"]["id"] == task["id"]
        rest = await http.get(f"{gw.rest_url(echo)}/tasks/{task['id']}",
                              params={"currentGeneration": str(value)}, headers=V11)
        assert rest.status_code == 400


async def test_a_thousand_waiting_long_polls_are_hub_subscriptions_that_read_nothing(http):
    """Each waiting call is one subscription on the hub, and none reads the store while it
    waits; one answer wakes them all, and none is left behind (figures: bench/long_poll.py)."""
    from tests.support.harness import running_gateway

    async with running_gateway() as gw, aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0)
    ) as many:
        echo = await gw.add_endpoint(settings={"delay": 0.0})
        url = gw.jsonrpc_url(echo)
        task = await input_required_task(http, url)
        hub, store = gw.gateway.hub, gw.gateway.store
        reads = 0
        real_get_task = store.get_task

        async def counted_get_task(*args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            reads += 1
            return await real_get_task(*args, **kwargs)

        store.get_task = counted_get_task  # type: ignore[method-assign]
        async def long_poll() -> dict[str, Any]:
            body = rpc("GetTask", {"id": task["id"], "currentGeneration": task["generation"]})
            async with many.post(url, json=body, headers=V11) as response:
                return await response.json()

        polls = [asyncio.create_task(long_poll()) for _ in range(1000)]
        deadline = time.monotonic() + 20
        while hub.subscriber_count(task["id"]) < 1000 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert hub.subscriber_count(task["id"]) == 1000
        reads_when_waiting = reads
        await asyncio.sleep(1.0)
        assert reads == reads_when_waiting, "a waiting long-poll read the store"
        assert not any(p.done() for p in polls)

        await call(http, url, "SendMessage", {
            "message": wire_message("all of you", taskId=task["id"]),
            "configuration": {"returnImmediately": True}})
        answers = await asyncio.wait_for(asyncio.gather(*polls), 20)
        assert all(a["result"]["generation"] > task["generation"] for a in answers)
        assert hub.subscriber_count(task["id"]) == 0
