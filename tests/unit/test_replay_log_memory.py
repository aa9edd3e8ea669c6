"""A task's replay log keeps its events serialized (an event object costs about ten times
its bytes in the protobuf runtime): what a reconnecting client gets back equals what was
published, generations included, while the log holds only bytes."""

from __future__ import annotations

from a2a.types import Task, TaskState, TaskStatusUpdateEvent

from a2a_gateway.generation import generation_of, set_generation
from a2a_gateway.live.hub import ReplayLimits
from tests.unit.test_live_hub import delta, drain, hub_with


def test_the_log_keeps_bytes_and_a_resume_gets_the_published_events_back() -> None:
    hub, runs, _ = hub_with(ReplayLimits(events=10))
    runs.runs["t1"] = object()
    first = hub.subscribe("t1")
    status = TaskStatusUpdateEvent(task_id="t1", context_id="c")
    status.status.state = TaskState.TASK_STATE_WORKING
    set_generation(status, 2)
    published = [status, delta("t1", "one"), delta("t1", " two"), Task(id="t1", context_id="c")]
    ids = [hub.publish("t1", event) for event in published]

    kept = [entry for _, entry, _ in hub._logs["t1"].events]
    assert [cls for cls, _ in kept] == [type(event) for event in published]
    assert [data for _, data in kept] == [event.SerializeToString() for event in published]

    resumed = hub.resume("t1", ids[0])
    assert resumed is not None
    got = drain(resumed)
    assert [event_id for event_id, _ in got] == ids[1:]
    assert [event for _, event in got] == published[1:]
    assert [type(event) for _, event in got] == [type(event) for event in published[1:]]
    again = drain(hub.resume("t1", ids[1]))  # type: ignore[arg-type]
    assert [event for _, event in again] == published[2:]
    from_start = drain(hub.resume("t1", first.position))  # type: ignore[arg-type]
    assert from_start[0] == (ids[0], status) and generation_of(from_start[0][1]) == 2
