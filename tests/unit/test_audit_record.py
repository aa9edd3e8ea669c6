"""``governance.audit.record``, the one writer of the audit log: secrets never reach the stored
entry or its log line (named secret fields, credential-named fields at any depth, credentials in
URLs), ``env:`` references stay, and the entry is stored as logged."""

from __future__ import annotations

from structlog.testing import capture_logs

from a2a_gateway.governance.audit import entry_json, record
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
