"""``governance.audit.record``, the one writer of the audit log: secrets never reach the stored
entry or its log line (named secret fields, credential-named fields at any depth, credentials in
URLs), ``env:`` references stay, and the entry is stored as logged."""

from __future__ import annotations

from structlog.testing import capture_logs

from a2a_gateway.governance.audit import RefusedSignIns, entry_json, record
from a2a_gateway.stores.base import AuditQuery
from a2a_gateway.stores.memory import MemoryStore


async def test_secrets_never_reach_the_entry_or_its_log_line():
    store = MemoryStore()
    after = {
        "metadata": {
            "bearer": "literal-bearer-value", "api_key": "sk-literal", "model": "m",
            "extra_headers": {"X-Api-Key": "header-literal"}, "token": "env:BACKEND_TOKEN",
            "base_url": "https://user:pw-literal@llm.example/v1?token=query-literal",
        },
        "key_hash": "ab" * 32,
    }
    with capture_logs() as logs:
        entry = await record(store, "os:alice", "endpoint.added", "ep-1", after=after,
                             secret_fields={"bearer"})
    [stored] = (await store.list_audit_entries(AuditQuery())).entries
    [line] = [log for log in logs if log["event"] == "audit_entry"]
    assert stored == entry and {k: line[k] for k in entry_json(entry)} == entry_json(entry)
    shown = str(stored) + str(line)
    for secret in ("literal-bearer-value", "sk-literal", "header-literal", "pw-literal",
                   "query-literal", "ab" * 32):
        assert secret not in shown
    metadata = stored.after["metadata"]
    assert metadata["bearer"] == metadata["api_key"] == "***"
    assert metadata["token"] == "env:BACKEND_TOKEN" and metadata["model"] == "m"


async def test_numbers_under_credential_like_names_are_shown():
    store = MemoryStore()
    price = {"currency": "USD", "per_1k_input_tokens": 0.5, "per_1k_output_tokens": 1.5}
    entry = await record(store, "os:alice", "endpoint.added", "ep-1",
                         after={"metadata": {"cost": price, "token": "t-literal"}})
    assert entry.after["metadata"]["cost"] == price
    assert entry.after["metadata"]["token"] == "***"


async def test_a_flood_of_refused_sign_ins_writes_a_bounded_number_of_entries():
    store = MemoryStore()
    now = [0.0]
    refused = RefusedSignIns(per_minute=3, clock=lambda: now[0])
    for _ in range(50):
        await refused.record(store, "unknown", {"method": "operator key"})
    assert len((await store.list_audit_entries(AuditQuery())).entries) == 3
    now[0] = 61.0
    await refused.record(store, "unknown", {"method": "operator key"})
    entries = (await store.list_audit_entries(AuditQuery())).entries
    assert len(entries) == 4
    assert entries[0].action == "console.sign_in_failed"
    assert entries[0].details["unrecorded_before"] == 47
