"""Core benchmark: blocking SendMessage (JSON-RPC, A2A 1.0) on an echo agent, side by side.

Servers (each its own process, started fresh for every run):

    gateway-memory       ``a2a-gateway serve`` on ``memory://``, log level warning
    gateway-memory-info  the same with log level info (one JSON log line per request)
    a2a-sdk              the official a2a-sdk server (Starlette + uvicorn, httptools, uvloop)
    bare-aiohttp         an aiohttp handler returning a fixed JSON-RPC reply
    gateway-sqlite       ``a2a-gateway serve`` on a fresh ``sqlite:///`` file, log level warning
    gateway-sqlite-key   gateway-sqlite with a private endpoint: every request carries an API key
    gateway-sqlite-key-limits  gateway-sqlite-key whose key has two quotas (tasks_per_minute and
                         concurrent_tasks, both far above the load): each request is admitted
    gateway-postgres     ``a2a-gateway serve`` on a fresh, migrated PostgreSQL database per run
                         (``--postgres-dsn``, default ``$A2A_TEST_POSTGRES_DSN``; one replica)

The gateways are the shipped command (``servers/gateway.py`` writes an endpoints file and
execs ``a2a-gateway serve``), on the event loop it picks (uvloop with the ``speed`` extra).

The load generator is ``wrk`` with ``bench/wrk_send.lua`` (a fresh messageId per request),
a closed loop of ``--concurrency`` connections. With ``taskset`` available the server is
pinned to ``--server-cpu`` and wrk to ``--client-cpu``. Every run is a warm-up of
``--warmup`` s followed by a measured ``--duration`` s; configurations are interleaved
run by run (so background noise spreads over all of them) and the table shows medians.
``--ref REF`` (repeatable) adds the gateway rows of the gateway as committed at REF (a ``git
archive`` snapshot; or a directory holding the packages), side by side with the working tree's.

    python bench/core_send.py --runs 3 --duration 8 --concurrency 64
    python bench/core_send.py --ref HEAD~3 --servers gateway-memory,gateway-sqlite,a2a-sdk
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
SERVERS = BENCH_DIR / "servers"
LUA = BENCH_DIR / "wrk_send.lua"
ENDPOINT_ID = "00000000-0000-4000-8000-0000000be9c4"
ECHO_TEXT = "echo: hello gateway"
PROBE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "probe-1",
                "role": "ROLE_USER",
                "parts": [{"text": "hello gateway"}],
            }
        },
    }
).encode()


API_KEY = "a2agw_0123456789abcdef_" + "k" * 43
"""The key of the gateway-sqlite-key server (well-formed; what it opens exists only in the run)."""


@dataclass(frozen=True)
class ServerConfig:
    name: str
    script: str
    args: tuple[str, ...] = ()
    checks_echo: bool = True
    sqlite: bool = False
    api_key: bool = False
    """Requests carry ``API_KEY`` (the server makes its endpoint private with it)."""
    postgres: bool = False
    """Served on a fresh PostgreSQL database (created, migrated and dropped per run)."""

    @property
    def gateway(self) -> bool:
        return self.script == "gateway.py"


CONFIGS = {
    "gateway-memory": ServerConfig(
        "gateway-memory", "gateway.py", ("--store", "memory://", "--log-level", "warning")
    ),
    "gateway-memory-info": ServerConfig(
        "gateway-memory-info", "gateway.py", ("--store", "memory://", "--log-level", "info")
    ),
    "a2a-sdk": ServerConfig("a2a-sdk", "a2a_sdk_server.py"),
    "bare-aiohttp": ServerConfig("bare-aiohttp", "bare_aiohttp.py", checks_echo=False),
    "gateway-sqlite": ServerConfig(
        "gateway-sqlite", "gateway.py", ("--log-level", "warning"), sqlite=True
    ),
    "gateway-sqlite-key": ServerConfig(
        "gateway-sqlite-key",
        "gateway.py",
        ("--log-level", "warning", "--api-key", API_KEY),
        sqlite=True,
        api_key=True,
    ),
    "gateway-sqlite-key-limits": ServerConfig(
        "gateway-sqlite-key-limits",
        "gateway.py",
        ("--log-level", "warning", "--api-key", API_KEY, "--limit", "tasks_per_minute=1000000000",
         "--limit", "concurrent_tasks=1000000"),
        sqlite=True,
        api_key=True,
    ),
    "gateway-postgres": ServerConfig(
        "gateway-postgres", "gateway.py", ("--log-level", "warning"), postgres=True
    ),
}


@dataclass
class Sample:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    load_before: float
    cpu_us: float
    """Server CPU time (user + system, all threads) per request during the measured run."""


@dataclass
class Result:
    config: ServerConfig
    source: Path | None = None
    """The gateway's packages (a ``--ref`` snapshot); None: the working tree."""
    samples: list[Sample] = field(default_factory=list)
    uvloop: str = "?"
    failures: int = 0

    def median(self, attr: str) -> float:
        values = [getattr(s, attr) for s in self.samples]
        return statistics.median(values) if values else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(cpu: int | None, argv: list[str]) -> list[str]:
    if cpu is None or shutil.which("taskset") is None:
        return argv
    return ["taskset", "-c", str(cpu), *argv]


def loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def probe(url: str, deadline: float, checks_echo: bool, with_key: bool = False) -> None:
    """Wait until the server answers one SendMessage; check the echo when it should be there."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        req = urllib.request.Request(url, data=PROBE, method="POST", headers={
            "Content-Type": "application/json", "A2A-Version": "1.0",
            **({"X-API-Key": API_KEY} if with_key else {}),
        })
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{url} answered HTTP {exc.code}: {exc.read()[:500]!r}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = exc
            time.sleep(0.1)
            continue
        if checks_echo:
            task = body.get("result", {}).get("task", {})
            state = task.get("status", {}).get("state")
            texts = [p.get("text") for a in task.get("artifacts", []) for p in a.get("parts", [])]
            if state != "TASK_STATE_COMPLETED" or ECHO_TEXT not in texts:
                raise RuntimeError(f"unexpected reply from {url}: {body}")
        return
    raise RuntimeError(f"server at {url} did not answer in time: {last}")


def _git(*argv: str) -> str:
    return subprocess.run(
        ["git", *argv], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def describe_tree() -> str:
    try:
        commit = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--", "a2a_gateway", "handlers")
    except (OSError, subprocess.CalledProcessError):
        return "working tree (not a git checkout)"
    return f"working tree at {commit}" + (
        " with uncommitted changes in a2a_gateway/ or handlers/" if dirty else ""
    )


def snapshot(ref: str, workdir: Path) -> tuple[Path, str]:
    """The gateway's packages at ``ref`` (a directory as given, or a ``git archive`` of a
    commit into ``workdir``) and a description of it."""
    if Path(ref).is_dir():
        return Path(ref).resolve(), f"directory {ref}"
    commit = _git("rev-parse", "--short", ref)
    target = workdir / f"source-{commit}"
    target.mkdir()
    archive = subprocess.run(["git", "archive", ref, "a2a_gateway", "handlers", "migrations"],
                             cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target, f"git {ref} ({commit})"


async def _admin(dsn: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_postgres_database(dsn: str, source: Path | None, index: int) -> tuple[str, str]:
    """A fresh database migrated by the gateway of ``source``: its URL and its name."""
    name = f"a2a_bench_{os.getpid()}_{index}_{int(time.time() * 1000) % 10**8}"
    asyncio.run(_admin(dsn, f'CREATE DATABASE "{name}" TEMPLATE template0'))
    url = urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))
    where = source or ROOT
    env = {**os.environ, "PYTHONPATH": str(where)}
    done = subprocess.run(
        [sys.executable, "-m", "a2a_gateway", "migrate", "--store", url],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        drop_postgres_database(dsn, name)
        raise RuntimeError(f"migrate failed: {done.stderr[-1000:]}")
    return url, name


def drop_postgres_database(dsn: str, name: str) -> None:
    asyncio.run(_admin(dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def run_wrk(
    url: str, args: argparse.Namespace, seconds: float, with_key: bool = False
) -> dict[str, float]:
    argv = pinned(args.client_cpu, [
        "wrk", f"-t{args.threads}", f"-c{args.concurrency}", f"-d{max(1, round(seconds))}s",
        "--timeout", "10s", "-s", str(LUA), url,
    ])
    env = {**os.environ, **({"A2A_BENCH_API_KEY": API_KEY} if with_key else {})}
    out = subprocess.run(
        argv, capture_output=True, text=True, timeout=seconds + 60, check=True, env=env
    ).stdout
    for line in out.splitlines():
        if line.startswith("WRKJSON "):
            return json.loads(line[len("WRKJSON "):])
    raise RuntimeError(f"no WRKJSON line in wrk output:\n{out}")


def one_run(config: ServerConfig, args: argparse.Namespace, workdir: Path, index: int,
            source: Path | None = None) -> tuple[Sample, str]:
    """One fresh server, warmed up and measured; ``source``: the gateway's packages (a
    ``--ref`` snapshot) instead of the working tree."""
    port = free_port()
    argv = [sys.executable, str(SERVERS / config.script), "--port", str(port), *config.args]
    tag = f"{config.name}-{source.name if source else 'tree'}-{index}"
    database = None
    if config.sqlite:
        argv += ["--store", f"sqlite:///{workdir / f'{tag}.db'}"]
    if config.postgres:
        if not getattr(args, "postgres_dsn", None):
            raise RuntimeError("gateway-postgres needs --postgres-dsn or $A2A_TEST_POSTGRES_DSN")
        url, database = create_postgres_database(args.postgres_dsn, source, index)
        argv += ["--store", url]
    env = {**os.environ, **({"A2A_BENCH_SOURCE": str(source)} if source else {})}
    log_path = workdir / f"{tag}.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            pinned(args.server_cpu, argv),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}/{ENDPOINT_ID}/a2a"
    try:
        probe(url, time.monotonic() + 30, config.checks_echo, config.api_key)
        if args.warmup > 0:
            run_wrk(url, args, args.warmup, config.api_key)
        load = loadavg()
        cpu_before = cpu_seconds(proc.pid)
        stats = run_wrk(url, args, args.duration, config.api_key)
        cpu_used = cpu_seconds(proc.pid) - cpu_before
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        if database is not None:
            drop_postgres_database(args.postgres_dsn, database)
    logged = log_path.read_text(errors="replace")
    served = re.search(r", event loop (\w+)", logged)  # a2a-gateway serve names its loop
    announced = re.search(r"uvloop=(\w+)", logged)
    uvloop = (
        ("yes" if served[1] == "uvloop" else "no") if served else announced[1] if announced else "?"
    )
    errors = int(
        stats["non2xx"] + stats["connect"] + stats["read"] + stats["write"] + stats["timeout"]
    )
    sample = Sample(
        rps=stats["requests"] / (stats["duration_us"] / 1e6),
        p50_ms=stats["p50_us"] / 1000,
        p99_ms=stats["p99_us"] / 1000,
        errors=errors,
        load_before=load,
        cpu_us=cpu_used / max(stats["requests"], 1) * 1e6,
    )
    return sample, uvloop


def machine_note(args: argparse.Namespace) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    pin = "pinned" if shutil.which("taskset") and args.server_cpu is not None else "not pinned"
    return (f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"server cpu {args.server_cpu} / wrk cpu {args.client_cpu} ({pin})")


CHECKS = [
    # label, numerator, denominator, target (requests per CPU-second), issue 13's targets
    ("gateway-memory / a2a-sdk", "gateway-memory", "a2a-sdk", 15.0),
    ("gateway-sqlite / a2a-sdk", "gateway-sqlite", "a2a-sdk", 10.0),
    ("gateway-memory / bare-aiohttp", "gateway-memory", "bare-aiohttp", 0.3),
    ("gateway-postgres / gateway-sqlite", "gateway-postgres", "gateway-sqlite", 0.8),
    ("gateway-sqlite / gateway-memory", "gateway-sqlite", "gateway-memory", None),
    ("gateway-memory-info / gateway-memory", "gateway-memory-info", "gateway-memory", None),
]


def print_table(
    results: dict[str, Result], args: argparse.Namespace, sources: dict[str, str]
) -> None:
    print()
    print(
        f"SendMessage (blocking, JSON-RPC 1.0), echo delay 0, {args.concurrency} connections, "
        f"{args.duration:g}s x {args.runs} runs (medians), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    print(machine_note(args))
    for suffix, description in sources.items():
        print(f"gateway source{suffix or ''}: {description}")
    print()
    width = max(20, *(len(n) for n in results))
    header = (
        f"| {'server':<{width}} | {'req/s':>7} | {'p50 ms':>7} | {'p99 ms':>7} "
        f"| {'runs (req/s)':<26} "
        f"| {'CPU µs/req':>10} | {'errors':>6} | uvloop |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for name, r in results.items():
        runs = " ".join(f"{s.rps:.0f}" for s in r.samples)
        errors = sum(s.errors for s in r.samples)
        if r.failures:
            runs += f" ({r.failures} failed)"
        print(
            f"| {name:<{width}} | {r.median('rps'):>7.0f} | {r.median('p50_ms'):>7.2f} | "
            f"{r.median('p99_ms'):>7.2f} | {runs:<26} | {r.median('cpu_us'):>10.0f} | "
            f"{errors:>6} | {r.uvloop:<6} |"
        )
    print()

    def measured(name: str) -> bool:
        return name in results and bool(results[name].samples)

    print(f"{'ratio':<48} {'req/s':>8} {'per CPU-s':>10}   target (per CPU-s)")
    for suffix in sources:
        for label, a, b, threshold in CHECKS:
            a_row = a + suffix
            b_row = b + suffix if CONFIGS[b].gateway else b
            if not measured(a_row) or not measured(b_row):
                continue
            by_rps = results[a_row].median("rps") / results[b_row].median("rps")
            by_cpu = results[b_row].median("cpu_us") / results[a_row].median("cpu_us")
            target = (
                ""
                if threshold is None
                else f">= {threshold:g}x " + ("met" if by_cpu >= threshold else "NOT met")
            )
            print(f"{label + suffix:<48} {by_rps:>7.2f}x {by_cpu:>9.2f}x   {target}")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--servers", default=",".join(n for n in CONFIGS if n != "gateway-postgres"),
                   help=f"comma list of: {', '.join(CONFIGS)}")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="wrk threads")
    p.add_argument("--duration", type=float, default=8.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per run (discarded)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--json", help="also write the raw samples to this file")
    p.add_argument(
        "--ref",
        action="append",
        default=[],
        help="also the gateway as committed at this git ref (or the packages in this directory), "
        "side by side; repeatable",
    )
    p.add_argument("--no-working-tree", action="store_true",
                   help="with --ref: only the refs' gateways (e.g. while the tree is being edited)")
    p.add_argument("--postgres-dsn", default=os.environ.get("A2A_TEST_POSTGRES_DSN"),
                   help="server for gateway-postgres (must be allowed to create databases); "
                        "default $A2A_TEST_POSTGRES_DSN")
    args = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian/Ubuntu: apt-get install wrk)")
    if not 1 <= args.runs <= 20 or not 1 <= args.duration <= 120:
        sys.exit("--runs must be 1..20 and --duration 1..120 s")
    if args.no_working_tree and not args.ref:
        sys.exit("--no-working-tree needs at least one --ref")
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        sys.exit(f"unknown server(s): {unknown}")
    with tempfile.TemporaryDirectory(prefix="a2a-bench-") as tmp:
        workdir = Path(tmp)
        sources: dict[str, str] = {} if args.no_working_tree else {"": describe_tree()}
        paths: dict[str, Path | None] = {} if args.no_working_tree else {"": None}
        for ref in args.ref:
            paths[f" @{ref}"], sources[f" @{ref}"] = snapshot(ref, workdir)
        for suffix, description in sources.items():
            print(f"gateway source{suffix}: {description}", flush=True)
        results: dict[str, Result] = {}
        for name in names:
            for suffix, path in (paths.items() if CONFIGS[name].gateway else [("", None)]):
                results[name + suffix] = Result(CONFIGS[name], path)
        for run in range(args.runs):
            for row, result in results.items():
                try:
                    sample, uvloop = one_run(result.config, args, workdir, run, result.source)
                except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                    print(
                        f"run {run + 1}/{args.runs} {row:<20} FAILED: {exc}\n"
                        f"{_log_tail(workdir, result, run)}",
                        file=sys.stderr,
                        flush=True,
                    )
                    result.failures += 1
                    continue
                result.samples.append(sample)
                result.uvloop = uvloop
                print(
                    f"run {run + 1}/{args.runs} {row:<20} {sample.rps:8.0f} req/s"
                    f"  p50 {sample.p50_ms:7.2f} ms  p99 {sample.p99_ms:7.2f} ms"
                    f"  cpu {sample.cpu_us:6.0f} µs/req  errors {sample.errors}"
                    f"  load {sample.load_before:.2f}",
                    flush=True,
                )
    print_table(results, args, sources)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": datetime.now(UTC).isoformat(), "machine": machine_note(args), "source": sources,
            "args": vars(args),
            "results": {n: [s.__dict__ for s in r.samples] for n, r in results.items()},
        }, indent=2))


def _log_tail(workdir: Path, result: Result, run: int) -> str:
    source = result.source.name if result.source else "tree"
    log_path = workdir / f"{result.config.name}-{source}-{run}.log"
    return log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""


if __name__ == "__main__":
    main()
