"""Cold start: import time, ``build_app`` time, exec → first ``/healthz`` 200, idle RSS.

    python bench/cold_start.py                          # the working tree, memory:// and sqlite:///
    python bench/cold_start.py --runs 9 --stores memory,sqlite,postgresql
    python bench/cold_start.py --source /tmp/before --source .    # two checkouts side by side
    python bench/cold_start.py --ref HEAD~2                       # a commit beside the working tree
    python bench/cold_start.py --no-bytecode                      # every module compiled at start
    python bench/cold_start.py --python /srv/venv/bin/python      # another environment's packages

What a Lambda cold start (or a fresh replica) pays before it can answer, each figure in a
fresh process per run, configurations interleaved run by run, medians over ``--runs``:

- **import ms** — CPU time of ``from a2a_gateway.app import build_app`` (plus
  ``GatewaySettings``) inside the process (interpreter start-up excluded); CPU time, not wall
  time, because on a shared machine it is the stable figure (wall time in ``--json``).
  **÷ aiohttp** divides it by the CPU time of a bare ``import aiohttp.web`` in its own
  process in the same run: the floor every aiohttp app pays.
- **build_app ms** — CPU time of ``build_app(GatewaySettings(store=URL))`` (the store opens
  at start-up, not here).
- **exec → /healthz ms** — wall time from ``exec`` of ``python -m a2a_gateway serve --endpoints
  FILE`` (one echo endpoint, as ``servers/gateway.py`` writes it) to the
  first 200 of ``/healthz`` (polled every 5 ms): interpreter, imports, app, store opened,
  socket bound; **serve CPU ms** is that process's CPU time at that moment.
- **idle RSS MB** — ``VmRSS`` of that ``serve`` process after ``--idle`` seconds of no traffic.
- **first send ms / its CPU ms / RSS after MB** — then the first blocking ``SendMessage`` to
  the echo endpoint (the endpoints file ``serve`` was started with): its round trip, the
  CPU the gateway spent on it, and ``VmRSS`` after it. What start-up leaves for later shows
  here: a Lambda cold start pays start-up and the first request.
- **modules** — ``len(sys.modules)`` after ``build_app``.

Bytecode: every process reads compiled modules from a cache of this run
(``PYTHONPYCACHEPREFIX``), filled by a warm-up import before the first measurement, as an
installed package has them, whatever ``PYTHONDONTWRITEBYTECODE`` says. ``--no-bytecode``
measures the other case, a process that compiles every module it imports (an environment
installed with ``pip --no-compile`` and run with ``PYTHONDONTWRITEBYTECODE=1``).

Environment: ``--python`` runs the processes with another interpreter, e.g. a virtualenv
holding only what ``pip install '.[postgres,dynamodb,speed]'`` installs (the image's set).
The dev virtualenv has more, and some of it is imported when present: ``trio`` (by httpcore),
``click`` and ``pygments`` (by httpx), ``grpc`` (by the a2a-sdk's server package).

Store URLs: ``memory://``, a fresh ``sqlite:///`` file per run, ``postgresql`` from
``--postgres-url``, ``dynamodb`` from ``--dynamodb-url`` (both migrated beforehand).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.core_send import ECHO_TEXT, PROBE, cpu_seconds, free_port, loadavg, snapshot  # noqa: E402
from bench.servers.common import BENCH_ENDPOINT_ID  # noqa: E402
from bench.servers.gateway import ENDPOINTS  # noqa: E402

IMPORT_PROBE = """
import json, sys, time
w0, c0 = time.perf_counter(), time.process_time()
from a2a_gateway.app import build_app
from a2a_gateway.settings import GatewaySettings
w1, c1 = time.perf_counter(), time.process_time()
build_app(GatewaySettings(store=sys.argv[1]))
c2 = time.process_time()
print(json.dumps({"import_ms": (c1 - c0) * 1000, "import_wall_ms": (w1 - w0) * 1000,
                  "build_ms": (c2 - c1) * 1000, "modules": len(sys.modules)}))
"""

AIOHTTP_PROBE = """
import time
c0 = time.process_time()
import aiohttp.web
print((time.process_time() - c0) * 1000)
"""


@dataclass
class Samples:
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.values.setdefault(name, []).append(value)

    def median(self, name: str) -> float:
        return statistics.median(self.values[name]) if self.values.get(name) else float("nan")

    def spread(self, name: str) -> str:
        v = self.values.get(name) or []
        return f"{min(v):.0f}–{max(v):.0f}" if v else "-"


PYTHON = sys.executable
"""The interpreter of the measured processes (``--python``)."""
BYTECODE: dict[str, str] = {}
"""How the processes find compiled modules: set by ``use_bytecode`` (the variables below)."""


def use_bytecode(cache: Path, compiled: bool) -> None:
    """Compiled modules in ``cache`` (written by the warm-up); not ``compiled``: ``cache`` stays
    empty and every process compiles every module it imports."""
    BYTECODE["PYTHONPYCACHEPREFIX"] = str(cache)
    if not compiled:
        BYTECODE["PYTHONDONTWRITEBYTECODE"] = "1"


def clean_env(source: Path, store: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("A2A_GATEWAY_")
        and k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    }
    env.update(
        {
            "PYTHONPATH": str(source),
            "A2A_GATEWAY_STORE": store,
            "A2A_GATEWAY_LOG_LEVEL": "warning",
            **BYTECODE,
        }
    )
    return env


def measure_import(source: Path, store: str) -> dict[str, float]:
    out = subprocess.run(
        [PYTHON, "-c", IMPORT_PROBE, store],
        cwd=source,
        env=clean_env(source, store),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure_aiohttp(source: Path) -> float:
    out = subprocess.run([PYTHON, "-c", AIOHTTP_PROBE], cwd=source, env=clean_env(source, "memory://"),
                         capture_output=True, text=True, check=True).stdout
    return float(out.strip())


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class ServeFigures:
    ready_ms: float
    """exec → first /healthz 200 (wall)."""
    ready_cpu_ms: float
    """CPU time of the process at that moment."""
    rss_mb: float
    """VmRSS after ``idle`` seconds without traffic."""
    first_ms: float
    """The first SendMessage (echo), sent after that: request → reply (wall)."""
    first_cpu_ms: float
    """CPU time the process spent on that first request."""
    rss_after_first_mb: float


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, started: float, timeout: float) -> None:
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"serve exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}"
            )  # type: ignore[union-attr]
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"no /healthz 200 within {timeout} s")
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.005)


def _first_send(url: str) -> None:
    request = urllib.request.Request(url, data=PROBE, method="POST", headers={
        "Content-Type": "application/json", "A2A-Version": "1.0"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        body = json.loads(reply.read())
    texts = [p.get("text") for a in body.get("result", {}).get("task", {}).get("artifacts", [])
             for p in a.get("parts", [])]
    if ECHO_TEXT not in texts:
        raise RuntimeError(f"unexpected first reply: {body}")


def measure_serve(
    source: Path, store: str, endpoints: Path, idle: float, timeout: float = 60.0
) -> ServeFigures:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    proc = subprocess.Popen([PYTHON, "-m", "a2a_gateway", "serve", "--host", "127.0.0.1",
                             "--port", str(port), "--endpoints", str(endpoints)],
                            cwd=source, env=clean_env(source, store),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_healthy(proc, f"{base}/healthz", started, timeout)
        ready_ms = (time.perf_counter() - started) * 1000
        ready_cpu_ms = cpu_seconds(proc.pid) * 1000
        time.sleep(idle)
        rss, cpu_before = rss_mb(proc.pid), cpu_seconds(proc.pid)
        sent = time.perf_counter()
        _first_send(f"{base}/{BENCH_ENDPOINT_ID}/a2a")
        first_ms = (time.perf_counter() - sent) * 1000
        first_cpu_ms = (cpu_seconds(proc.pid) - cpu_before) * 1000
        return ServeFigures(ready_ms, ready_cpu_ms, rss, first_ms, first_cpu_ms, rss_mb(proc.pid))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def store_urls(args: argparse.Namespace, workdir: Path, tag: str) -> dict[str, str]:
    urls = {}
    for kind in args.stores.split(","):
        if kind == "memory":
            urls[kind] = "memory://"
        elif kind == "sqlite":
            urls[kind] = f"sqlite:///{workdir}/{tag}.db"
        elif kind == "postgresql":
            urls[kind] = args.postgres_url or sys.exit("postgresql needs --postgres-url")
        elif kind == "dynamodb":
            urls[kind] = args.dynamodb_url or sys.exit("dynamodb needs --dynamodb-url")
        else:
            sys.exit(f"unknown store kind {kind!r} (memory, sqlite, postgresql, dynamodb)")
    return urls


def describe_source(source: Path) -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=source,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "a2a_gateway", "handlers"],
            cwd=source,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(source)
    return f"git {commit}" + (
        " with uncommitted changes in a2a_gateway/ or handlers/" if dirty else ""
    )


def machine_note() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, not pinned"


def print_table(
    results: dict[tuple[str, str], Samples], aiohttp: Samples, args: argparse.Namespace
) -> None:
    bytecode = (
        "no compiled modules (--no-bytecode)" if args.no_bytecode else "compiled modules cached"
    )
    print(
        f"\ncold start — {args.runs} runs, medians (min–max); idle {args.idle} s before RSS;"
        f" {bytecode}"
    )
    print(
        machine_note() + ("" if args.python == sys.executable else f"; interpreter {args.python}")
    )
    print(
        f"bare `import aiohttp.web`: {aiohttp.median('ms'):.0f} CPU ms ({aiohttp.spread('ms')})\n"
    )
    print("| source | store | import CPU ms | ÷ aiohttp | build_app CPU ms | exec → /healthz ms "
          "| serve CPU ms | idle RSS MB | first send ms | its CPU ms | RSS after MB | modules |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (source, kind), s in results.items():
        ratio = s.median("import_ms") / aiohttp.median("ms")
        print(
            f"| {source} | {kind} | {s.median('import_ms'):.0f} ({s.spread('import_ms')}) "
            f"| {ratio:.2f}× "
            f"| {s.median('build_ms'):.1f} | {s.median('ready_ms'):.0f} ({s.spread('ready_ms')}) "
            f"| {s.median('ready_cpu_ms'):.0f} ({s.spread('ready_cpu_ms')}) "
            f"| {s.median('rss_mb'):.1f} ({s.spread('rss_mb')}) "
            f"| {s.median('first_ms'):.0f} ({s.spread('first_ms')}) "
            f"| {s.median('first_cpu_ms'):.0f} "
            f"| {s.median('rss_after_first_mb'):.1f} | {s.median('modules'):.0f} |"
        )
    print(f"\nload average at the end: {loadavg():.2f}")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=7)
    p.add_argument(
        "--stores",
        default="memory,sqlite",
        help="comma list of: memory, sqlite, postgresql, dynamodb",
    )
    p.add_argument(
        "--idle", type=float, default=1.0, help="seconds after /healthz before reading RSS"
    )
    p.add_argument(
        "--source",
        type=Path,
        action="append",
        help="checkout whose a2a_gateway/ and handlers/ to run; repeat to compare"
        " (default: this one)",
    )
    p.add_argument(
        "--ref",
        action="append",
        default=[],
        help="also the gateway as committed at this git ref (a git archive snapshot),"
        " before the sources",
    )
    p.add_argument("--python", default=sys.executable,
                   help="interpreter (virtualenv) of the measured processes; default this one")
    p.add_argument(
        "--no-bytecode",
        action="store_true",
        help="no compiled modules: every process compiles what it imports (pip --no-compile)",
    )
    p.add_argument("--postgres-url", help="a migrated database (a2a-gateway migrate)")
    p.add_argument(
        "--dynamodb-url", help="dynamodb://… with its tables created (a2a-gateway migrate)"
    )
    p.add_argument("--json", help="also write the raw samples to this file")
    args = p.parse_args()
    global PYTHON
    PYTHON = args.python
    results: dict[tuple[str, str], Samples] = {}
    aiohttp = Samples()
    with tempfile.TemporaryDirectory(prefix="a2a-cold-start-") as tmp:
        sources = {label: path for path, label in (snapshot(ref, Path(tmp)) for ref in args.ref)}
        sources.update(
            {describe_source(path.resolve()): path.resolve() for path in args.source or [ROOT]}
        )
        use_bytecode(Path(tmp) / "pycache", compiled=not args.no_bytecode)
        endpoints = Path(tmp) / "endpoints.yaml"
        endpoints.write_text(ENDPOINTS.format(id=BENCH_ENDPOINT_ID, public="true"))
        for source in sources.values():  # compiles every module once into the cache (or nothing)
            for url in store_urls(args, Path(tmp), "warm-up").values():
                measure_import(source, url)
            measure_serve(source, "memory://", endpoints, 0)
        for run in range(args.runs):
            aiohttp.add("ms", measure_aiohttp(ROOT))
            for index, (label, source) in enumerate(sources.items()):
                for kind, url in store_urls(args, Path(tmp), f"run{run}-{index}").items():
                    s = results.setdefault((label, kind), Samples())
                    for name, value in measure_import(source, url).items():
                        s.add(name, value)
                    figures = measure_serve(source, url, endpoints, args.idle)
                    for name, value in vars(figures).items():
                        s.add(name, value)
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr, flush=True)
    print_table(results, aiohttp, args)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "date": datetime.now(UTC).isoformat(),
                    "machine": machine_note(),
                    "aiohttp_ms": aiohttp.values["ms"],
                    "results": [
                        {"source": label, "store": kind, **s.values}
                        for (label, kind), s in results.items()
                    ],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
