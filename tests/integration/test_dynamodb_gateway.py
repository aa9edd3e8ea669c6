"""The gateway end to end on DynamoDB (moto in server mode) with the real a2a-sdk client.

Replica ``a`` runs in this process; replica ``b`` is a second gateway *process*
(``python -m a2a_gateway serve``) on the same tables. The tables come from ``migrate`` and the
endpoint from ``endpoints add``, through the command line, as an operator would do it. What one
gateway does on DynamoDB is in ``test_gateway_every_store.py``, with the other stores.
There is no live path between processes on DynamoDB: a subscriber on ``b`` receives the task,
then the durable changes (final artifact, final state) by polling the store every
``A2A_GATEWAY_REMOTE_POLL_SECONDS``.

Every test gets its own table prefix, dropped afterwards. The moto server is
``A2A_TEST_DYNAMODB_ENDPOINT`` (CI's, ``.ci/services/05-moto.sh``), else one the run starts itself
(``tests/stores/dynamo_support.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, SubscribeToTaskRequest, TaskState

from tests.stores import dynamo_support as support
from tests.support.harness import RunningGateway, collect, running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually

pytestmark = pytest.mark.dynamodb

ROOT = Path(__file__).resolve().parents[2]
REMOTE_POLL = 0.2
LEASE = 3.0
"""Short enough that an owner checks for tasks ended elsewhere every second (lease / 3)."""
COMPLETED, CANCELED = TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_CANCELED


# -- processes ------------------------------------------------------------------------------


def aws_env(**extra: str) -> dict[str, str]:
    """The environment for a gateway process: moto's dummy credentials, never real ones."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("AWS_", "A2A_GATEWAY_"))
    }
    env.update(
        AWS_ACCESS_KEY_ID=support.CREDENTIALS["aws_access_key_id"],
        AWS_SECRET_ACCESS_KEY=support.CREDENTIALS["aws_secret_access_key"],
        AWS_EC2_METADATA_DISABLED="true",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def cli(*args: str, timeout: float = 60.0) -> str:
    """``python -m a2a_gateway ARGS``; its stdout (fails the test on a non-zero exit)."""
    done = subprocess.run(
        [sys.executable, "-m", "a2a_gateway", *args],
        cwd=ROOT, env=aws_env(), capture_output=True, text=True, timeout=timeout,
    )
    assert done.returncode == 0, f"a2a_gateway {args[0]} failed: {done.stderr[-2000:]}"
    return done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@asynccontextmanager
async def gateway_process(store_url: str, replica_id: str) -> AsyncIterator[str]:
    """``a2a_gateway serve`` on a free loopback port until the block ends; yields its base URL."""
    port = free_port()
    env = aws_env(
        A2A_GATEWAY_REPLICA_ID=replica_id,
        A2A_GATEWAY_REMOTE_POLL_SECONDS=str(REMOTE_POLL),
        A2A_GATEWAY_LEASE_SECONDS=str(LEASE),
        A2A_GATEWAY_LOG_LEVEL="warning",
    )
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "a2a_gateway", "serve", "--store", store_url,
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log,
        )

        def output() -> str:
            log.seek(0)
            return log.read()[-2000:]

        try:
            async with httpx.AsyncClient(timeout=1) as http:
                async def ready() -> bool:
                    if proc.poll() is not None:
                        pytest.fail(f"gateway process exited with {proc.returncode}: {output()}")
                    with contextlib.suppress(httpx.HTTPError):
                        return (await http.get(f"{base}/readyz")).status_code == 200
                    return False

                try:
                    await eventually(ready, interval=0.1, what="the gateway process is ready")
                except AssertionError as exc:
                    pytest.fail(f"{exc}: {output()}")
            yield base
        finally:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture
async def operator_url(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """Fresh tables, made by ``a2a_gateway migrate`` under a prefix of this test's own."""
    url = support.store_url(support.moto_endpoint(), support.unique_prefix())
    support.use_moto_credentials(monkeypatch)
    created = await asyncio.to_thread(cli, "migrate", "--store", url)
    assert "tasks" in created  # the tables were new
    try:
        assert "up to date" in await asyncio.to_thread(cli, "migrate", "--store", url)
        yield url
    finally:
        await support.drop_tables(url)


@pytest.fixture
async def cli_endpoint_id(operator_url: str) -> str:
    """An echo endpoint (0.05 s a word) added with ``a2a_gateway endpoints add``."""
    out = await asyncio.to_thread(
        cli, "endpoints", "add", "--store", operator_url, "--name", "echo on dynamodb",
        "--handler", "handlers.echo:EchoHandler", "--set", "delay=0.05", "--public",
    )
    return out.strip().splitlines()[-1]


@asynccontextmanager
async def replica_a(url: str) -> AsyncIterator[RunningGateway]:
    async with running_gateway(
        url, replica_id="a", lease_seconds=LEASE, remote_poll_seconds=REMOTE_POLL
    ) as gw:
        yield gw


@asynccontextmanager
async def replica_b(url: str) -> AsyncIterator[RunningGateway]:
    """The second gateway process; only its URL helpers and clients are used."""
    async with gateway_process(url, "b") as base:
        yield RunningGateway(base, app=None)  # type: ignore[arg-type]


# -- helpers --------------------------------------------------------------------------------


# -- two gateway processes --------------------------------------------------------------------


async def test_subscribe_on_second_process_gets_task_then_final_state_by_polling(
    operator_url, cli_endpoint_id
):
    words = " ".join(f"w{i}" for i in range(20))  # about one second at 0.05 s a word
    ep = cli_endpoint_id
    async with replica_a(operator_url) as a, replica_b(operator_url) as b, \
            a.client(ep) as on_a, b.client(ep) as on_b:
        stream = on_a.send_message(send_request(words))
        first = await anext(stream)
        remote = await collect(on_b.subscribe(SubscribeToTaskRequest(id=first.task.id)))
        local = await collect(stream)
        on_b_after = await on_b.get_task(GetTaskRequest(id=first.task.id))

    assert remote[0].HasField("task") and remote[0].task.id == first.task.id
    assert remote[0].task.status.state == TaskState.TASK_STATE_WORKING
    updates = [e.artifact_update for e in remote if e.HasField("artifact_update")]
    # polled, not live: no word-by-word chunks, one final artifact replacing any partial text
    assert updates and all(not u.append and u.last_chunk for u in updates)
    assert updates[-1].artifact.parts[0].text == f"echo: {words}"
    assert remote[-1].status_update.status.state == COMPLETED
    assert len(remote) <= 4
    # the owner's own stream was live: many chunks
    assert sum(e.HasField("artifact_update") for e in local) > 20
    assert on_b_after.status.state == COMPLETED
    assert on_b_after.artifacts[0].parts[0].text == f"echo: {words}"


async def test_cancel_on_second_process_stops_the_run_on_the_first(operator_url, cli_endpoint_id):
    ep = cli_endpoint_id
    async with replica_a(operator_url) as a, replica_b(operator_url) as b, \
            a.client(ep) as on_a, b.client(ep, streaming=False) as on_b:
        stream = on_a.send_message(
            send_request(" ".join(["word"] * 200))
        )  # ten seconds if not stopped
        first = await anext(stream)
        await anext(stream)
        canceled = await on_b.cancel_task(CancelTaskRequest(id=first.task.id))
        started = time.monotonic()
        rest = await asyncio.wait_for(collect(stream), timeout=8)
        stopped_after = time.monotonic() - started
        await eventually(lambda: first.task.id not in a.gateway.engine.runs, timeout=10,
                         what="the run leaves the owner's table once its driver has stopped")
        final = await on_a.get_task(GetTaskRequest(id=first.task.id))
        seen_on_b = await on_b.get_task(GetTaskRequest(id=first.task.id))

    assert canceled.status.state == CANCELED
    assert rest[-1].status_update.status.state == CANCELED
    assert stopped_after < 5  # noticed by the owner's lease check, long before the run's end
    assert final.status.state == CANCELED and not final.artifacts  # never completed afterwards
    assert seen_on_b.status.state == CANCELED
