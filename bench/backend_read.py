"""Reading a backend's event stream: CPU per server-sent event on the client side alone.

    python bench/backend_read.py                      # 100 streams of 500 events, 1 of 5,000
    python bench/backend_read.py --streams 10 --deltas 1000 --rounds 5

``servers/stream_backend.py`` (pinned to ``--server-cpu``) streams OpenAI-chat chunks with
pace 0, one HTTP chunk per event, as backends write them; this process (pinned to
``--client-cpu``) reads them into the bridges' ``SSEReader`` through:

    httpx                   httpx's own transport (httpcore, h11): as the bridges read before
    httpx on aiohttp        the same httpx calls on ``AiohttpTransport`` (the shared client now)
    aiohttp                 aiohttp's client alone: the floor of the transport underneath

The figure is this process's CPU per event (median of the rounds; uvloop when installed,
as ``serve`` runs), so the load of other processes moves it little.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
from bench.streaming import start_backend, stop  # noqa: E402
from handlers.upstream.aiohttp_transport import AiohttpTransport  # noqa: E402
from handlers.upstream.sse import SSEReader  # noqa: E402


def _body(deltas: int) -> dict[str, Any]:
    return {"model": "bench", "stream": True,
            "messages": [{"role": "user", "content": f"deltas={deltas} pace_ms=0"}]}


async def _through_httpx(client: httpx.AsyncClient, url: str, deltas: int) -> int:
    reader, frames = SSEReader(), 0
    async with client.stream("POST", url, json=_body(deltas)) as response:
        async for chunk in response.aiter_bytes():
            frames += len(reader.feed(chunk))
    return frames


async def _through_aiohttp(session: aiohttp.ClientSession, url: str, deltas: int) -> int:
    reader, frames = SSEReader(), 0
    async with session.post(url, json=_body(deltas)) as response:
        async for chunk in response.content.iter_any():
            frames += len(reader.feed(chunk))
    return frames


async def _cpu_per_event(client: Any, read: Callable[..., Awaitable[int]], url: str,
                         args: argparse.Namespace) -> float:
    async with client:
        await asyncio.gather(*(read(client, url, 5) for _ in range(args.streams)))  # connect
        figures = []
        for _ in range(args.rounds):
            started = time.process_time()
            frames = await asyncio.gather(
                *(read(client, url, args.deltas) for _ in range(args.streams)))
            figures.append((time.process_time() - started) / sum(frames) * 1e6)
    return statistics.median(figures)


async def measure(url: str, args: argparse.Namespace) -> dict[str, float]:
    limits = httpx.Limits(max_connections=args.streams, max_keepalive_connections=args.streams)
    readers: dict[str, tuple[Callable[[], Any], Callable[..., Awaitable[int]]]] = {
        "httpx": (lambda: httpx.AsyncClient(limits=limits, timeout=60), _through_httpx),
        "httpx on aiohttp": (lambda: httpx.AsyncClient(timeout=60, transport=AiohttpTransport(
            max_connections=args.streams, keepalive_seconds=5)), _through_httpx),
        "aiohttp": (lambda: aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=args.streams)), _through_aiohttp),
    }
    runs: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(args.repeat):  # interleaved: each reader sees the same machine
        for name, (make, read) in readers.items():
            runs[name].append(await _cpu_per_event(make(), read, url, args))
    return {name: statistics.median(values) for name, values in runs.items()}


def _run(coroutine: Awaitable[dict[str, float]]) -> dict[str, float]:
    """On uvloop when it is installed, as ``a2a-gateway serve`` runs."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)  # type: ignore[arg-type]
    return uvloop.run(coroutine)  # type: ignore[arg-type]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, action="append",
                   help="streams at once (repeatable; default 100 and 1)")
    p.add_argument("--deltas", type=int, default=0, help="events per stream (default 50,000 "
                   "over the streams, at least 500 each)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    args = p.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.client_cpu})
    with tempfile.TemporaryDirectory(prefix="a2a-backend-read-") as tmp:
        backend, base = start_backend(Path(tmp), args.server_cpu)
        try:
            for streams in args.streams or [100, 1]:
                one = argparse.Namespace(**{**vars(args), "streams": streams,
                                            "deltas": args.deltas or max(500, 50_000 // streams)})
                figures = _run(measure(f"{base}/v1/chat/completions", one))
                shown = ", ".join(f"{name} {value:.2f}" for name, value in figures.items())
                print(f"{streams} stream(s) of {one.deltas} events: CPU µs per event: {shown}",
                      flush=True)
        finally:
            stop(backend)


if __name__ == "__main__":
    main()
