"""Flows that must hold across replicas whatever links them (PostgreSQL NOTIFY, Redis), run on
a ``ReplicaSet`` of two or three replicas named ``a``, ``b`` (and ``c``) through the a2a-sdk
client. Stores must poll far less often than the flows' bounds: only the live path can carry
a chunk or a cancel in time."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)

from tests.replicas.cluster import ReplicaSet
from tests.support.messages import rpc, send_body, send_request, wire_message
from tests.support.streams import final_state, rebuild
from tests.support.waiting import eventually

COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
ECHO = "handlers.echo:EchoHandler"


def artifact_updates(events: list[StreamResponse]) -> list[StreamResponse]:
    return [e.artifact_update for e in events if e.HasField("artifact_update")]


def is_live_chunk(event: StreamResponse) -> bool:
    """An appended chunk before the last one: text that came while the run went on."""
    update = event.artifact_update
    return event.HasField("artifact_update") and update.append and not update.last_chunk


async def collect(stream: AsyncIterator[StreamResponse], into: list[StreamResponse],
                  arrivals: list[float] | None = None) -> None:
    async for event in stream:
        into.append(event)
        if arrivals is not None:
            arrivals.append(time.monotonic())


@contextlib.asynccontextmanager
async def following(stream: AsyncIterator[StreamResponse], into: list[StreamResponse],
                    arrivals: list[float] | None = None) -> AsyncIterator[asyncio.Task[None]]:
    """``stream`` read into ``into`` in the background; stopped when the block ends."""
    task = asyncio.create_task(collect(stream, into, arrivals))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def stored_text(rs: ReplicaSet, name: str, endpoint_id: str, task_id: str) -> str:
    async with rs.client(name, endpoint_id, streaming=False) as client:
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == COMPLETED, task.status
    return "".join(p.text for a in task.artifacts for p in a.parts)


async def subscribe_on_b_gets_live_chunks_and_the_whole_answer(rs: ReplicaSet) -> None:
    """A stream on A, a SubscribeToTask on B: B gets the text so far, live chunks while the
    run goes on, and rebuilds exactly the stored answer."""
    ep = await rs.add_endpoint(ECHO, delay=0.05)
    words = " ".join(f"w{i}" for i in range(40))
    async with rs.client("a", ep) as on_a, rs.client("b", ep) as on_b:
        stream = on_a.send_message(send_request(words))
        local = [await anext(stream) for _ in range(4)]
        task_id = local[0].task.id
        started = time.monotonic()
        remote: list[StreamResponse] = []
        arrivals: list[float] = []
        async with asyncio.timeout(15):
            await collect(on_b.subscribe(SubscribeToTaskRequest(id=task_id)), remote, arrivals)
        elapsed = time.monotonic() - started
        local += [e async for e in stream]
    stored = await stored_text(rs, "b", ep, task_id)
    assert remote[0].HasField("task") and remote[0].task.id == task_id
    chunks = [i for i, e in enumerate(remote) if is_live_chunk(e)]
    assert len(chunks) >= 5, f"only {len(chunks)} live chunks reached B"
    # the first live chunk came while the run went on, well before its end
    assert arrivals[-1] - arrivals[chunks[0]] > 0.5, "B got the chunks only at the end"
    assert stored == f"echo: {words}"
    assert rebuild(remote) == stored, "B's text differs from the stored answer (lost or twice)"
    assert rebuild(local) == stored
    assert final_state(remote) == COMPLETED and final_state(local) == COMPLETED
    assert elapsed < 10


async def cancel_on_c_stops_the_run_on_a_at_once(rs: ReplicaSet) -> None:
    """A CancelTask on C of a task streaming on A and followed on B: A's run stops at once
    (not at its next lease check), both streams end CANCELED, nothing completes after."""
    ep = await rs.add_endpoint(ECHO, delay=0.1)
    async with rs.client("a", ep) as on_a, rs.client("b", ep) as on_b, \
            rs.client("c", ep, streaming=False) as on_c:
        stream = on_a.send_message(send_request(" ".join(["word"] * 200)))
        first = await anext(stream)
        task_id = first.task.id
        await anext(stream)
        remote: list[StreamResponse] = []
        async with following(on_b.subscribe(SubscribeToTaskRequest(id=task_id)),
                             remote) as follower:
            await eventually(lambda: len(artifact_updates(remote)) >= 2, timeout=10,
                             what="live chunks on B")
            started = time.monotonic()
            canceled = await on_c.cancel_task(CancelTaskRequest(id=task_id))
            assert canceled.status.state == CANCELED
            async with asyncio.timeout(5):
                rest = [e async for e in stream]
            a_stopped = time.monotonic() - started
            async with asyncio.timeout(5):
                await follower
        await asyncio.sleep(0.5)  # a short while in which the canceled run must not complete
        final = await on_a.get_task(GetTaskRequest(id=task_id))
    assert final_state(rest) == CANCELED
    assert a_stopped < 3, f"A's stream ended {a_stopped:.1f}s after the cancel"
    assert final_state(remote) == CANCELED
    assert final.status.state == CANCELED
    assert not final.artifacts  # the run never completed after the cancel


async def quotas_are_counted_once_for_the_fleet(rs: ReplicaSet) -> None:
    """An endpoint's task window admits its limit once across replicas A and B (not once per
    replica), and the concurrency slot a task holds on A refuses a task on B until it ends."""
    v10 = {"A2A-Version": "1.0"}
    counted = await rs.add_endpoint(ECHO, delay=0, limits={"tasks_per_day": 3})
    urls = [f"{rs[name].base_url}/{counted}/a2a" for name in ("a", "b")] * 4
    async with httpx.AsyncClient(timeout=30) as http:
        answers = await asyncio.gather(*(
            http.post(url, json=send_body(f"call {i}", rid=i), headers=v10)
            for i, url in enumerate(urls)
        ))
        assert sorted(a.status_code for a in answers) == [200] * 3 + [429] * 5
        for rid, answer in enumerate(answers):
            if answer.status_code == 429:
                assert answer.json()["id"] == rid
                assert "tasks_per_day of 3" in answer.json()["error"]["message"]

        single = await rs.add_endpoint(ECHO, delay=0.2, limits={"concurrent_tasks": 1})
        on_a, on_b = (f"{rs[name].base_url}/{single}/a2a" for name in ("a", "b"))
        started = await http.post(on_a, json=rpc("SendMessage", {
            "message": wire_message("one two three four five six"),
            "configuration": {"returnImmediately": True},
        }), headers=v10)
        task_id = started.json()["result"]["task"]["id"]
        refused = await http.post(on_b, json=send_body(rid="b-1"), headers=v10)
        assert refused.status_code == 403, refused.text
        assert "concurrent_tasks of 1" in refused.json()["error"]["message"]

        async def state() -> str:
            got = await http.post(on_b, json=rpc("GetTask", {"id": task_id}), headers=v10)
            return got.json()["result"]["status"]["state"]

        await eventually(state, until=lambda s: s == "TASK_STATE_COMPLETED", what="A's task ended")

        async def admitted_on_b() -> int:
            return (await http.post(on_b, json=send_body(), headers=v10)).status_code

        await eventually(admitted_on_b, until=lambda s: s == 200, what="B admitted after it")


async def kill_9_of_the_owner_another_replica_completes(rs: ReplicaSet, backend: Any) -> None:
    """A stream on ``a`` of a ``FakeBackend`` run, followed on ``b``; ``a`` is killed with
    SIGKILL: another replica re-attaches the backend's run once ``a``'s lease expires (the set
    needs short leases), ``b``'s follower gets the whole text without a gap, and the task
    completes with it."""
    ep = await rs.add_endpoint(
        "tests.replicas.fake_backend:FakeBackendHandler", backend_url=backend.url, delay=0.1
    )
    words = " ".join(f"part{i}" for i in range(40))  # about 4 s of backend work
    async with rs.client("a", ep) as on_a, rs.client("b", ep) as on_b, \
            rs.client("c", ep, streaming=False) as on_c:
        stream = on_a.send_message(send_request(words))
        first = await anext(stream)
        task_id = first.task.id
        seen_on_a: list[Any] = []
        while len(artifact_updates(seen_on_a)) < 3:
            seen_on_a.append(await anext(stream))
        remote: list[Any] = []
        async with following(on_b.subscribe(SubscribeToTaskRequest(id=task_id)), remote) as done:
            await eventually(
                lambda: len(artifact_updates(remote)) >= 1, timeout=10, what="live chunks on B"
            )
            rs.kill("a")
            with contextlib.suppress(Exception):
                await stream.aclose()
            async with asyncio.timeout(30):
                await done
        final = await on_c.get_task(GetTaskRequest(id=task_id))
    assert len(backend.runs) == 1, "the backend run was started again instead of re-attached"
    (run,) = backend.runs.values()
    assert run.status == "completed"
    full = f"backend: {words}"
    assert run.output == full
    assert final.status.state == COMPLETED
    assert final.artifacts[0].parts[0].text == full
    assert final_state(remote) == COMPLETED
    assert artifact_updates(remote)[-1].last_chunk, remote[-4:]
    assert rebuild(remote) == full, rebuild(remote)
