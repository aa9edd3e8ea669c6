"""A wave of dropped streams: the gateway's memory before, at the peak, and after it ended.

    python bench/stream_wave.py                         # 1,000 streams, one wave
    python bench/stream_wave.py --streams 2000 --waves 2 --env MALLOC_ARENA_MAX=2

Starts ``a2a-gateway serve`` (SQLite store, a slow echo endpoint: ``--delay`` seconds per
word of a ``--words``-word message, replay logs kept ``--replay-keep`` s after their task
ended) pinned to ``--server-cpu``; this process is the client, on ``--client-cpu``. A wave
opens ``--streams`` SendStreamingMessage streams, reads each up to its first event (the
task), and drops the connection; the tasks go on without a listener and complete. Once
every task is terminal (GetTask), the replay logs' keep time has passed and the gateway's
memory check has run (every keep time, at most 5 s), its RSS is read again until it stops
falling. Figures per wave: RSS (``VmRSS``) before, its peak (sampled every 50 ms), after;
the growth per stream at the peak and what stays; what the RSS after is made of (glibc's
main heap, other anonymous memory: pymalloc's arenas, and the rest).
The issue's bar: after the wave, RSS within 1.5 × before + 64 MB.

``--env NAME=VALUE`` passes a variable to the gateway (e.g. ``MALLOC_ARENA_MAX=2``, or
``A2A_GATEWAY_MEMORY_TRIM_STREAMS=0`` to switch the gateway's trim off).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import aiohttp

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT))

from bench.idle_streams import raise_fd_limit, rss_kb, serve_echo, until_quiet  # noqa: E402

ECHO = "00000000-0000-4000-8000-0000000001d2"
STREAM_HEADERS = {"A2A-Version": "1.0", "Accept": "text/event-stream"}


def rss_by_mapping(pid: int) -> dict[str, float]:
    """Resident MB of the process's glibc main heap (``[heap]``), its other anonymous
    mappings (pymalloc's 1 MiB arenas, glibc's thread arenas, large blocks) and the rest
    (code, files)."""
    sizes = {"heap": 0, "anon": 0, "other": 0}
    kind = "other"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if not line[0].isupper() or not fields[0].endswith(":"):  # a mapping's header line
            kind = ("heap" if line.endswith("[heap]") else
                    "anon" if len(fields) == 5 or fields[5].startswith("[anon") else "other")
        elif fields[0] == "Rss:":
            sizes[kind] += int(fields[1])
    return {f"RSS after, {name} MB": kb / 1024 for name, kb in sizes.items()}


class PeakRSS:
    """The highest RSS of ``pid`` seen by a thread sampling it every 50 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, rss_kb(pid), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_kb(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


async def open_and_drop(http: aiohttp.ClientSession, url: str, words: int) -> str | None:
    """One stream: sent, read up to its first event, dropped; the task's id (None: failed)."""
    text = " ".join(f"w{n}" for n in range(words))
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
        "messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}}}
    try:
        async with http.post(url, json=body, headers=STREAM_HEADERS) as response:
            async for raw in response.content:
                line = raw.decode()
                if line.startswith("data:"):
                    task = json.loads(line[5:]).get("result", {}).get("task")
                    response.connection.transport.abort()  # type: ignore[union-attr]
                    return task["id"] if task else None
    except (aiohttp.ClientError, ConnectionError):
        return None
    return None


async def all_terminal(http: aiohttp.ClientSession, url: str, task_ids: list[str]) -> float:
    """Wait until every task is terminal; the seconds it took."""
    started, waiting = time.monotonic(), set(task_ids)
    while waiting:
        for task_id in list(waiting):
            body = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
            async with http.post(url, json=body, headers={"A2A-Version": "1.0"}) as answer:
                state = (await answer.json()).get("result", {}).get("status", {}).get("state")
            if state in {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"}:
                waiting.discard(task_id)
        if waiting:
            await asyncio.sleep(0.5)
    return time.monotonic() - started


async def wave(base: str, pid: int, args: argparse.Namespace) -> dict[str, float]:
    url = f"{base}/{ECHO}/a2a"
    before = until_quiet(pid, 10)
    peak = PeakRSS(pid)
    connector = aiohttp.TCPConnector(limit=args.connect_at_once, force_close=True)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=None)) as http:
        started = time.monotonic()
        ids = await asyncio.gather(*(open_and_drop(http, url, args.words)
                                     for _ in range(args.streams)))
        opened = time.monotonic() - started
        task_ids = [task_id for task_id in ids if task_id]
        done = await all_terminal(http, url, task_ids)
    await asyncio.sleep(args.replay_keep + 6)  # past the logs' keep time and a memory check
    top = peak.stop()
    after = until_quiet(pid, 20)
    return {"streams": len(task_ids), "failed": args.streams - len(task_ids),
            "open s": opened, "tasks done s": done, "RSS before MB": before / 1024,
            "RSS peak MB": top / 1024, "RSS after MB": after / 1024,
            "peak KB/stream": (top - before) / max(len(task_ids), 1),
            "kept KB/stream": (after - before) / max(len(task_ids), 1),
            "bar MB (1.5 x before + 64)": 1.5 * before / 1024 + 64,
            "met": float(after / 1024 <= 1.5 * before / 1024 + 64), **rss_by_mapping(pid)}


def run(args: argparse.Namespace) -> list[dict[str, float]]:
    from bench.streaming import stop

    settings = {"STREAM_REPLAY_KEEP_SECONDS": str(args.replay_keep),
                "SSE_KEEPALIVE_SECONDS": "5"}
    extra = dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory(prefix="a2a-wave-bench-") as tmp:
        gateway, base = serve_echo(Path(tmp), args.server_cpu, Path(args.source).resolve(),
                                   ECHO, args.delay, settings, extra_env=extra)
        try:
            warm = argparse.Namespace(**{**vars(args), "streams": 50})
            asyncio.run(wave(base, gateway.pid, warm))  # imports, pools, caches
            return [asyncio.run(wave(base, gateway.pid, args)) for _ in range(args.waves)]
        finally:
            stop(gateway)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--waves", type=int, default=1)
    p.add_argument("--words", type=int, default=20, help="words the echo answers, one a delay")
    p.add_argument("--delay", type=float, default=0.25, help="the echo's seconds per word")
    p.add_argument("--replay-keep", type=float, default=2.0,
                   help="the gateway's stream_replay_keep_seconds")
    p.add_argument("--connect-at-once", type=int, default=200)
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for the gateway (repeatable)")
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--source", default=str(ROOT), help="the checkout whose gateway runs")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()
    raise_fd_limit()
    from bench.core_send import pinned

    if args.client_cpu is not None and pinned(args.client_cpu, ["x"]) != ["x"]:
        import os

        os.sched_setaffinity(0, {args.client_cpu})
    waves = run(args)
    print(f"\nA wave of {args.streams:,} dropped streams through `a2a-gateway serve` (SQLite), "
          f"echo {args.words} words at {args.delay:g} s, replay logs kept {args.replay_keep:g} s"
          + (f", env {' '.join(args.env)}" if args.env else ""))
    print("| figure | " + " | ".join(f"wave {n + 1}" for n in range(len(waves))) + " |")
    print("|---|" + "---:|" * len(waves))
    for key in waves[0]:
        print(f"| {key} | " + " | ".join(f"{w[key]:,.2f}" if isinstance(w[key], float)
                                         else f"{w[key]:,}" for w in waves) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(waves, indent=2))


if __name__ == "__main__":
    main()
