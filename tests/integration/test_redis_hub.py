"""Two ``RedisLiveHub`` replicas in one process, on a real Redis: followers on another replica,
event ids valid on both, control commands, and hostile ids. The gateway-level flows (separate
``serve`` processes on DynamoDB and PostgreSQL) are in test_redis_replicas.py.

Needs ``A2A_TEST_REDIS_URL`` (.ci/services/08-redis.sh); skipped without it, except in CI.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from a2a.types import TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent

from a2a_gateway.live.hub import ReplayLimits
from a2a_gateway.live.redis import INBOX_TTL_SECONDS, RedisLiveHub, inbox_key, open_redis
from tests.support.harness import require_env
from tests.support.waiting import eventually

pytestmark = pytest.mark.redis


class Runs:
    """``LocalRuns`` of one replica: the tasks it runs and the text each streamed so far."""

    def __init__(self) -> None:
        self.text: dict[str, str] = {}
        self.runs: dict[str, object] = {}
        self.controls: list[tuple[str, str]] = []

    def run(self, task_id: str) -> Any:
        return self.runs.setdefault(task_id, object()) if task_id in self.text else None

    def text_so_far(self, task_id: str) -> TaskArtifactUpdateEvent | None:
        text = self.text.get(task_id)
        return delta(task_id, text, append=False) if text else None

    async def handle_control(self, command: str, task_id: str) -> None:
        self.controls.append((command, task_id))


def delta(task_id: str, text: str, append: bool = True) -> TaskArtifactUpdateEvent:
    event = TaskArtifactUpdateEvent(task_id=task_id, context_id="c", append=append)
    event.artifact.artifact_id = "a"
    event.artifact.parts.add(text=text)
    return event


def completed(task_id: str) -> TaskStatusUpdateEvent:
    event = TaskStatusUpdateEvent(task_id=task_id, context_id="c")
    event.status.state = TaskState.TASK_STATE_COMPLETED
    return event


def speak(hub: RedisLiveHub, runs: Runs, task_id: str, text: str) -> None:
    """The owner's run streams ``text``: its run state and the hub see it together."""
    runs.text[task_id] = runs.text.get(task_id, "") + text
    hub.publish(task_id, delta(task_id, text))


@pytest.fixture
async def replicas() -> AsyncIterator[tuple[RedisLiveHub, Runs, RedisLiveHub, Runs]]:
    url = require_env("A2A_TEST_REDIS_URL")
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    made = []
    for name in ("a", "b"):
        redis = open_redis(url)
        hub = RedisLiveHub(redis, None, name, prefix=prefix, refresh_seconds=0.5,
                           inbox_max_entries=200)
        runs = Runs()
        hub.serve(runs, ReplayLimits(events=100, keep_seconds=30))
        await hub.start()
        assert hub.listening
        made.append((hub, runs, redis))
    try:
        yield made[0][0], made[0][1], made[1][0], made[1][1]
    finally:
        for hub, _, redis in made:
            await hub.aclose()
            await redis.aclose()


async def take(sub: Any, n: int, timeout: float = 5.0) -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    async with asyncio.timeout(timeout):
        async for item in sub:
            items.append(item)
            if len(items) == n:
                break
    return items


async def take_until(sub: Any, text: Any, wanted: str, timeout: float = 5.0) -> list[Any]:
    """Items of ``sub`` until ``text(items)`` is ``wanted`` (chunks a reader has not taken
    yet arrive merged, so how many items that takes varies)."""
    items: list[tuple[str, Any]] = []
    async with asyncio.timeout(timeout):
        async for item in sub:
            items.append(item)
            if text(items) == wanted:
                return items
    raise AssertionError(f"the stream ended at {text(items)!r}")


def text_of(items: list[tuple[str, Any]]) -> str:
    text = ""
    for _, event in items:
        if isinstance(event, TaskArtifactUpdateEvent):
            chunk = "".join(p.text for p in event.artifact.parts)
            text = text + chunk if event.append else chunk
    return text


async def test_a_follower_on_another_replica_gets_the_text_so_far_then_every_delta(replicas):
    a, runs_a, b, _ = replicas
    own = a.subscribe("t1")  # streamed on A
    speak(a, runs_a, "t1", "one ")
    speak(a, runs_a, "t1", "two ")
    follower = b.follow("t1")
    first = await take(follower, 1)
    assert text_of(first) == "one two " and not first[0][1].append  # the snapshot
    speak(a, runs_a, "t1", "three")
    a.publish("t1", completed("t1"))
    a.end("t1")
    rest = [item async for item in follower]  # ends with the owner's end
    assert text_of(first + rest) == "one two three"
    assert isinstance(rest[-1][1], TaskStatusUpdateEvent)
    # the follower hands out the owner's ids: its last is the owner's subscriber's last
    owned = [item async for item in own]
    assert rest[-1][0] == owned[-1][0] == a.position("t1")


async def test_an_owner_that_learns_of_a_follower_from_its_refresh_sends_what_it_missed(
    replicas,
):
    """The task's owner does not know B's watch (it took the task over after its owner was
    lost, or the watch lapsed) and streams on: B's next refresh tells it, and the snapshot it
    sends then, without a nonce, reaches B's live follower, so its text has no gap."""
    a, runs_a, b, _ = replicas
    speak(a, runs_a, "t1", "one ")
    follower = b.follow("t1")
    assert text_of(await take(follower, 1)) == "one "
    del a._watchers["t1"]  # what a new owner knows of B
    speak(a, runs_a, "t1", "two ")  # not forwarded: B is no watcher here
    await eventually(lambda: "t1" in a._watchers, timeout=5, what="B's refresh")
    speak(a, runs_a, "t1", "three")
    a.publish("t1", completed("t1"))
    a.end("t1")
    rest = [item async for item in follower]
    assert text_of(rest) == "one two three"  # from the snapshot on: nothing missed, nothing twice


async def test_a_task_nobody_watches_elsewhere_is_not_written_to_redis(replicas):
    a, runs_a, b, _ = replicas
    runs_a.text["quiet"] = ""
    a.publish("quiet", delta("quiet", "x"))  # no subscriber, no log, no watcher
    streamed = a.subscribe("streamed")  # streamed on A only: its reconnects are A's own log
    speak(a, runs_a, "streamed", "y")
    assert len(await take(streamed, 1)) == 1
    await asyncio.sleep(0.2)
    assert a.stats["sent"] == 0
    assert await a._redis.exists(inbox_key(a._prefix, "b")) == 0  # nothing for B


async def test_a_follower_of_a_blocking_task_starts_the_mirror(replicas):
    a, runs_a, b, _ = replicas
    runs_a.text["blk"] = "so far "  # runs on A, nobody streams it there
    follower = b.follow("blk")
    (snapshot,) = await take(follower, 1)
    assert text_of([snapshot]) == "so far "

    async def watched() -> bool:
        return a.has_listeners("blk")

    await eventually(watched, timeout=5, what="A knows B watches")
    speak(a, runs_a, "blk", "and more")
    (live,) = await take(follower, 1)
    assert text_of([snapshot, live]) == "so far and more"
    # the follower's ids are the owner's log's: a client that got the snapshot can resume
    speak(a, runs_a, "blk", " and the rest")
    resumed = await b.reconnect("blk", snapshot[0])
    assert resumed is not None
    again = await take_until(resumed, lambda got: text_of([snapshot, *got]),
                             "so far and more and the rest")
    assert len(again) <= 2  # the two chunks after the snapshot (merged when read late)


async def test_last_event_id_resumes_on_the_other_replica_with_nothing_lost_or_twice(replicas):
    a, runs_a, b, _ = replicas
    own = a.subscribe("t2")
    seen = []
    for word in ("a ", "b ", "c "):
        speak(a, runs_a, "t2", word)
        seen += await take(own, 1)  # one by one: a lagging subscriber gets chunks merged
    speak(a, runs_a, "t2", "d ")
    await eventually(lambda: _flushed(a), timeout=5, what="A's outbox written")
    resumed = await b.reconnect("t2", seen[1][0])  # the client saw "a b " and moves to B
    assert resumed is not None
    speak(a, runs_a, "t2", "e")
    a.publish("t2", completed("t2"))
    a.end("t2")
    after = [item async for item in resumed]
    assert text_of(seen[:2]) + "".join(
        "".join(p.text for p in e.artifact.parts) for _, e in after
        if isinstance(e, TaskArtifactUpdateEvent)) == "a b c d e"
    ids = [event_id for event_id, _ in after]
    assert len(ids) == len(set(ids)) and seen[1][0] not in ids


async def _flushed(hub: RedisLiveHub) -> bool:
    return not hub._outbox


async def test_an_id_of_another_task_or_a_made_up_id_replays_nothing(replicas):
    a, runs_a, b, _ = replicas
    own = a.subscribe("t3")
    speak(a, runs_a, "t3", "secret")
    (item,) = await take(own, 1)
    a.subscribe("t4")
    speak(a, runs_a, "t4", "other")
    await eventually(lambda: _flushed(a), timeout=5, what="A's outbox written")
    assert await b.reconnect("t4", item[0]) is None  # t3's id on t4's stream
    for hostile in ("", "*", "0-0", "-", "+", "\r\nFLUSHALL", "x" * 5000, item[0] + "0"):
        assert await b.reconnect("t3", hostile) is None, hostile
    # task ids reach Redis only as digests
    # replica ids reach Redis only as digests
    assert "\n" not in inbox_key(a._prefix, "a\nb") and "evil" not in inbox_key(a._prefix, "evil")


async def test_cancel_reaches_the_owner_and_released_reaches_every_replica(replicas):
    a, runs_a, b, runs_b = replicas
    await b.send_control("a", "cancel", "t5")
    await a.tell_all("released")

    async def delivered() -> bool:
        return ("cancel", "t5") in runs_a.controls and ("released", "") in runs_b.controls

    await eventually(delivered, timeout=5, what="control commands delivered")
    assert ("released", "") not in runs_a.controls  # not to the sender itself


async def test_an_endpoint_change_reaches_the_other_replica(replicas):
    a, _, b, _ = replicas
    heard_a: list[str | None] = []
    heard_b: list[str | None] = []
    a.endpoint_changed, b.endpoint_changed = heard_a.append, heard_b.append
    await a.announce_endpoint_change("ep-1")
    await eventually(lambda: heard_b == ["ep-1"], timeout=5, what="B told of the change")
    assert heard_a == []  # the replica that changed it forgot the row itself


async def test_an_inbox_is_capped_and_expires_when_its_replica_stops_reading(replicas):
    a, runs_a, b, _ = replicas
    runs_a.text["t6"] = ""
    b.follow("t6")  # watched from B: mirrored

    async def watched() -> bool:
        return a.has_listeners("t6")

    await eventually(watched, timeout=5, what="A knows B watches")
    for n in range(400):  # one write each: the cap is 200 entries (the fixture's), trimmed
        speak(a, runs_a, "t6", f"{n} ")  # approximately
        await a._flush()
    key = inbox_key(a._prefix, "b")
    assert 200 <= await a._redis.xlen(key) < 400
    assert INBOX_TTL_SECONDS - 30 < await a._redis.ttl(key) <= INBOX_TTL_SECONDS


async def test_a_reconnect_after_the_end_gets_the_rest_then_the_stream_ends(replicas):
    a, runs_a, b, _ = replicas
    own = a.subscribe("t7")
    speak(a, runs_a, "t7", "first ")
    (first,) = await take(own, 1)
    speak(a, runs_a, "t7", "last")
    a.publish("t7", completed("t7"))
    a.end("t7")  # the client lost its stream before these; its task ended meanwhile
    resumed = await b.reconnect("t7", first[0])
    assert resumed is not None
    rest = [item async for item in resumed]
    assert text_of([first, *rest]) == "first last"
    assert isinstance(rest[-1][1], TaskStatusUpdateEvent)
    assert await b.reconnect("t7", rest[-1][0]) is None  # nothing after the last event


async def test_the_cli_announces_an_endpoint_it_disables(replicas, tmp_path):
    _, _, b, _ = replicas
    heard: list[str | None] = []
    b.endpoint_changed = heard.append
    store = f"sqlite:///{tmp_path}/gw.db"
    env = {**os.environ, "A2A_GATEWAY_REDIS_URL": os.environ["A2A_TEST_REDIS_URL"],
           "A2A_GATEWAY_REDIS_PREFIX": b._prefix}

    async def cli(*args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "a2a_gateway", *args, "--store", store, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        return out.decode()

    endpoint_id = (await cli("endpoints", "add", "--name", "e", "--handler",
                             "handlers.echo:EchoHandler")).split()[-1]
    await cli("endpoints", "disable", endpoint_id)
    await eventually(lambda: heard == [endpoint_id], timeout=5, what="the CLI's change heard")
    assert os.environ["A2A_TEST_REDIS_URL"] not in (await cli("endpoints", "list"))
