"""Streaming benchmark: the ``a2a-gateway serve`` command as shipped, side by side with
another version of it, in front of a scripted streaming backend.

    python bench/streaming.py                         # the working tree
    python bench/streaming.py --compare HEAD~3        # and the gateway as committed at a ref
    python bench/streaming.py --runs 3 --scenarios echo-1,latency-50

Each run starts every gateway afresh (``python -m a2a_gateway serve`` with an endpoints
file, the default SQLite store, log level warning; pinned to ``--server-cpu``) while the
load generator (this process, an asyncio client) and the scripted backend
(``servers/stream_backend.py``) run on ``--client-cpu``. Figures (medians over runs):

    echo-1       SendStreamingMessage on the echo agent (5,000 words, delay 0), ten one after
                 another: deltas/s, gateway CPU µs/delta
    echo-100     100 streams of 300 words started at once: aggregate deltas/s, CPU µs/delta,
                 first delta p50 (request sent → first text chunk), and the gateway's CPU
                 time spent before it (the scenario's start → the median first delta: how
                 much work went before the starting streams, whatever the machine's load)
    chat-1       through the OpenAI-chat bridge, one backend burst of 5,000 deltas (four one
                 after another): deltas/s, CPU µs/delta
    chat-100     100 such bursts of 500 deltas at once, twice: aggregate deltas/s, CPU µs/delta
    hermes-1     the same through the Hermes bridge (runs + events)
    latency-1    backend paced at 10 ms per delta, 1 stream: per-delta latency through the
                 gateway minus the same backend read directly (p50 / p99)
    latency-50   the same with 50 streams at once (5,000 deltas/s)
    slow-client  a 20,000-word echo, delay 0, read by a client that pauses 1 s after the first
                 event: whether the whole text arrives, or an error event

Every timed scenario also gives the gateway's run-queue wait (time it was ready to run but
another process had its CPU, from ``/proc/<pid>/task/*/schedstat``) and this client's CPU,
as shares of the wall time: a latency that grows with them is the machine's, not the gateway's.

A "delta" is one text delta of the reply (a word of the echo, a backend chunk), however
the gateway framed it. CPU µs/delta is the gateway process's user + system CPU over the
measured phase divided by the deltas delivered: on a shared machine the stable figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT))
from bench.core_send import cpu_seconds, free_port, loadavg, machine_note, pinned  # noqa: E402


def cpu_time(pid: int) -> float:
    """CPU seconds of all threads of ``pid`` so far, to the nanosecond where Linux tells
    (``/proc/<pid>/task/*/schedstat``); else from clock ticks."""
    try:
        return (
            sum(
                int(Path(t, "schedstat").read_text().split()[0])
                for t in Path(f"/proc/{pid}/task").iterdir()
            )
            / 1e9
        )
    except (OSError, ValueError):
        return cpu_seconds(pid)

ECHO = "00000000-0000-4000-8000-00000000ec40"
CHAT = "00000000-0000-4000-8000-00000000c4a7"
HERMES = "00000000-0000-4000-8000-0000000be4e5"
STAMP = re.compile(r"(\d+):(\d+)")
HEADERS = {"A2A-Version": "1.0", "Accept": "text/event-stream", "Content-Type": "application/json"}
ENDPOINTS_FILE = """endpoints:
  - {{id: {echo}, name: echo, handler: "handlers.echo:EchoHandler", public: true,
     settings: {{delay: 0}}}}
  - {{id: {chat}, name: chat, handler: "handlers.openai_chat:OpenAIChatHandler", public: true,
     settings: {{base_url: "{backend}/v1", timeout: 120, stream_usage: false}}}}
  - {{id: {hermes}, name: hermes, handler: "handlers.hermes:HermesAgentHandler", public: true,
     settings: {{hermes_api_url: "{backend}"}}}}
"""


# one SSE stream, read by the load generator ------------------------------------------------


@dataclass
class StreamRead:
    deltas: int = 0
    chunks: int = 0
    """SSE events that carried text (merged chunks carry several deltas)."""
    first_delta_s: float | None = None
    first_delta_cpu_s: float | None = None
    """The gateway's CPU time when the first delta arrived (with ``gateway_cpu``)."""
    latencies_ms: list[float] = field(default_factory=list)
    text: str = ""
    error: str | None = None
    final_state: str | None = None


async def _lines(response: aiohttp.ClientResponse) -> Any:
    async for raw in response.content:
        yield raw.decode().rstrip("\r\n")


def _stamps(text: str, into: StreamRead) -> None:
    now = time.monotonic_ns()
    for _, sent in STAMP.findall(text):
        into.latencies_ms.append((now - int(sent)) / 1e6)


async def gateway_stream(http: aiohttp.ClientSession, base: str, endpoint: str, text: str, *,
                         pause_after_first: float = 0.0, stamped: bool = False,
                         gateway_cpu: Callable[[], float] | None = None) -> StreamRead:
    """SendStreamingMessage; deltas are words (echo) or stamps (backend deltas).
    ``gateway_cpu``: read when the first delta arrives (``first_delta_cpu_s``)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
        "messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}}}
    out, started, events = StreamRead(), time.monotonic(), 0
    async with http.post(f"{base}/{endpoint}/a2a", json=body, headers=HEADERS) as response:
        async for line in _lines(response):
            if not line.startswith("data:"):
                continue
            data = json.loads(line[5:])
            events += 1
            if events == 1 and pause_after_first:
                await asyncio.sleep(pause_after_first)
            if "error" in data:
                out.error = f"{data['error'].get('code')} {data['error'].get('message')}"
                continue
            result = data["result"]
            if "artifactUpdate" in result:
                update = result["artifactUpdate"]
                chunk = "".join(p.get("text", "") for p in update["artifact"]["parts"])
                # the text as a client that follows ``append`` holds it: the last chunk
                # appends (often nothing) when the answer is what was streamed, else replaces
                out.text = out.text + chunk if update.get("append") else chunk
                if update.get("lastChunk") and not (update.get("append") and chunk):
                    continue  # the final artifact whole, or the empty end: not deltas
                if out.first_delta_s is None:
                    out.first_delta_s = time.monotonic() - started
                    if gateway_cpu is not None:
                        out.first_delta_cpu_s = gateway_cpu()
                out.chunks += 1
                if stamped:
                    _stamps(chunk, out)
                    out.deltas += len(STAMP.findall(chunk))
                else:
                    out.deltas += len(chunk.split())
            elif "statusUpdate" in result:
                out.final_state = result["statusUpdate"]["status"]["state"]
    return out


async def direct_stream(http: aiohttp.ClientSession, backend: str, text: str) -> StreamRead:
    """The backend's OpenAI-compatible stream, read without the gateway."""
    body = {"model": "bench", "stream": True, "messages": [{"role": "user", "content": text}]}
    out = StreamRead()
    async with http.post(f"{backend}/v1/chat/completions", json=body) as response:
        async for line in _lines(response):
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                for choice in json.loads(line[5:]).get("choices", []):
                    content = choice.get("delta", {}).get("content") or ""
                    _stamps(content, out)
                    out.deltas += len(STAMP.findall(content))
    return out


# scenarios ---------------------------------------------------------------------------------


@dataclass
class Measured:
    figures: dict[str, float]
    note: str = ""


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def runqueue_wait(pid: int) -> float:
    """Seconds the threads of ``pid`` spent runnable but waiting for a CPU (schedstat's
    second field): how much the machine, not the gateway, delayed it."""
    try:
        return (
            sum(
                int(Path(t, "schedstat").read_text().split()[1])
                for t in Path(f"/proc/{pid}/task").iterdir()
            )
            / 1e9
        )
    except (OSError, ValueError, IndexError):
        return float("nan")


async def _timed(pid: int, work: Callable[[], Awaitable[list[StreamRead]]],
                 into: dict[str, float]) -> tuple[list[StreamRead], float, float]:
    """``work``'s reads, wall seconds and gateway CPU seconds; ``into`` gets the gateway's
    run-queue wait and this client's CPU, as shares of the wall time."""
    cpu, wall, waited, own = (
        cpu_time(pid),
        time.monotonic(),
        runqueue_wait(pid),
        time.process_time(),
    )
    reads = await work()
    elapsed = time.monotonic() - wall
    into["gateway runq wait %"] = (runqueue_wait(pid) - waited) / elapsed * 100
    into["client cpu %"] = (time.process_time() - own) / elapsed * 100
    return reads, elapsed, cpu_time(pid) - cpu


def _throughput(reads: list[StreamRead], wall: float, cpu: float) -> dict[str, float]:
    deltas = sum(r.deltas for r in reads)
    errors = sum(1 for r in reads if r.error)
    return {"deltas/s": deltas / wall, "cpu µs/delta": cpu / max(deltas, 1) * 1e6,
            "deltas per event": deltas / max(sum(r.chunks for r in reads), 1), "errors": errors}


async def _one_after_another(
    times: int, stream: Callable[[], Awaitable[StreamRead]]
) -> list[StreamRead]:
    return [await stream() for _ in range(times)]


async def echo(
    http: aiohttp.ClientSession, gw: Gateway, streams: int, words: int, repeat: int = 1
) -> Measured:
    text = " ".join(f"w{i}" for i in range(words))
    await gateway_stream(http, gw.base, ECHO, "warm up")
    machine: dict[str, float] = {}
    gateway_cpu = (lambda: cpu_time(gw.pid)) if streams > 1 else None
    cpu_before = cpu_time(gw.pid)
    reads, wall, cpu = await _timed(
        gw.pid,
        lambda: _one_after_another(
            repeat,
            lambda: asyncio.gather(
                *(gateway_stream(http, gw.base, ECHO, text, gateway_cpu=gateway_cpu)
                  for _ in range(streams))
            ),
        ),
        machine,
    )
    reads = [r for group in reads for r in group]
    figures = _throughput(reads, wall, cpu)
    figures["first delta p50 ms"] = _pct(
        [r.first_delta_s * 1000 for r in reads if r.first_delta_s], 0.5
    )
    if gateway_cpu is not None:  # the gateway's CPU before it: not moved by the machine's load
        figures["first delta p50 cpu ms"] = _pct(
            [(r.first_delta_cpu_s - cpu_before) * 1000 for r in reads if r.first_delta_cpu_s],
            0.5,
        )
        figures["scenario cpu ms"] = cpu * 1000
    return Measured(figures | machine)


async def bridge(http: aiohttp.ClientSession, gw: Gateway, endpoint: str, deltas: int, repeat: int,
                 streams: int = 1) -> Measured:
    """``repeat`` rounds of ``streams`` backend bursts of ``deltas`` each, at once."""
    await gateway_stream(http, gw.base, endpoint, "deltas=5 warm up", stamped=True)
    machine: dict[str, float] = {}
    rounds, wall, cpu = await _timed(
        gw.pid,
        lambda: _one_after_another(
            repeat,
            lambda: asyncio.gather(
                *(
                    gateway_stream(
                        http, gw.base, endpoint, f"deltas={deltas} pace_ms=0", stamped=True
                    )
                    for _ in range(streams)
                )
            ),
        ),
        machine,
    )
    return Measured(_throughput([r for group in rounds for r in group], wall, cpu) | machine)


async def latency(
    http: aiohttp.ClientSession, gw: Gateway, backend: str, streams: int, deltas: int
) -> Measured:
    ask = f"deltas={deltas} pace_ms=10"
    await gateway_stream(http, gw.base, CHAT, "deltas=5 warm up", stamped=True)
    direct = await asyncio.gather(*(direct_stream(http, backend, ask) for _ in range(streams)))
    machine: dict[str, float] = {}
    reads, wall, cpu = await _timed(gw.pid, lambda: asyncio.gather(
        *(gateway_stream(http, gw.base, CHAT, ask, stamped=True) for _ in range(streams))), machine)
    through = [ms for r in reads for ms in r.latencies_ms]
    alone = [ms for r in direct for ms in r.latencies_ms]
    figures = {
        "added p50 ms": _pct(through, 0.5) - _pct(alone, 0.5),
        "added p99 ms": _pct(through, 0.99) - _pct(alone, 0.99),
        "direct p50 ms": _pct(alone, 0.5), "gateway p50 ms": _pct(through, 0.5),
        "cpu µs/delta": cpu / max(len(through), 1) * 1e6,
        "gateway cpu %": cpu / wall * 100, "errors": sum(1 for r in reads if r.error),
    }
    return Measured(figures | machine)


async def slow_client(http: aiohttp.ClientSession, gw: Gateway) -> Measured:
    words = 20_000
    text = " ".join(f"w{i}" for i in range(words))
    read = await gateway_stream(http, gw.base, ECHO, text, pause_after_first=1.0)
    whole = read.text == f"echo: {text}"
    note = (
        "whole text, no error"
        if whole and not read.error
        else f"error: {read.error}"
        if read.error
        else "text incomplete"
    )
    return Measured({"whole text": float(whole), "errors": float(bool(read.error))}, note)


SCENARIOS: dict[str, Callable[[aiohttp.ClientSession, Gateway, str], Awaitable[Measured]]] = {
    "echo-1": lambda http, gw, backend: echo(http, gw, 1, 5_000, repeat=10),
    "echo-100": lambda http, gw, backend: echo(http, gw, 100, 300),
    "chat-1": lambda http, gw, backend: bridge(http, gw, CHAT, 5_000, repeat=4),
    "chat-100": lambda http, gw, backend: bridge(http, gw, CHAT, 500, repeat=2, streams=100),
    "hermes-1": lambda http, gw, backend: bridge(http, gw, HERMES, 5_000, repeat=4),
    "latency-1": lambda http, gw, backend: latency(http, gw, backend, 1, 300),
    "latency-50": lambda http, gw, backend: latency(http, gw, backend, 50, 200),
    "slow-client": lambda http, gw, backend: slow_client(http, gw),
}


# processes -----------------------------------------------------------------------------------


@dataclass
class Gateway:
    name: str
    proc: subprocess.Popen[bytes]
    base: str
    loop: str

    @property
    def pid(self) -> int:
        return self.proc.pid


def _wait_listening(proc: subprocess.Popen[bytes], log: Path, pattern: str, deadline: float) -> str:
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        found = re.search(pattern, text)
        if found:
            return found.group(0)
        if proc.poll() is not None:
            raise RuntimeError(f"exited before listening:\n{text[-2000:]}")
        time.sleep(0.05)
    raise RuntimeError(f"not listening in time:\n{log.read_text(errors='replace')[-2000:]}")


def start_gateway(name: str, source: Path, workdir: Path, backend: str, cpu: int | None,
                  extra_env: dict[str, str]) -> Gateway:
    port = free_port()
    endpoints = workdir / f"endpoints-{name}.yaml"
    endpoints.write_text(
        ENDPOINTS_FILE.format(echo=ECHO, chat=CHAT, hermes=HERMES, backend=backend)
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    env.update({"PYTHONPATH": str(source), "A2A_GATEWAY_LOG_LEVEL": "warning",
                "A2A_GATEWAY_STORE": f"sqlite:///{workdir / f'{name}-{port}.db'}", **extra_env})
    log = workdir / f"gateway-{name}-{port}.log"
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
    line = _wait_listening(proc, log, r"listening on http://\S+[^\n]*", time.monotonic() + 60)
    loop = line.rsplit("event loop ", 1)[1].strip() if "event loop " in line else "asyncio"
    return Gateway(name, proc, f"http://127.0.0.1:{port}", loop)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def start_backend(workdir: Path, cpu: int | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = workdir / "backend.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            pinned(
                cpu,
                [
                    sys.executable,
                    str(BENCH_DIR / "servers" / "stream_backend.py"),
                    "--port",
                    str(port),
                ],
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    _wait_listening(proc, log, r"bench-server stream-backend", time.monotonic() + 30)
    time.sleep(0.3)
    return proc, f"http://127.0.0.1:{port}"


def snapshot(ref: str, workdir: Path) -> tuple[Path, str]:
    """The gateway as committed at ``ref`` (a git archive of its packages)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    target = workdir / f"source-{commit}"
    target.mkdir()
    archive = subprocess.run(
        ["git", "archive", ref, "a2a_gateway", "handlers", "migrations"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target, f"{ref} ({commit})"


# the run -------------------------------------------------------------------------------------


async def one_round(
    sources: dict[str, tuple[Path, dict[str, str]]],
    names: list[str],
    backend: str,
    workdir: Path,
    args: argparse.Namespace,
    results: dict[tuple[str, str], list[Measured]],
    loops: dict[str, str],
) -> None:
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, read_bufsize=1 << 24
    ) as http:
        for scenario in names:
            for label, (source, extra_env) in sources.items():
                gw = start_gateway(label, source, workdir, backend, args.server_cpu, extra_env)
                loops[label] = gw.loop
                try:
                    measured = await SCENARIOS[scenario](http, gw, backend)
                finally:
                    stop(gw.proc)
                results.setdefault((scenario, label), []).append(measured)
                shown = ", ".join(f"{k} {v:.2f}" for k, v in measured.figures.items())
                print(
                    f"  {scenario:<11} {label:<10} {shown} {measured.note}  (load {loadavg():.2f})",
                    flush=True,
                )


def print_table(results: dict[tuple[str, str], list[Measured]], labels: list[str], names: list[str],
                described: dict[str, str], loops: dict[str, str], args: argparse.Namespace) -> None:
    print(f"\nStreaming through `a2a-gateway serve` (SQLite store), {args.runs} run(s), medians, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(machine_note(args))
    for label in labels:
        print(f"  {label}: {described[label]}, event loop {loops.get(label, '?')}")
    print()
    print(
        f"| {'scenario':<11} | {'figure':<20} | "
        + " | ".join(f"{label:>12}" for label in labels)
        + " |"
    )
    print(f"|{'-' * 13}|{'-' * 22}|" + "|".join("-" * 14 for _ in labels) + "|")
    for scenario in names:
        keys = list(results[(scenario, labels[0])][0].figures)
        for key in keys:
            cells = []
            for label in labels:
                values = [
                    m.figures[key] for m in results.get((scenario, label), []) if key in m.figures
                ]
                cells.append(f"{statistics.median(values):>12.2f}" if values else f"{'-':>12}")
            print(f"| {scenario:<11} | {key:<20} | " + " | ".join(cells) + " |")
        notes = {
            label: "; ".join(sorted({m.note for m in results.get((scenario, label), []) if m.note}))
            for label in labels
        }
        if any(notes.values()):
            print(
                f"| {scenario:<11} | {'result':<20} | "
                + " | ".join(f"{notes[label]:>12}" for label in labels)
                + " |"
            )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma list of: {', '.join(SCENARIOS)}"
    )
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        help="also run the gateway as committed at this ref",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL:NAME=VALUE",
        help="also run the working tree with a setting,"
        " e.g. asyncio:A2A_GATEWAY_EVENT_LOOP=asyncio",
    )
    p.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="also run the gateway from another checkout (its a2a_gateway, handlers, migrations)",
    )
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--json", help="also write the raw figures to this file")
    args = p.parse_args()
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        sys.exit(f"unknown scenario(s): {unknown}")
    if args.client_cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.client_cpu})
    with tempfile.TemporaryDirectory(prefix="a2a-stream-bench-") as tmp:
        workdir = Path(tmp)
        sources: dict[str, tuple[Path, dict[str, str]]] = {"working": (ROOT, {})}
        described = {"working": "working tree"}
        for variant in args.variant:
            label, _, setting = variant.partition(":")
            name, _, value = setting.partition("=")
            sources[label], described[label] = (
                (ROOT, {name: value}),
                f"working tree, {name}={value}",
            )
        for source in args.source:
            label, _, path = source.partition("=")
            sources[label], described[label] = (Path(path).resolve(), {}), f"checkout {path}"
        for ref in args.compare:
            path, text = snapshot(ref, workdir)
            label = ref if len(ref) <= 12 else text.split("(")[-1].rstrip(")")
            sources[label], described[label] = (path, {}), text
        backend_proc, backend = start_backend(workdir, args.client_cpu)
        results: dict[tuple[str, str], list[Measured]] = {}
        loops: dict[str, str] = {}
        try:
            for run in range(args.runs):
                print(f"run {run + 1}/{args.runs}", flush=True)
                asyncio.run(one_round(sources, names, backend, workdir, args, results, loops))
        finally:
            stop(backend_proc)
    print_table(results, list(sources), names, described, loops, args)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "date": datetime.now(UTC).isoformat(),
                    "machine": machine_note(args),
                    "sources": described,
                    "results": {
                        f"{s}|{label}": [m.figures | {"note": m.note} for m in ms]
                        for (s, label), ms in results.items()
                    },
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
