"""Backend health (``endpoints.backend_health``): status from the last success and the last
error, counts, messages that are short and carry no credential; records that merge (counts add,
the latest times win, the latest error brings its message) in any order; replicas sharing a
store showing the same health; at most one store write per endpoint per interval; a store that
fails losing nothing and failing no caller."""

from __future__ import annotations

import asyncio
import itertools

from a2a_gateway.endpoints.backend_health import (
    MAX_MESSAGE_CHARS,
    BackendHealth,
    error_message,
    health_json,
    safe_message,
)
from a2a_gateway.stores.base import EndpointHealth, StoreUnavailableError
from a2a_gateway.stores.memory import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class CountingStore(MemoryStore):
    """The memory store, counting its health writes; ``down`` makes them fail, ``delay`` slow."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.writes: list[tuple[str, EndpointHealth]] = []
        self.down = False
        self.delay = delay

    async def record_backend_health(self, endpoint_id: str, change: EndpointHealth) -> None:
        await asyncio.sleep(self.delay)
        if self.down:
            raise StoreUnavailableError("the database went away")
        self.writes.append((endpoint_id, change))
        await super().record_backend_health(endpoint_id, change)


async def test_an_endpoint_is_unknown_then_failing_after_an_error_then_ok_after_a_success():
    clock = Clock()
    health = BackendHealth(MemoryStore(), clock=clock)
    assert health_json(await health.of("e1")) == {
        "status": "unknown",
        "last_success": None,
        "last_error": None,
        "successes": 0,
        "errors": 0,
    }
    health.failed("e1", "cannot reach the chat backend at http://127.0.0.1:9/v1/chat/completions")
    shown = health_json(await health.of("e1"))
    assert shown["status"] == "failing" and shown["last_success"] is None
    assert shown["last_error"] == {"at": "2027-01-15T08:00:00+00:00",
                                   "message": "cannot reach the chat backend at http://127.0.0.1:9/v1/chat/completions"}
    clock.now += 5
    health.succeeded("e1")
    shown = health_json(await health.of("e1"))
    assert shown["status"] == "ok" and shown["last_success"] == "2027-01-15T08:00:05+00:00"
    assert shown["last_error"]["at"] == "2027-01-15T08:00:00+00:00"  # kept: when it last failed
    assert (shown["successes"], shown["errors"]) == (1, 1)
    clock.now += 5
    health.failed("e1", RuntimeError("boom"))
    e1 = await health.of("e1")
    assert e1.status == "failing" and e1.last_error_message == "RuntimeError: boom"
    assert (await health.of("e2")).status == "unknown"  # endpoints apart
    await health.aclose()


def test_records_merge_counts_adding_and_the_latest_times_winning_in_any_order():
    first = EndpointHealth(
        successes=3, errors=1, last_success=100.0, last_error=90.0, last_error_message="old"
    )
    second = EndpointHealth(
        successes=1, errors=2, last_success=95.0, last_error=120.0, last_error_message="new"
    )
    third = EndpointHealth(successes=2, last_success=130.0)
    expected = EndpointHealth(
        successes=6, errors=3, last_success=130.0, last_error=120.0, last_error_message="new"
    )
    for order in itertools.permutations([first, second, third]):
        merged = EndpointHealth()
        for change in order:
            merged = merged.add(change)
        assert merged == expected, order
    assert expected.status == "ok"
    assert (
        expected.add(EndpointHealth(errors=1, last_error=140.0, last_error_message="down")).status
        == "failing"
    )
    # an earlier error arriving late changes neither the time nor the message
    late = expected.add(EndpointHealth(errors=1, last_error=50.0, last_error_message="stale"))
    assert (late.last_error, late.last_error_message, late.errors) == (120.0, "new", 4)
    assert first == EndpointHealth(successes=3, errors=1, last_success=100.0, last_error=90.0,
                                   last_error_message="old")  # add makes a new record


async def test_replicas_sharing_a_store_show_the_same_health():
    store, clock = MemoryStore(), Clock()
    a = BackendHealth(store, cache_seconds=0, clock=clock)
    b = BackendHealth(store, cache_seconds=0, clock=clock)
    a.failed("e1", "cannot reach the backend")
    await a.settled()
    shown = await b.of("e1")
    assert shown.status == "failing" and shown.last_error_message == "cannot reach the backend"
    clock.now += 1
    b.succeeded("e1")
    await b.settled()
    shown = await a.of("e1")
    assert shown.status == "ok" and (shown.successes, shown.errors) == (1, 1)
    assert await a.all() == await b.all()
    await a.aclose()
    await b.aclose()


async def test_an_endpoint_is_written_at_most_once_per_interval_and_its_outcomes_show_meanwhile():
    store, clock = CountingStore(), Clock()
    health = BackendHealth(store, write_seconds=0.5, cache_seconds=0, clock=clock)
    health.failed("e1", "error 0")
    health.succeeded("e2")
    await health.settled()
    assert [endpoint for endpoint, _ in store.writes] == [
        "e1",
        "e2",
    ]  # the first outcome of each, at once
    for n in range(1, 50):
        clock.now += 0.01
        health.succeeded("e1") if n % 2 else health.failed("e1", f"error {n}")
    shown = await health.of("e1")  # the store's record plus what waits for the interval
    assert (shown.successes, shown.errors, shown.last_error_message) == (25, 25, "error 48")
    await asyncio.sleep(0.2)
    assert len(store.writes) == 2
    await asyncio.sleep(0.6)
    assert [endpoint for endpoint, _ in store.writes] == ["e1", "e2", "e1"]  # the other 49 together
    assert (store.writes[2][1].successes, store.writes[2][1].errors) == (25, 24)
    stored = (await store.list_backend_health())["e1"]
    assert (stored.successes, stored.errors, stored.status) == (25, 25, "ok")
    assert await health.of("e1") == stored
    await asyncio.sleep(0.7)
    assert len(store.writes) == 3  # nothing changed: nothing written
    await health.aclose()


async def test_a_failing_store_fails_no_caller_and_loses_no_outcome():
    store, clock = CountingStore(), Clock()
    store.down = True
    health = BackendHealth(store, write_seconds=0.2, cache_seconds=0, clock=clock)
    health.failed("e1", "the backend answered 502")
    health.succeeded("e1")
    await health.settled()
    assert store.writes == []
    store.down = False
    await asyncio.sleep(0.5)  # the next interval's write takes what the failed one held
    stored = (await store.list_backend_health())["e1"]
    assert (stored.successes, stored.errors, stored.last_error_message) == (
        1,
        1,
        "the backend answered 502",
    )
    await health.aclose()


async def test_settled_waits_for_the_writes_under_way_and_no_longer_than_flush_seconds():
    store = CountingStore(
        delay=0.3
    )  # what a worker awaits before it answers (Lambda may freeze it then)
    health = BackendHealth(store, flush_seconds=10)
    health.failed("e1", "down")
    await health.settled()
    assert [endpoint for endpoint, _ in store.writes] == ["e1"]
    await health.aclose()
    store.delay = 30
    health = BackendHealth(store, flush_seconds=0.2)
    health.failed("e2", "down")
    started = asyncio.get_running_loop().time()
    await health.settled()
    await health.aclose()  # gives up on the write after flush_seconds too
    assert asyncio.get_running_loop().time() - started < 5 and len(store.writes) == 1


async def test_closing_writes_what_waits_for_its_interval():
    store = CountingStore()
    health = BackendHealth(store, write_seconds=3600)
    health.succeeded("e1")
    await health.settled()
    health.failed("e1", "down")
    health.failed("e1", "down again")
    assert len(store.writes) == 1
    await health.aclose()
    stored = (await store.list_backend_health())["e1"]
    assert (stored.successes, stored.errors, stored.last_error_message, len(store.writes)) == (
        1,
        2,
        "down again",
        2,
    )


def test_messages_lose_url_credentials_queries_tokens_and_keys_and_stay_one_short_line():
    text = (
        "cannot reach http://bob:hunter2@backend:8000/v1/chat?api_key=sk-123#frag\n"
        "Authorization: Basic Zm9vOmJhcg== with Bearer eyJabc and token=tok-456, password: pw-789, "
        "key a2agw_0123456789abcdef_s3cr3t"
    )
    shown = safe_message(text)
    for secret in (
        "hunter2",
        "bob:",
        "sk-123",
        "frag",
        "Zm9vOmJhcg",
        "eyJabc",
        "tok-456",
        "pw-789",
        "s3cr3t",
        "\n",
    ):
        assert secret not in shown, secret
    assert shown.startswith("cannot reach http://backend:8000/v1/chat ")
    assert len(safe_message("x" * 5000)) == MAX_MESSAGE_CHARS
    assert (
        safe_message("the model hit its token limit") == "the model hit its token limit"
    )  # words stay


def test_credentials_in_a_json_error_body_and_under_compound_names_are_hidden():
    text = (
        'backend said {"error": "denied", "api_key": "sk-live-123", "access_token":"eyJxyz"} '
        "client_secret=shh-1 AWS_SECRET_ACCESS_KEY=aws-2 x-refresh-token: rt-3 Cookie: session=c-4"
    )
    shown = safe_message(text)
    for secret in ("sk-live-123", "eyJxyz", "shh-1", "aws-2", "rt-3", "c-4"):
        assert secret not in shown, (secret, shown)
    assert shown.startswith('backend said {"error": "denied", "api_key": "***"')
    for kept in ("max_tokens=4096 is more than the model takes", "prompt_tokens: 12"):
        assert safe_message(kept) == kept


def test_an_exception_is_named_by_its_class_with_its_message_made_safe():
    assert error_message(ConnectionRefusedError(111, "Connection refused")) == \
        "ConnectionRefusedError: [Errno 111] Connection refused"
    assert error_message(ValueError()) == "ValueError"
    assert "pw" not in error_message(OSError("https://u:pw@h/x failed"))
