"""The store contract for ``delete_endpoint``, on every store: the row is gone (and no longer
listed), the other rows stay, a second delete and an unknown or unstorable id answer False."""

from __future__ import annotations

from a2a_gateway.stores.base import Endpoint


async def test_a_deleted_endpoint_is_gone_and_the_others_stay(store):
    for endpoint_id in ("ep-1", "ep-2"):
        await store.create_endpoint(Endpoint(id=endpoint_id, name=endpoint_id))
    assert await store.delete_endpoint("ep-1") is True
    assert await store.get_endpoint("ep-1") is None
    assert [e.id for e in await store.list_endpoints()] == ["ep-2"]
    assert await store.delete_endpoint("ep-1") is False
    for unknown in ("no-such-endpoint", "nul\x00id", ""):
        assert await store.delete_endpoint(unknown) is False
    await store.create_endpoint(Endpoint(id="ep-1", name="again"))  # the id may be used again
    assert (await store.get_endpoint("ep-1")).name == "again"
