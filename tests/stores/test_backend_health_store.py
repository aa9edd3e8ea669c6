"""The store contract for backend health (``record_backend_health``, ``list_backend_health``),
on every store: a change adds to the endpoint's record (counts add, the later time wins, the
later error brings its message), whatever order the replicas' changes arrive in and however
many arrive at once; the records stay apart from the endpoints and tasks around them."""

from __future__ import annotations

import asyncio

from a2a_gateway.stores.base import Endpoint, EndpointHealth, Scope, TaskQuery

T0 = 1_800_000_000.0


async def test_a_change_adds_to_the_record_counts_adding_and_later_times_winning(store):
    assert await store.list_backend_health() == {}
    await store.record_backend_health(
        "ep-1",
        EndpointHealth(errors=1, last_error=T0 + 10, last_error_message="cannot reach the backend"),
    )
    assert await store.list_backend_health() == {
        "ep-1": EndpointHealth(
            errors=1, last_error=T0 + 10, last_error_message="cannot reach the backend"
        )
    }

    await store.record_backend_health("ep-1", EndpointHealth(successes=2, last_success=T0 + 20))
    # an earlier error and success told late (another replica's slow write): counted, times kept
    await store.record_backend_health(
        "ep-1",
        EndpointHealth(
            successes=1,
            errors=1,
            last_success=T0 + 5,
            last_error=T0 + 1,
            last_error_message="stale",
        ),
    )
    await store.record_backend_health(
        "ep-2", EndpointHealth(successes=1, last_success=T0 + 0.123456)
    )
    stored = await store.list_backend_health()
    assert stored["ep-1"] == EndpointHealth(
        successes=3,
        errors=2,
        last_success=T0 + 20,
        last_error=T0 + 10,
        last_error_message="cannot reach the backend",
    )
    assert stored["ep-1"].status == "ok"
    assert (
        stored["ep-2"].last_success == T0 + 0.123456 and stored["ep-2"].last_error is None
    )  # to the µs

    await store.record_backend_health(
        "ep-1",
        EndpointHealth(errors=1, last_error=T0 + 30, last_error_message="the backend answered 502"),
    )
    ep1 = (await store.list_backend_health())["ep-1"]
    assert (ep1.status, ep1.errors, ep1.last_error_message) == (
        "failing",
        3,
        "the backend answered 502",
    )


async def test_replicas_recording_at_once_lose_nothing(store):
    changes = [
        EndpointHealth(successes=1, last_success=T0 + n)
        if n % 3
        else EndpointHealth(errors=1, last_error=T0 + n, last_error_message=f"error {n}")
        for n in range(30)
    ]
    await asyncio.gather(*(store.record_backend_health("ep-1", change) for change in changes))
    merged = EndpointHealth()
    for change in changes:
        merged = merged.add(change)
    assert (await store.list_backend_health())["ep-1"] == merged
    assert (merged.successes, merged.errors, merged.last_error_message) == (20, 10, "error 27")


async def test_health_records_are_not_endpoints_or_tasks(store):
    await store.create_endpoint(Endpoint(id="ep-1", name="one"))
    await store.record_backend_health("ep-1", EndpointHealth(successes=1, last_success=T0))
    assert [e.id for e in await store.list_endpoints()] == ["ep-1"]
    assert await store.list_active_tasks("ep-1", 10) == []
    assert (await store.list_tasks(Scope("default", "ep-1"), TaskQuery())).tasks == []
    assert (await store.get_endpoint("ep-1")).name == "one"
