"""The in-process live hub: ``follow`` is ``subscribe`` when there is no other replica."""

from __future__ import annotations

from a2a.types import TaskStatusUpdateEvent

from a2a_gateway.live.hub import LiveHub


async def test_in_process_follow_gets_published_events_until_the_task_ends():
    hub = LiveHub()
    followed, subscribed = hub.follow("t"), hub.subscribe("t")
    assert hub.subscriber_count("t") == 2
    event = TaskStatusUpdateEvent(task_id="t", context_id="c")
    hub.publish("t", event)
    hub.end("t")
    assert [e async for e in followed] == [event]
    assert [e async for e in subscribed] == [event]
    assert hub.subscriber_count("t") == 0
