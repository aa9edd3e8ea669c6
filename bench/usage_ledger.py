"""The usage ledger's cost: the terminal task write with and without its usage record (CPU
per task, side by side, on SQLite and PostgreSQL), and ``usage_summary`` over a million ended
tasks on PostgreSQL.

    python bench/usage_ledger.py --tasks 3000 \
        --postgres postgresql://postgres@127.0.0.1:5432/postgres

The PostgreSQL part creates a database of its own (``usage_bench_<random>``), migrates it,
loads ``--rows`` ended tasks with COPY (20 endpoints, 500 callers using up to three of them
each, ends spread over 90 days; the trigger keeps ``usage_daily`` as the gateway's writes
do), runs VACUUM ANALYZE as autovacuum would, times each query ``--repeat`` times (the median
and the slowest are printed) and drops the database. Without ``--postgres`` only SQLite
runs.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from a2a.types import Task, TaskState

from a2a_gateway.governance.usage import Price, UsageStart, usage_record
from a2a_gateway.stores.base import Scope, Store, UsageQuery
from a2a_gateway.stores.usage_rows import epoch_us

PRICE = Price("USD", 0.001, 0.5, 1.5)
ENDPOINTS = [f"ep-{n:02d}" for n in range(20)]
PRINCIPALS = [f"caller-{n:04d}" for n in range(500)]
ENDPOINTS_OF = {p: sorted({ENDPOINTS[n % 20], ENDPOINTS[n * 7 % 20], ENDPOINTS[n * 13 % 20]})
                for n, p in enumerate(PRINCIPALS)}
"""Each caller works with up to three of the agents."""
DAYS = 90


def ended_task() -> Task:
    task = Task(id=str(uuid.uuid4()), context_id=str(uuid.uuid4()))
    message = task.history.add()
    message.message_id, message.role = str(uuid.uuid4()), 1
    message.parts.add().text = "Summarise the attached report in three bullet points. " * 4
    artifact = task.artifacts.add()
    artifact.artifact_id, artifact.name = str(uuid.uuid4()), "response"
    artifact.parts.add().text = "A short answer of a few lines. " * 10
    task.status.state = TaskState.TASK_STATE_COMPLETED
    task.status.timestamp.GetCurrentTime()
    return task


async def write_cost(store: Store, tasks: int, with_usage: bool) -> tuple[float, float]:
    """CPU and wall seconds per task of creating ``tasks`` ended tasks one after the other (a
    blocking send writes its task once, at its end), the usage record built per task when
    asked. The wall time includes the database's own work (PostgreSQL's trigger)."""
    scope = Scope("bench", "ep-bench", "caller")
    started, wall = time.process_time(), time.perf_counter()
    for _ in range(tasks):
        task = ended_task()
        usage = None
        if with_usage:
            start = UsageStart(time.time() - 1.5, "0123456789abcdef", "bench")
            usage = usage_record(task, start, time.time(), (120, 40), PRICE)
        await store.create_task(scope, task, usage=usage)
    return (time.process_time() - started) / tasks, (time.perf_counter() - wall) / tasks


async def compare_writes(name: str, open_store, tasks: int) -> None:
    store = await open_store()
    try:
        await write_cost(store, min(tasks, 200), True)  # warm up
        rounds: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _ in range(3):  # interleaved, so drift hits both alike
            for with_usage in (False, True):
                rounds[with_usage].append(await write_cost(store, tasks, with_usage))
        for label, index in (("CPU", 0), ("wall", 1)):
            without, with_ = (statistics.median(r[index] for r in rounds[k]) for k in (False, True))
            print(f"{name:10s} write {label:4s} per task: without usage {without * 1e6:7.1f} us,"
                  f" with usage {with_ * 1e6:7.1f} us ({(with_ / without - 1) * 100:+.1f} %)")
    finally:
        await store.aclose()


async def load_rows(dsn: str, rows: int) -> None:
    import asyncpg

    rng = random.Random(25)
    now_us = epoch_us(datetime.now(UTC))
    span_us = DAYS * 86_400_000_000
    conn = await asyncpg.connect(dsn)
    try:
        batch = 100_000
        for offset in range(0, rows, batch):
            records = []
            for n in range(offset, min(rows, offset + batch)):
                ended = now_us - rng.randrange(span_us)
                input_tokens, output_tokens = rng.randrange(50, 4000), rng.randrange(10, 800)
                principal = rng.choice(PRINCIPALS)
                records.append((
                    "default", rng.choice(ENDPOINTS_OF[principal]), principal, f"task-{n}",
                    f"ctx-{n}", rng.choice((3, 3, 3, 3, 3, 3, 3, 3, 4, 5)), ended, 2, b"",
                    "{}", f"key-{principal}", "bench", ended - rng.randrange(100_000, 30_000_000),
                    ended, 1, 800, 2400, input_tokens, output_tokens,
                    PRICE.micros(input_tokens, output_tokens), "USD",
                ))
            await conn.copy_records_to_table("tasks", records=records, columns=[
                "tenant", "endpoint_id", "principal", "id", "context_id", "state", "status_us",
                "version", "task", "run_state", "usage_key_id", "usage_key_name", "started_us",
                "ended_us", "requests", "bytes_in", "bytes_out", "input_tokens",
                "output_tokens", "cost_micros", "currency",
            ])
        await conn.execute("VACUUM ANALYZE tasks")
        await conn.execute("VACUUM ANALYZE usage_daily")
        daily = await conn.fetchval("SELECT count(*) FROM usage_daily")
        print(f"postgresql: usage_daily holds {daily:,} rows (day, endpoint, caller, currency)")
    finally:
        await conn.close()


async def time_queries(dsn: str, repeat: int) -> None:
    from a2a_gateway.stores.postgres import PostgresStore

    store = await PostgresStore.open(dsn)
    now = datetime.now(UTC)
    month = now - timedelta(days=30)
    queries = {
        "30 days, by endpoint": UsageQuery(start=month, end=now, group_by=("endpoint",)),
        "30 days, by endpoint and day": UsageQuery(start=month, end=now,
                                                   group_by=("endpoint", "day")),
        "90 days, by principal": UsageQuery(start=now - timedelta(days=DAYS), end=now,
                                            group_by=("principal",)),
        "one endpoint, 30 days, by day": UsageQuery(endpoint_id=ENDPOINTS[3], start=month,
                                                    end=now, group_by=("day",)),
        "one principal since a month (quota)": UsageQuery(principal=PRINCIPALS[7], start=month),
        "one key since a month (quota)": UsageQuery(key_id=f"key-{PRINCIPALS[7]}", start=month),
        "one principal today (quota)": UsageQuery(
            principal=PRINCIPALS[7], start=now.replace(hour=0, minute=0, second=0)),
    }
    try:
        for name, query in queries.items():
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                totals = await store.usage_summary(query)
                times.append(time.perf_counter() - started)
            tasks = sum(t.tasks for t in totals)
            print(f"  {name:38s} median {statistics.median(times) * 1000:7.1f} ms,"
                  f" max {max(times) * 1000:7.1f} ms ({len(totals)} groups, {tasks} tasks)")
    finally:
        await store.aclose()


async def postgres_part(admin_dsn: str, tasks: int, rows: int, repeat: int) -> None:
    import asyncpg

    from a2a_gateway.stores.postgres import PostgresStore, migrate_postgres

    name = f"usage_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = admin_dsn.rsplit("/", 1)[0] + f"/{name}"
    try:
        await migrate_postgres(dsn)
        await compare_writes("postgresql", lambda: PostgresStore.open(dsn), tasks)
        async with asyncio.timeout(3600):
            started = time.perf_counter()
            await load_rows(dsn, rows)
        print(f"postgresql: {rows:,} ended tasks loaded with COPY and vacuumed in"
              f" {time.perf_counter() - started:.0f} s; usage_summary:")
        await time_queries(dsn, repeat)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--postgres", help="a server's URL whose user may create databases")
    args = parser.parse_args()
    from a2a_gateway.stores.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.db"
        await compare_writes("sqlite", lambda: SQLiteStore.open(path), args.tasks)
    if args.postgres:
        await postgres_part(args.postgres, args.tasks, args.rows, args.repeat)


if __name__ == "__main__":
    asyncio.run(main())
