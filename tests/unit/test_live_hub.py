"""The in-process live hub: fan-out, event ids and the replay log behind ``Last-Event-ID``
(``follow`` is ``subscribe`` when there is no other replica)."""

from __future__ import annotations

from typing import Any

from a2a.types import TaskArtifactUpdateEvent, TaskStatusUpdateEvent

from a2a_gateway.live.hub import LiveHub, ReplayLimits


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Runs:
    """``LocalRuns`` with the run of each task set by the test."""

    def __init__(self) -> None:
        self.runs: dict[str, object] = {}

    def run(self, task_id: str) -> Any:
        return self.runs.get(task_id)

    def text_so_far(self, task_id: str) -> None:
        return None

    async def handle_control(self, command: str, task_id: str) -> None:
        pass


def hub_with(limits: ReplayLimits = ReplayLimits()) -> tuple[LiveHub, Runs, Clock]:
    hub, runs, clock = LiveHub(), Runs(), Clock()
    hub.clock = clock
    hub.serve(runs, limits)
    return hub, runs, clock


def delta(task_id: str, text: str) -> TaskArtifactUpdateEvent:
    event = TaskArtifactUpdateEvent(task_id=task_id, context_id="c", append=True)
    event.artifact.artifact_id = "a"
    event.artifact.parts.add(text=text)
    return event


def texts(items: list[tuple[str, Any]]) -> list[str]:
    return ["".join(part.text for part in event.artifact.parts) for _, event in items]


def drain(sub: Any) -> list[tuple[str, Any]]:
    """What a subscription holds right now (it never blocks here)."""
    out = []
    while (item := sub._backlog.take_nowait()) is not None and isinstance(item, tuple):
        out.append(item)
    return out


async def test_in_process_follow_gets_published_events_until_the_task_ends():
    hub = LiveHub()
    followed, subscribed = hub.follow("t"), hub.subscribe("t")
    assert hub.subscriber_count("t") == 2
    event = TaskStatusUpdateEvent(task_id="t", context_id="c")
    hub.publish("t", event)
    hub.end("t")
    got_followed = [e async for e in followed]
    got_subscribed = [e async for e in subscribed]
    assert [e for _, e in got_followed] == [event] == [e for _, e in got_subscribed]
    assert got_followed[0][0] == got_subscribed[0][0]  # one id per event, whoever receives it
    assert hub.subscriber_count("t") == 0


def test_ids_follow_the_subscription_position_and_resume_gives_exactly_what_followed():
    hub, runs, _ = hub_with()
    runs.runs["t"] = object()
    sub = hub.subscribe("t")
    seen = []
    for word in "one two three four five".split():
        hub.publish("t", delta("t", word))
        seen += drain(sub)  # taken at once: nothing to merge
    token = sub.position.rpartition(".")[0]
    assert sub.position == f"{token}.0"
    assert [i for i, _ in seen] == [f"{token}.{n}" for n in range(1, 6)]
    sub.close()
    resumed = hub.resume("t", seen[1][0])
    assert resumed is not None and resumed.position == seen[1][0]
    assert drain(resumed) == seen[2:]  # replayed as logged, one id each
    six = delta("t", "six")
    hub.publish("t", six)  # then live, numbered on
    assert drain(resumed) == [(f"{token}.6", six)]


def test_resume_after_the_last_event_waits_live_and_an_unknown_id_is_a_miss():
    hub, runs, _ = hub_with()
    runs.runs["t"] = object()
    sub = hub.subscribe("t")
    hub.publish("t", delta("t", "one"))
    (last_id, _), = drain(sub)
    resumed = hub.resume("t", last_id)
    assert resumed is not None and drain(resumed) == []
    hub.publish("t", delta("t", "two"))
    assert texts(drain(resumed)) == ["two"]
    token = last_id.rpartition(".")[0]
    hostile = (f"{token}." + "9" * 5000, f"{token}.\u0661", f"{token}.1.1")
    for stale in (
        "",
        "garbage",
        f"{token}.99",
        f"{token}.-1",
        f"{token}x.1",
        "0123456789ab.1",
        f"{token}",
        *hostile,
    ):
        assert hub.resume("t", stale) is None, stale
    assert hub.resume("other-task", last_id) is None


def test_the_log_keeps_the_last_events_only():
    hub, runs, _ = hub_with(ReplayLimits(events=3))
    runs.runs["t"] = object()
    sub = hub.subscribe("t")
    ids = []
    for n in range(10):
        hub.publish("t", delta("t", str(n)))
        ids += [i for i, _ in drain(sub)]
    assert hub.resume("t", ids[5]) is None  # events 8..10 are kept: 7 is gone
    resumed = hub.resume("t", ids[6])
    assert resumed is not None and texts(drain(resumed)) == ["7", "8", "9"]
    assert hub.replay_stats()["events"] == 3


async def test_an_ended_task_replays_its_remainder_until_the_keep_time_runs_out():
    hub, runs, clock = hub_with(ReplayLimits(keep_seconds=30))
    runs.runs["t"] = object()
    sub = hub.subscribe("t")
    ids = []
    for word in ("a", "b", "c"):
        hub.publish("t", delta("t", word))
        ids += [i for i, _ in drain(sub)]
    sub.close()
    hub.end("t")
    runs.runs.pop("t")
    assert not hub.has_listeners("t")
    clock.now += 29
    resumed = hub.resume("t", ids[0])
    assert resumed is not None
    assert texts([item async for item in resumed]) == ["b", "c"]  # and the stream ends
    assert hub.resume("t", ids[-1]) is None  # nothing after the last event of an ended task
    clock.now += 31
    assert hub.resume("t", ids[0]) is None
    assert hub.replay_stats()["logs"] == 0


def test_a_log_lives_without_subscribers_so_nothing_is_lost_while_a_client_is_away():
    hub, runs, clock = hub_with(ReplayLimits(keep_seconds=10))
    runs.runs["t"] = object()
    hub.subscribe("t").close()
    assert hub.has_listeners("t")  # the run keeps publishing
    clock.now += 9
    hub.publish("t", delta("t", "x"))
    clock.now += 9
    assert hub.has_listeners("t")
    clock.now += 2
    hub.subscribe("u")  # any activity sweeps: t was idle for 11 s
    assert not hub.has_listeners("t")


def test_another_run_of_the_task_starts_a_new_log():
    hub, runs, _ = hub_with()
    runs.runs["t"] = object()
    sub = hub.subscribe("t")
    hub.publish("t", delta("t", "first run"))
    (old_id, _), = drain(sub)
    runs.runs["t"] = object()  # e.g. the task went on, here or on another replica
    hub.publish("t", delta("t", "second run"))
    (new_id, _), = drain(sub)
    assert old_id.rpartition(".")[0] != new_id.rpartition(".")[0]
    assert hub.resume("t", old_id) is None
    resumed = hub.resume("t", new_id)
    assert resumed is not None and drain(resumed) == []
    runs.runs.pop("t")  # the run left without ending the task: its log may be incomplete
    assert hub.resume("t", new_id) is None


def test_memory_stays_within_the_byte_budget_dropping_the_least_recently_active():
    budget = 50_000
    hub, runs, _ = hub_with(ReplayLimits(events=1000, max_bytes=budget))
    for n in range(200):
        task_id = f"t{n}"
        runs.runs[task_id] = object()
        hub.subscribe(task_id).close()
        for _ in range(20):
            hub.publish(task_id, delta(task_id, "y" * 100))
        assert hub.replay_stats()["bytes"] <= budget
    kept = hub.replay_stats()["logs"]
    assert 0 < kept < 200
    assert "t199" in hub._logs and "t0" not in hub._logs


def test_no_log_when_replay_is_off():
    hub, runs, _ = hub_with(ReplayLimits(events=0))
    runs.runs["t"] = object()
    sub = hub.subscribe("t")
    hub.publish("t", delta("t", "x"))
    (event_id, _), = drain(sub)
    sub.close()
    assert hub.resume("t", event_id) is None and hub.resume("t", sub.position) is None
    assert not hub.has_listeners("t")
    assert hub.replay_stats() == {"logs": 0, "bytes": 0, "events": 0}


# the cross-replica hub on a LocalRuns, without a database ----------------------------------


class RecordingRuns(Runs):
    def __init__(self) -> None:
        super().__init__()
        self.commands: list[tuple[str, str]] = []

    def text_so_far(self, task_id: str) -> TaskArtifactUpdateEvent | None:
        return delta(task_id, "so far") if task_id in self.runs else None

    async def handle_control(self, command: str, task_id: str) -> None:
        self.commands.append((command, task_id))


async def test_the_postgres_hub_needs_only_local_runs_for_control_watchers_and_pointers():

    import orjson

    from a2a_gateway.live.postgres import PostgresLiveHub
    from a2a_gateway.live.postgres_wire import WATCH_CHANNEL, control_payload
    from a2a_gateway.stores.base import Scope

    class Run:
        scope, version = Scope("tenant", "ep", "alice"), 7

    hub, runs = PostgresLiveHub(store=None, replica_id="a"), RecordingRuns()
    hub.serve(runs)
    runs.runs["t"] = Run()
    hub._on_notify(None, 0, hub.channel, control_payload("b", "cancel", "t"))
    await hub._background.side_tasks_done()
    assert runs.commands == [("cancel", "t")]
    watch = orjson.dumps(
        {"k": "w", "r": "b", "q": 1, "ids": ["t", "elsewhere"], "s": True}
    ).decode()
    hub._on_notify(None, 0, WATCH_CHANNEL, watch)
    assert list(hub._watchers) == ["t"]  # only the task that runs here
    (snapshot,) = [orjson.loads(p) for _, p in hub._outbox]
    assert snapshot["t"] == "t" and snapshot["k"] == "e"
    huge = TaskStatusUpdateEvent(task_id="t", context_id="c")
    huge.status.message.parts.add(text="x" * 20_000)
    hub.publish("t", huge)
    pointer = orjson.loads(hub._outbox[-1][1])
    assert (pointer["f"], pointer["sc"], pointer["v"]) == ("fs", ["tenant", "ep", "alice"], 7)


def test_live_imports_nothing_above_it():
    import ast
    from pathlib import Path

    import a2a_gateway.live as live

    for path in Path(live.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(
                    (
                        "a2a_gateway.tasks",
                        "a2a_gateway.transport",
                        "a2a_gateway.endpoints",
                        "a2a_gateway.app",
                    )
                ), f"{path.name} imports {node.module}"
