"""Idle open streams: memory per stream, keepalives, and memory after they close.

    python bench/idle_streams.py                       # 10,000 streams, 4 client processes
    python bench/idle_streams.py --streams 2000 --clients 2 --hold 12

Starts ``a2a-gateway serve`` (SQLite store, an echo endpoint whose ``delay`` keeps every
task running and silent after its first word, keepalive every ``--keepalive`` seconds, a
replay log kept 1 s after its task ends) pinned to ``--server-cpu``, and client processes
(this script with ``client``) on ``--client-cpu``, each holding its share of the streams:
SendStreamingMessage, read up to the first text chunk, then only keepalives for ``--hold``
seconds. Then every task is canceled and every stream closed. Figures: the gateway's RSS
(``VmRSS``) after a warm-up, with all streams open (per stream: the growth divided by the
streams) and after they closed and their tasks ended; streams that failed; the longest gap
between two keepalives any stream saw (it should stay near ``--keepalive``).

The fd limit is raised to its hard limit for every process (``resource.setrlimit``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT))

ECHO = "00000000-0000-4000-8000-0000000001d1"
HEADERS = {"A2A-Version": "1.0", "Accept": "text/event-stream", "Content-Type": "application/json"}


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


# the client side: one process holds its share of the streams ----------------------------------


class Held:
    """One open stream: its task and when its keepalives came."""

    def __init__(self) -> None:
        self.task_id: str | None = None
        self.pings: list[float] = []
        self.opened = asyncio.Event()
        self.error: str | None = None


async def hold_one(
    http: aiohttp.ClientSession, url: str, held: Held, gate: asyncio.Semaphore
) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
        "messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hold"}]}}}
    try:
        async with gate:
            response = await http.post(url, json=body, headers=HEADERS)
        async with response:
            async for raw in response.content:
                line = raw.decode().rstrip("\r\n")
                if line.startswith(": ping"):
                    held.pings.append(time.monotonic())
                elif line.startswith("data:"):
                    result = json.loads(line[5:]).get("result", {})
                    if "task" in result:
                        held.task_id = result["task"]["id"]
                    elif "artifactUpdate" in result:
                        held.opened.set()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # counted, not raised: the figure is how many failed
        held.error = type(exc).__name__
    finally:
        held.opened.set()


async def client(base: str, streams: int, connect_at_once: int) -> None:
    """Open ``streams`` streams, report, wait for ``close`` on stdin, cancel their tasks, close."""
    url = f"{base}/{ECHO}/a2a"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None)
    ) as http:
        gate = asyncio.Semaphore(connect_at_once)
        helds = [Held() for _ in range(streams)]
        readers = [asyncio.create_task(hold_one(http, url, h, gate)) for h in helds]
        await asyncio.gather(*(h.opened.wait() for h in helds))
        errors = sum(1 for h in helds if h.error or h.task_id is None)
        print(json.dumps({"open": streams - errors, "errors": errors}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        gaps = [b - a for h in helds for a, b in zip(h.pings, h.pings[1:], strict=False)]
        first = [h.pings[0] for h in helds if h.pings]
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        cancel_errors = 0
        for h in helds:
            if h.task_id is None:
                continue
            async with gate:
                cancel = {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "CancelTask",
                    "params": {"id": h.task_id},
                }
                async with http.post(url, json=cancel, headers={"A2A-Version": "1.0"}) as answer:
                    cancel_errors += "error" in await answer.json()
        print(json.dumps({"closed": streams, "cancel_errors": cancel_errors, "pinged": len(first),
                          "keepalives": sum(len(h.pings) for h in helds),
                          "max_gap": max(gaps, default=float("nan")),
                          "errors": sum(1 for h in helds if h.error)}), flush=True)


# the run --------------------------------------------------------------------------------------


def start_gateway(
    workdir: Path, cpu: int | None, keepalive: float, source: Path
) -> tuple[subprocess.Popen[bytes], str]:
    return serve_echo(workdir, cpu, source, ECHO, 3600, {
        "SSE_KEEPALIVE_SECONDS": str(keepalive), "STREAM_REPLAY_KEEP_SECONDS": "1"})


def serve_echo(
    workdir: Path, cpu: int | None, source: Path, endpoint_id: str, delay: float,
    settings: dict[str, str], extra_env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """``a2a-gateway serve`` of ``source`` on a SQLite file in ``workdir``, pinned to ``cpu``,
    with one public echo endpoint of ``delay``, the ``A2A_GATEWAY_*`` ``settings`` and the
    other variables ``extra_env``; the process and its base URL, once it listens."""
    from bench.core_send import free_port, pinned
    from bench.streaming import _wait_listening

    port = free_port()
    endpoints = workdir / "endpoints.yaml"
    endpoints.write_text(f"""endpoints:
  - {{id: {endpoint_id}, name: echo, handler: "handlers.echo:EchoHandler", public: true,
     settings: {{delay: {delay}}}}}
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    env.update({"PYTHONPATH": str(source), "A2A_GATEWAY_LOG_LEVEL": "warning",
                "A2A_GATEWAY_STORE": f"sqlite:///{workdir / 'gateway.db'}",
                **{f"A2A_GATEWAY_{name}": value for name, value in settings.items()},
                **(extra_env or {})})
    log = workdir / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            pinned(
                cpu,
                [
                    sys.executable,
                    "-m",
                    "a2a_gateway",
                    "serve",
                    "--port",
                    str(port),
                    "--endpoints",
                    str(endpoints),
                ],
            ),
            cwd=source,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    _wait_listening(proc, log, r"listening on http://\S+", time.monotonic() + 60)
    return proc, f"http://127.0.0.1:{port}"


def start_clients(
    base: str, streams: int, clients: int, cpu: int | None
) -> list[subprocess.Popen[str]]:
    from bench.core_send import pinned

    shares = [streams // clients + (1 if n < streams % clients else 0) for n in range(clients)]
    return [
        subprocess.Popen(
            pinned(
                cpu, [sys.executable, __file__, "client", "--url", base, "--streams", str(share)]
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for share in shares
        if share
    ]


def read_reports(procs: list[subprocess.Popen[str]]) -> list[dict[str, float]]:
    return [json.loads(proc.stdout.readline()) for proc in procs]  # type: ignore[union-attr]


def until_quiet(pid: int, seconds: float) -> int:
    """The RSS once it stopped falling (or after ``seconds``)."""
    deadline, last = time.monotonic() + seconds, rss_kb(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = rss_kb(pid)
        if now >= last:
            return now
        last = now
    return last


def run(args: argparse.Namespace) -> dict[str, float]:
    from bench.streaming import stop

    with tempfile.TemporaryDirectory(prefix="a2a-idle-bench-") as tmp:
        gateway, base = start_gateway(
            Path(tmp), args.server_cpu, args.keepalive, Path(args.source).resolve()
        )
        try:
            warm = start_clients(base, 50, 1, args.client_cpu)
            read_reports(warm)
            for proc in warm:
                proc.communicate("close\n", timeout=120)
            time.sleep(2.0)
            before = until_quiet(gateway.pid, 10)
            started = time.monotonic()
            procs = start_clients(base, args.streams, args.clients, args.client_cpu)
            opened = read_reports(procs)
            open_seconds = time.monotonic() - started
            time.sleep(args.hold)
            held = rss_kb(gateway.pid)
            closed = []
            for proc in procs:
                out, _ = proc.communicate("close\n", timeout=600)
                closed.append(json.loads(out.strip().splitlines()[-1]))
            time.sleep(2.0)
            after = until_quiet(gateway.pid, 20)
        finally:
            stop(gateway)
    streams = sum(r["open"] for r in opened)
    return {
        "streams": streams,
        "open errors": sum(r["errors"] for r in opened),
        "stream errors": sum(r["errors"] for r in closed),
        "cancel errors": sum(r["cancel_errors"] for r in closed),
        "open s": open_seconds,
        "RSS before MB": before / 1024,
        "RSS open MB": held / 1024,
        "KB per stream": (held - before) / max(streams, 1),
        "RSS after close MB": after / 1024,
        "kept after close KB/stream": (after - before) / max(streams, 1),
        "streams pinged": sum(r["pinged"] for r in closed),
        "max keepalive gap s": max(r["max_gap"] for r in closed),
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command")
    c = sub.add_parser("client", help="(internal) hold streams open")
    c.add_argument("--url", required=True)
    c.add_argument("--streams", type=int, required=True)
    c.add_argument("--connect-at-once", type=int, default=100)
    p.add_argument("--streams", type=int, default=10_000)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument(
        "--hold", type=float, default=12.0, help="seconds the streams stay open and idle"
    )
    p.add_argument(
        "--keepalive", type=float, default=5.0, help="the gateway's sse_keepalive_seconds"
    )
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--source", default=str(ROOT), help="the checkout whose gateway runs")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()
    limit = raise_fd_limit()
    if args.command == "client":
        asyncio.run(client(args.url, args.streams, args.connect_at_once))
        return
    figures = run(args)
    print(f"\nIdle streams through `a2a-gateway serve` (SQLite), fd limit {limit}, "
          f"keepalive every {args.keepalive:g} s, held {args.hold:g} s")
    print("| figure | value |\n|---|---:|")
    for key, value in figures.items():
        print(f"| {key} | {value:,.2f} |" if isinstance(value, float) else f"| {key} | {value:,} |")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
