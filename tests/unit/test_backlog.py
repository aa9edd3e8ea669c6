"""A subscriber's backlog: chunks of one artifact merge while they wait, memory is bounded
by bytes, and a subscriber past its budget starts over instead of failing."""

from __future__ import annotations

import asyncio

import pytest
from a2a.types import TaskArtifactUpdateEvent, TaskStatusUpdateEvent

from a2a_gateway.live.backlog import END, RESTART, Backlog, mergeable
from a2a_gateway.live.hub import LiveHub, ReplayLimits, SubscriberBehind
from tests.unit.test_live_hub import Runs


def chunk(
    text: str, *, artifact: str = "a", append: bool = True, last: bool = False
) -> TaskArtifactUpdateEvent:
    event = TaskArtifactUpdateEvent(task_id="t", context_id="c", append=append, last_chunk=last)
    event.artifact.artifact_id = artifact
    event.artifact.name = "response"
    event.artifact.parts.add(text=text)
    return event


def status(n: int) -> TaskStatusUpdateEvent:
    event = TaskStatusUpdateEvent(task_id="t", context_id="c")
    event.status.message.parts.add(text=f"step {n}")
    return event


def put(backlog: Backlog, event_id: str, event) -> bool:
    return backlog.put(event_id, event, event.ByteSize())


def texts(event: TaskArtifactUpdateEvent) -> list[str]:
    return [part.text for part in event.artifact.parts]


def take_all(backlog: Backlog) -> list:
    out = []
    while (item := backlog.take_nowait()) is not None:
        out.append(item)
    return out


def test_appended_chunks_of_one_artifact_wait_as_one_chunk_of_their_parts_with_the_id_of_the_last():
    backlog = Backlog(max_bytes=1 << 20)
    first = chunk("Hello", append=False)
    put(backlog, "x.1", first)
    put(backlog, "x.2", chunk(", "))
    put(backlog, "x.3", chunk("world", last=True))
    (item,) = take_all(backlog)
    event_id, merged = item
    assert event_id == "x.3"
    assert texts(merged) == ["Hello", ", ", "world"]  # what appending them one by one builds
    assert (merged.append, merged.last_chunk) == (
        False,
        True,
    )  # the first's append, the last's last_chunk
    assert merged.artifact.artifact_id == "a" and merged.artifact.name == "response"
    assert texts(first) == ["Hello"]  # the published event (shared with the log) is untouched
    assert backlog.bytes == 0


def test_only_what_appends_to_the_waiting_chunk_merges_and_order_is_kept():
    backlog = Backlog(max_bytes=1 << 20)
    with_metadata = chunk("m")
    with_metadata.metadata.update({"k": 1})
    sequence = [
        ("1", chunk("a")),
        ("2", chunk("b")),  # merge
        ("3", status(1)),  # a status breaks the run
        ("4", chunk("c")),
        ("5", chunk("d", artifact="other")),  # another artifact
        ("6", chunk("e", artifact="other", append=False)),  # a replace never merges
        ("7", chunk("f", artifact="other", last=True)),
        ("8", chunk("g", artifact="other")),  # after last_chunk
        ("9", with_metadata),  # not plain text
    ]
    for event_id, event in sequence:
        put(backlog, event_id, event)
    got = [(i, "".join(texts(e)) if isinstance(e, TaskArtifactUpdateEvent) else "status")
           for i, e in take_all(backlog)]
    assert got == [
        ("2", "ab"),
        ("3", "status"),
        ("4", "c"),
        ("5", "d"),
        ("7", "ef"),
        ("8", "g"),
        ("9", "m"),
    ]
    assert not mergeable(with_metadata) and not mergeable(status(1)) and mergeable(chunk("x"))


def test_a_merged_chunk_costs_its_parts_and_the_budget_is_reported():
    backlog = Backlog(max_bytes=3_000)
    first = chunk("x" * 10, append=False)
    put(backlog, "1", first)
    assert backlog.bytes == first.ByteSize()
    part_bytes = chunk("y" * 10).artifact.parts[0].ByteSize() + 3
    for n in range(150):
        assert put(backlog, str(n + 2), chunk("y" * 10))  # its part each, not an event each
    assert backlog.bytes == first.ByteSize() + 150 * part_bytes < 150 * chunk("y" * 10).ByteSize()
    assert len(backlog) == 1
    assert not put(backlog, "z", chunk("y" * 1000))  # over the budget: the owner decides
    backlog.restart()
    assert backlog.bytes == 0 and take_all(backlog) == [RESTART]


async def test_take_waits_for_the_next_item():
    backlog = Backlog(max_bytes=1000)
    waiting = asyncio.ensure_future(backlog.take())
    await asyncio.sleep(0)
    assert not waiting.done()
    backlog.end()
    assert await asyncio.wait_for(waiting, 5) is END


# through the hub ------------------------------------------------------------------------------


def hub_with_budget(max_bytes: int) -> LiveHub:
    hub, runs = LiveHub(), Runs()
    hub.serve(runs, ReplayLimits(), subscriber_max_bytes=max_bytes)
    runs.runs["t"] = object()
    return hub


async def test_a_slow_subscriber_gets_the_same_text_as_a_fast_one_in_fewer_chunks():
    hub = hub_with_budget(1 << 20)
    fast, slow = hub.subscribe("t"), hub.subscribe("t")
    words = [f" w{i}" for i in range(20_000)]
    fast_seen = []
    for word in words:
        hub.publish("t", chunk(word))
        fast_seen.append(fast._backlog.take_nowait())
    hub.end("t")
    slow_seen = [item async for item in slow]
    assert len(fast_seen) == 20_000 and len(slow_seen) == 1
    assert "".join(texts(slow_seen[0][1])) == "".join(words)
    assert slow_seen[-1][0] == fast_seen[-1][0]  # one id: the last event it stands for


async def test_past_its_budget_a_subscriber_is_told_to_start_over_and_stays_within_it():
    hub = hub_with_budget(4_000)
    slow, fine = hub.subscribe("t"), hub.subscribe("t")
    for n in range(1_000):  # a status flood: nothing to merge
        hub.publish("t", status(n))
        assert slow._backlog.bytes <= 4_000 + status(n).ByteSize()
        fine._backlog.take_nowait()
    with pytest.raises(SubscriberBehind):
        async for _ in slow:
            pass
    position = slow.catch_up()
    assert position == hub.position("t") and position.endswith(".1000")
    hub.publish("t", status(1_000))
    hub.end("t")
    after = [item async for item in slow]
    assert [i for i, _ in after] == [position.rpartition(".")[0] + ".1001"]
    assert hub.subscriber_count("t") == 0 and fine._backlog.bytes < 1_000  # the other never noticed


async def test_a_follower_that_falls_behind_goes_on_from_the_store():
    """A task run elsewhere: its forwarded events flood a follower past its budget; the
    follower drops the live events and still ends with the task's final state, from the store."""
    from a2a.types import Task, TaskState

    from a2a_gateway.stores.base import Scope
    from a2a_gateway.stores.memory import MemoryStore
    from a2a_gateway.tasks.follower import follow_task

    store, hub, scope = MemoryStore(), LiveHub(), Scope("default", "ep", "alice")
    hub.serve(Runs(), ReplayLimits(events=0), subscriber_max_bytes=2_000)
    task = Task(id="t", context_id="c")
    task.status.state = TaskState.TASK_STATE_WORKING
    version = await store.create_task(scope, task)
    followed = follow_task(
        store, hub, scope, task, version, interval=0.05, stop_when_interrupted=False
    )
    reader = asyncio.ensure_future(_all(followed))
    await asyncio.sleep(0.05)  # the follower subscribed and waits
    for n in range(200):
        hub.publish("t", status(n))  # all at once, before it reads: past its budget
    assert hub._subscribers["t"][0]._behind
    await asyncio.sleep(0.2)  # it learns that it fell behind, and polls the store
    assert not reader.done()
    task.status.state = TaskState.TASK_STATE_COMPLETED
    await store.update_task(scope, task, expected_version=version)
    got = await asyncio.wait_for(reader, 10)
    assert got and got[-1][1].status.state == TaskState.TASK_STATE_COMPLETED


async def _all(items):
    return [item async for item in items]
