"""Raw store throughput: DynamoDB-in-moto vs SQLite vs memory (relative cost only).

    python bench/dynamodb_store.py [--endpoint http://127.0.0.1:PORT] [-n 400] [-c 16]

Per store: create_task, get_task, update_task (to COMPLETED) and list_tasks (page of 20),
each run ``-n`` times with ``-c`` concurrent callers. Without ``--endpoint`` (or
``A2A_TEST_DYNAMODB_ENDPOINT``) a moto server is started for the run. moto answers over
HTTP from one Python process, so its numbers say how the store's call pattern costs
relative to SQLite, not what real DynamoDB would do (≈ 5–10 ms per call, any scale).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from a2a.types import Task, TaskState

from a2a_gateway.stores.base import Scope, Store, TaskQuery

SCOPE = Scope("bench", "ep", "anonymous")
CREDENTIALS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}


def make_task(i: int) -> Task:
    task = Task(id=str(uuid.uuid4()), context_id=f"ctx-{i % 10}")
    task.status.state = TaskState.TASK_STATE_WORKING
    task.status.timestamp.seconds = 1_700_000_000 + i
    return task


async def timed(n: int, concurrency: int, op: Callable[[int], Awaitable[object]]) -> float:
    """Operations per second of ``op(0..n-1)`` with ``concurrency`` callers."""
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await op(i)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - start)


async def bench_store(store: Store, n: int, concurrency: int) -> dict[str, float]:
    tasks = [make_task(i) for i in range(n)]
    results = {"create": await timed(n, concurrency, lambda i: store.create_task(SCOPE, tasks[i]))}
    results["get"] = await timed(n, concurrency, lambda i: store.get_task(SCOPE, tasks[i].id))

    async def complete(i: int) -> None:
        tasks[i].status.state = TaskState.TASK_STATE_COMPLETED
        await store.update_task(SCOPE, tasks[i], expected_version=1)

    results["update"] = await timed(n, concurrency, complete)
    lists = max(n // 10, 1)
    results["list"] = await timed(
        lists, concurrency, lambda i: store.list_tasks(SCOPE, TaskQuery(page_size=20))
    )
    return results


def start_moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    moto = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen(
        [str(moto), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("moto server did not start")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoint", default=os.environ.get("A2A_TEST_DYNAMODB_ENDPOINT", ""))
    parser.add_argument("-n", type=int, default=400)
    parser.add_argument("-c", "--concurrency", type=int, default=16)
    args = parser.parse_args()

    from a2a_gateway.stores.dynamodb import DynamoDBStore, create_tables
    from a2a_gateway.stores.memory import MemoryStore
    from a2a_gateway.stores.sqlite import SQLiteStore

    proc, endpoint = (None, args.endpoint) if args.endpoint else start_moto()
    rows: dict[str, dict[str, float]] = {}
    try:
        rows["memory"] = await bench_store(MemoryStore(), args.n, args.concurrency)
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = await SQLiteStore.open(str(Path(tmp) / "bench.db"))
            rows["sqlite"] = await bench_store(sqlite, args.n, args.concurrency)
            await sqlite.aclose()
        prefix = f"bench{uuid.uuid4().hex[:8]}-"
        url = f"dynamodb://?region=eu-central-1&table_prefix={prefix}&endpoint_url={endpoint}"
        await create_tables(url, **CREDENTIALS)
        dynamo = await DynamoDBStore.open(url, **CREDENTIALS)
        try:
            rows["dynamodb-moto"] = await bench_store(dynamo, args.n, args.concurrency)
        finally:
            for table in (f"{prefix}endpoints", f"{prefix}tasks"):
                await asyncio.to_thread(dynamo._client.delete_table, TableName=table)
            await dynamo.aclose()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()

    ops = ["create", "get", "update", "list"]
    print(f"ops/s, n={args.n}, concurrency={args.concurrency}")
    print(f"{'store':<15}" + "".join(f"{op:>10}" for op in ops))
    for name, result in rows.items():
        print(f"{name:<15}" + "".join(f"{result[op]:>10.0f}" for op in ops))


if __name__ == "__main__":
    asyncio.run(main())
