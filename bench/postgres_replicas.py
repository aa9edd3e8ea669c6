"""Gateway on PostgreSQL: SendMessage throughput, task writes, cross-replica NOTIFY latency.

Three measurements, each on fresh gateway processes and fresh databases:

1. **SendMessage requests/s** — blocking SendMessage (JSON-RPC 1.0) on an echo agent
   (delay 0), the gateway on ``memory://``, on a fresh SQLite file and on a fresh
   migrated PostgreSQL database; load from ``wrk`` with ``bench/wrk_send.lua`` exactly
   as ``bench/core_send.py`` runs it (same launcher, pinning, warm-up, medians).
   The PostgreSQL server is not pinned: its CPU time is not in "CPU µs/req".
2. **Task writes per task** — ``--write-tasks`` streamed tasks (SendStreamingMessage,
   echo of ``--words`` words, so that many deltas) and as many blocking ones, counted
   in PostgreSQL: every task write sets or bumps the row's ``version`` (lease
   renewals, one batched statement per tick for all running tasks, do not).
3. **NOTIFY fan-out latency** — two gateway processes A and B on one database; a
   stamping agent on A emits ``--deltas`` deltas ``--interval`` s apart, each holding
   the wall-clock time it was yielded; an SSE client streams the task from A and
   another subscribes to it on B (``SubscribeToTask``). Latency = arrival at the client
   − stamp, for every ``append`` chunk: B's numbers are the cross-replica path (A's
   outbox → NOTIFY → B's listener → B's SSE), A's the same-replica baseline.
   ``--streams`` tasks run at the same time.

    python bench/postgres_replicas.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
    python bench/postgres_replicas.py --parts latency --streams 20

``--dsn`` (default ``$A2A_TEST_POSTGRES_DSN``) must be allowed to create databases;
every database made here is dropped at the end. Loopback only; every run is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from handlers.base import (  # noqa: E402
    Completed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    TextDelta,
)

HANDLER_MODULE = "bench.postgres_replicas"


# the stamping agent (imported by the gateway processes of part 3) ----------------------


class StampSettings(HandlerSettings):
    deltas: int = 50
    interval: float = 0.02
    start_delay: float = 0.5


class StampHandler(Handler):
    """Deltas ``<ns>`` holding ``time.time_ns()`` at the moment each is yielded."""

    Settings = StampSettings
    uses_context: ClassVar[bool] = False
    settings: StampSettings

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        await asyncio.sleep(self.settings.start_delay)  # let the remote subscriber arrive
        for _ in range(self.settings.deltas):
            yield TextDelta(f"<{time.time_ns()}>")
            await asyncio.sleep(self.settings.interval)
        yield Completed(text="done")


# processes and databases --------------------------------------------------------------


def database_url(dsn: str, name: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))


@asynccontextmanager
async def migrated_database(dsn: str) -> AsyncIterator[str]:
    import asyncpg

    name = f"bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    finally:
        await admin.close()
    url = database_url(dsn, name)
    try:
        gateway_cli("migrate", "--store", url)
        yield url
    finally:
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


def gateway_cli(*args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "a2a_gateway", *args], cwd=ROOT, env=env or os.environ.copy(),
        capture_output=True, text=True, timeout=120,
    )
    if out.returncode != 0:
        raise RuntimeError(f"a2a_gateway {args[0]} failed: {out.stderr[-1500:]}")
    return out.stdout


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    """``python -m a2a_gateway serve`` on a free port."""

    def __init__(self, name: str, store: str, env: dict[str, str], workdir: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"gateway-{name}.log"
        with self.log.open("wb") as log_file:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "a2a_gateway",
                    "serve",
                    "--store",
                    store,
                    "--port",
                    str(self.port),
                ],
                cwd=ROOT,
                env={**env, "A2A_GATEWAY_REPLICA_ID": name},
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )

    async def ready(self, timeout: float = 30.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"gateway exited: {self.log.read_text()[-1500:]}")
                try:
                    if (await http.get(f"{self.base}/readyz")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError("gateway not ready in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def gateway_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    env.update({"A2A_GATEWAY_LOG_LEVEL": "warning", **extra})
    return env


# SSE ---------------------------------------------------------------------------------------


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def user_message(text: str) -> dict[str, Any]:
    return {
        "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    }


async def sse_events(
    http: Any, url: str, body: dict[str, Any]
) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """(arrival ns, result) for every event of a JSON-RPC SSE stream."""
    import orjson

    async with http.stream("POST", url, json=body, headers={"A2A-Version": "1.0"}) as response:
        if response.status_code != 200:
            raise RuntimeError(
                f"{url} answered {response.status_code}: {(await response.aread())[:300]!r}"
            )
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                arrived = time.time_ns()
                message = orjson.loads(line[5:])
                if "error" in message:
                    raise RuntimeError(f"stream error: {message['error']}")
                yield arrived, message["result"]


def stamps(result: dict[str, Any], arrived: int, snapshot: list[int] | None = None) -> list[float]:
    """Latencies in ms of the stamps of an ``append`` chunk; a snapshot (the text so far,
    ``append: false``) is not timed, its stamps are counted in ``snapshot``."""
    update = result.get("artifactUpdate")
    if not update or update.get("lastChunk"):
        return []
    if not update.get("append"):
        if snapshot is not None:
            snapshot[0] += sum(
                p.get("text", "").count("<") for p in update["artifact"].get("parts", [])
            )
        return []
    out = []
    for part in update["artifact"].get("parts", []):
        for piece in part.get("text", "").split(">"):
            if piece.startswith("<"):
                out.append((arrived - int(piece[1:])) / 1e6)
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


# part 1: throughput ------------------------------------------------------------------------


def part_throughput(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from bench.core_send import ServerConfig, one_run

    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    results: dict[str, list[Any]] = {s: [] for s in stores}
    writes: list[float] = []
    for run in range(args.runs):
        for kind in stores:
            if kind == "postgres":
                sample = asyncio.run(_postgres_run(args, workdir, run, writes))
            else:
                store = "memory://" if kind == "memory" else None
                config = ServerConfig(
                    f"gateway-{kind}", "gateway.py",
                    ("--log-level", "warning", *(("--store", store) if store else ())),
                    sqlite=kind == "sqlite",
                )
                sample, _ = one_run(config, args, workdir, run)
            results[kind].append(sample)
            print(
                f"run {run + 1}/{args.runs} gateway-{kind:<9} {sample.rps:8.0f} req/s  p50 {sample.p50_ms:6.2f} ms"
                f"  p99 {sample.p99_ms:6.2f} ms  cpu {sample.cpu_us:5.0f} µs/req  errors {sample.errors}",
                flush=True,
            )
    return {
        "samples": results,
        "writes_per_blocking_task": statistics.mean(writes) if writes else None,
    }


async def _postgres_run(
    args: argparse.Namespace, workdir: Path, run: int, writes: list[float]
) -> Any:
    import asyncpg

    from bench.core_send import ServerConfig, one_run

    async with migrated_database(args.dsn) as url:
        config = ServerConfig(
            "gateway-postgres", "gateway.py", ("--store", url, "--log-level", "warning")
        )
        sample, _ = await asyncio.to_thread(one_run, config, args, workdir, run)
        conn = await asyncpg.connect(url)
        try:
            avg = await conn.fetchval("SELECT avg(version)::float FROM tasks")
        finally:
            await conn.close()
        if avg is not None:
            writes.append(avg)
    return sample


# part 2: task writes ---------------------------------------------------------------------


async def part_writes(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import httpx

    async with migrated_database(args.dsn) as url:
        env = gateway_env()
        endpoint = (
            gateway_cli(
                "endpoints",
                "add",
                "--store",
                url,
                "--name",
                "echo",
                "--handler",
                "handlers.echo:EchoHandler",
                "--set",
                "delay=0",
                "--public",
                env=env,
            )
            .strip()
            .splitlines()[-1]
        )
        gateway = Gateway("w", url, env, workdir)
        try:
            await gateway.ready()
            text = " ".join(f"w{i}" for i in range(args.words))
            deltas = 0
            target = f"{gateway.base}/{endpoint}/a2a"
            async with httpx.AsyncClient(timeout=60) as http:
                for _ in range(args.write_tasks):
                    async for _, result in sse_events(
                        http, target, rpc("SendStreamingMessage", user_message(text))
                    ):
                        update = result.get("artifactUpdate")
                        if update and not update.get("lastChunk"):
                            deltas += 1
                streamed = await _count_writes(url)
                for _ in range(args.write_tasks):
                    reply = await http.post(target, json=rpc("SendMessage", user_message(text)),
                                            headers={"A2A-Version": "1.0"})
                    assert reply.status_code == 200 and "result" in reply.json(), reply.text[:300]
                both = await _count_writes(url)
        finally:
            gateway.stop()
    n = args.write_tasks
    blocking = {k: both[k] - streamed[k] for k in both}
    return {
        "tasks": n, "deltas_per_task": deltas / n,
        "streamed": {k: v / n for k, v in streamed.items()},
        "blocking": {k: v / n for k, v in blocking.items()},
    }


async def _count_writes(url: str) -> dict[str, float]:
    """Task writes so far: every create or update of a task row sets or bumps ``version``
    (exact, unlike ``pg_stat_user_tables``, which other sessions flush lazily)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        versions = await conn.fetchval("SELECT coalesce(sum(version), 0) FROM tasks")
        contexts = await conn.fetchval("SELECT count(*) FROM contexts")
    finally:
        await conn.close()
    return {"task_writes": float(versions), "context_rows": float(contexts)}


# part 3: NOTIFY latency ----------------------------------------------------------------------


async def part_latency(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import httpx

    async with migrated_database(args.dsn) as url:
        env = gateway_env(
            A2A_GATEWAY_HANDLER_ALLOWLIST=json.dumps(["handlers.", HANDLER_MODULE]),
            A2A_GATEWAY_REMOTE_POLL_SECONDS="30",  # only the live path delivers chunks in time
            A2A_GATEWAY_LEASE_SECONDS="60",
        )
        endpoint = gateway_cli(
            "endpoints", "add", "--store", url, "--name", "stamp",
            "--handler", f"{HANDLER_MODULE}:StampHandler",
            "--set", f"deltas={args.deltas}", "--set", f"interval={args.interval}", "--public",
            env=env,
        ).strip().splitlines()[-1]
        a = Gateway("a", url, env, workdir)
        b = Gateway("b", url, env, workdir)
        local: list[float] = []
        remote: list[float] = []
        missing = in_snapshot = 0
        try:
            await asyncio.gather(a.ready(), b.ready())
            limits = httpx.Limits(max_connections=4 * args.streams + 8)
            async with httpx.AsyncClient(timeout=60, limits=limits) as http:
                for _ in range(args.latency_rounds):
                    got = await asyncio.wait_for(asyncio.gather(*(
                        _one_stream(http, a.base, b.base, endpoint) for _ in range(args.streams)
                    )), timeout=120)
                    for local_ms, remote_ms, snapped in got:
                        local += local_ms
                        remote += remote_ms
                        in_snapshot += snapped
                        missing += max(0, args.deltas - len(remote_ms) - snapped)
        finally:
            a.stop()
            b.stop()
    return {"local_ms": local, "remote_ms": remote, "remote_in_snapshot": in_snapshot,
            "remote_chunks_missing": missing}


async def _one_stream(
    http: Any, a_base: str, b_base: str, endpoint: str
) -> tuple[list[float], list[float], int]:
    local: list[float] = []
    remote: list[float] = []
    snapshot = [0]
    subscribed: asyncio.Task[None] | None = None

    async def follow(task_id: str) -> None:
        body = rpc("SubscribeToTask", {"id": task_id})
        async for arrived, result in sse_events(http, f"{b_base}/{endpoint}/a2a", body):
            remote.extend(stamps(result, arrived, snapshot))

    body = rpc("SendStreamingMessage", user_message("stamp"))
    async for arrived, result in sse_events(http, f"{a_base}/{endpoint}/a2a", body):
        if subscribed is None and "task" in result:
            subscribed = asyncio.create_task(follow(result["task"]["id"]))
        local.extend(stamps(result, arrived))
    if subscribed is not None:
        await asyncio.wait_for(subscribed, 30)
    return local, remote, snapshot[0]


# report ------------------------------------------------------------------------------------


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    print()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}")
    if "throughput" in results:
        t = results["throughput"]
        print(
            f"\nSendMessage (blocking, JSON-RPC 1.0, echo delay 0), {args.concurrency} connections, "
            f"{args.duration:g}s x {args.runs} runs (medians)"
        )
        print(
            f"| {'store':<10} | {'req/s':>7} | {'p50 ms':>7} | {'p99 ms':>7} | {'CPU µs/req':>10} | {'errors':>6} |"
        )
        print(f"|{'-' * 12}|{'-' * 9}|{'-' * 9}|{'-' * 9}|{'-' * 12}|{'-' * 8}|")
        for kind, samples in t["samples"].items():
            if not samples:
                continue
            med = {
                k: statistics.median(getattr(s, k) for s in samples)
                for k in ("rps", "p50_ms", "p99_ms", "cpu_us")
            }
            errors = sum(s.errors for s in samples)
            print(
                f"| {kind:<10} | {med['rps']:>7.0f} | {med['p50_ms']:>7.2f} | {med['p99_ms']:>7.2f} | "
                f"{med['cpu_us']:>10.0f} | {errors:>6} |"
            )
        if t.get("writes_per_blocking_task") is not None:
            print(
                f"PostgreSQL task writes per blocking SendMessage (avg row version): {t['writes_per_blocking_task']:.2f}"
            )
    if "writes" in results:
        w = results["writes"]
        print(f"\nTask writes per task ({w['tasks']} tasks each, echo of {args.words} words,"
              f" {w['deltas_per_task']:.0f} streamed deltas per task)")
        for mode in ("streamed", "blocking"):
            counts = w[mode]
            print(f"  {mode:<9} {counts['task_writes']:.2f} task writes per task")
    if "latency" in results:
        lat = results["latency"]
        print(
            f"\nDelta published on A → received by an SSE client ({args.streams} concurrent stream(s),"
            f" {args.deltas} deltas every {args.interval * 1000:g} ms, {args.latency_rounds} round(s))"
        )
        for label, key in (
            ("same replica (A)", "local_ms"),
            ("other replica (B, NOTIFY)", "remote_ms"),
        ):
            values = lat[key]
            print(
                f"  {label:<27} n={len(values):<6} p50 {pct(values, 50):7.2f} ms  p90 {pct(values, 90):7.2f} ms"
                f"  p99 {pct(values, 99):7.2f} ms  max {max(values, default=float('nan')):7.2f} ms"
            )
        print(f"  chunks B got in its snapshot (not timed): {lat['remote_in_snapshot']},"
              f" never received: {lat['remote_chunks_missing']}")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dsn", default=os.environ.get("A2A_TEST_POSTGRES_DSN"),
                   help="admin DSN of a PostgreSQL server (default: $A2A_TEST_POSTGRES_DSN)")
    p.add_argument("--parts", default="throughput,writes,latency")
    p.add_argument(
        "--stores", default="memory,sqlite,postgres", help="throughput: stores to compare"
    )
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--write-tasks", type=int, default=20)
    p.add_argument("--words", type=int, default=200)
    p.add_argument("--deltas", type=int, default=50)
    p.add_argument("--interval", type=float, default=0.02)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--latency-rounds", type=int, default=5)
    p.add_argument("--json", help="also write the raw results to this file")
    args = p.parse_args()
    if not args.dsn:
        sys.exit("--dsn (or A2A_TEST_POSTGRES_DSN) is required")
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    bounds = [(args.runs, 1, 20, "--runs"), (args.duration, 1, 120, "--duration"),
              (args.write_tasks, 1, 1000, "--write-tasks"), (args.words, 1, 5000, "--words"),
              (args.deltas, 1, 2000, "--deltas"), (args.streams, 1, 200, "--streams"),
              (args.latency_rounds, 1, 100, "--latency-rounds")]
    for value, low, high, name in bounds:
        if not low <= value <= high:
            sys.exit(f"{name} must be {low}..{high}")
    if "throughput" in parts and not __import__("shutil").which("wrk"):
        sys.exit("wrk is not installed (Debian/Ubuntu: apt-get install wrk)")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="a2a-bench-pg-") as tmp:
        workdir = Path(tmp)
        if "throughput" in parts:
            results["throughput"] = part_throughput(args, workdir)
        if "writes" in parts:
            results["writes"] = asyncio.run(part_writes(args, workdir))
        if "latency" in parts:
            results["latency"] = asyncio.run(part_latency(args, workdir))
    report(results, args)
    if args.json:
        serial = json.loads(json.dumps(results, default=lambda o: getattr(o, "__dict__", str(o))))
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": serial}, indent=2))


if __name__ == "__main__":
    main()
