"""A wave of streams dropped by their clients leaves nothing behind once its tasks ended and
their replay logs' keep time passed: the logs are dropped although no request comes (a quiet
hub sweeps nowhere else), the Python objects of the streams and runs are released, and the
heap is trimmed once or twice, not per stream (``observability.memory``: glibc's
``malloc_trim``)."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest
from a2a.types import GetTaskRequest, TaskState

from a2a_gateway.app import MEMORY_RELEASE
from a2a_gateway.observability.memory import libc_malloc_trim
from a2a_gateway.transport.sse import OPEN_STREAMS
from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

WAVE = 40
WORDS = " ".join(f"w{n}" for n in range(20))
KEPT_BOUND = 8 * 1024
"""Python bytes a dropped stream may leave, the client's side included; measured ≈ 3.6 KB:
the memory store's task row and usage record (≈ 1.5 KB, data, not a leak), the client's
connection pool, warm caches. (An idle stream's own bound: ``test_idle_streams``.)"""


async def _open_and_drop(client) -> str:
    """A SendStreamingMessage read up to its first event (the task), then dropped."""
    stream = client.send_message(send_request(WORDS))
    try:
        first = await anext(stream)
    finally:
        await stream.aclose()
    return first.task.id


async def _quiet(gw: RunningGateway) -> None:
    """Every run ended, every stream closed, every replay log dropped — with no request."""
    hub = gw.gateway.hub
    await eventually(lambda: not gw.gateway.engine.runs, what="every run ended")
    await eventually(lambda: not gw.app[OPEN_STREAMS], what="every stream closed")
    await eventually(lambda: hub.replay_stats()["logs"] == 0, what="the replay logs dropped")


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


@pytest.mark.skipif(libc_malloc_trim() is None, reason="malloc_trim is glibc's")
async def test_a_wave_of_dropped_streams_is_released_and_trimmed_once_its_logs_expire() -> None:
    tracemalloc.start()
    try:
        async with running_gateway(stream_replay_keep_seconds=0.3,
                                   memory_trim_streams=WAVE // 2) as gw:
            endpoint_id = await gw.add_endpoint(settings={"delay": 0.02},
                                                card={"capabilities": {"streaming": True}})
            release = gw.app[MEMORY_RELEASE]
            async with gw.client(endpoint_id) as client:
                await _open_and_drop(client)  # first use: imports, pools, caches
                await _quiet(gw)
                before, trims_before = _traced(), release.trims
                ids = await asyncio.gather(*(_open_and_drop(client) for _ in range(WAVE)))
                assert len(set(ids)) == WAVE
                await _quiet(gw)
                await eventually(lambda: release.trims > trims_before, what="a trim")
                after = _traced()
                task = await client.get_task(GetTaskRequest(id=ids[0]))
    finally:
        tracemalloc.stop()
    assert task.status.state == TaskState.TASK_STATE_COMPLETED  # ran on without a client
    # a trim or two (once the streams closed, once their logs expired), not one per stream
    assert trims_before + 1 <= release.trims <= trims_before + 2
    assert (after - before) / WAVE <= KEPT_BOUND, f"{(after - before) / WAVE:.0f} B kept"

