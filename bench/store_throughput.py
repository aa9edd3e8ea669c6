"""Raw store throughput: task writes and reads on memory, SQLite and PostgreSQL.

Each store gets the same workload, run by ``--concurrency`` coroutines: create a task
(SUBMITTED), update it twice (WORKING, then COMPLETED with an artifact), read it back,
then page through ListTasks. A streamed task costs the gateway about this many writes.

    python bench/store_throughput.py --tasks 2000 --concurrency 16 \
        --postgres postgresql://postgres@127.0.0.1:5432/bench

The PostgreSQL database is migrated first; the benchmark's rows live under a tenant of
their own and are deleted at the end. Without ``--postgres`` only memory and SQLite run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from a2a.types import Task, TaskState

from a2a_gateway.stores.base import Scope, Store, TaskQuery


def make_task(context_id: str) -> Task:
    task = Task(id=str(uuid.uuid4()), context_id=context_id)
    task.status.state = TaskState.TASK_STATE_SUBMITTED
    task.status.timestamp.GetCurrentTime()
    message = task.history.add()
    message.message_id = str(uuid.uuid4())
    message.parts.add().text = "Summarise the attached report in three bullet points. " * 4
    return task


async def run_phase(
    name: str, items: list, concurrency: int, op: Callable[[object], Awaitable[None]]
) -> dict[str, float]:
    latencies: list[float] = []
    queue = list(reversed(items))

    async def worker() -> None:
        while queue:
            item = queue.pop()
            started = time.perf_counter()
            await op(item)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "phase": name,
        "ops": len(latencies),
        "ops_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


async def bench_store(store: Store, tasks: int, concurrency: int) -> list[dict[str, float]]:
    scope = Scope(f"bench-{uuid.uuid4().hex[:8]}", "ep-bench", "anonymous")
    created = [make_task(f"ctx-{i % 50}") for i in range(tasks)]
    versions: dict[str, int] = {}

    async def create(task: Task) -> None:
        versions[task.id] = await store.create_task(scope, task, owner="bench", lease_until=1e12)

    async def advance(task: Task) -> None:
        task.status.state = TaskState.TASK_STATE_WORKING
        task.status.timestamp.GetCurrentTime()
        version = await store.update_task(
            scope, task, expected_version=versions[task.id], owner="bench", lease_until=1e12
        )
        task.status.state = TaskState.TASK_STATE_COMPLETED
        task.status.timestamp.GetCurrentTime()
        artifact = task.artifacts.add()
        artifact.artifact_id = "answer"
        artifact.parts.add().text = "A point about the report. " * 40
        await store.update_task(scope, task, expected_version=version)

    async def read(task: Task) -> None:
        assert await store.get_task(scope, task.id) is not None

    async def list_context(context_id: str) -> None:
        token = ""
        while True:
            query = TaskQuery(context_id=context_id, page_size=20, page_token=token)
            page = await store.list_tasks(scope, query)
            token = page.next_page_token
            if not token:
                return

    contexts = [f"ctx-{i}" for i in range(50)]
    results = [
        await run_phase("create_task", created, concurrency, create),
        await run_phase("update_task x2", created, concurrency, advance),
        await run_phase("get_task", created, concurrency, read),
        await run_phase("list_tasks (ctx, all pages)", contexts, concurrency, list_context),
    ]
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--postgres", help="PostgreSQL URL (migrated first)")
    args = parser.parse_args()

    stores: list[tuple[str, Callable[[], Awaitable[Store]]]] = []

    async def memory() -> Store:
        from a2a_gateway.stores.memory import MemoryStore

        return MemoryStore()

    tmp = tempfile.TemporaryDirectory()

    async def sqlite() -> Store:
        from a2a_gateway.stores.sqlite import SQLiteStore

        return await SQLiteStore.open(str(Path(tmp.name) / "bench.db"))

    async def postgres() -> Store:
        from a2a_gateway.stores.postgres import PostgresStore, migrate_postgres

        await migrate_postgres(args.postgres)
        return await PostgresStore.open(args.postgres, pool_size=max(args.concurrency, 2))

    stores += [("memory", memory), ("sqlite", sqlite)]
    if args.postgres:
        stores.append(("postgres", postgres))

    print(f"{args.tasks} tasks, concurrency {args.concurrency}")
    print(f"{'store':<9} {'phase':<28} {'ops':>6} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    try:
        for name, opener in stores:
            store = await opener()
            try:
                for row in await bench_store(store, args.tasks, args.concurrency):
                    print(
                        f"{name:<9} {row['phase']:<28} {row['ops']:>6} {row['ops_per_s']:>9.0f}"
                        f" {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f}"
                    )
            finally:
                if name == "postgres":
                    await _delete_bench_rows(store)
                await store.aclose()
    finally:
        tmp.cleanup()


async def _delete_bench_rows(store: Store) -> None:
    async with store._conn() as conn:  # noqa: SLF001 - benchmark cleanup only
        await conn.execute("DELETE FROM tasks WHERE tenant LIKE 'bench-%'")


if __name__ == "__main__":
    asyncio.run(main())
