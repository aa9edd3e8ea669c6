"""Several gateway replicas on one PostgreSQL database (LISTEN/NOTIFY live path, recovery).

Process tests start real gateway processes (``python -m a2a_gateway serve``) on a fresh
migrated database and talk to them with the a2a-sdk client:

* stream on A, subscribe on B: B gets the live chunks and the final state, with B's
  store polling set far beyond the test's bounds (only NOTIFY can deliver in time);
* cancel on C: A's run stops at once (its lease check is 20 s away) and its stream
  ends CANCELED;
* quotas: two replicas admit an endpoint's task window once (counted in the database) and a
  concurrency slot held on A refuses on B until the task ends;
* kill -9 of the replica running a task: another replica re-attaches to the backend
  run and completes the task with the full output;
* PostgreSQL stopped during a run: ``/readyz`` and requests answer 503 with a JSON
  error while it is down, and the replicas recover by themselves when it is back.

In-process tests cover payloads above the NOTIFY limit, a lost LISTEN connection and answers
sent to B for a run still open on A (``tests/replicas/answered_elsewhere``).
They need ``A2A_TEST_POSTGRES_DSN`` (skipped without it, failing when ``CI=true``);
the payload-encoding tests at the end do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from a2a.types import (
    Artifact,
    GetTaskRequest,
    Part,
    SubscribeToTaskRequest,
    TaskArtifactUpdateEvent,
    TaskState,
)

from a2a_gateway.live.postgres import PostgresLiveHub
from a2a_gateway.live.postgres_wire import PAYLOAD_LIMIT, LiveWire, split_utf8
from tests.replicas.answered_elsewhere import (
    answer_on_b_joins_the_owners_history,
    answers_on_the_owner_and_on_b_at_once_one_wins,
    serve_asks_twice,
    two_answers_at_one_generation_one_wins,
)
from tests.replicas.cluster import PgControl, replica_set
from tests.replicas.fake_backend import FakeBackend, big_text
from tests.replicas.scenarios import (
    artifact_updates,
    cancel_on_c_stops_the_run_on_a_at_once,
    collect,
    following,
    kill_9_of_the_owner_another_replica_completes,
    quotas_are_counted_once_for_the_fleet,
    subscribe_on_b_gets_live_chunks_and_the_whole_answer,
)
from tests.stores.pg_support import admin_dsn, fresh_database
from tests.support.harness import running_gateway
from tests.support.messages import send_body, send_request
from tests.support.streams import final_state, rebuild
from tests.support.waiting import eventually

COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
ALLOW_TESTS = ["handlers.", "tests."]


@pytest.fixture
def postgres() -> str:
    """The test cluster's DSN (skips without one, fails in CI)."""
    return admin_dsn()


# three processes ---------------------------------------------------------------------


async def test_stream_on_a_subscribe_on_b_gets_live_chunks_and_final(postgres, tmp_path):
    # B polls the store every 30 s: within the bounds only NOTIFY can deliver
    async with replica_set(
        tmp_path, ["a", "b"], lease_seconds=60, remote_poll_seconds=30
    ) as rs:
        await subscribe_on_b_gets_live_chunks_and_the_whole_answer(rs)


async def test_cancel_on_c_stops_the_run_on_a_at_once(postgres, tmp_path):
    # leases of 60 s: A's lease check (every 20 s) cannot be what stops the run
    async with replica_set(
        tmp_path, ["a", "b", "c"], lease_seconds=60, remote_poll_seconds=30
    ) as rs:
        await cancel_on_c_stops_the_run_on_a_at_once(rs)


async def test_quotas_are_counted_once_for_two_replicas(postgres, tmp_path):
    async with replica_set(
        tmp_path, ["a", "b"], lease_seconds=60, remote_poll_seconds=30
    ) as rs:
        await quotas_are_counted_once_for_the_fleet(rs)


async def test_kill_9_of_the_owner_another_replica_completes_with_full_output(postgres, tmp_path):
    async with FakeBackend() as backend, replica_set(
        tmp_path, ["a", "b", "c"], lease_seconds=2, remote_poll_seconds=0.3
    ) as rs:
        await kill_9_of_the_owner_another_replica_completes(rs, backend)


async def test_postgres_stopped_during_a_run_503_then_recovery(postgres, tmp_path):
    pg = await PgControl.discover()
    if pg is None:
        pytest.skip("cannot stop and start the PostgreSQL test cluster from here")
    async with FakeBackend() as backend, replica_set(
        tmp_path, ["a", "b"], lease_seconds=2, remote_poll_seconds=0.3
    ) as rs:
        ep = await rs.add_endpoint(
            "tests.replicas.fake_backend:FakeBackendHandler", backend_url=backend.url, delay=0.1
        )
        echo = await rs.add_endpoint("handlers.echo:EchoHandler", delay=0)
        words = " ".join(f"part{i}" for i in range(30))
        async with rs.client("a", ep, streaming=False) as on_a:
            started = [e async for e in on_a.send_message(send_request(words, immediately=True))]
        task_id = started[0].task.id
        await eventually(lambda: bool(backend.runs), timeout=5, what="the backend run")
        (run,) = backend.runs.values()
        assert run.status == "running"

        body = send_body()
        headers = {"A2A-Version": "1.0"}
        pg.stop()
        try:
            async with httpx.AsyncClient(timeout=20) as http:
                for name in ("a", "b"):
                    url = f"{rs[name].base_url}/readyz"
                    await _until_status(http, url, 503, 10)
                t0 = time.monotonic()
                reply = await http.post(
                    f"{rs['a'].base_url}/{echo}/a2a", json=body, headers=headers
                )
                took = time.monotonic() - t0
                assert reply.status_code == 503, reply.text
                assert reply.headers.get("Retry-After")
                error = reply.json()["error"]
                assert "unavailable" in error["message"] and "Traceback" not in reply.text
                assert took < 15
                rest = await http.get(
                    f"{rs['b'].base_url}/{ep}/a2a/rest/tasks/{task_id}", headers=headers
                )
                assert rest.status_code == 503 and "unavailable" in rest.json()["error"]["message"]
                # the backend finishes while the database is down: the owner cannot
                # record it, and the task must not stay WORKING
                await eventually(
                    lambda: run.status == "completed", timeout=15, what="the backend run to finish"
                )
        finally:
            pg.start()
        async with httpx.AsyncClient(timeout=20) as http:
            for name in ("a", "b"):
                await _until_status(http, f"{rs[name].base_url}/readyz", 200, 30)
        full = f"backend: {words}"
        async with rs.client("b", ep, streaming=False) as on_b:
            try:
                task = await eventually(lambda: on_b.get_task(GetTaskRequest(id=task_id)),
                                        until=lambda t: t.status.state == COMPLETED,
                                        interval=0.2, what="the task completes after the outage")
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{rs.logs()}") from None
        assert task.artifacts[0].parts[0].text == full
        assert len(backend.runs) == 1
        for name in ("a", "b"):
            async with rs.client(name, echo, streaming=False) as client:
                answer = [e async for e in client.send_message(send_request("after the outage"))]
            assert answer[-1].task.status.state == COMPLETED


async def _until_status(http: httpx.AsyncClient, url: str, status: int, timeout: float) -> None:
    async def answer() -> int | httpx.HTTPError:
        try:
            response = await http.get(url, timeout=5)
        except httpx.HTTPError as exc:
            return exc
        if response.status_code == 503 == status:
            assert response.json()["status"] == "unavailable"
        return response.status_code

    await eventually(answer, until=lambda last: last == status, timeout=timeout, interval=0.1,
                     what=f"{url} answers {status}")


# in-process: payload limits, lost listener ----------------------------------------------


@contextlib.asynccontextmanager
async def two_replicas(url: str, **settings: Any) -> AsyncIterator[tuple[Any, Any]]:
    """Replicas a and b on ``url``, in process; leases and store polls far beyond the tests'
    bounds, so only NOTIFY can deliver in time."""
    common = {"lease_seconds": 60, "remote_poll_seconds": 30, **settings}
    async with running_gateway(url, replica_id="a", **common) as a, \
            running_gateway(url, replica_id="b", **common) as b:
        yield a, b


async def test_an_answer_sent_to_b_joins_the_owners_history_and_of_two_at_once_one_wins(
    postgres, monkeypatch
):
    serve_asks_twice(monkeypatch)
    # B's follow may start after the owner's first events (the backend goes on at resume):
    # those come from the store, so it is polled every second here
    async with fresh_database() as url, two_replicas(url, remote_poll_seconds=1) as (a, b):
        await answer_on_b_joins_the_owners_history(a, b)
        await two_answers_at_one_generation_one_wins(a, b)
        await answers_on_the_owner_and_on_b_at_once_one_wins(a, b)


async def test_oversized_deltas_are_split_and_oversized_final_is_fetched(postgres):
    sizes = {"delta_bytes": 20_000, "final_bytes": 30_000, "deltas": 3, "delay": 0.3}
    async with fresh_database() as url, two_replicas(url, handler_allowlist=ALLOW_TESTS) as (a, b):
        ep = await a.add_endpoint("tests.replicas.fake_backend:BigTextHandler", settings=sizes)
        async with a.client(ep) as on_a, b.client(ep) as on_b:
            stream = on_a.send_message(send_request("big"))
            first = await anext(stream)
            remote: list[Any] = []
            async with asyncio.timeout(15):
                await collect(on_b.subscribe(SubscribeToTaskRequest(id=first.task.id)), remote)
            _ = [e async for e in stream]
    streamed = "".join(big_text(sizes["delta_bytes"], seed=i) for i in range(sizes["deltas"]))
    updates = artifact_updates(remote)
    chunks = [u for u in updates if not u.last_chunk]
    # split pieces arriving together may wait as one chunk, each piece one of its parts
    assert sum(len(u.artifact.parts) for u in chunks) > sizes["deltas"], "the deltas were not split"
    assert rebuild([e for e in remote if not e.artifact_update.last_chunk]) == streamed
    final = updates[-1]
    assert final.last_chunk and final.artifact.parts[0].text == big_text(
        sizes["final_bytes"], seed=99
    )
    assert final_state(remote) == COMPLETED


async def test_a_task_nobody_follows_elsewhere_sends_no_notify(postgres):
    async with fresh_database() as url, running_gateway(url, replica_id="a") as a, \
            running_gateway(url, replica_id="b") as b:
        ep = await a.add_endpoint(settings={"delay": 0.01})
        async with a.client(ep) as on_a, a.client(ep, streaming=False) as blocking:
            streamed = [e async for e in on_a.send_message(send_request("one two three four"))]
            answered = [e async for e in blocking.send_message(send_request("five six"))]
        await asyncio.sleep(0.3)  # time for the send loop to flush anything queued
        # the endpoint event feed's lifecycle events go out on their own channel, all of them
        # while a replica has not yet heard every replica's feed watches (it just started):
        # three for the streamed task (WORKING, artifact, end), two for the blocking one,
        # which is written once, at its end (its artifact, its end)
        relays = (a.gateway.hub.feed_relay.stats, b.gateway.hub.feed_relay.stats)
        feed = tuple(r["sent"] for r in relays)
        sent = tuple(
            hub.gateway.hub.stats["sent"] - r["sent"] - r["announced"]
            for hub, r in zip((a, b), relays)
        )
    assert final_state(streamed) == COMPLETED
    assert answered[-1].task.status.state == COMPLETED
    assert sent == (0, 0)
    assert feed == (5, 0)


async def _followed_on_b_through(a: Any, b: Any, disruption: Any) -> list[Any]:
    """A 160-word stream on A, followed on B; once B has live chunks, ``disruption()``
    runs. B's follower must then get more than three live chunks more (not only the store's
    poll, 30 s away) and the whole answer; its events are returned."""
    ep = await a.add_endpoint(settings={"delay": 0.05})
    words = " ".join(f"w{i}" for i in range(160))
    async with a.client(ep) as on_a, b.client(ep) as on_b:
        stream = on_a.send_message(send_request(words))
        first = await anext(stream)
        remote: list[Any] = []
        async with following(
            on_b.subscribe(SubscribeToTaskRequest(id=first.task.id)), remote
        ) as follower:
            await eventually(
                lambda: len(artifact_updates(remote)) >= 3, timeout=10, what="live chunks on B"
            )
            await disruption()
            before = len(artifact_updates(remote))
            async with asyncio.timeout(15):
                await follower
        _ = [e async for e in stream]
    assert len(artifact_updates(remote)) > before + 3, "no live chunks after the disruption"
    assert artifact_updates(remote)[-1].last_chunk and rebuild(remote) == f"echo: {words}"
    assert final_state(remote) == COMPLETED
    return remote


async def _terminate(where: str, *args: Any) -> int:
    """Terminate PostgreSQL backends (``where``: a condition on pg_stat_activity); how many."""
    admin = await asyncpg.connect(admin_dsn())
    try:
        return await admin.fetchval(
            f"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE {where}", *args
        )
    finally:
        await admin.close()


async def test_lost_listener_reconnects_and_the_follower_still_finishes(postgres):
    async with fresh_database() as url, two_replicas(url) as (a, b):
        async def kill_every_connection() -> None:
            name = url.rsplit("/", 1)[-1]
            killed = await _terminate("datname = $1 AND pid <> pg_backend_pid()", name)
            assert killed >= 2  # at least both LISTEN connections

        await _followed_on_b_through(a, b, kill_every_connection)
        assert a.gateway.hub.stats["connects"] >= 2 and b.gateway.hub.stats["connects"] >= 2


async def test_a_snapshot_request_the_owner_missed_is_asked_again(postgres, monkeypatch):
    """B's listener comes back and asks A for a snapshot while A cannot hear it (A's
    listener was down too): B's follower takes none of A's events until a snapshot comes, so
    B asks again at its next refresh instead of waiting for the store's poll."""
    async with fresh_database() as url, two_replicas(url) as (a, b):
        missed: list[dict] = []
        on_watch = a.gateway.hub._on_watch

        def deaf_to_the_first_snapshot_request(message: dict) -> None:
            if message.get("s") and not missed:
                missed.append(message)
                return
            on_watch(message)

        async def kill_b_s_listener() -> None:
            missed.clear()  # B's first snapshot request came with its follow: heard
            await _terminate("pid = $1", b.gateway.hub._listener.get_server_pid())
            await eventually(lambda: b.gateway.hub.stats["connects"] >= 2 and missed,
                             timeout=10, what="B's snapshot request after it reconnected")

        monkeypatch.setattr(a.gateway.hub, "_on_watch", deaf_to_the_first_snapshot_request)
        await _followed_on_b_through(a, b, kill_b_s_listener)


async def test_a_snapshot_b_did_not_ask_for_reaches_its_followers(postgres):
    """The owner counts B as a new watcher while B's follower is streaming (it took the task
    over after a kill, or had forgotten B's watch): what it streamed before B's next refresh
    never came to B, so its snapshot goes to B's followers and the text has no gap."""
    async with fresh_database() as url, two_replicas(url) as (a, b):
        async def a_forgets_b() -> None:
            await asyncio.sleep(2.5)  # past the time B's own snapshot request is answered in
            watchers = a.gateway.hub._watchers
            (task_id,) = watchers
            del watchers[task_id]  # what a replica that took the task over knows of B
            await eventually(lambda: task_id in watchers, timeout=10, what="B's refresh")

        await _followed_on_b_through(a, b, a_forgets_b)


def _concatenated(events: list[Any]) -> str:
    """The text a naive client shows: every artifact update's text, appended or not."""
    return "".join(p.text for u in artifact_updates(events) for p in u.artifact.parts)


async def test_a_second_follower_on_b_gets_the_text_so_far_and_the_first_not_again(postgres):
    async with fresh_database() as url, two_replicas(url) as (a, b):
        ep = await a.add_endpoint(settings={"delay": 0.05})
        words = " ".join(f"w{i}" for i in range(60))
        async with a.client(ep) as on_a, b.client(ep) as first_b, b.client(ep) as second_b:
            stream = on_a.send_message(send_request(words))
            task_id = (await anext(stream)).task.id
            first: list[Any] = []
            second: list[Any] = []
            following = [asyncio.create_task(
                collect(first_b.subscribe(SubscribeToTaskRequest(id=task_id)), first)
            )]
            try:
                await eventually(lambda: len(artifact_updates(first)) >= 3, timeout=10,
                                 what="live chunks on B")
                following.append(asyncio.create_task(
                    collect(second_b.subscribe(SubscribeToTaskRequest(id=task_id)), second)
                ))
                async with asyncio.timeout(15):
                    await asyncio.gather(*following)
            finally:
                for follower in following:
                    follower.cancel()
            _ = [e async for e in stream]
    answer = f"echo: {words}"
    # the second follower starts with the text so far (append: false), then the live deltas
    assert not artifact_updates(second)[0].append
    assert len(artifact_updates(second)[0].artifact.parts[0].text) > 0
    for events in (first, second):
        assert rebuild(events) == answer and final_state(events) == COMPLETED
        assert _concatenated(events) == answer  # no text twice, even for a naive client


async def test_a_snapshot_b_asked_for_is_known_as_such_however_late_it_comes(
    postgres, monkeypatch
):
    """A's answers to B's snapshot requests come later than B's refresh (NOTIFY held up): B
    asks again meanwhile, and the answer to that second request comes after the first one
    was taken. The owner says the snapshot was asked for, so B's follower does not take it
    again: a client that concatenates chunks shows the text once."""
    async with fresh_database() as url, two_replicas(url) as (a, b):
        monkeypatch.setattr(b.gateway.hub, "_refresh", 0.5)
        loop, on_watch = asyncio.get_running_loop(), a.gateway.hub._on_watch

        def slow_to_answer(message: dict) -> None:
            if message.get("s"):
                loop.call_later(3.0, on_watch, message)
            else:
                on_watch(message)

        monkeypatch.setattr(a.gateway.hub, "_on_watch", slow_to_answer)
        ep = await a.add_endpoint(settings={"delay": 0.05})
        words = " ".join(f"w{i}" for i in range(200))  # 10 s: past the late answers
        async with a.client(ep) as on_a, b.client(ep) as on_b:
            stream = on_a.send_message(send_request(words))
            task_id = (await anext(stream)).task.id
            remote: list[Any] = []
            async with asyncio.timeout(30):
                await collect(on_b.subscribe(SubscribeToTaskRequest(id=task_id)), remote)
            _ = [e async for e in stream]
    answer = f"echo: {words}"
    assert rebuild(remote) == answer and final_state(remote) == COMPLETED
    assert _concatenated(remote) == answer


# interest (no database) ------------------------------------------------------------------


class _NoRuns:
    """``LocalRuns`` of a replica that runs nothing."""

    def run(self, task_id: str) -> None:
        return None


def _queued(hub: PostgresLiveHub) -> list[dict[str, Any]]:
    return [orjson.loads(payload) for _, payload in hub._outbox]


async def test_follow_announces_interest_at_once_and_subscribe_never_does():
    hub = PostgresLiveHub(store=None, replica_id="b")
    hub.serve(_NoRuns())
    local = hub.subscribe("t-local")
    await asyncio.sleep(0.1)  # a short while in which nothing may be announced
    assert _queued(hub) == []
    follower = hub.follow("t-remote")
    (watch,) = _queued(hub)
    assert (watch["k"], watch["ids"], watch["s"]) == ("w", ["t-remote"], True)
    follower.close()
    local.close()
    assert [(m["k"], m["ids"]) for m in _queued(hub)] == [("w", ["t-remote"]), ("u", ["t-remote"])]


async def test_a_snapshot_is_taken_as_asked_for_when_its_owner_says_so_or_else_by_when():
    hub = PostgresLiveHub(store=None, replica_id="b")
    hub.serve(_NoRuns())
    follower = hub.follow("t")  # asks the owner for a snapshot
    text_so_far = TaskArtifactUpdateEvent(task_id="t", artifact=Artifact(
        artifact_id="r", parts=[Part(text="text so far")]))
    owner = LiveWire()

    def delivered(payloads: list[str]) -> bool:
        before = follower._backlog.bytes
        for payload in payloads:
            hub._deliver(orjson.loads(payload))
        return follower._backlog.bytes > before

    assert delivered(owner.snapshot("t", text_so_far, asked=True))  # the answer it waits for
    assert not delivered(owner.snapshot("t", text_so_far, asked=True))  # it has that text
    assert delivered(owner.snapshot("t", text_so_far, asked=False))  # what it missed meanwhile
    # an owner of an earlier version does not say: judged by when this replica last asked
    unsaid = [orjson.dumps({k: v for k, v in orjson.loads(p).items() if k != "x"}).decode()
              for p in owner.snapshot("t", text_so_far, asked=True)]
    assert not delivered(unsaid)  # asked within the last refresh
    hub._asked["t"] -= 10
    assert delivered(unsaid)
    follower.close()


# payload encoding (no database) -----------------------------------------------------------


def test_split_utf8_never_cuts_a_character_and_respects_the_limit():
    text = big_text(50_000)
    for limit in (1, 3, 7, 100, 5000):
        pieces = split_utf8(text[:2000] if limit < 10 else text, limit)
        assert "".join(pieces) == (text[:2000] if limit < 10 else text)
        assert all(len(p.encode()) <= max(limit, 4) for p in pieces)


def test_every_payload_fits_the_notify_limit():
    from a2a.types import Artifact, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

    wire = LiveWire()
    delta = TaskArtifactUpdateEvent(task_id="t", context_id="c", append=True)
    delta.artifact.CopyFrom(
        Artifact(artifact_id="x", name="response", parts=[Part(text=big_text(100_000))])
    )
    payloads = wire.event("t", delta)
    assert len(payloads) > 10 and all(len(p.encode()) < PAYLOAD_LIMIT for p in payloads)
    final = TaskArtifactUpdateEvent(task_id="t", context_id="c", last_chunk=True)
    final.artifact.CopyFrom(delta.artifact)
    (pointer,) = wire.event("t", final)
    assert len(pointer.encode()) < 300 and '"k":"fa"' in pointer
    status = TaskStatusUpdateEvent(task_id="t", context_id="c")
    status.status.state = TaskState.TASK_STATE_FAILED
    status.status.message.parts.add(text=big_text(20_000))
    (slim,) = wire.event("t", status)
    assert len(slim.encode()) < 1000 and '"f":"fs"' in slim
