"""The store contract for the audit log (``append_audit_entry``, ``list_audit_entries``,
``prune_audit_entries``), on every store: entries come back as written, newest first, filtered
by action, target, actor and time, in keyset pages that neither skip nor repeat; pruning removes
only the entries older than the cut; a page token no store issued is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from a2a_gateway.stores.base import AuditEntry, AuditQuery, InvalidPageTokenError

T0 = datetime(2026, 11, 3, 9, 30, 0, 123456, tzinfo=UTC)


def _entry(n: int, action: str = "endpoint.disabled", **fields) -> AuditEntry:
    return AuditEntry(
        id=f"e{n:03d}", at=T0 + timedelta(seconds=n), actor=fields.pop("actor", "os:alice"),
        action=action, target=fields.pop("target", f"ep-{n % 3}"), **fields,
    )


async def _all(store, query: AuditQuery) -> list[str]:
    ids, seen_tokens = [], set()
    while True:
        page = await store.list_audit_entries(query)
        ids += [e.id for e in page.entries]
        if not page.next_page_token:
            return ids
        assert page.next_page_token not in seen_tokens
        seen_tokens.add(page.next_page_token)
        query = AuditQuery(**{**_fields(query), "page_token": page.next_page_token})


def _fields(query: AuditQuery) -> dict:
    return {name: getattr(query, name) for name in AuditQuery.__dataclass_fields__}


async def test_entries_come_back_as_written_newest_first_filtered_and_paged(store):
    written = _entry(
        0, "endpoint.changed", actor="oidc:sub-1",
        before={"enabled": True, "settings": {"model": "a"}},
        after={"enabled": False, "settings": {"model": "b"}},
        details={"source": "admin"},
    )
    await store.append_audit_entry(written)
    for n in range(1, 12):
        action = "key.revoked" if n % 4 == 0 else "endpoint.disabled"
        await store.append_audit_entry(_entry(n, action))
    # two entries at the same microsecond: the id orders them
    await store.append_audit_entry(AuditEntry(id="tie-a", at=T0 + timedelta(seconds=20),
                                              actor="k1", action="task.canceled", target="t1"))
    await store.append_audit_entry(AuditEntry(id="tie-b", at=T0 + timedelta(seconds=20),
                                              actor="k1", action="task.canceled", target="t2"))

    first = await store.list_audit_entries(AuditQuery(action="endpoint.changed"))
    assert first.entries == [written] and first.next_page_token == ""

    every = ["tie-b", "tie-a", *(f"e{n:03d}" for n in range(11, -1, -1))]
    assert await _all(store, AuditQuery(page_size=4)) == every
    assert await _all(store, AuditQuery(page_size=1, action="key.revoked")) == ["e008", "e004"]
    assert await _all(store, AuditQuery(page_size=2, target="ep-1")) == [
        "e010", "e007", "e004", "e001"
    ]
    assert await _all(store, AuditQuery(actor="k1")) == ["tie-b", "tie-a"]
    window = AuditQuery(since=T0 + timedelta(seconds=3), until=T0 + timedelta(seconds=6),
                        page_size=2)
    assert await _all(store, window) == ["e005", "e004", "e003"]  # since inclusive, until not
    assert (await store.list_audit_entries(AuditQuery(target="nobody"))).entries == []


async def test_pruning_removes_only_entries_older_than_the_cut(store):
    for n in range(5):
        await store.append_audit_entry(_entry(n))
    assert await store.prune_audit_entries(T0 + timedelta(seconds=2)) == 2
    assert await _all(store, AuditQuery()) == ["e004", "e003", "e002"]
    assert await store.prune_audit_entries(T0) == 0


async def test_a_page_token_no_store_issued_is_refused(store):
    await store.append_audit_entry(_entry(1))
    with pytest.raises(InvalidPageTokenError):
        await store.list_audit_entries(AuditQuery(page_token="not-a-token"))


async def test_a_filter_matching_few_of_many_entries_pages_to_all_of_them(store, monkeypatch):
    # DynamoDB reads at most this many queries a page (one here): a page may end early, empty,
    # with a token that goes on below what it read; every store ends with the same entries
    monkeypatch.setattr("a2a_gateway.stores.dynamodb._ENDPOINT_PAGE_QUERIES", 1)
    for n in range(3):
        await store.append_audit_entry(_entry(n, "key.revoked"))
    for n in range(3, 260):
        await store.append_audit_entry(_entry(n, "endpoint.enabled"))
    assert await _all(store, AuditQuery(action="key.revoked", page_size=2)) == [
        "e002", "e001", "e000"
    ]
