"""Gateway replicas: SendMessage throughput, task writes, the live path across replicas
(PostgreSQL NOTIFY or Redis): latency and CPU per delta, rate-limit cost with Redis.

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
3. **Cross-replica latency** (``latency``) — two gateway processes A and B on one
   database; a stamping agent on A emits deltas, each holding the wall-clock time it was
   yielded; an SSE client streams the task from A (the owner) and another subscribes to
   it on B (``SubscribeToTask``). Latency = arrival at the client − stamp, for every
   ``append`` chunk: B's numbers are the cross-replica path, A's the same-replica
   baseline. ``--live notify,redis`` compares the live paths side by side: PostgreSQL
   NOTIFY (``live/postgres.py``) and Redis streams (``live/redis.py``, the same store
   with ``A2A_GATEWAY_REDIS_URL`` set). ``--streams 50,500`` tasks run at once, the
   deltas of all of them paced to ``--rate`` per second in total for ``--round-seconds``;
   each (streams, live path) pair runs ``--latency-rounds`` times on fresh processes,
   interleaved. For Redis the server's command counters and network bytes are read
   before and after (entries per delta, bytes per delta: ``bench/redis_model.py``).
4. **Cross-replica deltas per CPU-second** (``crossrate``) — ``--cross-streams`` tasks
   started on A without a client there (``returnImmediately``), each followed on B; the
   deltas B's clients receive per CPU-second of A + B. ``local`` is the baseline of
   the same subscribers on A (A's CPU only).
5. **Rate-limit cost** (``ratelimit``) — ``FleetRateLimiter.admit`` against the Redis
   (CPU µs and wall time per call, one at a time and 32 at once) beside the local
   ``RateLimiter.admit``; then blocking SendMessage on ``memory://`` with ``wrk`` (as in
   ``core_send.py``) through an endpoint with a rate limit too high to refuse, without
   and with ``A2A_GATEWAY_REDIS_URL``, and without a limit: gateway CPU µs per request.

    python bench/postgres_replicas.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
    python bench/postgres_replicas.py --parts latency --live notify,redis --streams 50,500
    python bench/postgres_replicas.py --parts crossrate,ratelimit --live notify,redis

``--dsn`` (default ``$A2A_TEST_POSTGRES_DSN``) must be allowed to create databases;
every database made here is dropped at the end. ``--redis-url`` (default
``$A2A_TEST_REDIS_URL``) is used under a key prefix of this run's own, whose keys are
deleted at the end. Loopback only; every run is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
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
        # let the remote subscriber arrive; a random phase spreads many streams' deltas
        await asyncio.sleep(self.settings.start_delay + random.random() * self.settings.interval)
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

    def __init__(self, name: str, store: str, env: dict[str, str], workdir: Path,
                 extra: tuple[str, ...] = (), cpu: int | None = None) -> None:
        from bench.core_send import pinned

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"gateway-{name}.log"
        with self.log.open("wb") as log_file:
            self.proc = subprocess.Popen(
                pinned(cpu, [sys.executable, "-m", "a2a_gateway", "serve", "--store", store,
                             "--port", str(self.port), *extra]),
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
    """(arrival ns, result) for every event of a JSON-RPC SSE stream (``http``: an
    ``aiohttp.ClientSession``: its C parser keeps a thousand open streams cheap)."""
    import orjson

    async with http.post(url, json=body, headers={"A2A-Version": "1.0"}) as response:
        if response.status != 200:
            text = (await response.read())[:300]
            raise RuntimeError(f"{url} answered {response.status}: {text!r}")
        async for line in response.content:
            if line.startswith(b"data:"):
                arrived = time.time_ns()
                message = orjson.loads(line[5:])
                if "error" in message:
                    raise RuntimeError(f"stream error: {message['error']}")
                yield arrived, message["result"]


def client_session(connections: int) -> Any:
    import aiohttp

    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections + 8),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
    )


def stamped(
    result: dict[str, Any], arrived: int, snapshot: list[int] | None = None
) -> list[tuple[int, float]]:
    """(stamp ns, latency ms) of the stamps of an ``append`` chunk; a snapshot (the text so
    far, ``append: false``) is not timed, its stamps are counted in ``snapshot``."""
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
                stamp = int(piece[1:])
                out.append((stamp, (arrived - stamp) / 1e6))
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
                f"run {run + 1}/{args.runs} gateway-{kind:<9} {sample.rps:8.0f} req/s"
                f"  p50 {sample.p50_ms:6.2f} ms  p99 {sample.p99_ms:6.2f} ms"
                f"  cpu {sample.cpu_us:5.0f} µs/req  errors {sample.errors}",
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
            async with client_session(4) as http:
                for _ in range(args.write_tasks):
                    async for _, result in sse_events(
                        http, target, rpc("SendStreamingMessage", user_message(text))
                    ):
                        update = result.get("artifactUpdate")
                        if update and not update.get("lastChunk"):
                            deltas += 1
                streamed = await _count_writes(url)
                for _ in range(args.write_tasks):
                    async with http.post(target, json=rpc("SendMessage", user_message(text)),
                                         headers={"A2A-Version": "1.0"}) as reply:
                        body = await reply.json()
                    assert reply.status == 200 and "result" in body, str(body)[:300]
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


# the live path between replicas ------------------------------------------------------------

REDIS_COMMANDS = ("xadd", "expire", "xread", "xrevrange", "xrange", "publish", "evalsha")


def live_env(mode: str, args: argparse.Namespace) -> dict[str, str]:
    """The settings that pick the live path between replicas: NOTIFY on the PostgreSQL store
    (none), or Redis streams under this run's key prefix."""
    if mode == "redis":
        return {"A2A_GATEWAY_REDIS_URL": args.redis_url,
                "A2A_GATEWAY_REDIS_PREFIX": args.redis_prefix}
    return {}


def replica_env() -> dict[str, str]:
    return gateway_env(
        A2A_GATEWAY_HANDLER_ALLOWLIST=json.dumps(["handlers.", HANDLER_MODULE]),
        A2A_GATEWAY_REMOTE_POLL_SECONDS="30",  # only the live path delivers chunks in time
        A2A_GATEWAY_LEASE_SECONDS="60",
    )


def stamp_endpoint(url: str, env: dict[str, str], name: str, deltas: int, interval: float,
                   start_delay: float) -> str:
    """Adds a stamping endpoint to the store; its id."""
    return gateway_cli(
        "endpoints", "add", "--store", url, "--name", name,
        "--handler", f"{HANDLER_MODULE}:StampHandler", "--set", f"deltas={deltas}",
        "--set", f"interval={interval}", "--set", f"start_delay={start_delay}", "--public",
        env=env,
    ).strip().splitlines()[-1]


@asynccontextmanager
async def replicas(
    names: tuple[str, ...], url: str, env: dict[str, str], workdir: Path
) -> AsyncIterator[list[Gateway]]:
    """``serve`` processes on one store, ready; stopped on the way out."""
    gateways = [Gateway(name, url, env, workdir) for name in names]
    try:
        await asyncio.gather(*(g.ready() for g in gateways))
        yield gateways
    finally:
        for gateway in gateways:
            gateway.stop()


def cpu_of(gateways: list[Gateway]) -> list[float]:
    from bench.core_send import cpu_seconds

    return [cpu_seconds(g.proc.pid) for g in gateways]


def redis_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


def redis_counters(url: str) -> dict[str, float]:
    """The Redis server's command calls, network bytes and CPU seconds so far. Server-wide:
    whatever else uses that Redis meanwhile counts too."""
    client = redis_client(url)
    try:
        commands, stats, cpu = (client.info(s) for s in ("commandstats", "stats", "cpu"))
    finally:
        client.close()
    out = {c: float(commands.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in REDIS_COMMANDS}
    out["net_in"] = float(stats["total_net_input_bytes"])
    out["net_out"] = float(stats["total_net_output_bytes"])
    out["cpu"] = float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])
    return out


STAMP = re.compile(rb"<(\d{19})>")


def redis_streams_sample(url: str, prefix: str, keys: int = 50) -> dict[str, float]:
    """From up to ``keys`` of this run's task streams: payload bytes of an event entry
    (field names and values), the server's memory per entry, and how long a delta took
    from its stamp to its ``XADD`` (an entry id is the server's clock in ms when it was
    added): the owner's share of the follower's latency."""
    client = redis_client(url)
    payload: list[int] = []
    memory: list[float] = []
    to_redis: list[float] = []
    try:
        for key in list(client.scan_iter(match=f"{prefix}live:*", count=1000))[:keys]:
            entries = client.xrange(key)
            for entry_id, fields in entries:
                if fields.get(b"k") != b"e":
                    continue
                payload.append(sum(len(k) + len(v) for k, v in fields.items()))
                added_ms = int(entry_id.split(b"-")[0])
                to_redis += [added_ms - int(ns) / 1e6 for ns in STAMP.findall(fields[b"e"])]
            used = client.memory_usage(key)
            if entries and used:
                memory.append(used / len(entries))
    finally:
        client.close()
    return {"entry_payload_bytes": statistics.mean(payload) if payload else float("nan"),
            "memory_per_entry_bytes": statistics.mean(memory) if memory else float("nan"),
            "to_redis_p50_ms": pct(to_redis, 50), "to_redis_p99_ms": pct(to_redis, 99)}


def delete_redis_keys(url: str, prefix: str) -> int:
    client = redis_client(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.unlink(*keys[start:start + 500])
    finally:
        client.close()
    return len(keys)


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": pct(values, 50), "p90": pct(values, 90),
            "p99": pct(values, 99), "max": max(values, default=float("nan"))}


def pacing(streams: int, rate: float, seconds: float) -> tuple[int, float, float]:
    """(deltas per stream, interval, start delay) for ``streams`` streams sending ``rate``
    deltas per second in all for ``seconds``; the start delay lets the subscribers on
    the other replica arrive (longer for more streams)."""
    interval = streams / rate
    return max(1, round(seconds / interval)), interval, 0.5 + streams / 200


# part 3: cross-replica latency ---------------------------------------------------------------


async def part_latency(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    async with migrated_database(args.dsn) as url:
        env = replica_env()
        endpoints = {}
        for streams in args.streams:
            deltas, interval, delay = pacing(streams, args.rate, args.round_seconds)
            endpoints[streams] = (stamp_endpoint(url, env, f"stamp{streams}", deltas,
                                                 interval, delay), deltas)
        for run in range(args.latency_rounds):
            for streams in args.streams:
                for mode in args.live:
                    endpoint, deltas = endpoints[streams]
                    result = await latency_round(args, url, env, workdir, mode, streams,
                                                 endpoint, deltas, f"{mode}{streams}r{run}")
                    rounds.append(result)
                    print_latency_round(result, run, args)
    return {"rounds": rounds}


async def latency_round(
    args: argparse.Namespace, url: str, env: dict[str, str], workdir: Path, mode: str,
    streams: int, endpoint: str, deltas: int, tag: str,
) -> dict[str, Any]:
    """``streams`` tasks run on A, each streamed from A and followed on B; deltas stamped
    before every follower had its first event are not timed (they measure the start)."""
    local: list[float] = []
    remote: list[float] = []
    in_snapshot = 0
    followed: list[int] = []
    env = {**env, **live_env(mode, args)}
    async with replicas((f"{tag}-a", f"{tag}-b"), url, env, workdir) as gateways:
        a, b = gateways
        redis_before = redis_counters(args.redis_url) if mode == "redis" else None
        cpu_before, started = cpu_of(gateways), time.monotonic()
        async with client_session(2 * streams) as http:
            got = await asyncio.wait_for(asyncio.gather(*(
                _one_stream(http, a.base, b.base, endpoint, followed) for _ in range(streams)
            )), timeout=args.round_seconds + 120)
        cpu_after, seconds = cpu_of(gateways), time.monotonic() - started
        redis = None
        if redis_before is not None:
            after = redis_counters(args.redis_url)
            redis = {k: after[k] - redis_before[k] for k in after}
            redis.update(redis_streams_sample(args.redis_url, args.redis_prefix))
    if mode == "redis":
        delete_redis_keys(args.redis_url, args.redis_prefix)
    settled = max(followed, default=0)
    early = 0
    for local_ms, remote_ms, snapped in got:
        local += [ms for stamp, ms in local_ms if stamp >= settled]
        remote += [ms for stamp, ms in remote_ms if stamp >= settled]
        early += sum(1 for stamp, _ in remote_ms if stamp < settled)
        in_snapshot += snapped
    published = streams * deltas
    return {
        "mode": mode, "streams": streams, "deltas": published, "seconds": seconds,
        "local": summary(local), "remote": summary(remote), "in_snapshot": in_snapshot,
        "missing": max(0, published - len(remote) - early - in_snapshot), "early": early,
        "cpu_a": cpu_after[0] - cpu_before[0], "cpu_b": cpu_after[1] - cpu_before[1],
        "redis": redis,
    }


def print_latency_round(r: dict[str, Any], run: int, args: argparse.Namespace) -> None:
    print(
        f"run {run + 1}/{args.latency_rounds} {r['streams']:>4} streams {r['mode']:<6}"
        f" owner p50 {r['local']['p50']:6.2f} p99 {r['local']['p99']:6.2f} ms"
        f" | follower p50 {r['remote']['p50']:6.2f} p99 {r['remote']['p99']:6.2f} ms"
        f" | n={r['remote']['n']} early {r['early']} snapshot {r['in_snapshot']}"
        f" missing {r['missing']}"
        f" | cpu A {r['cpu_a']:.2f}s B {r['cpu_b']:.2f}s load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


async def _one_stream(
    http: Any, a_base: str, b_base: str, endpoint: str, followed: list[int]
) -> tuple[list[tuple[int, float]], list[tuple[int, float]], int]:
    """Stream a task from A and follow it on B: (stamp, ms) of every delta each got by
    ``append``, and how many B got in its snapshot; appends to ``followed`` when B's
    stream has its first event."""
    local: list[tuple[int, float]] = []
    remote: list[tuple[int, float]] = []
    snapshot = [0]
    subscribed: asyncio.Task[None] | None = None

    async def follow(task_id: str) -> None:
        body = rpc("SubscribeToTask", {"id": task_id})
        async for arrived, result in sse_events(http, f"{b_base}/{endpoint}/a2a", body):
            if not remote and not snapshot[0]:
                followed.append(arrived)
            remote.extend(stamped(result, arrived, snapshot))

    body = rpc("SendStreamingMessage", user_message("stamp"))
    async for arrived, result in sse_events(http, f"{a_base}/{endpoint}/a2a", body):
        if subscribed is None and "task" in result:
            subscribed = asyncio.create_task(follow(result["task"]["id"]))
        local.extend(stamped(result, arrived))
    if subscribed is not None:
        await asyncio.wait_for(subscribed, 30)
    return local, remote, snapshot[0]


# part 4: cross-replica deltas per CPU-second ---------------------------------------------------


async def part_crossrate(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    deltas, interval, delay = pacing(args.cross_streams, args.cross_rate, args.round_seconds)
    async with migrated_database(args.dsn) as url:
        env = replica_env()
        endpoint = stamp_endpoint(url, env, "crossrate", deltas, interval, delay)
        for run in range(args.latency_rounds):
            for mode in ("local", *args.live):
                r = await crossrate_round(args, url, env, workdir, mode, endpoint,
                                          f"x{mode}r{run}")
                r["offered"] = args.cross_streams * deltas
                rounds.append(r)
                print(
                    f"run {run + 1}/{args.latency_rounds} crossrate {mode:<6}"
                    f" {r['delivered']} of {r['offered']} deltas in {r['seconds']:.1f}s,"
                    f" cpu A {r['cpu_a']:.2f}s B {r['cpu_b']:.2f}s"
                    f" → {r['per_cpu_second']:,.0f} deltas per CPU-s"
                    f"  load {os.getloadavg()[0]:.1f}", flush=True,
                )
    return {"rounds": rounds, "deltas_per_task": deltas, "interval": interval}


async def crossrate_round(
    args: argparse.Namespace, url: str, env: dict[str, str], workdir: Path, mode: str,
    endpoint: str, tag: str,
) -> dict[str, Any]:
    """Tasks started on A with no client there, each followed on B (``local``: on A)."""
    names = (f"{tag}-a",) if mode == "local" else (f"{tag}-a", f"{tag}-b")
    async with replicas(names, url, {**env, **live_env(mode, args)}, workdir) as gateways:
        a, follower = gateways[0], gateways[-1]
        redis_before = redis_counters(args.redis_url) if mode == "redis" else None
        cpu_before, started = cpu_of(gateways), time.monotonic()
        async with client_session(2 * args.cross_streams) as http:
            counts = await asyncio.wait_for(asyncio.gather(*(
                _followed_task(http, a.base, follower.base, endpoint)
                for _ in range(args.cross_streams)
            )), timeout=args.round_seconds + 120)
        cpu_after, seconds = cpu_of(gateways), time.monotonic() - started
        redis_cpu = None
        if redis_before is not None:
            redis_cpu = redis_counters(args.redis_url)["cpu"] - redis_before["cpu"]
    if mode == "redis":
        delete_redis_keys(args.redis_url, args.redis_prefix)
    cpu = [after - before for before, after in zip(cpu_before, cpu_after, strict=True)]
    delivered = sum(counts)
    return {"mode": mode, "delivered": delivered, "seconds": seconds, "cpu_a": cpu[0],
            "cpu_b": cpu[-1] if len(cpu) > 1 else 0.0, "redis_cpu": redis_cpu,
            "per_cpu_second": delivered / sum(cpu) if sum(cpu) > 0 else float("nan")}


async def _followed_task(http: Any, a_base: str, follower_base: str, endpoint: str) -> int:
    """Start a task on A without waiting for it, follow it on ``follower_base``: the deltas
    received (in the snapshot or after it)."""
    params = {**user_message("stamp"), "configuration": {"returnImmediately": True}}
    async with http.post(f"{a_base}/{endpoint}/a2a", json=rpc("SendMessage", params),
                         headers={"A2A-Version": "1.0"}) as reply:
        body = await reply.json()
    task_id = body["result"]["task"]["id"]
    snapshot = [0]
    appended = 0
    subscribe = rpc("SubscribeToTask", {"id": task_id})
    async for arrived, result in sse_events(http, f"{follower_base}/{endpoint}/a2a", subscribe):
        appended += len(stamped(result, arrived, snapshot))
    return appended + snapshot[0]


# part 5: rate-limit cost ------------------------------------------------------------------------

LIMITED_ENDPOINTS = """endpoints:
  - id: {id}
    name: echo
    handler: handlers.echo:EchoHandler
    public: true
    settings: {{delay: 0}}
{limit}"""
NEVER_REFUSED = "    rate_limit: {per_second: 1000000000, burst: 1000000000}\n"
RATE_CONFIGS = (  # (name, the endpoint has a rate limit, the gateway has a Redis)
    ("no limit", False, False),
    ("local limit", True, False),
    ("redis limit", True, True),
    ("redis, no limit", False, True),
)


def part_ratelimit(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    in_process = [run_loop(limiter_costs(args)) for _ in range(args.runs)]
    for costs in in_process:
        print("admit: " + "  ".join(f"{k} {v:.1f}" for k, v in costs.items()), flush=True)
    gateway: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in RATE_CONFIGS}
    for run in range(args.runs):
        for name, limited, redis in RATE_CONFIGS:
            sample = send_cost(args, workdir, limited, redis, f"rl{run}{len(gateway[name])}")
            gateway[name].append(sample)
            print(f"run {run + 1}/{args.runs} {name:<16} {sample['rps']:7.0f} req/s"
                  f"  cpu {sample['cpu_us']:5.0f} µs/req  errors {sample['errors']:.0f}"
                  f"  load {sample['load']:.1f}", flush=True)
    delete_redis_keys(args.redis_url, args.redis_prefix)
    return {"in_process": in_process, "gateway": gateway}


def run_loop(coroutine: Any) -> Any:
    """Run on uvloop when installed, as ``serve`` does."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


async def limiter_costs(args: argparse.Namespace) -> dict[str, float]:
    """CPU µs per ``admit`` of the local and the Redis limiter, and the Redis one's wall
    time per call, one call at a time and 32 at once (64 callers, never refused)."""
    from a2a_gateway.auth.rate_limit import FleetRateLimiter, RateLimit, RateLimiter
    from a2a_gateway.live.redis import open_redis

    limit = RateLimit(per_second=1e9, burst=10**9)
    calls = args.admit_calls
    local = RateLimiter()
    cpu = time.process_time()
    for i in range(calls * 10):
        local.admit("endpoint", f"caller{i % 64}", limit)
    out = {"local_cpu_us": (time.process_time() - cpu) / (calls * 10) * 1e6}
    redis = open_redis(args.redis_url)
    fleet = FleetRateLimiter(redis, args.redis_prefix)
    try:
        for i in range(200):  # connections and the script loaded
            await fleet.admit("endpoint", f"caller{i % 64}", limit)
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(calls):
            await fleet.admit("endpoint", f"caller{i % 64}", limit)
        out["redis_cpu_us"] = (time.process_time() - cpu) / calls * 1e6
        out["redis_wall_us"] = (time.perf_counter() - wall) / calls * 1e6
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(calls // 32):
            await asyncio.gather(*(fleet.admit("endpoint", f"caller{i}", limit)
                                   for i in range(32)))
        out["redis_cpu_us_32"] = (time.process_time() - cpu) / (calls // 32 * 32) * 1e6
        out["redis_wall_us_32"] = (time.perf_counter() - wall) / (calls // 32) * 1e6
    finally:
        await redis.aclose()
    buckets = sum(1 for _ in redis_client(args.redis_url).scan_iter(
        match=f"{args.redis_prefix}rate:*", count=1000))
    if buckets != 64:  # the limiter counted locally: Redis did not answer
        raise RuntimeError(f"expected 64 buckets in Redis, found {buckets}")
    return out


def send_cost(args: argparse.Namespace, workdir: Path, limited: bool, redis: bool,
              tag: str) -> dict[str, float]:
    """Blocking SendMessage under ``wrk`` through one ``serve`` on ``memory://``, pinned as
    ``core_send.py`` pins it: requests/s and the gateway's CPU µs per request."""
    from bench.core_send import cpu_seconds, loadavg, probe, run_wrk
    from bench.servers.common import BENCH_ENDPOINT_ID

    endpoints = workdir / f"{tag}.yaml"
    endpoints.write_text(LIMITED_ENDPOINTS.format(
        id=BENCH_ENDPOINT_ID, limit=NEVER_REFUSED if limited else ""))
    env = gateway_env(**(live_env("redis", args) if redis else {}))
    gateway = Gateway(tag, "memory://", env, workdir, ("--endpoints", str(endpoints)),
                      cpu=args.server_cpu)
    url = f"{gateway.base}/{BENCH_ENDPOINT_ID}/a2a"
    try:
        probe(url, time.monotonic() + 30, True)
        run_wrk(url, args, args.warmup)
        load, cpu = loadavg(), cpu_seconds(gateway.proc.pid)
        stats = run_wrk(url, args, args.duration)
        cpu = cpu_seconds(gateway.proc.pid) - cpu
    finally:
        gateway.stop()
    errors = sum(stats[k] for k in ("non2xx", "connect", "read", "write", "timeout"))
    return {"rps": stats["requests"] / (stats["duration_us"] / 1e6),
            "cpu_us": cpu / max(stats["requests"], 1) * 1e6, "errors": errors, "load": load}


# report ------------------------------------------------------------------------------------


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    print()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}")
    if "throughput" in results:
        t = results["throughput"]
        print(
            f"\nSendMessage (blocking, JSON-RPC 1.0, echo delay 0),"
            f" {args.concurrency} connections, "
            f"{args.duration:g}s x {args.runs} runs (medians)"
        )
        print(
            f"| {'store':<10} | {'req/s':>7} | {'p50 ms':>7} | {'p99 ms':>7} "
            f"| {'CPU µs/req':>10} | {'errors':>6} |"
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
                f"| {kind:<10} | {med['rps']:>7.0f} | {med['p50_ms']:>7.2f} "
                f"| {med['p99_ms']:>7.2f} | "
                f"{med['cpu_us']:>10.0f} | {errors:>6} |"
            )
        if t.get("writes_per_blocking_task") is not None:
            print(
                "PostgreSQL task writes per blocking SendMessage (avg row version): "
                f"{t['writes_per_blocking_task']:.2f}"
            )
    if "writes" in results:
        w = results["writes"]
        print(f"\nTask writes per task ({w['tasks']} tasks each, echo of {args.words} words,"
              f" {w['deltas_per_task']:.0f} streamed deltas per task)")
        for mode in ("streamed", "blocking"):
            counts = w[mode]
            print(f"  {mode:<9} {counts['task_writes']:.2f} task writes per task")
    if "latency" in results:
        report_latency(results["latency"], args)
    if "crossrate" in results:
        report_crossrate(results["crossrate"], args)
    if "ratelimit" in results:
        report_ratelimit(results["ratelimit"], args)


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """Median (min–max) of per-run values."""
    values = [v for v in values if v == v]
    if not values:
        return "-"
    middle = fmt.format(statistics.median(values))
    if len(values) == 1:
        return middle
    return f"{middle} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def report_latency(lat: dict[str, Any], args: argparse.Namespace) -> None:
    nan = float("nan")
    print(f"\nDelta yielded on A → received by an SSE client, {args.rate:g} deltas/s in all"
          f" for {args.round_seconds:g} s, {args.latency_rounds} round(s) each on fresh"
          f" processes: median of the rounds (min–max), ms")
    print("| streams | live path | owner p50 | owner p99 | follower p50 | follower p99 "
          "| added p50 | added p99 | timed / snapshot / missing | CPU µs per delta A + B |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for streams in args.streams:
        for mode in args.live:
            rs = [r for r in lat["rounds"] if r["streams"] == streams and r["mode"] == mode]
            if not rs:
                continue
            col = {
                f"{side}{q}": spread([r[side][q] for r in rs])
                for side in ("local", "remote") for q in ("p50", "p99")
            }
            added = {q: spread([r["remote"][q] - r["local"][q] for r in rs])
                     for q in ("p50", "p99")}
            counts = (f"{sum(r['remote']['n'] for r in rs)} / "
                      f"{sum(r['in_snapshot'] for r in rs)} / {sum(r['missing'] for r in rs)}")
            cpu = spread([(r["cpu_a"] + r["cpu_b"]) / r["deltas"] * 1e6 for r in rs], "{:.0f}")
            print(f"| {streams} | {mode} | {col['localp50']} | {col['localp99']} "
                  f"| {col['remotep50']} | {col['remotep99']} | {added['p50']} | {added['p99']} "
                  f"| {counts} | {cpu} |")
    redis_rounds = [r for r in lat["rounds"] if r["redis"]]
    if redis_rounds:
        print("\nRedis per published delta (server-wide counters: other users of that Redis"
              " count too)")
        print("| streams | XADD | EXPIRE | XREAD | PUBLISH | bytes in | bytes out "
              "| Redis CPU µs | entry payload B | memory per entry B "
              "| stamp → XADD p50 / p99 ms (owner's share, ±1 ms) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for streams in args.streams:
            rs = [r for r in redis_rounds if r["streams"] == streams]
            if not rs:
                continue

            def per(key: str, fmt: str = "{:.3f}", scale: float = 1.0) -> str:
                return spread([r["redis"][key] / r["deltas"] * scale for r in rs], fmt)

            print(f"| {streams} | {per('xadd')} | {per('expire')} | {per('xread')} "
                  f"| {per('publish')} | {per('net_in', '{:.0f}')} | {per('net_out', '{:.0f}')} "
                  f"| {per('cpu', '{:.1f}', 1e6)} "
                  f"| {spread([r['redis']['entry_payload_bytes'] for r in rs], '{:.0f}')} "
                  f"| {spread([r['redis']['memory_per_entry_bytes'] for r in rs], '{:.0f}')} "
                  f"| {spread([r['redis'].get('to_redis_p50_ms', nan) for r in rs], '{:.1f}')} / "
                  f"{spread([r['redis'].get('to_redis_p99_ms', nan) for r in rs], '{:.1f}')} |")


def report_crossrate(cross: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"\nDeltas delivered per CPU-second of the gateway processes: {args.cross_streams}"
          f" tasks started on A without a client there, {cross['deltas_per_task']} deltas each"
          f" ({args.cross_rate:g}/s offered), each followed on B (local: on A);"
          f" median of {args.latency_rounds} (min–max)")
    print("| subscribers | deltas/s | deltas per CPU-s (A + B) | CPU A s | CPU B s "
          "| Redis CPU µs/delta | delivered / offered |")
    print("|---|---:|---:|---:|---:|---:|---|")
    medians = {}
    for mode in ("local", *args.live):
        rs = [r for r in cross["rounds"] if r["mode"] == mode]
        if not rs:
            continue
        medians[mode] = statistics.median(r["per_cpu_second"] for r in rs)
        redis = [r["redis_cpu"] / r["delivered"] * 1e6 for r in rs if r["redis_cpu"]]
        print(f"| {mode} | {spread([r['delivered'] / r['seconds'] for r in rs], '{:,.0f}')} "
              f"| {spread([r['per_cpu_second'] for r in rs], '{:,.0f}')} "
              f"| {spread([r['cpu_a'] for r in rs])} | {spread([r['cpu_b'] for r in rs])} "
              f"| {spread(redis, '{:.1f}')} "
              f"| {sum(r['delivered'] for r in rs)} / {sum(r['offered'] for r in rs)} |")
    if "redis" in medians and "notify" in medians:
        print(f"redis / notify, deltas per CPU-second: {medians['redis'] / medians['notify']:.2f}×"
              " (goal ≥ 3×)")


def report_ratelimit(rl: dict[str, Any], args: argparse.Namespace) -> None:
    inproc = rl["in_process"]
    print(f"\nRate-limit check in one process ({args.admit_calls} Redis calls per run,"
          f" {len(inproc)} runs: median (min–max))")
    for key, label in (
        ("local_cpu_us", "RateLimiter.admit, CPU µs"),
        ("redis_cpu_us", "FleetRateLimiter.admit, one at a time, CPU µs"),
        ("redis_wall_us", "FleetRateLimiter.admit, one at a time, wall µs (round trip)"),
        ("redis_cpu_us_32", "FleetRateLimiter.admit, 32 at once, CPU µs per call"),
        ("redis_wall_us_32", "FleetRateLimiter.admit, 32 at once, wall µs per 32"),
    ):
        print(f"  {label:<62} {spread([c[key] for c in inproc])}")
    print(f"\nBlocking SendMessage through `serve` on memory:// (echo, delay 0), {args.concurrency}"
          f" connections, {args.duration:g} s × {args.runs}: median (min–max)")
    print("| gateway | req/s | CPU µs/req | errors |")
    print("|---|---:|---:|---:|")
    for name, samples in rl["gateway"].items():
        print(f"| {name} | {spread([s['rps'] for s in samples], '{:,.0f}')} "
              f"| {spread([s['cpu_us'] for s in samples], '{:.0f}')} "
              f"| {sum(s['errors'] for s in samples):.0f} |")


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


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
    p.add_argument("--live", default="notify",
                   help="live paths between replicas to compare: notify, redis (comma-separated)")
    p.add_argument("--redis-url", default=os.environ.get("A2A_TEST_REDIS_URL"),
                   help="Redis for --live redis and ratelimit (default: $A2A_TEST_REDIS_URL)")
    p.add_argument("--streams", type=int_list, default=[50],
                   help="latency: concurrent streams, comma-separated (e.g. 50,500)")
    p.add_argument("--rate", type=float, default=1000.0,
                   help="latency: deltas per second over all streams")
    p.add_argument("--round-seconds", type=float, default=10.0,
                   help="latency, crossrate: how long the agents stream")
    p.add_argument("--latency-rounds", type=int, default=3,
                   help="latency, crossrate: rounds per configuration, each on fresh processes")
    p.add_argument("--cross-streams", type=int, default=100)
    p.add_argument("--cross-rate", type=float, default=5000.0,
                   help="crossrate: deltas per second offered over all streams")
    p.add_argument("--admit-calls", type=int, default=5000,
                   help="ratelimit: FleetRateLimiter.admit calls per run")
    p.add_argument("--json", help="also write the raw results to this file")
    args = p.parse_args()
    if not args.dsn:
        sys.exit("--dsn (or A2A_TEST_POSTGRES_DSN) is required")
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    args.live = [x.strip() for x in args.live.split(",") if x.strip()]
    if not set(args.live) <= {"notify", "redis"}:
        sys.exit("--live takes notify and/or redis")
    live_parts = parts & {"latency", "crossrate"}
    needs_redis = "ratelimit" in parts or ("redis" in args.live and bool(live_parts))
    if needs_redis and not args.redis_url:
        sys.exit("--redis-url (or A2A_TEST_REDIS_URL) is required for redis and ratelimit")
    args.redis_prefix = f"bench{uuid.uuid4().hex[:8]}:"
    bounds = [(args.runs, 1, 20, "--runs"), (args.duration, 1, 120, "--duration"),
              (args.write_tasks, 1, 1000, "--write-tasks"), (args.words, 1, 5000, "--words"),
              (min(args.streams, default=0), 1, 2000, "--streams"),
              (max(args.streams, default=0), 1, 2000, "--streams"),
              (args.rate, 1, 100_000, "--rate"), (args.round_seconds, 1, 600, "--round-seconds"),
              (args.cross_streams, 1, 2000, "--cross-streams"),
              (args.cross_rate, 1, 100_000, "--cross-rate"),
              (args.admit_calls, 32, 1_000_000, "--admit-calls"),
              (args.latency_rounds, 1, 100, "--latency-rounds")]
    for value, low, high, name in bounds:
        if not low <= value <= high:
            sys.exit(f"{name} must be {low}..{high}")
    if parts & {"throughput", "ratelimit"} and not __import__("shutil").which("wrk"):
        sys.exit("wrk is not installed (Debian/Ubuntu: apt-get install wrk)")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="a2a-bench-pg-") as tmp:
        workdir = Path(tmp)
        if "throughput" in parts:
            results["throughput"] = part_throughput(args, workdir)
        if "writes" in parts:
            results["writes"] = asyncio.run(part_writes(args, workdir))
        try:
            if "latency" in parts:
                results["latency"] = asyncio.run(part_latency(args, workdir))
            if "crossrate" in parts:
                results["crossrate"] = asyncio.run(part_crossrate(args, workdir))
            if "ratelimit" in parts:
                results["ratelimit"] = part_ratelimit(args, workdir)
        finally:
            if args.redis_url:
                delete_redis_keys(args.redis_url, args.redis_prefix)
    report(results, args)
    if args.json:
        serial = json.loads(json.dumps(results, default=lambda o: getattr(o, "__dict__", str(o))))
        options = {k: v for k, v in vars(args).items() if k not in ("redis_url", "dsn")}
        Path(args.json).write_text(json.dumps({"args": options, "results": serial}, indent=2))


if __name__ == "__main__":
    main()
