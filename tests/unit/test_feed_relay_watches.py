"""Feed watches between replicas (``live.feed_relay``), the relays joined by an in-memory
channel instead of PostgreSQL (the real one: tests/integration/test_event_feed_relay.py):
what a replica sends before and after it heard every replica's watches, the acknowledged
watch a new feed client waits for, and what expires."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from a2a_gateway.live.feed import EVERY_ENDPOINT, EndpointFeed
from a2a_gateway.live.feed_relay import FeedRelay

REFRESH = 0.1


class Channel:
    """Delivers every NOTIFY to every relay, each after its own delay (None: never)."""

    def __init__(self) -> None:
        self.relays: dict[str, FeedRelay] = {}
        self.delay: dict[str, float | None] = {}
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def join(self, name: str) -> tuple[EndpointFeed, FeedRelay]:
        feed = EndpointFeed()
        relay = FeedRelay(
            feed, None, name, lambda p: self.notify(name, "feed", p), refresh_seconds=REFRESH
        )
        self.relays[name] = relay
        return feed, relay

    def notify(self, sender: str, channel: str, payload: str) -> None:
        self.sent.append((sender, orjson.loads(payload)))
        loop = asyncio.get_running_loop()
        for name, relay in self.relays.items():
            delay = self.delay.get(name, 0.0)
            if delay is not None:
                loop.call_later(delay, relay.on_message, payload)


async def settled(*relays: FeedRelay) -> None:
    for relay in relays:
        relay.connected()
    await asyncio.sleep(1.5 * REFRESH + 0.02)
    assert all(relay.selective for relay in relays)


async def test_a_replica_sends_everything_until_it_heard_every_watch_then_only_what_is_watched():
    channel = Channel()
    _, a = channel.join("a")
    a.connected()
    assert not a.selective and a.wanted(
        "nobody-watches"
    )  # just connected: it may have missed lists
    await asyncio.sleep(1.5 * REFRESH + 0.02)
    assert a.selective and not a.wanted("nobody-watches")
    a.refresh(listening=False)  # its listener was lost: it may miss lists again
    assert not a.selective and a.wanted("nobody-watches")


async def test_a_new_watch_waits_for_every_replica_and_then_they_send_its_events():
    channel = Channel()
    feed_b, b = channel.join("b")
    _, a = channel.join("a")
    _, c = channel.join("c")
    await settled(a, b, c)
    for relay in (a, b, c):
        relay.refresh(listening=True)  # each announces its (empty) list: b now knows a and c
    await asyncio.sleep(0.01)
    channel.delay["c"] = 0.15  # c hears everything late
    feed_b.subscribe("ep-1")
    started = time.monotonic()
    await feed_b.watching("ep-1")
    assert time.monotonic() - started >= 0.15  # it waited for c's acknowledgement
    assert a.wanted("ep-1") and c.wanted("ep-1") and not a.wanted("ep-2")
    assert b.stats["unconfirmed"] == 0
    started = time.monotonic()
    await feed_b.watching("ep-1")  # already acknowledged everywhere: no wait
    assert time.monotonic() - started < 0.05


async def test_a_silent_replica_bounds_the_wait_and_a_list_not_refreshed_expires():
    channel = Channel()
    feed_b, b = channel.join("b")
    _, a = channel.join("a")
    await settled(a, b)
    a.refresh(listening=True)
    await asyncio.sleep(0.01)
    channel.delay["a"] = None  # a stops hearing anything
    feed_b.subscribe(EVERY_ENDPOINT)
    started = time.monotonic()
    await feed_b.watching(EVERY_ENDPOINT)
    assert 3 * REFRESH - 0.02 <= time.monotonic() - started < 3 * REFRESH + 0.5
    assert b.stats["unconfirmed"] == 1

    channel.delay["a"] = 0.0
    b.refresh(listening=True)  # b's list: every endpoint
    await asyncio.sleep(0.01)
    assert a.wanted("any-endpoint")
    await asyncio.sleep(3 * REFRESH + 0.02)  # b announces nothing more
    a.refresh(listening=True)
    assert not a.wanted("any-endpoint")


async def test_a_list_too_long_for_one_payload_asks_for_every_endpoint():
    channel = Channel()
    feed_b, b = channel.join("b")
    _, a = channel.join("a")
    await settled(a, b)
    for n in range(300):
        feed_b.subscribe(f"{n:036d}")
    b.refresh(listening=True)
    await asyncio.sleep(0.01)
    assert channel.sent[-1][1]["w"] == [EVERY_ENDPOINT]
    assert a.wanted("not-even-listed")
