"""Following a task that runs on another replica (or on no replica right now).

Live events of such a task arrive through ``LiveHub.follow`` when the hub spans
replicas (PostgreSQL LISTEN/NOTIFY); the store is the ground truth either way: it is
polled at ``interval`` seconds and every durable change the hub did not already
deliver (new state, final artifact) is turned into an event. Events come with ids
as ``(event_id, event)``: the hub's, or for an event read from the store one outside
every replay log (a client reconnecting with it starts from a snapshot). A follower ends at
a terminal state, or — when asked to stop at interruptions — at the first
input-required state written after ``after_version``. A follower whose live events
ended, or were dropped because its client fell behind, goes on from the store alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from a2a.types import Artifact, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

from a2a_gateway.events import INTERRUPTED_STATES, artifact_event, status_event
from a2a_gateway.live.hub import LiveEvent, LiveHub, SubscriberBehind
from a2a_gateway.stores.base import TERMINAL_STATES, Scope, Store


def _status_key(task_or_event: Task | TaskStatusUpdateEvent) -> tuple[int, int, int]:
    ts = task_or_event.status.timestamp
    return (task_or_event.status.state, ts.seconds, ts.nanos)


async def follow_task(
    store: Store,
    hub: LiveHub,
    scope: Scope,
    task: Task,
    version: int,
    *,
    interval: float,
    stop_when_interrupted: bool,
    after_version: int | None = None,
) -> AsyncIterator[tuple[str, LiveEvent]]:
    """Events of ``task`` (already sent to the client at ``version``) until it settles."""
    sub = hub.follow(task.id)
    seen_status = _status_key(task)
    seen_artifacts = {a.artifact_id: _content(a) for a in task.artifacts}
    held: dict[str, Artifact] = {}  # each artifact as the client holds it from live chunks
    live_next: asyncio.Task[tuple[str, LiveEvent]] | None = None
    events: AsyncIterator[tuple[str, LiveEvent]] | None = sub.__aiter__()
    try:
        while True:
            if live_next is None and events is not None:
                live_next = asyncio.ensure_future(anext(events))
            if live_next is None:
                await asyncio.sleep(interval)
            else:
                await asyncio.wait({live_next}, timeout=interval)
            if live_next is not None and live_next.done():
                try:
                    event_id, event = live_next.result()
                except (StopAsyncIteration, SubscriberBehind):
                    event, events = None, None
                live_next = None
                if event is not None:
                    if isinstance(event, TaskStatusUpdateEvent):
                        seen_status = _status_key(event)
                    if isinstance(event, TaskArtifactUpdateEvent):
                        artifact = _apply(held, event)
                        if event.last_chunk:
                            seen_artifacts[artifact.artifact_id] = _content(artifact)
                    yield event_id, event
                    # a live question is a new one: the answer was stored before the follow
                    if _settles(
                        event.status.state if isinstance(event, TaskStatusUpdateEvent) else None,
                        stop_when_interrupted,
                        None,
                        version,
                    ):
                        return
                    continue
            stored = await store.get_task(scope, task.id)
            if stored is None or stored.version == version:
                continue
            version = stored.version
            for artifact in stored.task.artifacts:
                content = _content(artifact)
                if seen_artifacts.get(artifact.artifact_id) != content:
                    seen_artifacts[artifact.artifact_id] = content
                    yield hub.unlogged_id(), artifact_event(task, artifact, last_chunk=True)
            if _status_key(stored.task) != seen_status:
                seen_status = _status_key(stored.task)
                yield hub.unlogged_id(), status_event(stored.task)
            if _settles(stored.task.status.state, stop_when_interrupted, after_version, version):
                return
    finally:
        if live_next is not None:
            live_next.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await live_next
        sub.close()


def _apply(held: dict[str, Artifact], event: TaskArtifactUpdateEvent) -> Artifact:
    """The artifact as a client holds it after ``event``: appended to, or replaced."""
    artifact = held.get(event.artifact.artifact_id)
    if artifact is None or not event.append:
        artifact = held[event.artifact.artifact_id] = Artifact()
        artifact.CopyFrom(event.artifact)
    else:
        artifact.parts.extend(event.artifact.parts)
        if event.artifact.HasField("metadata"):
            artifact.metadata.MergeFrom(event.artifact.metadata)
    return artifact


def _content(artifact: Artifact) -> tuple[str, str, tuple[bytes, ...], bytes]:
    """What an artifact holds, however its text is cut in parts (streamed chunks, or the
    stored one part): name, text, other parts, metadata."""
    text = "".join(p.text for p in artifact.parts if p.WhichOneof("content") == "text")
    others = tuple(p.SerializeToString(deterministic=True) for p in artifact.parts
                   if p.WhichOneof("content") != "text")
    return artifact.name, text, others, artifact.metadata.SerializeToString(deterministic=True)


def _settles(
    state: int | None, stop_when_interrupted: bool, after_version: int | None, version: int
) -> bool:
    if state is None:
        return False
    if state in TERMINAL_STATES:
        return True
    if stop_when_interrupted and state in INTERRUPTED_STATES:
        # after_version holds the answer, WORKING: a question written after it is a new one
        return after_version is None or version > after_version
    return False
