"""SIGTERM to a gateway process with a stream and a blocking SendMessage in flight.

Both clients get a final answer from the stopping replica within its grace period (the
stream a status event of the task's current state with ``kind: gateway_stopping``, the
blocking caller the task as it stands), ``/readyz`` and new requests answer 503 at
once, and the process exits 0 — on one process, where the next start fails the
handed-over tasks with the text streamed so far, and on two replicas on PostgreSQL,
where the other replica re-attaches the backend runs (a test backend, and the real
Hermes) and completes them (and a subscription on the stopping replica to a task run
elsewhere ends the same way).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from typing import Any

import asyncpg
import httpx
from a2a.types import GetTaskRequest, SubscribeToTaskRequest, TaskState

from tests.integration.test_postgres_replicas import artifact_updates, collect, final_state, rebuild
from tests.replicas.cluster import replica_set
from tests.replicas.fake_backend import FakeBackend
from tests.stores import pg_support
from tests.support.cli_process import run_cli, serving
from tests.support.harness import RunningGateway, require_env
from tests.support.messages import send_request
from tests.support.waiting import eventually

WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED
FAILED = TaskState.TASK_STATE_FAILED
GRACE = 2.0
KUBERNETES_GRACE = 30.0
STOPPING_NOTE = {"kind": "gateway_stopping"}


def stopping_note(event: Any) -> dict[str, Any] | None:
    return dict(event.status_update.metadata) if event.HasField("status_update") else None


async def until_text(stream: Any, into: list[Any], words: int) -> None:
    """Read ``stream`` into ``into`` until ``words`` words were streamed."""
    while len(rebuild(into).split()) < words:
        into.append(await anext(stream))


async def test_sigterm_answers_a_stream_and_a_blocking_call_then_exits_0_and_keeps_the_text(
    tmp_path,
):
    added = run_cli("endpoints", "add", "--name", "slow", "--handler", "handlers.echo:EchoHandler",
                    "--set", "delay=0.2", "--public", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    ep = added.stdout.strip().splitlines()[-1]
    words = " ".join(f"w{i}" for i in range(500))  # 100 s of work: only the shutdown ends it
    env = {"A2A_GATEWAY_SHUTDOWN_GRACE_SECONDS": str(GRACE)}
    procs: list[asyncio.subprocess.Process] = []
    async with serving("serve", cwd=tmp_path, process=procs, **env) as listening:
        gateway = RunningGateway(listening[1], None)  # type: ignore[arg-type]
        async with (
            gateway.client(ep) as streaming,
            gateway.client(ep, streaming=False) as blocking,
            httpx.AsyncClient(base_url=listening[1], timeout=10) as http,
        ):
            stream = streaming.send_message(send_request(words))
            seen = [await anext(stream)]
            await until_text(stream, seen, 3)
            waiting = asyncio.create_task(anext(blocking.send_message(send_request(words))))
            await eventually(lambda: _running(http, 2), timeout=20, what="both runs under way")
            sigterm = time.monotonic()
            procs[0].send_signal(signal.SIGTERM)
            ready = await eventually(
                lambda: _status(http, "/readyz", 503), timeout=10, what="not ready"
            )
            refused = await http.post(
                f"/{ep}/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"}
            )
            async with asyncio.timeout(GRACE + 20):
                rest = [e async for e in stream]
                answer = await waiting
            answered = time.monotonic() - sigterm
            async with asyncio.timeout(KUBERNETES_GRACE):
                code = await procs[0].wait()
            exited = time.monotonic() - sigterm
    print(f"SIGTERM to answers {answered:.1f}s, to exit {exited:.1f}s")
    assert ready and refused.status_code == 503 and refused.headers["Retry-After"] == "1"
    assert (
        refused.json()["error"]["code"] == -32603
        and "shutting down" in refused.json()["error"]["message"]
    )
    assert stopping_note(rest[-1]) == STOPPING_NOTE and final_state(rest) == WORKING
    assert answer.task.status.state == WORKING and answer.task.id != seen[0].task.id
    assert code == 0
    streamed = rebuild(seen + rest)

    # the next start takes the handed-over tasks (the echo cannot re-attach): failed as
    # lost, with the text streamed so far kept as a partial response
    async with serving("serve", cwd=tmp_path) as listening:
        gateway = RunningGateway(listening[1], None)  # type: ignore[arg-type]
        async with gateway.client(ep, streaming=False) as client:
            lost = await client.get_task(GetTaskRequest(id=seen[0].task.id))
    assert (
        lost.status.state == FAILED and lost.status.message.parts[0].text == "gateway instance lost"
    )
    (partial,) = lost.artifacts
    assert partial.metadata["partial"] is True
    assert partial.parts[0].text.startswith(streamed) and len(partial.parts[0].text.split()) > 3


async def test_a_second_sigterm_ends_the_grace_period_at_once_and_still_hands_over(tmp_path):
    added = run_cli("endpoints", "add", "--name", "slow", "--handler", "handlers.echo:EchoHandler",
                    "--set", "delay=0.2", "--public", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    ep = added.stdout.strip().splitlines()[-1]
    grace = 120.0  # longer than the test may take: only the second signal can end it
    output: list[str] = []
    procs: list[asyncio.subprocess.Process] = []
    async with serving(
        "serve",
        cwd=tmp_path,
        process=procs,
        output=output,
        A2A_GATEWAY_SHUTDOWN_GRACE_SECONDS=str(grace),
        A2A_GATEWAY_LOG_LEVEL="info",
    ) as listening:
        gateway = RunningGateway(listening[1], None)  # type: ignore[arg-type]
        async with (
            gateway.client(ep) as streaming,
            httpx.AsyncClient(base_url=listening[1], timeout=10) as http,
        ):
            stream = streaming.send_message(send_request(" ".join(f"w{i}" for i in range(2000))))
            seen = [await anext(stream)]
            await until_text(stream, seen, 3)
            procs[0].send_signal(signal.SIGTERM)
            assert await eventually(
                lambda: _status(http, "/readyz", 503), timeout=10, what="draining"
            )
            await asyncio.sleep(1.0)
            assert procs[0].returncode is None  # the first signal alone waits for the grace period
            procs[0].send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                rest = [e async for e in stream]
                code = await procs[0].wait()
    assert stopping_note(rest[-1]) == STOPPING_NOTE and final_state(rest) == WORKING
    assert code == 0
    lines = "".join(output).splitlines()  # the output comes in chunks, not lines
    (handing_over,) = [json.loads(line) for line in lines if "shutdown_handing_over" in line]
    assert handing_over["hurried"] is True and handing_over["running_tasks"] == 1


async def test_sigterm_on_one_replica_the_other_completes_the_run_at_once(tmp_path):
    require_env(pg_support.ENV_VAR)
    # leases of 300 s: B's own lease check comes every 100 s, so only A's released leases
    # and its "released" notice let B take the tasks over within the test's bounds
    async with FakeBackend() as backend, replica_set(
        tmp_path, ["a", "b"], lease_seconds=300, remote_poll_seconds=0.3,
        extra_env={"A2A_GATEWAY_SHUTDOWN_GRACE_SECONDS": str(GRACE)},
    ) as rs:
        ep = await rs.add_endpoint("tests.replicas.fake_backend:FakeBackendHandler",
                                   backend_url=backend.url, delay=0.1)
        words = " ".join(f"part{i}" for i in range(150))  # about 15 s of backend work
        async with rs.client("a", ep) as on_a, rs.client("a", ep, streaming=False) as blocking_a, \
                rs.client("b", ep) as on_b, rs.client("b", ep, streaming=False) as get_b:
            stream = on_a.send_message(send_request(words))
            seen = [await anext(stream)]
            task_id = seen[0].task.id
            await until_text(stream, seen, 3)
            waiting = asyncio.create_task(anext(blocking_a.send_message(send_request(words))))
            on_b_stream = on_b.send_message(send_request(words))  # runs on B, followed from A
            run_on_b = (await anext(on_b_stream)).task.id
            from_a: list[Any] = []
            following = asyncio.create_task(
                collect(on_a.subscribe(SubscribeToTaskRequest(id=run_on_b)), from_a)
            )
            await eventually(
                lambda: len(backend.runs) == 3 and artifact_updates(from_a),
                timeout=20,
                what="three backend runs, one followed from A",
            )
            sigterm = time.monotonic()
            rs["a"].proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(GRACE + 20):
                rest = [e async for e in stream]
                answer = await waiting
                await following
            answered = time.monotonic() - sigterm
            # the streaming client follows its task on B, as the last event suggests
            remote: list[Any] = []
            resubscribed = asyncio.create_task(
                collect(on_b.subscribe(SubscribeToTaskRequest(id=task_id)), remote)
            )
            code = await asyncio.to_thread(rs["a"].proc.wait, KUBERNETES_GRACE)
            exited = time.monotonic() - sigterm
            # B looks for expired leases when A says it released them (B may complete it at once)
            await eventually(
                lambda: _owner(rs.store_url, task_id),
                until=lambda owner: owner != "a",
                timeout=30,
                what="A's task taken over",
            )
            claimed = time.monotonic() - sigterm
            async with asyncio.timeout(60):
                await resubscribed
            taken_over = time.monotonic() - sigterm
            blocked = await eventually(
                lambda: _task_state(get_b, answer.task.id, COMPLETED),
                timeout=60,
                what="blocking task completed",
            )
            async with asyncio.timeout(60):
                on_b_events = [e async for e in on_b_stream]
    print(
        f"SIGTERM to answers {answered:.1f}s, to exit {exited:.1f}s, to B's claim {claimed:.1f}s, "
        f"to completion on B {taken_over:.1f}s"
    )
    assert stopping_note(rest[-1]) == STOPPING_NOTE and final_state(rest) == WORKING
    assert answer.task.status.state == WORKING
    assert stopping_note(from_a[-1]) == STOPPING_NOTE and final_state(from_a) == WORKING
    assert final_state(on_b_events) == COMPLETED  # B's own run never noticed A stopping
    assert code == 0
    assert len(backend.runs) == 3, "a backend run was started again instead of re-attached"
    full = f"backend: {words}"
    assert all(run.output == full for run in backend.runs.values())
    assert (
        final_state(remote) == COMPLETED
        and artifact_updates(remote)[-1].last_chunk
        and rebuild(remote) == full
    )
    assert blocked.artifacts[0].parts[0].text == full and not blocked.artifacts[0].metadata


async def _running(http: httpx.AsyncClient, count: int) -> bool:
    ready = await http.get("/readyz")
    return ready.status_code == 200 and ready.json()["running_tasks"] >= count


async def _status(http: httpx.AsyncClient, path: str, status: int) -> bool:
    return (await http.get(path)).status_code == status


async def _owner(store_url: str, task_id: str) -> str | None:
    conn = await asyncpg.connect(store_url)
    try:
        return await conn.fetchval("SELECT owner FROM tasks WHERE id = $1", task_id)
    finally:
        await conn.close()


async def _task_state(client: Any, task_id: str, state: int) -> Any:
    task = await client.get_task(GetTaskRequest(id=task_id))
    return task if task.status.state == state else None


async def test_sigterm_during_a_real_hermes_run_the_other_replica_reattaches_and_completes(
    tmp_path,
):
    hermes_url = require_env("A2A_TEST_HERMES_URL")
    require_env("A2A_TEST_HERMES_KEY")
    require_env("A2A_TEST_LLM_URL")
    require_env(pg_support.ENV_VAR)
    async with replica_set(
        tmp_path, ["a", "b"], lease_seconds=300, remote_poll_seconds=0.3,
        extra_env={"A2A_GATEWAY_SHUTDOWN_GRACE_SECONDS": str(GRACE)},
    ) as rs:
        ep = await rs.add_endpoint(
            "handlers.hermes:HermesAgentHandler",
            hermes_api_url=hermes_url,
            hermes_api_key="env:A2A_TEST_HERMES_KEY",
            poll_interval_seconds=0.2,
        )
        async with rs.client("a", ep) as on_a, rs.client("b", ep, streaming=False) as on_b:
            stream = on_a.send_message(
                send_request(f"FAKE_SLOW words=60 delay=0.2 {uuid.uuid4().hex[:10]}")
            )
            seen = [await anext(stream)]
            await until_text(stream, seen, 3)
            rs["a"].proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(GRACE + 20):
                rest = [e async for e in stream]
            code = await asyncio.to_thread(rs["a"].proc.wait, KUBERNETES_GRACE)
            done = await eventually(
                lambda: _task_state(on_b, seen[0].task.id, COMPLETED),
                timeout=60,
                what="the Hermes task completed on B",
            )
    assert stopping_note(rest[-1]) == STOPPING_NOTE and code == 0
    assert done.artifacts[0].parts[0].text == " ".join(f"slow{i}" for i in range(60))
