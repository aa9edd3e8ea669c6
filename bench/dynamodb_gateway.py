"""SendMessage through the gateway: DynamoDB-in-moto vs SQLite (relative cost only).

    python bench/dynamodb_gateway.py [--endpoint http://127.0.0.1:PORT] [--runs 3] [--duration 8]

Blocking SendMessage (JSON-RPC, A2A 1.0) on an echo agent with no delay, from ``wrk``
(``bench/wrk_send.lua``, a separate process) against the gateway launcher
``bench/servers/gateway.py`` (also its own process), once with a fresh ``sqlite:///`` file and
once with ``dynamodb://`` on fresh tables in moto. Runs are interleaved and the table shows
medians. Without ``--endpoint`` (or ``A2A_TEST_DYNAMODB_ENDPOINT``) a moto server is started.

Each request costs the store four calls (read context, create task, write context, complete the
task). moto is one Python process answering HTTP, so it is the bottleneck of the DynamoDB rows:
the numbers say what the store's call pattern costs relative to SQLite on one machine, not what
real DynamoDB would do (single-digit ms per call, any scale). The gateway's own CPU per request
(botocore building, signing and parsing each call) is measured separately and does carry over.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core_send import (  # noqa: E402
    ENDPOINT_ID,
    ROOT,
    SERVERS,
    cpu_seconds,
    free_port,
    loadavg,
    machine_note,
    pinned,
    probe,
    run_wrk,
)
from bench.dynamodb_store import start_moto  # noqa: E402

CREDENTIALS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
REGION = "eu-central-1"


@dataclass
class Sample:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    gateway_cpu_us: float
    backend_cpu_us: float
    """CPU of the moto process per request (DynamoDB rows only)."""


@dataclass
class Row:
    name: str
    samples: list[Sample] = field(default_factory=list)
    failures: int = 0

    def median(self, attr: str) -> float:
        values = [getattr(s, attr) for s in self.samples]
        return statistics.median(values) if values else float("nan")


def server_env() -> dict[str, str]:
    """The gateway's environment: moto's dummy credentials, never real ones."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "A2A_GATEWAY_"))}
    env.update(
        AWS_ACCESS_KEY_ID=CREDENTIALS["aws_access_key_id"],
        AWS_SECRET_ACCESS_KEY=CREDENTIALS["aws_secret_access_key"],
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def dynamodb_url(endpoint: str, prefix: str) -> str:
    return f"dynamodb://?region={REGION}&table_prefix={prefix}&endpoint_url={endpoint}"


async def create_tables(url: str) -> None:
    from a2a_gateway.stores.dynamodb import create_tables as create

    await create(url, **CREDENTIALS)


def drop_tables(url: str) -> None:
    from a2a_gateway.stores.dynamodb import DynamoDBSettings, _client, table_definitions

    settings = DynamoDBSettings.from_url(url)
    client = _client(settings, CREDENTIALS)
    try:
        for name in (d["TableName"] for d in table_definitions(settings)):
            try:
                client.delete_table(TableName=name)
            except client.exceptions.ResourceNotFoundException:
                pass
    finally:
        client.close()


def one_run(
    name: str, store_url: str, args: argparse.Namespace, workdir: Path, backend_pid: int | None
) -> Sample:
    port = free_port()
    argv = [sys.executable, str(SERVERS / "gateway.py"), "--port", str(port),
            "--store", store_url, "--log-level", "warning"]
    log_path = workdir / f"{name}.log"
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen(pinned(args.server_cpu, argv), stdout=log_file,
                                stderr=subprocess.STDOUT, cwd=ROOT, env=server_env())
    url = f"http://127.0.0.1:{port}/{ENDPOINT_ID}/a2a"
    try:
        probe(url, time.monotonic() + 30, True)
        if args.warmup > 0:
            run_wrk(url, args, args.warmup)
        cpu_before = cpu_seconds(proc.pid)
        backend_before = cpu_seconds(backend_pid) if backend_pid else float("nan")
        stats = run_wrk(url, args, args.duration)
        cpu_used = cpu_seconds(proc.pid) - cpu_before
        backend_used = cpu_seconds(backend_pid) - backend_before if backend_pid else float("nan")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    requests = max(stats["requests"], 1)
    errors = int(stats["non2xx"] + stats["connect"] + stats["read"] + stats["write"] + stats["timeout"])
    return Sample(
        rps=stats["requests"] / (stats["duration_us"] / 1e6),
        p50_ms=stats["p50_us"] / 1000, p99_ms=stats["p99_us"] / 1000, errors=errors,
        gateway_cpu_us=cpu_used / requests * 1e6, backend_cpu_us=backend_used / requests * 1e6,
    )


def print_table(rows: dict[str, Row], args: argparse.Namespace) -> None:
    print()
    print(f"SendMessage (blocking, JSON-RPC 1.0), echo delay 0, {args.concurrency} connections, "
          f"{args.duration:g}s x {args.runs} runs (medians)")
    print(machine_note(args))
    print()
    print("| store | req/s | p50 ms | p99 ms | runs (req/s) | gateway CPU µs/req | moto CPU µs/req | errors |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for row in rows.values():
        runs = " ".join(f"{s.rps:.0f}" for s in row.samples)
        if row.failures:
            runs += f" ({row.failures} failed)"
        backend = row.median("backend_cpu_us")
        print(f"| {row.name} | {row.median('rps'):.0f} | {row.median('p50_ms'):.2f} | "
              f"{row.median('p99_ms'):.2f} | {runs} | {row.median('gateway_cpu_us'):.0f} | "
              f"{'–' if backend != backend else f'{backend:.0f}'} | "
              f"{sum(s.errors for s in row.samples)} |")
    sqlite, dynamo = rows["sqlite"], rows["dynamodb-moto"]
    if sqlite.samples and dynamo.samples:
        print()
        print(f"dynamodb-moto / sqlite: {dynamo.median('rps') / sqlite.median('rps'):.2f}x req/s, "
              f"{dynamo.median('gateway_cpu_us') / sqlite.median('gateway_cpu_us'):.2f}x gateway CPU per request")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", default=os.environ.get("A2A_TEST_DYNAMODB_ENDPOINT", ""),
                   help="a running moto server (default: start one)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--threads", type=int, default=1, help="wrk threads")
    p.add_argument("--duration", type=float, default=8.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per run (discarded)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--server-cpu", type=int, default=0, help="pin the gateway here (taskset)")
    p.add_argument("--client-cpu", type=int, default=1, help="pin wrk here (taskset)")
    args = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian/Ubuntu: apt-get install wrk)")
    if not 1 <= args.runs <= 20 or not 1 <= args.duration <= 120 or not 0 <= args.warmup <= 60:
        sys.exit("--runs must be 1..20, --duration 1..120 s and --warmup 0..60 s")

    moto, endpoint = (None, args.endpoint) if args.endpoint else start_moto()
    backend_pid = moto.pid if moto is not None else None
    rows = {"sqlite": Row("sqlite"), "dynamodb-moto": Row("dynamodb-moto")}
    try:
        with tempfile.TemporaryDirectory(prefix="a2a-bench-") as tmp:
            workdir = Path(tmp)
            for run in range(args.runs):
                urls = {
                    "sqlite": f"sqlite:///{workdir / f'bench-{run}.db'}",
                    "dynamodb-moto": dynamodb_url(endpoint, f"bench{uuid.uuid4().hex[:8]}-"),
                }
                for name, url in urls.items():
                    dynamo = name == "dynamodb-moto"
                    try:
                        if dynamo:
                            asyncio.run(create_tables(url))
                        sample = one_run(name, url, args, workdir, backend_pid if dynamo else None)
                    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
                        log = workdir / f"{name}.log"
                        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                        print(f"run {run + 1}/{args.runs} {name:<14} FAILED: {exc}\n{tail}",
                              file=sys.stderr, flush=True)
                        rows[name].failures += 1
                        continue
                    finally:
                        if dynamo:
                            drop_tables(url)
                    rows[name].samples.append(sample)
                    print(f"run {run + 1}/{args.runs} {name:<14} {sample.rps:7.0f} req/s"
                          f"  p50 {sample.p50_ms:6.2f} ms  p99 {sample.p99_ms:7.2f} ms"
                          f"  gateway cpu {sample.gateway_cpu_us:5.0f} µs/req  errors {sample.errors}"
                          f"  load {loadavg():.2f}", flush=True)
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait()
    print_table(rows, args)


if __name__ == "__main__":
    main()
