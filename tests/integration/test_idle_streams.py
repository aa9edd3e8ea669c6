"""Idle open streams cost bounded memory, and give it back when they close.

A few hundred SendStreamingMessage streams on an echo whose ``delay`` keeps every task
running and silent after its first word, held by a client in another process
(``bench/idle_streams.py client``, the load generator of the 10,000-stream figure), so
what ``tracemalloc`` counts here is the gateway's. Then every task is canceled and every
stream closed: what stays is a small fraction of what they held.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import tracemalloc
from pathlib import Path

import pytest

from tests.support.harness import running_gateway

pytestmark = pytest.mark.timeout(300)

CLIENT = Path(__file__).resolve().parents[2] / "bench" / "idle_streams.py"
ECHO = "00000000-0000-4000-8000-0000000001d1"
STREAMS = 300
PER_STREAM_BOUND = 36 * 1024
"""Measured ≈ 30–31 KB of Python objects per stream (33.5 before the run's slots and before
the stream let its request, starting task and sent events go; 36.6 before the run's
LightEvents, the replay log's list and the stream's slots; bench/README.md, idle_streams).
The protobuf objects (the replay log's events are kept as bytes) are outside
``tracemalloc``."""
KEPT_BOUND = 8 * 1024  # measured ≈ 2 KB: caches and pools that stay warm


class _Clients:
    def __init__(self, base: str, streams: int) -> None:
        self.base, self.streams = base, streams

    async def __aenter__(self) -> dict:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CLIENT),
            "client",
            "--url",
            self.base,
            "--streams",
            str(self.streams),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return json.loads(await asyncio.wait_for(self.proc.stdout.readline(), 200))  # type: ignore[union-attr]

    async def close(self) -> dict:
        self.proc.stdin.write(b"close\n")  # type: ignore[union-attr]
        out, _ = await asyncio.wait_for(self.proc.communicate(), 200)
        return json.loads(out.decode().strip().splitlines()[-1])

    async def __aexit__(self, *exc: object) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def _settled(gw) -> int:
    """Traced bytes once every run ended and the replay logs were dropped."""
    while gw.gateway.engine.runs:
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # past stream_replay_keep_seconds
    gw.gateway.hub._sweep(gw.gateway.hub.clock())
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def test_idle_streams_cost_bounded_memory_and_give_it_back_when_they_close() -> None:
    tracemalloc.start()
    try:
        async with running_gateway(sse_keepalive_seconds=0.5,
                                   stream_replay_keep_seconds=0.25) as gw:
            await gw.add_endpoint(settings={"delay": 3600}, endpoint_id=ECHO,
                                  card={"capabilities": {"streaming": True}})
            warm = _Clients(gw.base_url, 20)  # first use: imports, pools, caches
            async with warm:
                await warm.close()
            before = await _settled(gw)
            tasks_before = len(asyncio.all_tasks())
            held = _Clients(gw.base_url, STREAMS)
            async with held as opened:
                assert opened == {"open": STREAMS, "errors": 0}
                await asyncio.sleep(1.25)  # idle: keepalives only
                gc.collect()
                open_bytes = tracemalloc.get_traced_memory()[0]
                tasks_open = len(asyncio.all_tasks()) - tasks_before
                closed = await held.close()
            after = await _settled(gw)
    finally:
        tracemalloc.stop()
    per_stream = (open_bytes - before) / STREAMS
    assert 0 < per_stream <= PER_STREAM_BOUND, f"{per_stream:.0f} bytes per idle stream"
    # aiohttp's two per connection (its reader, the request) and the run's; the keepalives
    # of all of them share one (was one more per stream)
    assert tasks_open <= 3 * STREAMS + 5
    assert closed["errors"] == 0 and closed["cancel_errors"] == 0
    assert closed["pinged"] == STREAMS  # every idle stream got its keepalives
    assert (after - before) / STREAMS <= KEPT_BOUND, (
        f"{(after - before) / STREAMS:.0f} bytes kept per stream"
    )
