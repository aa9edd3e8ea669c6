"""Quotas through the CLI on a SQLite store: ``keys create --limit``, ``keys limit`` (set,
change, ``NAME=none``), the limits in ``keys list``, and ``endpoints add --set limits=…``;
every malformed limit is a one-line error naming the field, and nothing is written. In
process (``cli.main``), except one real process that shows the error as the user sees it."""

from __future__ import annotations

import asyncio
import json

import pytest
import structlog

from a2a_gateway import cli
from a2a_gateway.stores import open_store
from a2a_gateway.stores.base import AuditEntry, AuditQuery
from tests.support.cli_process import run_cli
from tests.unit.test_cli import ECHO, assert_one_line_error


@pytest.fixture(autouse=True)
def _fresh_cli_logging():
    """Each command logs its audit entry to the stderr of this test's capture (the CLI
    configures structlog once per process)."""
    saved = structlog.get_config()
    structlog.reset_defaults()
    yield
    structlog.configure(**saved)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    cli.main(list(argv))
    return capsys.readouterr().out


def _refused(*argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.main(list(argv))
    return str(exited.value.code)


def test_keys_get_limits_at_creation_and_change_them(tmp_path, capsys):
    store = f"sqlite:///{tmp_path}/cli.db"
    endpoint = _run(capsys, "endpoints", "add", "--store", store, "--name", "x",
                    "--handler", ECHO).split()[-1]
    made = _run(capsys, "keys", "create", "--store", store, "--endpoint", endpoint,
                "--limit", "tasks_per_minute=5", "--limit", "cost_per_day=2.5")
    key_id = made.split()[1]
    assert _run(capsys, "keys", "list", "--store", store).splitlines() == [
        f"{key_id}  {endpoint}  {key_id}  active, never expires"
        "  limits tasks_per_minute=5,cost_per_day=2.5"
    ]
    changed = _run(capsys, "keys", "limit", "--store", store, key_id, "tasks_per_minute=none",
                   "concurrent_tasks=2")
    assert changed.strip() == f"key {key_id} limits: concurrent_tasks=2,cost_per_day=2.5"
    assert _run(capsys, "keys", "list", "--store", store).strip().endswith(
        "limits concurrent_tasks=2,cost_per_day=2.5"
    )
    [entry] = asyncio.run(_audited(store, "key.limited"))
    assert entry.target == key_id and entry.actor.startswith("os:")
    assert entry.before["limits"] == {"tasks_per_minute": 5, "cost_per_day": 2.5}
    assert entry.after["limits"] == {"concurrent_tasks": 2, "cost_per_day": 2.5}


async def _audited(store_url: str, action: str) -> list[AuditEntry]:
    store = await open_store(store_url)
    try:
        return (await store.list_audit_entries(AuditQuery(action=action))).entries
    finally:
        await store.aclose()


def test_bad_limits_are_one_line_errors_naming_the_field_and_write_nothing(tmp_path, capsys):
    store = f"sqlite:///{tmp_path}/cli.db"
    endpoint = _run(capsys, "endpoints", "add", "--store", store, "--name", "x",
                    "--handler", ECHO).split()[-1]
    key_id = _run(capsys, "keys", "create", "--store", store, "--endpoint", endpoint,
                  "--limit", "tasks_per_day=9").split()[1]
    before = _run(capsys, "keys", "list", "--store", store)
    cases = [
        (["tasks_per_mnute=5"], "limits.tasks_per_mnute: unknown limit"),
        (["tasks_per_minute=0"], "limits.tasks_per_minute: input should be greater than 0"),
        (["concurrent_tasks=-3"], "limits.concurrent_tasks: input should be greater than 0"),
        (["tasks_per_hour=1.5"], "limits.tasks_per_hour: input should be a valid integer"),
        (["cost_per_day=lots"], "limits.cost_per_day: 'lots' is not a number"),
        (["tasks_per_day=10000000000"], "limits.tasks_per_day: input should be less than"),
        (["tasks_per_day"], "limit 'tasks_per_day': expected NAME=VALUE"),
    ]
    for assignments, expected in cases:
        message = _refused("keys", "limit", "--store", store, key_id, *assignments)
        assert message.startswith("a2a-gateway: ") and expected in message
        assert "\n" not in message
    assert "limits.tokens_per_day: input should be greater than 0" in _refused(
        "keys", "create", "--store", store, "--endpoint", endpoint, "--limit", "tokens_per_day=0"
    )
    assert "no key 0000000000000000" in _refused(
        "keys", "limit", "--store", store, "0000000000000000", "tasks_per_day=1"
    )
    assert _run(capsys, "keys", "list", "--store", store) == before

    # an endpoint's limits are checked where its settings are
    assert "limits.tasks_per_hour: input should be greater than 0" in _refused(
        "endpoints", "add", "--store", store, "--name", "y", "--handler", ECHO,
        "--set", 'limits={"tasks_per_hour": 0}',
    )
    limited = _run(capsys, "endpoints", "add", "--store", store, "--name", "z", "--handler",
                   ECHO, "--set", 'limits={"concurrent_tasks": 4}').split()[-1]
    shown = json.loads(_run(capsys, "endpoints", "show", "--store", store, limited))
    assert shown["metadata"]["limits"] == {"concurrent_tasks": 4}
    assert len(_run(capsys, "endpoints", "list", "--store", store).splitlines()) == 2

    # as the user sees it: one line on stderr, no traceback
    assert_one_line_error(
        run_cli("keys", "limit", "--store", store, key_id, "tasks_per_day=0"),
        "limits.tasks_per_day: input should be greater than 0",
    )
