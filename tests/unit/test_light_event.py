"""``LightEvent`` behaves as ``asyncio.Event`` (set wakes every waiter, a set flag does not
block, clear re-arms, a cancelled waiter leaves) and holds no waiter list while none waits."""

from __future__ import annotations

import asyncio

import pytest

from a2a_gateway.tasks.light_event import LightEvent


@pytest.mark.parametrize("kind", [LightEvent, asyncio.Event])
async def test_it_behaves_as_asyncio_event(kind: type) -> None:
    event = kind()
    assert not event.is_set()
    waiters = [asyncio.create_task(event.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    event.set()
    assert await asyncio.gather(*waiters) == [True, True, True]
    assert event.is_set() and await asyncio.wait_for(event.wait(), 1) is True
    event.clear()
    late = asyncio.create_task(event.wait())
    await asyncio.sleep(0)
    late.cancel()
    with pytest.raises(asyncio.CancelledError):
        await late
    waiting = asyncio.create_task(event.wait())
    await asyncio.sleep(0)
    event.set()
    assert await waiting is True


async def test_it_holds_no_waiter_list_while_none_waits() -> None:
    event = LightEvent()
    assert event._waiters is None and not hasattr(event, "__dict__")
    waiter = asyncio.create_task(event.wait())
    await asyncio.sleep(0)
    assert event._waiters is not None
    event.set()
    await waiter
    assert event._waiters is None
    cancelled = LightEvent()
    task = asyncio.create_task(cancelled.wait())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled._waiters is None
