"""``serve --endpoints FILE`` and ``endpoints export`` as an operator runs them: agents from the
file answer the a2a-sdk client on memory:// and SQLite, SIGHUP applies the changed file (a bad
one is logged and the old rows keep serving), a bad file stops startup with the file, entry and
reason, export round-trips, and an ``env:NAME`` secret stays a reference everywhere."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import httpx
import pytest
from a2a.types import TaskState

from a2a_gateway.app import ENDPOINTS_FILE
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.cli_process import run_cli, serving, stored_endpoints
from tests.support.harness import RunningGateway, collect, require_env, running_gateway
from tests.support.messages import send_body, send_request
from tests.support.waiting import eventually

ECHO = "handlers.echo:EchoHandler"
V10 = {"A2A-Version": "1.0"}
FIRST, SECOND, BY_HAND = (str(uuid.UUID(int=n, version=4)) for n in (1, 2, 3))


def echo_entry(endpoint_id: str, name: str, **settings: object) -> str:
    shown = ", ".join(f"{k}: {v}" for k, v in {"delay": 0, **settings}.items())
    return (f"  - id: {endpoint_id}\n    name: {name}\n    handler: {ECHO}\n"
            f"    settings: {{{shown}}}\n    public: true\n")


def endpoints_file(path: Path, *entries: str) -> Path:
    path.write_text("endpoints:\n" + "".join(entries) if entries else "endpoints: []\n")
    return path


async def card_name(base: str, endpoint_id: str) -> str | int:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(f"{base}/{endpoint_id}/.well-known/agent-card.json")
    return response.json()["name"] if response.status_code == 200 else response.status_code


async def sdk_answer(base: str, endpoint_id: str, text: str) -> tuple[int, str]:
    """The a2a-sdk client's blocking SendMessage: the task's state and its answer."""
    async with RunningGateway(base, None).client(endpoint_id, streaming=False) as client:  # type: ignore[arg-type]
        (event,) = await collect(client.send_message(send_request(text)))
    return event.task.status.state, event.task.artifacts[0].parts[0].text


async def test_agents_from_the_file_answer_the_sdk_client_on_the_memory_store(tmp_path):
    path = endpoints_file(
        tmp_path / "endpoints.yaml", echo_entry(FIRST, "first"), echo_entry(SECOND, "second")
    )
    async with serving("serve", "--store", "memory://", "--endpoints", str(path)) as listening:
        assert listening[3] == "2"
        answer = await sdk_answer(listening[1], SECOND, "hello file")
    assert answer == (TaskState.TASK_STATE_COMPLETED, "echo: hello file")


async def test_file_rows_and_cli_rows_share_a_sqlite_store_and_the_file_wins_for_its_ids(tmp_path):
    store = f"sqlite:///{tmp_path}/gw.db"
    for endpoint_id, name in ((BY_HAND, "by hand"), (FIRST, "by hand, then in the file")):
        done = run_cli("endpoints", "add", "--store", store, "--id", endpoint_id, "--name", name,
                       "--handler", ECHO, "--set", "delay=0", "--public")
        assert done.returncode == 0, done.stderr
    path = endpoints_file(tmp_path / "endpoints.toml", "")
    path.write_text(f'[[endpoints]]\nid = "{FIRST}"\nname = "from the file"\nhandler = "{ECHO}"\n'
                    "public = true\nsettings = { delay = 0 }\n")
    async with serving(
        "serve", "--store", store, A2A_GATEWAY_ENDPOINTS_FILE=str(path)
    ) as listening:
        assert listening[3] == "2"
        names = [await card_name(listening[1], e) for e in (FIRST, BY_HAND)]
        answers = [await sdk_answer(listening[1], e, "hi") for e in (FIRST, BY_HAND)]
    assert names == ["from the file", "by hand"]
    assert answers == [(TaskState.TASK_STATE_COMPLETED, "echo: hi")] * 2


async def test_sighup_applies_the_changed_file_and_keeps_the_rows_when_it_is_bad(tmp_path):
    path = endpoints_file(
        tmp_path / "endpoints.yaml", echo_entry(FIRST, "first"), echo_entry(SECOND, "second")
    )
    output: list[str] = []
    process: list[asyncio.subprocess.Process] = []
    async with serving("serve", "--store", "memory://", "--endpoints", str(path), output=output,
                       process=process, A2A_GATEWAY_ENDPOINT_CACHE_SECONDS="0") as listening:
        base, gateway = listening[1], process[0]
        # a setting and the name change, an entry is added, one is dropped
        endpoints_file(path, echo_entry(FIRST, "first, renamed", response_mode="message"),
                       echo_entry(BY_HAND, "added"))
        gateway.send_signal(signal.SIGHUP)
        await eventually(lambda: card_name(base, BY_HAND), until=lambda n: n == "added",
                         what="the added entry served")
        renamed = await card_name(base, FIRST)
        async with httpx.AsyncClient(timeout=10) as http:
            as_message = (
                await http.post(f"{base}/{FIRST}/a2a", json=send_body("hi"), headers=V10)
            ).json()
        dropped = await card_name(base, SECOND)

        endpoints_file(path, echo_entry(FIRST, "broken", dealy=0))
        gateway.send_signal(signal.SIGHUP)
        await eventually(
            lambda: "endpoints_file_refused" in "".join(output), what="the refusal logged"
        )
        after_bad = [await card_name(base, e) for e in (FIRST, BY_HAND)]
        still = await sdk_answer(base, BY_HAND, "still here")
        alive = gateway.returncode is None
    logged = "".join(output)
    assert (
        renamed == "first, renamed"
        and as_message["result"]["message"]["parts"][0]["text"] == "echo: hi"
    )
    assert dropped == 404  # its entry is gone: disabled
    assert after_bad == ["first, renamed", "added"] and still[1] == "echo: still here" and alive
    assert "endpoints_file_refused" in logged and "entry 1 (id " + FIRST in logged
    assert "unknown setting dealy" in logged and "Traceback" not in logged


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (echo_entry(SECOND, "x", dealy=0), "unknown setting dealy for handlers.echo:EchoHandler"),
        (
            echo_entry(SECOND, "x").replace(ECHO, "os:path"),
            "handler module 'os' is not in the allowlist",
        ),
        (
            echo_entry(SECOND, "x") + "    card: {skills: [{id: a, name: A}]}\n",
            "skills[0] needs description",
        ),
        (
            echo_entry(SECOND, "x") + "    auth: {api_key: {header: 7}}\n",
            "invalid auth.api_key.header",
        ),
        (
            echo_entry(SECOND, "x") + "    rate_limit: {per_second: -1}\n",
            "invalid rate_limit: per_second",
        ),
    ],
)
def test_a_file_that_cannot_be_served_stops_startup_and_writes_nothing(tmp_path, entry, reason):
    path = endpoints_file(tmp_path / "endpoints.yaml", echo_entry(FIRST, "fine"), entry)
    store = f"sqlite:///{tmp_path}/gw.db"
    done = run_cli("serve", "--store", store, "--endpoints", str(path), "--port", "0")
    assert done.returncode != 0 and "Traceback" not in done.stderr and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"a2a-gateway: {path}: entry 2 (id {SECOND}): ") and reason in line
    assert stored_endpoints(store) == []


def test_an_unreadable_file_stops_startup(tmp_path):
    path = tmp_path / "endpoints.yaml"
    path.write_text("endpoints:\n  - id: [unclosed\n")
    done = run_cli("serve", "--store", "memory://", "--endpoints", str(path), "--port", "0")
    assert done.returncode != 0 and done.stderr.startswith(f"a2a-gateway: {path}: not valid YAML")
    missing = run_cli("serve", "--store", "memory://", "--endpoints", str(tmp_path / "none.toml"))
    assert missing.returncode != 0 and "cannot be read" in missing.stderr


@pytest.fixture(scope="module")
def exported_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A SQLite store made with the CLI (two endpoints, one disabled) and the disabled one's
    id; the export tests only read it, so both formats share it."""
    first_store = f"sqlite:///{tmp_path_factory.mktemp('exported')}/a.db"
    added = [
        ["--name", "plain", "--set", "delay=0", "--public"],
        [
            "--name",
            "carded",
            "--tenant",
            "team-a",
            "--description",
            "with a card",
            "--card",
            '{"version": "2.0.0", "skills": '
            '[{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]}',
            "--set",
            "response_mode=message",
            "--set",
            'rate_limit={"per_second": 5, "burst": 2}',
            "--auth",
            '{"api_key": {"header": "X-Team-Key"}}',
        ],
    ]
    for extra in added:
        done = run_cli("endpoints", "add", "--store", first_store, "--handler", ECHO, *extra)
        assert done.returncode == 0, done.stderr
    plain = run_cli("endpoints", "list", "--store", first_store, check=True).stdout.split()[0]
    run_cli("endpoints", "disable", plain, "--store", first_store, check=True)
    return first_store, plain


@pytest.mark.parametrize("fmt", ["yaml", "toml"])
async def test_export_then_serve_the_exported_file_on_a_fresh_store_gives_the_same_rows(
    tmp_path, fmt, exported_store
):
    (first_store, plain), second_store = exported_store, f"sqlite:///{tmp_path}/b.db"
    exported = run_cli(
        "endpoints", "export", "--store", first_store, "--format", fmt, check=True
    ).stdout
    path = tmp_path / f"endpoints.{fmt}"
    path.write_text(exported)
    async with serving("serve", "--store", second_store, "--endpoints", str(path)) as listening:
        assert listening[3] == "2"
    again = run_cli(
        "endpoints", "export", "--store", second_store, "--format", fmt, check=True
    ).stdout
    assert again == exported
    assert ("enabled = false" if fmt == "toml" else "enabled: false") in exported
    assert (
        '"enabled": false'
        in run_cli("endpoints", "show", plain, "--store", second_store, check=True).stdout
    )


async def test_an_env_secret_stays_a_reference_in_the_store_and_the_export(tmp_path):
    hermes_url = require_env("A2A_TEST_HERMES_URL")
    key = require_env("A2A_TEST_HERMES_KEY")
    require_env("A2A_TEST_LLM_URL")
    path = tmp_path / "endpoints.yaml"
    path.write_text(
        f"endpoints:\n  - id: {FIRST}\n    name: hermes\n"
        "    handler: handlers.hermes:HermesAgentHandler\n    public: true\n"
        f"    settings:\n      hermes_api_url: {hermes_url}\n"
        "      hermes_api_key: env:GATEWAY_HERMES_KEY\n      poll_interval_seconds: 0.2\n"
    )
    store = f"sqlite:///{tmp_path}/gw.db"
    output: list[str] = []
    async with serving("serve", "--store", store, "--endpoints", str(path), output=output,
                       A2A_GATEWAY_LOG_LEVEL="debug", GATEWAY_HERMES_KEY=key) as listening:
        async with httpx.AsyncClient(timeout=120) as http:
            answer = (await http.post(f"{listening[1]}/{FIRST}/a2a", json=send_body("hello hermes"),
                                      headers=V10)).json()
    # Hermes refuses a wrong key: a completed task shows the gateway resolved the reference
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    shown = run_cli("endpoints", "show", FIRST, "--store", store, check=True).stdout
    exported = run_cli("endpoints", "export", "--store", store, check=True).stdout
    assert '"hermes_api_key": "env:GATEWAY_HERMES_KEY"' in shown
    assert "hermes_api_key: env:GATEWAY_HERMES_KEY" in exported
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("gw.db*"))
    assert key.encode() not in stored
    assert all(key not in text for text in (shown, exported, "".join(output)))


def test_export_refuses_a_row_holding_a_literal_secret(tmp_path):
    store = f"sqlite:///{tmp_path}/gw.db"
    literal = "sk-literal-" + uuid.uuid4().hex
    run_cli(
        "endpoints",
        "add",
        "--store",
        store,
        "--id",
        FIRST,
        "--name",
        "chat",
        "--public",
        "--handler",
        "handlers.openai_chat:OpenAIChatHandler",
        "--set",
        f"api_key={literal}",
        check=True,
    )
    done = run_cli("endpoints", "export", "--store", store)
    assert done.returncode != 0 and done.stdout == "" and literal not in done.stderr
    assert f"{FIRST} settings.api_key" in done.stderr and "env:NAME" in done.stderr


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_the_file_applies_on_every_store_and_an_unchanged_file_writes_nothing(
    tmp_path, monkeypatch, kind
):
    card = "    card: {version: '1.0.0', provider: {organization: Example, url: 'https://example.com'}}\n"
    path = endpoints_file(
        tmp_path / "endpoints.yaml",
        echo_entry(FIRST, "first", delay=0.01) + card,
        echo_entry(SECOND, "second"),
    )
    async with fresh_store_url(kind, tmp_path, monkeypatch) as url:
        async with running_gateway(url, endpoints_file=str(path), endpoint_cache_seconds=0) as gw:
            declared = gw.app[ENDPOINTS_FILE]
            first_answer = await sdk_answer(gw.base_url, FIRST, "on every store")
            unchanged = await declared.reload(gw.store)
            endpoints_file(path, echo_entry(FIRST, "renamed", delay=0.01) + card)
            changed = await declared.reload(gw.store)
            names = [await card_name(gw.base_url, e) for e in (FIRST, SECOND)]
    assert first_answer == (TaskState.TASK_STATE_COMPLETED, "echo: on every store")
    assert (
        unchanged is not None and unchanged.unchanged == [FIRST, SECOND] and not unchanged.updated
    )
    assert changed is not None and (changed.updated, changed.disabled) == ([FIRST], [SECOND])
    assert names == ["renamed", 404]
