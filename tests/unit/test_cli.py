"""The command line: endpoints add/check/list/show/disable/enable, migrate, help, one-line
errors."""

from __future__ import annotations

import argparse
import asyncio
import json
import re

import pytest

from a2a_gateway import cli
from a2a_gateway.stores import open_store
from a2a_gateway.stores.base import Endpoint
from tests.support.cli_process import ROOT, run_cli, stored_endpoints

ECHO = "handlers.echo:EchoHandler"


def added_id(done) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def assert_one_line_error(done, *fragments: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    last = done.stderr.strip().splitlines()[-1]
    for fragment in fragments:
        assert fragment in done.stderr, done.stderr
    assert last.startswith("a2a-gateway: "), done.stderr


def test_endpoints_lifecycle_through_the_cli(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"
    endpoint_id = added_id(
        run_cli(
            "endpoints",
            "add",
            "--store",
            store,
            "--name",
            "Ops",
            "--handler",
            ECHO,
            "--set",
            "delay=0",
            "--set",
            "response_mode=message",
            "--card",
            '{"version": "2.0"}',
            "--public",
        )
    )
    shown = json.loads(
        run_cli("endpoints", "show", "--store", store, endpoint_id, check=True).stdout
    )
    assert shown["metadata"] == {"module_name": "handlers.echo", "class_name": "EchoHandler",
                                 "delay": 0, "response_mode": "message", "public": True}
    assert shown["card"] == {"version": "2.0"} and shown["enabled"] is True
    run_cli("endpoints", "disable", "--store", store, endpoint_id, check=True)
    assert "disabled" in run_cli("endpoints", "list", "--store", store, check=True).stdout
    run_cli("endpoints", "enable", "--store", store, endpoint_id, check=True)
    assert (
        json.loads(run_cli("endpoints", "show", "--store", store, endpoint_id).stdout)["enabled"]
        is True
    )
    assert f"{endpoint_id} ok" in run_cli("endpoints", "check", "--store", store, check=True).stdout
    assert "up to date" in run_cli("migrate", "--store", store, check=True).stdout


def test_endpoints_use_the_default_store_of_serve_and_demo(tmp_path):
    endpoint_id = added_id(
        run_cli("endpoints", "add", "--name", "x", "--handler", ECHO, "--public", cwd=tmp_path)
    )
    assert (tmp_path / "a2a-gateway.db").exists()
    assert endpoint_id in run_cli("endpoints", "list", cwd=tmp_path, check=True).stdout


@pytest.mark.parametrize(
    "command", [["add", "--name", "x", "--handler", ECHO], ["list"], ["check"]]
)
def test_row_commands_refuse_the_memory_store(command):
    done = run_cli("endpoints", *command, "--store", "memory://")
    assert_one_line_error(done, "memory:// keeps nothing")
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--set", "delay=fast"], "delay"),
        (["--set", "dealy=0"], "unknown setting dealy"),
        (["--set", "novalue"], "KEY=VALUE"),
        (["--card", '{"skills": [{"id": "a", "name": "A"}]}'], "skills[0] needs description, tags"),
        (
            ["--card", '{"capabilities": {"streaming": "yes"}}'],
            "capabilities.streaming must be true or false",
        ),
        (["--card", "{not json"], "--card is not valid JSON"),
        (["--id", "not-a-uuid"], "--id must be a UUID"),
        (["--set", 'rate_limit={"per_second": -1}'], "invalid rate_limit: per_second"),
    ],
)
def test_endpoints_add_checks_before_it_writes(tmp_path, extra, expected):
    store = f"sqlite:///{tmp_path}/cli.db"
    done = run_cli(
        "endpoints", "add", "--store", store, "--name", "x", "--handler", ECHO, "--public", *extra
    )
    assert_one_line_error(done, expected)
    assert stored_endpoints(store) == []


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        ("no-colon", "MODULE:CLASS"),
        ("os:path", "not in the allowlist"),
        ("handlers.nope:Handler", "cannot be imported"),
        ("handlers.echo:Missing", "is not a handler class"),
    ],
)
def test_endpoints_add_refuses_handlers_it_cannot_load(tmp_path, handler, expected):
    store = f"sqlite:///{tmp_path}/cli.db"
    done = run_cli("endpoints", "add", "--store", store, "--name", "x", "--handler", handler)
    assert_one_line_error(done, expected)
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""
    assert stored_endpoints(store) == []


@pytest.mark.parametrize(
    ("handler", "line"),
    [
        (
            "handlers.echo:EchoHandlr",
            "handlers.echo.EchoHandlr is not a handler class; did you mean EchoHandler?",
        ),
        (
            "handlers.hermes:HermesHandler",
            "handlers.hermes.HermesHandler is not a handler class;"
            " did you mean HermesAgentHandler?",
        ),
        (
            "handlers.ecko:EchoHandler",
            "handler module 'handlers.ecko' cannot be imported: ModuleNotFoundError: "
            "No module named 'handlers.ecko'; did you mean handlers.echo?",
        ),
        (
            "handler.echo:EchoHandler",
            "handler module 'handler.echo' is not in the allowlist; did you mean handlers.echo?",
        ),
    ],
)
def test_a_handler_typo_is_one_line_with_a_did_you_mean_and_nothing_written(
    tmp_path, handler, line
):
    store = f"sqlite:///{tmp_path}/cli.db"
    done = run_cli("endpoints", "add", "--store", store, "--name", "x", "--handler", handler)
    assert done.returncode == 1
    assert done.stderr == f"a2a-gateway: endpoint not added: {line}\n"  # no note of a key to create
    assert done.stdout == ""
    assert stored_endpoints(store) == []


def test_a_misspelt_handler_with_nothing_close_gets_no_guess(tmp_path):
    done = run_cli("endpoints", "add", "--store", f"sqlite:///{tmp_path}/cli.db", "--name", "x",
                   "--handler", "handlers.echo:Zzz")
    assert (
        done.stderr == "a2a-gateway: endpoint not added: handlers.echo.Zzz is not a handler class\n"
    )


def test_endpoints_add_notes_unset_environment_references_and_writes(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"
    done = run_cli("endpoints", "add", "--store", store, "--name", "h", "--public",
                   "--handler", "handlers.hermes:HermesAgentHandler",
                   "--set", "hermes_api_key=env:A2A_TEST_SURELY_UNSET_KEY")
    added_id(done)
    assert done.stderr == (
        "note: hermes_api_key reads the environment variable A2A_TEST_SURELY_UNSET_KEY, "
        "which is not set here\n"
    )


def test_endpoints_check_fails_on_an_unset_environment_reference_until_it_is_exported(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"
    endpoint_id = added_id(run_cli("endpoints", "add", "--store", store, "--name", "h", "--public",
                                   "--handler", "handlers.hermes:HermesAgentHandler",
                                   "--set", "hermes_api_key=env:A2A_CLI_TEST_UNSET_KEY"))
    unset = run_cli("endpoints", "check", "--store", store)
    assert unset.returncode == 1 and unset.stdout == ""  # before: "<id> ok", exit 0
    assert unset.stderr.splitlines() == [
        f"{endpoint_id}: hermes_api_key reads the environment variable A2A_CLI_TEST_UNSET_KEY,"
        " which is not set here",
        "a2a-gateway: 1 endpoint cannot be served",
    ]
    exported = run_cli(
        "endpoints", "check", "--store", store, A2A_CLI_TEST_UNSET_KEY="from-the-environment"
    )
    assert (
        exported.returncode == 0
        and exported.stdout == f"{endpoint_id} ok\n"
        and exported.stderr == ""
    )


def test_endpoints_check_reports_rows_that_would_not_load(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"
    good = added_id(
        run_cli(
            "endpoints", "add", "--store", store, "--name", "good", "--handler", ECHO, "--public"
        )
    )

    async def write_bad_row() -> str:
        opened = await open_store(store)
        bad = Endpoint(
            id="11111111-1111-4111-8111-111111111111",
            name="bad",
            metadata={"module_name": "handlers.echo", "class_name": "EchoHandler", "delay": "fast"},
            card={"skills": "many"},
        )
        await opened.create_endpoint(bad)
        await opened.aclose()
        return bad.id

    bad = asyncio.run(write_bad_row())
    done = run_cli("endpoints", "check", "--store", store)
    assert_one_line_error(
        done,
        f"{bad}: invalid card: skills must be a list",
        f"{bad}: invalid handler settings: delay",
    )
    assert f"{good} ok" in done.stdout
    assert f"{bad} ok" not in done.stdout
    assert run_cli("endpoints", "check", "--store", store, good).returncode == 0
    assert "not --public" in run_cli("endpoints", "check", "--store", store, bad).stderr


def test_missing_endpoint_is_a_clear_error(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"
    run_cli("migrate", "--store", store, check=True)
    assert_one_line_error(
        run_cli("endpoints", "show", "--store", store, "0" * 8 + "-0000-4000-8000-" + "0" * 12),
        "no endpoint",
    )


def test_sqlite_store_in_a_missing_directory_is_refused_not_created(tmp_path):
    done = run_cli("endpoints", "list", "--store", f"sqlite:///{tmp_path}/nope/cli.db")
    assert_one_line_error(done, "does not exist")
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize("command", [("endpoints", "list"), ("serve", "--port", "0"), ("migrate",)])
def test_a_file_that_is_no_sqlite_database_is_a_clear_error_and_the_command_exits(
    tmp_path, command
):
    not_a_database = tmp_path / "notes.db"
    not_a_database.write_text("these are notes, not a database; " * 10)
    done = run_cli(
        *command, "--store", f"sqlite:///{not_a_database}"
    )  # before: a traceback, then a hang
    assert_one_line_error(
        done, f"cannot open the SQLite database {not_a_database}: file is not a database"
    )
    assert not_a_database.read_text().startswith("these are notes")


@pytest.mark.parametrize(("url", "module", "extra"), [
    ("postgresql://postgres@127.0.0.1:1/db", "asyncpg", "postgres"),
    ("dynamodb://?region=us-east-1", "botocore", "dynamodb"),
])
def test_store_without_its_extra_names_the_extra(tmp_path, url, module, extra):
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        f"import sys\nsys.modules[{module!r}] = None  # as if the extra were not installed\n"
    )
    done = run_cli("serve", "--store", url, PYTHONPATH=f"{tmp_path}:{ROOT}")
    assert_one_line_error(done, f"pip install 'a2a-gateway[{extra}]'")


def test_version():
    done = run_cli("--version", check=True)
    assert done.stdout.strip().startswith("a2a-gateway ") and done.stdout.strip()[-1].isdigit()


def _all_parsers(parser: argparse.ArgumentParser, name: str = "a2a-gateway"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for sub_name, sub in action.choices.items():
                assert helps.get(sub_name), f"{name} {sub_name} has no help text"
                yield from _all_parsers(sub, f"{name} {sub_name}")


def test_every_option_and_subcommand_has_help_text():
    seen = 0
    for name, parser in _all_parsers(cli.parser()):
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, (
                    f"{name} {action.option_strings or action.dest} has no help text"
                )
                seen += 1
    assert seen > 40


def test_demo_help_names_the_store_demo_serves(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A2A_GATEWAY_STORE", raising=False)
    with pytest.raises(SystemExit) as exited:
        cli.main(["demo", "--help"])
    assert exited.value.code == 0
    named = re.search(r"default (sqlite:///\S+?\.db)", " ".join(capsys.readouterr().out.split()))
    served: list[str] = []
    monkeypatch.setattr(
        cli, "serve", lambda settings, *endpoints, **_: served.append(settings.store)
    )
    cli.main(["demo"])
    assert named is not None and served == [named[1]]


def test_migrate_names_what_it_applied(tmp_path):
    store = f"sqlite:///{tmp_path}/fresh.db"
    shipped = sorted(p.name for p in (ROOT / "migrations" / "sqlite").glob("*.sql"))
    assert run_cli("migrate", "--store", store, check=True).stdout.split() == shipped
    assert "up to date" in run_cli("migrate", "--store", store, check=True).stdout


def test_endpoints_show_masks_literal_secrets_but_shows_env_references(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"
    literal = "sk-literal-0123456789"
    hermes = added_id(run_cli("endpoints", "add", "--store", store, "--name", "h", "--public",
                              "--handler", "handlers.hermes:HermesAgentHandler",
                              "--set", f"hermes_api_key={literal}"))
    chat = added_id(run_cli("endpoints", "add", "--store", store, "--name", "c", "--public",
                            "--handler", "handlers.openai_chat:OpenAIChatHandler",
                            "--set", "api_key=env:OPENAI_API_KEY", "--set", "model=m"))
    shown = json.loads(run_cli("endpoints", "show", "--store", store, hermes, check=True).stdout)
    assert shown["metadata"]["hermes_api_key"] == "***"
    assert literal not in run_cli("endpoints", "list", "--store", store).stdout
    other = json.loads(run_cli("endpoints", "show", "--store", store, chat, check=True).stdout)
    assert (
        other["metadata"]["api_key"] == "env:OPENAI_API_KEY" and other["metadata"]["model"] == "m"
    )


def test_keys_list_shows_when_each_key_expires(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"
    endpoint_id = added_id(
        run_cli("endpoints", "add", "--store", store, "--name", "x", "--handler", ECHO)
    )
    made = run_cli(
        "keys",
        "create",
        "--store",
        store,
        "--endpoint",
        endpoint_id,
        "--expires",
        "30",
        "--name",
        "ci",
        check=True,
    )
    created = re.match(
        r"key (\w+) for endpoint \S+, principal \S+, expires (\S+)$", made.stdout.splitlines()[0]
    )
    forever = run_cli("keys", "create", "--store", store, "--endpoint", endpoint_id, check=True)
    forever_id = forever.stdout.strip().splitlines()[-1].split("_")[1]
    assert created is not None
    key_id, expires = created.groups()
    listed = run_cli("keys", "list", "--store", store, check=True).stdout.splitlines()
    assert sorted(listed) == sorted([
        f"{key_id}  {endpoint_id}  {key_id}  active, expires {expires}  ci",
        f"{forever_id}  {endpoint_id}  {forever_id}  active, never expires",
    ])


@pytest.mark.parametrize(
    ("environment", "expected"), [({}, "auto"), ({"A2A_GATEWAY_LOG_FORMAT": "json"}, "json")]
)
def test_demo_logs_for_people_unless_a_log_format_is_set(
    monkeypatch, tmp_path, environment, expected
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("A2A_GATEWAY_LOG_FORMAT", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    served: list[str] = []
    monkeypatch.setattr(
        cli, "serve", lambda settings, *endpoints, **_: served.append(settings.log_format)
    )
    cli.main(["demo"])
    assert served == [expected]


def test_a_log_format_that_does_not_exist_is_one_line():
    done = run_cli("serve", "--store", "memory://", A2A_GATEWAY_LOG_FORMAT="text")
    assert_one_line_error(done, "log_format: Input should be 'json', 'console' or 'auto'")
