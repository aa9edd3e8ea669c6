"""The audit log through a running gateway, on every store: each operator change made with the
admin API (endpoint added, disabled with its running tasks canceled, enabled; key created and
revoked with its principal's tasks canceled; a task canceled) and with the CLI (the same, the
OS user as actor) is one entry, read back with ``GET /admin/api/audit`` (filters, pages, 400
naming a bad parameter), without the literal secret setting or the key; no route changes an
entry; the retention setting prunes old entries."""

from __future__ import annotations

import asyncio
import getpass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from a2a.types import TaskState

from a2a_gateway.cli import main as cli_main
from a2a_gateway.stores.base import AuditEntry, AuditQuery, Scope
from a2a_gateway.stores.memory import MemoryStore
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.admin_support import OPERATOR_KEY, admin
from tests.support.harness import running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually

LITERAL_SECRET = "sk-literal-secret-audit-value"
ME = f"os:{getpass.getuser()}"


@pytest.fixture(params=STORE_KINDS)
async def store_url(request, tmp_path, monkeypatch):
    async with fresh_store_url(request.param, tmp_path, monkeypatch) as url:
        yield url


async def _input_required_task(gw, endpoint_id: str, text: str = "?input") -> str:
    async with gw.client(endpoint_id, streaming=False) as client:
        task = [e async for e in client.send_message(send_request(text))][-1].task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    return task.id


async def _entries(gw, query: str = "") -> list[dict]:
    answer = await admin(gw, "GET", f"/audit{query}")
    assert answer.status_code == 200, answer.text
    return answer.json()["entries"]


async def test_operator_changes_through_the_admin_api_and_the_cli_are_audited(store_url, tmp_path):
    async with running_gateway(store_url, operator_keys=[OPERATOR_KEY],
                               endpoint_cache_seconds=0.2) as gw:
        added = await admin(gw, "POST", "/endpoints", json={
            "name": "llm", "handler": "handlers.openai_chat:OpenAIChatHandler",
            "settings": {"base_url": "http://127.0.0.1:9/v1", "model": "m",
                         "api_key": LITERAL_SECRET},
        })
        assert added.status_code == 201, added.text
        llm = added.json()["endpoint"]["id"]
        echo = await gw.add_endpoint(settings={"delay": 0})
        created = (await admin(gw, "POST", f"/endpoints/{echo}/keys",
                               json={"principal": "bob"})).json()
        key_id, key = created["id"], created["key"]
        alone = await _input_required_task(gw, echo)
        canceled = await admin(gw, "POST", f"/endpoints/{echo}/tasks/{alone}/cancel"
                               "?principal=anonymous")
        assert canceled.json()["state"] == "TASK_STATE_CANCELED"
        running = await _input_required_task(gw, echo)
        killed = await admin(gw, "POST", f"/endpoints/{echo}/disable",
                             json={"cancelRunning": True})
        assert killed.status_code == 200 and killed.json()["canceledTasks"] == [running]
        task = await gw.store.get_task(Scope("default", echo, "anonymous"), running)
        assert task.task.status.state == TaskState.TASK_STATE_CANCELED
        reason = task.task.status.message.parts[0].text
        assert reason.startswith("canceled by operator key:") and reason.endswith(
            ": endpoint disabled"
        )
        assert (await admin(gw, "POST", f"/endpoints/{echo}/enable")).status_code == 200
        someone_elses = await _input_required_task(gw, echo)
        revoked = await admin(gw, "POST", f"/endpoints/{echo}/keys/{key_id}/revoke",
                              json={"cancelRunning": True})
        assert revoked.status_code == 200 and revoked.json()["canceledTasks"] == []  # bob's only
        still = await gw.store.get_task(Scope("default", echo, "anonymous"), someone_elses)
        assert still.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert (await admin(gw, "DELETE", f"/endpoints/{llm}")).status_code == 409  # enabled
        assert (await admin(gw, "POST", f"/endpoints/{llm}/disable")).status_code == 200
        assert (await admin(gw, "DELETE", f"/endpoints/{llm}")).status_code == 200
        assert await gw.store.get_endpoint(llm) is None

        entries = await _entries(gw)
        assert [e["action"] for e in entries] == [
            "endpoint.deleted", "endpoint.disabled", "key.revoked", "endpoint.enabled",
            "endpoint.disabled", "task.canceled", "key.created", "endpoint.added",
        ]
        by_action = {e["action"]: e for e in entries[2:]}
        assert all(e["actor"].startswith("key:") for e in entries)
        assert by_action["endpoint.added"]["target"] == llm
        assert by_action["endpoint.added"]["after"]["metadata"]["api_key"] == "***"
        assert entries[0]["target"] == llm and entries[0]["before"]["metadata"]["api_key"] == "***"
        assert by_action["endpoint.disabled"]["details"] == {"canceledTasks": [running]}
        assert by_action["endpoint.disabled"]["before"] == {"enabled": True}
        assert by_action["task.canceled"]["target"] == alone
        assert by_action["key.created"]["after"]["principal"] == "bob"
        assert by_action["key.revoked"]["after"]["state"] == "revoked"
        shown = str(entries)
        assert LITERAL_SECRET not in shown and key not in shown

        if store_url != "memory://":  # the CLI opens the store the gateway uses
            async def cli(*args: str) -> None:
                await asyncio.to_thread(cli_main, [*args, "--store", store_url])

            await cli("endpoints", "disable", echo, "--cancel-running")
            await cli("keys", "create", "--endpoint", echo, "--principal", "carol")
            await cli("endpoints", "add", "--name", "cli-llm", "--handler",
                      "handlers.openai_chat:OpenAIChatHandler", "--set", "model=m",
                      "--set", "base_url=http://127.0.0.1:9/v1",
                      "--set", f"api_key={LITERAL_SECRET}")
            [carol] = [k for k in await gw.store.list_api_keys(echo) if k.principal == "carol"]
            await cli("keys", "revoke", carol.id)
            await cli("endpoints", "enable", echo)
            with pytest.raises(SystemExit, match="is enabled: disable it first"):
                await cli("endpoints", "delete", echo)  # one line, nothing deleted or recorded
            [cli_llm] = [e for e in await gw.store.list_endpoints() if e.name == "cli-llm"]
            await cli("endpoints", "disable", cli_llm.id)
            await cli("endpoints", "delete", cli_llm.id)
            assert await gw.store.get_endpoint(cli_llm.id) is None
            mine = await _entries(gw, f"?actor={ME}")
            assert [e["action"] for e in mine[:2]] == ["endpoint.deleted", "endpoint.disabled"]
            assert mine[0]["before"]["metadata"]["api_key"] == "***"
            mine = mine[2:]
            assert [e["action"] for e in mine] == [
                "endpoint.enabled", "key.revoked", "endpoint.added", "key.created",
                "endpoint.disabled",
            ]
            assert mine[1]["target"] == carol.id and mine[1]["after"]["state"] == "revoked"
            assert mine[2]["after"]["metadata"]["api_key"] == "***"
            assert len(mine[4]["details"]["canceledTasks"]) == 1
            assert LITERAL_SECRET not in str(mine)

        # filters, pages and bad parameters
        assert [e["target"] for e in await _entries(gw, "?action=task.canceled")] == [alone]
        first = (await admin(gw, "GET", "/audit?page_size=2")).json()
        second = (await admin(gw, "GET", f"/audit?page_size=2&page_token="
                              f"{first['nextPageToken']}")).json()
        assert len(first["entries"]) == 2 and first["entries"][-1]["id"] not in {
            e["id"] for e in second["entries"]
        }
        future = (datetime.now(UTC) + timedelta(days=1)).isoformat().replace("+00:00", "Z")
        assert await _entries(gw, f"?from={future}") == []
        for bad, field in (("?from=yesterday", "from"), ("?page_size=0", "page_size"),
                           ("?page_token=forged", "page_token"), ("?sort=asc", "sort"),
                           (f"?from={future}&to=2020-01-01", "from")):
            refused = await admin(gw, "GET", f"/audit{bad}")
            assert refused.status_code == 400 and field in refused.text, (bad, refused.text)

        # append-only: no route changes an entry
        before = await _entries(gw, "?page_size=500")
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            assert (await admin(gw, method, "/audit")).status_code == 405
            assert (await admin(gw, method, f"/audit/{before[0]['id']}")).status_code in (404, 405)
        assert await _entries(gw, "?page_size=500") == before


async def test_entries_older_than_the_retention_are_pruned():
    store = MemoryStore()
    old = AuditEntry(id="old", at=datetime.now(UTC) - timedelta(days=40), actor="os:x",
                     action="endpoint.disabled", target="ep")
    recent = AuditEntry(id="recent", at=datetime.now(UTC) - timedelta(days=2), actor="os:x",
                        action="endpoint.enabled", target="ep")
    await store.append_audit_entry(old)
    await store.append_audit_entry(recent)
    async with running_gateway(store=store, audit_retention_days=30):
        async def kept() -> list[str]:
            return [e.id for e in (await store.list_audit_entries(AuditQuery())).entries]

        await eventually(kept, until=lambda ids: ids == ["recent"], what="the old entry pruned")


async def test_console_sign_ins_and_the_endpoints_file_are_audited(tmp_path):
    declared = tmp_path / "endpoints.yaml"
    declared.write_text(
        "endpoints:\n- id: 0b6f3c1e-8a3e-4c47-9d0e-5a8f3f1d2c11\n  name: from the file\n"
        "  handler: handlers.echo:EchoHandler\n"
    )
    async with running_gateway(operator_keys=[OPERATOR_KEY], console=True,
                               endpoints_file=str(declared)) as gw:
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=30) as http:
            refused = await http.post("/console/api/login", json={"key": "x" * 20 + "-wrong"})
            assert refused.status_code == 401
            assert (await http.post("/console/api/login",
                                    json={"key": OPERATOR_KEY})).status_code == 200
        entries = (await gw.store.list_audit_entries(AuditQuery())).entries
    signed_in, failed, applied = entries
    assert (signed_in.action, failed.action, applied.action) == (
        "console.signed_in", "console.sign_in_failed", "endpoints_file.applied"
    )
    assert signed_in.actor.startswith("key:") and OPERATOR_KEY not in str(entries)
    assert failed.actor == "unknown" and "-wrong" not in str(entries)
    assert (applied.actor, applied.target) == ("gateway", str(declared))
    assert applied.details["created"] == ["0b6f3c1e-8a3e-4c47-9d0e-5a8f3f1d2c11"]
