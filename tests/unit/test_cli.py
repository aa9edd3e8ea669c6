"""The command line: endpoints add/list/show/disable/enable, migrate, and demo's store."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from a2a_gateway import cli


def run_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "a2a_gateway", *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def test_endpoints_lifecycle_through_the_cli(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"
    out = run_cli("endpoints", "add", "--store", store, "--name", "Ops", "--handler", "handlers.echo:EchoHandler",
                  "--set", "delay=0", "--set", "response_mode=message", "--card", '{"version": "2.0"}', "--public")
    endpoint_id = out.strip().splitlines()[-1]
    shown = json.loads(run_cli("endpoints", "show", "--store", store, endpoint_id))
    assert shown["metadata"] == {"module_name": "handlers.echo", "class_name": "EchoHandler",
                                 "delay": 0, "response_mode": "message", "public": True}
    assert shown["card"] == {"version": "2.0"} and shown["enabled"] is True
    run_cli("endpoints", "disable", "--store", store, endpoint_id)
    assert "disabled" in run_cli("endpoints", "list", "--store", store)
    run_cli("endpoints", "enable", "--store", store, endpoint_id)
    assert json.loads(run_cli("endpoints", "show", "--store", store, endpoint_id))["enabled"] is True
    assert "up to date" in run_cli("migrate", "--store", store)


def test_bad_handler_argument_is_a_clear_error(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "a2a_gateway", "endpoints", "add", "--store", f"sqlite:///{tmp_path}/x.db",
         "--name", "x", "--handler", "no-colon"], capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0 and "MODULE:CLASS" in done.stderr


def test_demo_serves_the_store_it_registered_the_demo_agent_in(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A2A_GATEWAY_STORE", raising=False)
    served: list[str] = []
    monkeypatch.setattr(cli, "serve", lambda settings: served.append(settings.store))
    cli.main(["demo", "--port", "0"])
    assert served == ["sqlite:///./a2a-gateway-demo.db"]
    assert (tmp_path / "a2a-gateway-demo.db").exists()


@pytest.mark.parametrize("argv", [["serve", "--help"], ["endpoints", "add", "--help"]])
def test_help_works(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 0 and "usage" in capsys.readouterr().out


def test_migrate_names_what_it_applied(tmp_path):
    store = f"sqlite:///{tmp_path}/fresh.db"
    assert run_cli("migrate", "--store", store).strip() == "0001_initial.sql"
    assert "up to date" in run_cli("migrate", "--store", store)
