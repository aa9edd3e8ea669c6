"""Core benchmark: blocking SendMessage (JSON-RPC, A2A 1.0) on an echo agent, side by side.

Servers (each its own process, started fresh for every run):

    gateway-memory       ``a2a-gateway serve`` on ``memory://``, log level warning
    gateway-memory-info  the same with log level info (one JSON log line per request)
    a2a-sdk              the official a2a-sdk server (Starlette + uvicorn, httptools, uvloop)
    bare-aiohttp         an aiohttp handler returning a fixed JSON-RPC reply
    gateway-sqlite       ``a2a-gateway serve`` on a fresh ``sqlite:///`` file, log level warning
    gateway-sqlite-key   gateway-sqlite with a private endpoint: every request carries an API key

The gateways are the shipped command (``servers/gateway.py`` writes an endpoints file and
execs ``a2a-gateway serve``), on the event loop it picks (uvloop with the ``speed`` extra).

The load generator is ``wrk`` with ``bench/wrk_send.lua`` (a fresh messageId per request),
a closed loop of ``--concurrency`` connections. With ``taskset`` available the server is
pinned to ``--server-cpu`` and wrk to ``--client-cpu``. Every run is a warm-up of
``--warmup`` s followed by a measured ``--duration`` s; configurations are interleaved
run by run (so background noise spreads over all of them) and the table shows medians.

    python bench/core_send.py --runs 3 --duration 8 --concurrency 64
"""

from __future__ import annotations

import argparse
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

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
SERVERS = BENCH_DIR / "servers"
LUA = BENCH_DIR / "wrk_send.lua"
ENDPOINT_ID = "00000000-0000-4000-8000-0000000be9c4"
ECHO_TEXT = "echo: hello gateway"
PROBE = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
    "params": {"message": {"messageId": "probe-1", "role": "ROLE_USER", "parts": [{"text": "hello gateway"}]}},
}).encode()


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


CONFIGS = {
    "gateway-memory": ServerConfig("gateway-memory", "gateway.py", ("--store", "memory://", "--log-level", "warning")),
    "gateway-memory-info": ServerConfig("gateway-memory-info", "gateway.py", ("--store", "memory://", "--log-level", "info")),
    "a2a-sdk": ServerConfig("a2a-sdk", "a2a_sdk_server.py"),
    "bare-aiohttp": ServerConfig("bare-aiohttp", "bare_aiohttp.py", checks_echo=False),
    "gateway-sqlite": ServerConfig("gateway-sqlite", "gateway.py", ("--log-level", "warning"), sqlite=True),
    "gateway-sqlite-key": ServerConfig("gateway-sqlite-key", "gateway.py",
                                       ("--log-level", "warning", "--api-key", API_KEY), sqlite=True, api_key=True),
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


def describe_source(ref: str | None, workdir: Path) -> str:
    """Export ``ref`` for the gateway launcher (``A2A_BENCH_SOURCE``), or describe the working tree."""
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        if ref:
            commit = git("rev-parse", "--short", ref)
            snapshot = workdir / "source"
            snapshot.mkdir()
            archive = subprocess.run(["git", "archive", ref, "a2a_gateway", "handlers", "migrations"],
                                     cwd=ROOT, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(snapshot)], input=archive, check=True)
            os.environ["A2A_BENCH_SOURCE"] = str(snapshot)
            return f"git {ref} ({commit})"
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "a2a_gateway", "handlers")
    except (OSError, subprocess.CalledProcessError):
        return "working tree (not a git checkout)"
    return f"working tree at {commit}" + (" with uncommitted changes in a2a_gateway/ or handlers/" if dirty else "")


def run_wrk(url: str, args: argparse.Namespace, seconds: float, with_key: bool = False) -> dict[str, float]:
    argv = pinned(args.client_cpu, [
        "wrk", f"-t{args.threads}", f"-c{args.concurrency}", f"-d{max(1, round(seconds))}s",
        "--timeout", "10s", "-s", str(LUA), url,
    ])
    env = {**os.environ, **({"A2A_BENCH_API_KEY": API_KEY} if with_key else {})}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=True, env=env).stdout
    for line in out.splitlines():
        if line.startswith("WRKJSON "):
            return json.loads(line[len("WRKJSON "):])
    raise RuntimeError(f"no WRKJSON line in wrk output:\n{out}")


def one_run(config: ServerConfig, args: argparse.Namespace, workdir: Path, index: int) -> tuple[Sample, str]:
    port = free_port()
    argv = [sys.executable, str(SERVERS / config.script), "--port", str(port), *config.args]
    if config.sqlite:
        argv += ["--store", f"sqlite:///{workdir / f'bench-{index}.db'}"]
    log_path = workdir / f"{config.name}-{index}.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(pinned(args.server_cpu, argv), stdout=log_file, stderr=subprocess.STDOUT, cwd=ROOT)
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
    logged = log_path.read_text(errors="replace")
    served = re.search(r", event loop (\w+)", logged)  # a2a-gateway serve names its loop
    announced = re.search(r"uvloop=(\w+)", logged)
    uvloop = ("yes" if served[1] == "uvloop" else "no") if served else announced[1] if announced else "?"
    errors = int(stats["non2xx"] + stats["connect"] + stats["read"] + stats["write"] + stats["timeout"])
    sample = Sample(
        rps=stats["requests"] / (stats["duration_us"] / 1e6),
        p50_ms=stats["p50_us"] / 1000, p99_ms=stats["p99_us"] / 1000, errors=errors, load_before=load,
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


def print_table(results: dict[str, Result], args: argparse.Namespace, source: str) -> None:
    print()
    print(f"SendMessage (blocking, JSON-RPC 1.0), echo delay 0, {args.concurrency} connections, "
          f"{args.duration:g}s x {args.runs} runs (medians), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(machine_note(args))
    print(f"gateway source: {source}")
    print()
    header = f"| {'server':<20} | {'req/s':>7} | {'p50 ms':>7} | {'p99 ms':>7} | {'runs (req/s)':<26} | {'CPU µs/req':>10} | {'errors':>6} | uvloop |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for r in results.values():
        runs = " ".join(f"{s.rps:.0f}" for s in r.samples)
        errors = sum(s.errors for s in r.samples)
        if r.failures:
            runs += f" ({r.failures} failed)"
        print(f"| {r.config.name:<20} | {r.median('rps'):>7.0f} | {r.median('p50_ms'):>7.2f} | "
              f"{r.median('p99_ms'):>7.2f} | {runs:<26} | {r.median('cpu_us'):>10.0f} | {errors:>6} | {r.uvloop:<6} |")
    print()

    def rps(name: str) -> float:
        return results[name].median("rps") if name in results else float("nan")

    def per_cpu(name: str) -> float:
        """Requests per CPU-second of the server: less sensitive to CPU stolen by neighbours."""
        return 1e6 / results[name].median("cpu_us") if name in results else float("nan")

    checks = [
        ("gateway-memory / a2a-sdk", "gateway-memory", "a2a-sdk", ">= 10x", 10.0),
        ("gateway-memory / bare-aiohttp", "gateway-memory", "bare-aiohttp", ">= 0.4x", 0.4),
        ("gateway-sqlite / gateway-memory", "gateway-sqlite", "gateway-memory", ">= 0.5x", 0.5),
        ("gateway-memory-info / gateway-memory", "gateway-memory-info", "gateway-memory", "(log cost)", None),
    ]
    print(f"{'ratio':<38} {'req/s':>8} {'per CPU-s':>10}   target")
    for label, a, b, target, threshold in checks:
        if a not in results or b not in results or not results[a].samples or not results[b].samples:
            continue
        by_rps, by_cpu = rps(a) / rps(b), per_cpu(a) / per_cpu(b)
        verdict = "" if threshold is None else ("  met" if by_rps >= threshold else "  NOT met")
        print(f"{label:<38} {by_rps:>7.2f}x {by_cpu:>9.2f}x   {target}{verdict}")
    if all(n in results and results[n].samples for n in ("gateway-memory-info", "gateway-memory")):
        warn, info = rps("gateway-memory"), rps("gateway-memory-info")
        cpu_warn, cpu_info = results["gateway-memory"].median("cpu_us"), results["gateway-memory-info"].median("cpu_us")
        print(f"info logging: {(1e6 / info - 1e6 / warn):.0f} µs more wall time per request at saturation, "
              f"{cpu_info - cpu_warn:.0f} µs more server CPU per request")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", default=",".join(CONFIGS), help=f"comma list of: {', '.join(CONFIGS)}")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="wrk threads")
    p.add_argument("--duration", type=float, default=8.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per run (discarded)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--json", help="also write the raw samples to this file")
    p.add_argument("--ref", help="benchmark the gateway as committed at this git ref (e.g. HEAD) "
                                 "instead of the working tree")
    args = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian/Ubuntu: apt-get install wrk)")
    if not 1 <= args.runs <= 20 or not 1 <= args.duration <= 120:
        sys.exit("--runs must be 1..20 and --duration 1..120 s")
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        sys.exit(f"unknown server(s): {unknown}")
    results = {n: Result(CONFIGS[n]) for n in names}
    with tempfile.TemporaryDirectory(prefix="a2a-bench-") as tmp:
        workdir = Path(tmp)
        source = describe_source(args.ref, workdir)
        print(f"gateway source: {source}", flush=True)
        for run in range(args.runs):
            for name in names:
                try:
                    sample, uvloop = one_run(CONFIGS[name], args, workdir, run)
                except (RuntimeError, subprocess.SubprocessError) as exc:
                    log_path = workdir / f"{name}-{run}.log"
                    tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
                    print(f"run {run + 1}/{args.runs} {name:<20} FAILED: {exc}\n{tail}", file=sys.stderr, flush=True)
                    results[name].failures += 1
                    continue
                results[name].samples.append(sample)
                results[name].uvloop = uvloop
                print(f"run {run + 1}/{args.runs} {name:<20} {sample.rps:8.0f} req/s  p50 {sample.p50_ms:7.2f} ms"
                      f"  p99 {sample.p99_ms:7.2f} ms  cpu {sample.cpu_us:6.0f} µs/req  errors {sample.errors}  load {sample.load_before:.2f}",
                      flush=True)
    print_table(results, args, source)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": datetime.now(UTC).isoformat(), "machine": machine_note(args), "source": source,
            "args": vars(args),
            "results": {n: [s.__dict__ for s in r.samples] for n, r in results.items()},
        }, indent=2))


if __name__ == "__main__":
    main()
