"""The endpoint event feed in one process: which announcements become events, their
envelope, ids and the replay log behind ``Last-Event-ID``, filters, and the byte bound of
a slow subscriber."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from a2a.types import Task, TaskState

from a2a_gateway.events import agent_message, artifact_event, new_status, status_event
from a2a_gateway.live.feed import (
    EVERY_ENDPOINT,
    EndpointFeed,
    FeedFilter,
    FeedLimits,
    FeedOverflowError,
)
from a2a_gateway.stores.base import Scope

SCOPE = Scope("default", "ep-1", "alice")
WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED
INPUT = TaskState.TASK_STATE_INPUT_REQUIRED
DONE = TaskState.TASK_STATE_COMPLETED


def task(task_id: str = "t1", context_id: str = "c1") -> Task:
    return Task(id=task_id, context_id=context_id)


def announce(feed: EndpointFeed, t: Task, state: int, scope: Scope = SCOPE) -> None:
    t.status.CopyFrom(new_status(state))
    feed.status(scope, t, 1)


def drain(sub) -> list[tuple[str, dict]]:
    out = []
    while sub._queue:
        item = sub._queue.popleft()
        if not isinstance(item, tuple):
            out.append(("", {"marker": item}))
            continue
        sub._bytes -= len(item[1].data)
        out.append((item[0], orjson.loads(item[1].data)))
    return out


def test_state_changes_become_events_progress_repeats_do_not():
    feed = EndpointFeed()
    sub = feed.subscribe("ep-1")
    t = task()
    for state in (WORKING, WORKING, WORKING, INPUT, WORKING, DONE):
        announce(feed, t, state)
    events = drain(sub)
    assert [e["state"] for _, e in events] == [
        "TASK_STATE_WORKING",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    ]
    first = events[0][1]
    assert first["kind"] == "status" and first["taskId"] == "t1" and first["contextId"] == "c1"
    assert (
        first["principal"] == "alice"
        and first["endpointId"] == "ep-1"
        and first["timestamp"].endswith("Z")
    )
    assert first["statusUpdate"]["taskId"] == "t1"
    assert first["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"


def test_a_second_question_in_the_same_state_is_an_event_the_same_one_again_is_not():
    feed = EndpointFeed()
    sub = feed.subscribe("ep-1")
    t = task()
    for prompt in ("which one?", "which one, really?"):
        t.status.CopyFrom(new_status(INPUT, agent_message(t, prompt)))
        feed.status(SCOPE, t, 1)
    feed.status(SCOPE, t, 1)  # e.g. the status a stopping replica repeats
    questions = [e["statusUpdate"]["status"]["message"]["parts"][0]["text"] for _, e in drain(sub)]
    assert questions == ["which one?", "which one, really?"]


def test_final_artifact_is_an_event_with_the_a2a_update():
    feed = EndpointFeed()
    sub = feed.subscribe("ep-1")
    t = task()
    announce(feed, t, WORKING)
    artifact = t.artifacts.add(artifact_id="a1", name="response")
    artifact.parts.add(text="the answer")
    feed.artifact(SCOPE, t, artifact_event(t, artifact, last_chunk=True), 1)
    _, event = drain(sub)[-1]
    assert event["kind"] == "artifact"
    assert event["artifactUpdate"]["artifact"]["parts"][0]["text"] == "the answer"
    assert event["artifactUpdate"]["lastChunk"] is True


def test_other_endpoints_events_are_not_delivered():
    feed = EndpointFeed()
    sub = feed.subscribe("ep-1")
    announce(feed, task("t2"), WORKING, Scope("default", "ep-2", "bob"))
    assert drain(sub) == []


def test_resume_inside_the_log_gives_exactly_the_missed_events():
    feed = EndpointFeed()
    first = feed.subscribe("ep-1")
    t = task()
    announce(feed, t, WORKING)
    seen = drain(first)
    first.close()
    announce(feed, t, INPUT)
    announce(feed, t, WORKING)
    resumed = feed.resume("ep-1", seen[-1][0])
    assert resumed is not None
    missed = drain(resumed)
    assert [e["state"] for _, e in missed] == ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING"]
    token = seen[-1][0].rpartition(".")[0]
    assert [i for i, _ in missed] == [f"{token}.2", f"{token}.3"]


def test_resume_outside_the_log_is_a_miss():
    feed = EndpointFeed(FeedLimits(events=2))
    sub = feed.subscribe("ep-1")
    for n in range(5):
        announce(feed, task(f"t{n}"), WORKING)
    ids = [i for i, _ in drain(sub)]
    assert feed.resume("ep-1", ids[0]) is None  # dropped from the log
    assert feed.resume("ep-1", ids[-2]) is not None
    assert feed.resume("ep-1", "made-up.1") is None
    assert feed.resume("ep-1", feed.unlogged_id()) is None
    assert feed.resume("ep-other", ids[-1]) is None


def test_log_kept_for_its_time_after_the_last_subscriber():
    now = [100.0]
    feed = EndpointFeed(FeedLimits(keep_seconds=30), clock=lambda: now[0])
    sub = feed.subscribe("ep-1")
    announce(feed, task(), WORKING)
    last = drain(sub)[-1][0]
    sub.close()
    now[0] += 20
    again = feed.resume("ep-1", last)
    assert again is not None
    again.close()
    now[0] += 31
    assert feed.resume("ep-1", last) is None
    assert feed.log_stats()["logs"] == 0


def test_filters_by_state_and_context():
    feed = EndpointFeed()
    sub = feed.subscribe("ep-1", FeedFilter(frozenset({INPUT}), "c2"))
    announce(feed, task("t1", "c1"), INPUT)
    announce(feed, task("t2", "c2"), WORKING)
    announce(feed, task("t3", "c2"), INPUT)
    assert [e["taskId"] for _, e in drain(sub)] == ["t3"]


def test_a_slow_subscriber_is_dropped_at_its_byte_bound_and_the_feed_goes_on():
    feed = EndpointFeed(FeedLimits(client_max_bytes=4000))
    slow = feed.subscribe("ep-1")
    for n in range(100):
        announce(feed, task(f"t{n}"), WORKING)
    assert slow.backlog_bytes <= 4000
    assert feed.subscriber_count("ep-1") == 0
    assert len(slow._queue) == 1  # only the overflow marker: what it held is released

    async def read():
        async for _ in slow:
            pass

    with pytest.raises(FeedOverflowError):
        asyncio.run(read())
    fresh = feed.subscribe("ep-1")
    announce(feed, task("later"), WORKING)
    assert [e["taskId"] for _, e in drain(fresh)] == ["later"]


def test_nothing_is_built_for_an_unwatched_endpoint_in_one_process(monkeypatch):
    feed = EndpointFeed()
    calls = []

    def build(t: Task):
        calls.append(t.id)
        return status_event(t)

    monkeypatch.setattr("a2a_gateway.live.feed.status_event", build)
    t = task()
    t.status.CopyFrom(new_status(WORKING))
    feed.status(SCOPE, t, 1)
    assert calls == [] and feed.published == 0 and feed.log_stats()["logs"] == 0
    feed.subscribe("ep-1")
    t.status.CopyFrom(new_status(COMPLETED))
    feed.status(SCOPE, t, 2)
    assert calls == [t.id]  # built once somebody watches


def test_one_event_larger_than_the_bound_still_reaches_a_client_that_keeps_up():
    feed = EndpointFeed(FeedLimits(client_max_bytes=100))
    sub = feed.subscribe("ep-1")
    announce(feed, task(), WORKING)
    assert [e["state"] for _, e in drain(sub)] == ["TASK_STATE_WORKING"]
    assert feed.subscriber_count("ep-1") == 1


def test_the_gateway_wide_feed_gets_every_endpoints_events_with_ids_of_its_own():
    feed = EndpointFeed()
    one = feed.subscribe("ep-1")
    every = feed.subscribe(EVERY_ENDPOINT)
    only_two = feed.subscribe(EVERY_ENDPOINT, FeedFilter(endpoints=frozenset({"ep-2"})))
    announce(feed, task("t1"), WORKING)
    announce(feed, task("t2"), WORKING, Scope("default", "ep-2", "bob"))
    assert [e["taskId"] for _, e in drain(one)] == ["t1"]
    seen = drain(every)
    assert [e["taskId"] for _, e in seen] == ["t1", "t2"]
    assert [e["taskId"] for _, e in drain(only_two)] == ["t2"]
    every.close()
    announce(feed, task("t3"), WORKING, Scope("default", "ep-3", "carol"))
    assert [e["taskId"] for _, e in drain(feed.resume(EVERY_ENDPOINT, seen[0][0]))] == ["t2", "t3"]
    assert feed.resume("ep-1", seen[0][0]) is None  # the ids of one feed mean nothing to another


def test_a_final_artifact_announced_before_anyone_watched_comes_with_its_task_end():
    # the gap a snapshot cannot cover: the artifact is announced, a feed client subscribes
    # (its snapshot, read now, shows the task working), then the task ends
    feed = EndpointFeed()
    t = task()
    announce(feed, t, WORKING)
    artifact = t.artifacts.add(artifact_id="a1", name="response")
    artifact.parts.add(text="the answer")
    feed.artifact(SCOPE, t, artifact_event(t, artifact, last_chunk=True), 1)
    assert feed.published == 0  # nobody watched: nothing built
    sub = feed.subscribe("ep-1")
    working_at = t.status.timestamp.ToJsonString()
    announce(feed, t, DONE)
    events = [e for _, e in drain(sub)]
    assert [(e["kind"], e["state"]) for e in events] == [
        ("artifact", "TASK_STATE_WORKING"), ("status", "TASK_STATE_COMPLETED")]
    assert events[0]["timestamp"] == working_at
    assert events[0]["artifactUpdate"]["artifact"]["parts"][0]["text"] == "the answer"
    other = task("t2")
    announce(feed, other, WORKING)
    announce(feed, other, DONE)  # no artifact held for it
    assert [e["kind"] for _, e in drain(sub)] == ["status", "status"]
