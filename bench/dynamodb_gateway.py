"""SendMessage through the gateway: DynamoDB-in-moto vs SQLite (relative cost only).

    python bench/dynamodb_gateway.py [--endpoint http://127.0.0.1:PORT] [--runs 3] [--duration 8]
    python bench/dynamodb_gateway.py --ref HEAD~1  # also the gateway as of HEAD~1, side by side

Blocking SendMessage (JSON-RPC, A2A 1.0) on an echo agent with no delay, from ``wrk``
(``bench/wrk_send.lua``, a separate process) against the gateway launcher
``bench/servers/gateway.py`` (also its own process), once with a fresh ``sqlite:///`` file and
once with ``dynamodb://`` on fresh tables in moto. Runs are interleaved and the table shows
medians. Without ``--endpoint`` (or ``A2A_TEST_DYNAMODB_ENDPOINT``) a moto server is started.

The table gives the store calls per request (the gateway's own count, from ``/metrics``, by
operation). ``--ref REF`` adds the rows of the gateway as committed at ``REF`` (a ``git archive``
snapshot in a temporary directory; the working tree is not touched), interleaved with the
others, so a change's before and after come from one run. moto is one Python process
answering HTTP, so it is the bottleneck of the DynamoDB rows: the numbers say what the store's
call pattern costs relative to SQLite on one machine, not what real DynamoDB would do
(single-digit ms per call, any scale). The gateway's own CPU per request (botocore building,
signing and parsing each call) is measured separately and does carry over.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
    calls: dict[str, float] = field(default_factory=dict)
    """Store calls per request, by operation (the gateway's ``a2a_gateway_store_call_seconds``)."""


@dataclass
class Row:
    name: str
    store: str
    """``sqlite`` or ``dynamodb``."""
    source: str | None = None
    """A snapshot of the packages to serve (``A2A_BENCH_SOURCE``); None: the working tree."""
    samples: list[Sample] = field(default_factory=list)
    failures: int = 0

    def median(self, attr: str) -> float:
        values = [getattr(s, attr) for s in self.samples]
        return statistics.median(values) if values else float("nan")

    def calls(self) -> tuple[float, str]:
        """Median store calls per request, and the median of each operation."""
        if not self.samples:
            return float("nan"), ""
        total = statistics.median(sum(s.calls.values()) for s in self.samples)
        ops = sorted({op for s in self.samples for op in s.calls})
        each = {op: statistics.median(s.calls.get(op, 0.0) for s in self.samples) for op in ops}
        return total, " ".join(f"{op} {n:.2f}" for op, n in each.items() if n >= 0.005)


CALL_METRIC = "a2a_gateway_store_call_seconds_count"


def store_calls(base_url: str) -> dict[str, float]:
    """The gateway's store calls so far, by operation (its ``/metrics``)."""
    import httpx

    calls: dict[str, float] = {}
    for line in httpx.get(f"{base_url}/metrics", timeout=10).text.splitlines():
        if line.startswith(CALL_METRIC + "{"):
            labels, _, value = line[len(CALL_METRIC) + 1:].partition("} ")
            operation = labels.split('operation="', 1)[1].split('"', 1)[0]
            calls[operation] = calls.get(operation, 0.0) + float(value)
    return calls


def snapshot(ref: str, workdir: Path) -> Path:
    """The gateway's packages as committed at ``ref``, in a directory of ``workdir``."""
    target = workdir / f"source-{uuid.uuid4().hex[:8]}"
    target.mkdir()
    archive = subprocess.run(["git", "archive", ref, "a2a_gateway", "handlers", "migrations"],
                             cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def server_env(source: str | None) -> dict[str, str]:
    """The gateway's environment: moto's dummy credentials, never real ones."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "A2A_GATEWAY_", "A2A_BENCH_SOURCE"))
    }
    if source is not None:
        env["A2A_BENCH_SOURCE"] = source
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
    row: Row, store_url: str, args: argparse.Namespace, workdir: Path, backend_pid: int | None
) -> Sample:
    name = row.name
    port = free_port()
    argv = [sys.executable, str(SERVERS / "gateway.py"), "--port", str(port),
            "--store", store_url, "--log-level", "warning"]
    log_path = workdir / f"{name}.log"
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen(pinned(args.server_cpu, argv), stdout=log_file,
                                stderr=subprocess.STDOUT, cwd=ROOT, env=server_env(row.source))
    url = f"http://127.0.0.1:{port}/{ENDPOINT_ID}/a2a"
    try:
        probe(url, time.monotonic() + 30, True)
        if args.warmup > 0:
            run_wrk(url, args, args.warmup)
        base_url = f"http://127.0.0.1:{port}"
        calls_before = store_calls(base_url)
        cpu_before = cpu_seconds(proc.pid)
        backend_before = cpu_seconds(backend_pid) if backend_pid else float("nan")
        stats = run_wrk(url, args, args.duration)
        cpu_used = cpu_seconds(proc.pid) - cpu_before
        calls_after = store_calls(base_url)
        backend_used = cpu_seconds(backend_pid) - backend_before if backend_pid else float("nan")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    requests = max(stats["requests"], 1)
    errors = int(
        stats["non2xx"] + stats["connect"] + stats["read"] + stats["write"] + stats["timeout"]
    )
    return Sample(
        rps=stats["requests"] / (stats["duration_us"] / 1e6),
        p50_ms=stats["p50_us"] / 1000, p99_ms=stats["p99_us"] / 1000, errors=errors,
        gateway_cpu_us=cpu_used / requests * 1e6, backend_cpu_us=backend_used / requests * 1e6,
        calls={op: (n - calls_before.get(op, 0.0)) / requests for op, n in calls_after.items()
               if n > calls_before.get(op, 0.0)},
    )


def print_table(rows: dict[str, Row], args: argparse.Namespace) -> None:
    print()
    print(f"SendMessage (blocking, JSON-RPC 1.0), echo delay 0, {args.concurrency} connections, "
          f"{args.duration:g}s x {args.runs} runs (medians)")
    print(machine_note(args))
    print()
    print(
        "| gateway | req/s | p50 ms | p99 ms | runs (req/s) | gateway CPU µs/req | moto CPU µs/req "
        "| store calls/req | by operation | errors |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|---|---:|")
    for row in rows.values():
        runs = " ".join(f"{s.rps:.0f}" for s in row.samples)
        if row.failures:
            runs += f" ({row.failures} failed)"
        backend = row.median("backend_cpu_us")
        print(f"| {row.name} | {row.median('rps'):.0f} | {row.median('p50_ms'):.2f} | "
              f"{row.median('p99_ms'):.2f} | {runs} | {row.median('gateway_cpu_us'):.0f} | "
              f"{'–' if backend != backend else f'{backend:.0f}'} | "
              f"{row.calls()[0]:.2f} | {row.calls()[1]} | "
              f"{sum(s.errors for s in row.samples)} |")
    for suffix in ("", f" @{args.ref}"):
        sqlite, dynamo = rows.get("sqlite" + suffix), rows.get("dynamodb-moto" + suffix)
        if sqlite and dynamo and sqlite.samples and dynamo.samples:
            print()
            print(
                f"dynamodb-moto / sqlite{suffix}: "
                f"{dynamo.median('rps') / sqlite.median('rps'):.2f}x req/s, "
                f"{dynamo.median('gateway_cpu_us') / sqlite.median('gateway_cpu_us'):.2f}x"
                " gateway CPU per request"
            )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--endpoint", default=os.environ.get("A2A_TEST_DYNAMODB_ENDPOINT", ""),
                   help="a running moto server (default: start one)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--threads", type=int, default=1, help="wrk threads")
    p.add_argument("--duration", type=float, default=8.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per run (discarded)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--server-cpu", type=int, default=0, help="pin the gateway here (taskset)")
    p.add_argument("--client-cpu", type=int, default=1, help="pin wrk here (taskset)")
    p.add_argument(
        "--ref", help="also the gateway as committed at this git ref (e.g. HEAD~1), side by side"
    )
    p.add_argument("--json", help="also write the raw samples to this file")
    args = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian/Ubuntu: apt-get install wrk)")
    if not 1 <= args.runs <= 20 or not 1 <= args.duration <= 120 or not 0 <= args.warmup <= 60:
        sys.exit("--runs must be 1..20, --duration 1..120 s and --warmup 0..60 s")

    moto, endpoint = (None, args.endpoint) if args.endpoint else start_moto()
    backend_pid = moto.pid if moto is not None else None
    try:
        with tempfile.TemporaryDirectory(prefix="a2a-bench-") as tmp:
            workdir = Path(tmp)
            sources: list[tuple[str, str | None]] = [("", None)]
            if args.ref:
                sources.insert(0, (f" @{args.ref}", str(snapshot(args.ref, workdir))))
            rows = {f"{store}{suffix}": Row(f"{store}{suffix}", store.split("-")[0], source)
                    for suffix, source in sources for store in ("sqlite", "dynamodb-moto")}
            for run in range(args.runs):
                for name, row in rows.items():
                    dynamo = row.store == "dynamodb"
                    url = (dynamodb_url(endpoint, f"bench{uuid.uuid4().hex[:8]}-") if dynamo
                           else f"sqlite:///{workdir / f'bench-{uuid.uuid4().hex[:8]}.db'}")
                    try:
                        if dynamo:
                            asyncio.run(create_tables(url))
                        sample = one_run(row, url, args, workdir, backend_pid if dynamo else None)
                    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
                        log = workdir / f"{name}.log"
                        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                        print(f"run {run + 1}/{args.runs} {name:<22} FAILED: {exc}\n{tail}",
                              file=sys.stderr, flush=True)
                        rows[name].failures += 1
                        continue
                    finally:
                        if dynamo:
                            drop_tables(url)
                    rows[name].samples.append(sample)
                    print(
                        f"run {run + 1}/{args.runs} {name:<22} {sample.rps:7.0f} req/s"
                        f"  p50 {sample.p50_ms:6.2f} ms  p99 {sample.p99_ms:7.2f} ms"
                        f"  gateway cpu {sample.gateway_cpu_us:5.0f} µs/req"
                        f"  store calls {sum(sample.calls.values()):.2f}/req"
                        f"  errors {sample.errors}"
                        f"  load {loadavg():.2f}",
                        flush=True,
                    )
            print_table(rows, args)
            if args.json:
                Path(args.json).write_text(
                    json.dumps(
                        {
                            "machine": machine_note(args),
                            "results": {
                                name: [s.__dict__ for s in row.samples]
                                for name, row in rows.items()
                            },
                        },
                        indent=2,
                    )
                )
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait()


if __name__ == "__main__":
    main()
