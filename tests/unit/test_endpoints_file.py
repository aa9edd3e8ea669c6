"""The endpoints file without a process: reading YAML and TOML, per-entry checks, applying to a
store (create, update only what changed, disable what the file dropped), export."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from a2a_gateway.endpoints.file import EndpointsFileError, apply, export, load
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import Endpoint
from a2a_gateway.stores.memory import MemoryStore

ECHO_ID = "7d0c6c1e-6a57-4b8e-9d43-3f1c2a9e0b11"
CHAT_ID = "7d0c6c1e-6a57-4b8e-9d43-3f1c2a9e0b12"
SETTINGS = GatewaySettings(store="memory://")

YAML = f"""
endpoints:
  - id: {ECHO_ID}
    name: Echo
    handler: handlers.echo:EchoHandler
    settings: {{delay: 0}}
    card: {{version: "2.1.0"}}
    public: true
    rate_limit: {{per_second: 5, burst: 10}}
  - id: {CHAT_ID}
    name: Chat
    tenant: team-a
    enabled: false
    handler: handlers.openai_chat:OpenAIChatHandler
    settings:
      api_key: env:A2A_TEST_CHAT_KEY
      extra_headers: {{X-Route: blue}}
    auth: {{api_key: {{header: X-Team-Key}}}}
"""

TOML = f"""
[[endpoints]]
id = "{ECHO_ID}"
name = "Echo"
handler = "handlers.echo:EchoHandler"
card = {{ version = "2.1.0" }}
public = true
rate_limit = {{ per_second = 5, burst = 10 }}
settings = {{ delay = 0 }}

[[endpoints]]
id = "{CHAT_ID}"
name = "Chat"
tenant = "team-a"
enabled = false
handler = "handlers.openai_chat:OpenAIChatHandler"
auth = {{ api_key = {{ header = "X-Team-Key" }} }}

[endpoints.settings]
api_key = "env:A2A_TEST_CHAT_KEY"
extra_headers = {{ X-Route = "blue" }}
"""


def written(tmp_path: Path, text: str, name: str = "endpoints.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_and_toml_declare_the_same_rows(tmp_path):
    from_yaml = load(written(tmp_path, YAML), SETTINGS)
    from_toml = load(written(tmp_path, TOML, "endpoints.toml"), SETTINGS)
    assert [(r.id, r.name, r.tenant, r.enabled, r.card, r.metadata) for r in from_yaml] == \
        [(r.id, r.name, r.tenant, r.enabled, r.card, r.metadata) for r in from_toml]
    echo, chat = from_yaml
    assert echo.metadata == {
        "module_name": "handlers.echo",
        "class_name": "EchoHandler",
        "delay": 0,
        "public": True,
        "rate_limit": {"per_second": 5, "burst": 10},
        "endpoints_file": True,
    }
    assert chat.metadata["api_key"] == "env:A2A_TEST_CHAT_KEY" and not chat.enabled


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("name: x\n    handler: handlers.echo:EchoHandler", "id: Field required"),
        (
            "id: nope\n    name: x\n    handler: handlers.echo:EchoHandler",
            "id: Input should be a valid UUID",
        ),
        (
            f"id: {ECHO_ID}\n    name: x\n    handler: handlers.echo:EchoHandler\n"
            "    setings: {}",
            "setings: Extra inputs are not permitted",
        ),
        (f"id: {ECHO_ID}\n    name: x\n    handler: echo", "handler must be MODULE:CLASS"),
        (f"id: {ECHO_ID}\n    name: x\n    handler: os:path", "not in the allowlist"),
        (
            f"id: {ECHO_ID}\n    name: x\n    handler: handlers.echo:EchoHandler\n"
            "    settings: {dealy: 0}",
            "unknown setting dealy",
        ),
        (
            f"id: {ECHO_ID}\n    name: x\n    handler: handlers.echo:EchoHandler\n"
            "    settings: {public: true}",
            "give public beside settings",
        ),
        (
            f"id: {ECHO_ID}\n    name: x\n    handler: handlers.echo:EchoHandler\n"
            "    enabled: yes please",
            "enabled: Input should be a valid boolean",
        ),
        (
            f"id: {ECHO_ID}\n    name: x\n    handler: handlers.echo:EchoHandler\n"
            "    card: {capabilities: {streaming: maybe}}",
            "capabilities.streaming must be true or false",
        ),
        (
            f"id: {ECHO_ID}\n    name: x\n    handler: handlers.echo:EchoHandler\n"
            "    auth: {jwt: {issuer: x}}",
            "invalid auth.jwt.audience",
        ),
        (
            f"id: {ECHO_ID}\n    name: x\n    handler: handlers.echo:EchoHandler\n"
            "    rate_limit: {per_second: -1}",
            "invalid rate_limit: per_second",
        ),
        (
            f"id: {ECHO_ID}\n    name: x\n    handler: handlers.openai_chat:OpenAIChatHandler\n"
            "    settings: {api_key: sk-literal-value}",
            "settings.api_key holds a secret: give it as env:NAME",
        ),
        (
            f"id: {ECHO_ID}\n    name: x\n    handler: handlers.openai_chat:OpenAIChatHandler\n"
            "    settings: {base_url: 'http://user:pw@backend/v1'}",
            "settings.base_url holds a secret",
        ),
    ],
)
def test_an_entry_that_cannot_be_served_is_refused_with_its_place_and_reason(
    tmp_path, entry, reason
):
    good = f"  - id: {CHAT_ID}\n    name: fine\n    handler: handlers.echo:EchoHandler\n"
    path = written(tmp_path, f"endpoints:\n{good}  - {entry}\n")
    with pytest.raises(EndpointsFileError) as refused:
        load(path, SETTINGS)
    message = str(refused.value)
    assert message.startswith(f"{path}: entry 2") and reason in message
    assert "sk-literal-value" not in message and "pw@" not in message
    assert "entry 1" not in message


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        ("e.yaml", "endpoints: [\n", "not valid YAML"),
        ("e.toml", "[[endpoints]\n", "not valid TOML"),
        ("e.yaml", "", "needs a list named endpoints"),
        ("e.yaml", "endpoints: {}", "needs a list named endpoints"),
        ("e.yaml", "endpoints: []\nendpionts: []", "unknown top-level key endpionts"),
        ("e.json", "{}", "ends in .yaml, .yml or .toml"),
        (
            "e.yaml",
            f"endpoints:\n  - {{id: {ECHO_ID}, name: a, handler: 'handlers.echo:EchoHandler'}}\n"
            f"  - {{id: {ECHO_ID}, name: b, handler: 'handlers.echo:EchoHandler'}}",
            "declared twice",
        ),
    ],
)
def test_a_file_that_cannot_be_read_is_refused(tmp_path, name, text, reason):
    with pytest.raises(EndpointsFileError, match=reason):
        load(written(tmp_path, text, name), SETTINGS)


def test_a_yaml_error_names_the_place_but_quotes_no_line(tmp_path):
    path = written(tmp_path, "endpoints:\n  - id: x\n    settings: {api_key: sk-literal-value\n")
    with pytest.raises(EndpointsFileError) as refused:
        load(path, SETTINGS)
    assert "(line 4, column 1)" in str(refused.value) and "sk-literal-value" not in str(
        refused.value
    )


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(EndpointsFileError, match="cannot be read: No such file"):
        load(tmp_path / "absent.yaml", SETTINGS)


async def test_apply_creates_updates_what_changed_and_leaves_other_rows_alone(tmp_path):
    store = MemoryStore()
    cli_row = Endpoint(id="11111111-1111-4111-8111-111111111111", name="from the cli",
                       metadata={"module_name": "handlers.echo", "class_name": "EchoHandler"})
    overwritten = Endpoint(id=ECHO_ID, name="added by hand", metadata={
        "module_name": "handlers.echo", "class_name": "EchoHandler", "delay": 5})
    await store.create_endpoint(cli_row)
    await store.create_endpoint(overwritten)
    rows = load(written(tmp_path, YAML), SETTINGS)

    first = await apply(store, rows)
    assert (first.created, first.updated) == ([CHAT_ID], [ECHO_ID])
    echo = await store.get_endpoint(ECHO_ID)
    assert echo.name == "Echo" and echo.metadata["delay"] == 0  # the file wins for its id
    assert echo.created_at == overwritten.created_at

    again = await apply(store, load(written(tmp_path, YAML), SETTINGS))
    assert (again.created, again.updated, again.unchanged) == ([], [], [ECHO_ID, CHAT_ID])
    assert (await store.get_endpoint(ECHO_ID)).updated_at == echo.updated_at  # handler kept

    assert (await store.get_endpoint(cli_row.id)).metadata == cli_row.metadata


class RacedStore(MemoryStore):
    """Another replica creates each row between this one's read and its create."""

    async def create_endpoint(self, endpoint: Endpoint) -> None:
        rival = Endpoint(
            id=endpoint.id, name="the other replica's older file", metadata=endpoint.metadata
        )
        await super().create_endpoint(rival)
        await super().create_endpoint(endpoint)  # ConflictError, as from a real store


async def test_a_row_another_replica_created_meanwhile_is_updated_to_the_file(tmp_path):
    store = RacedStore()
    applied = await apply(store, load(written(tmp_path, YAML), SETTINGS))
    assert applied.updated == [ECHO_ID, CHAT_ID] and not applied.created
    assert (await store.get_endpoint(ECHO_ID)).name == "Echo"


async def test_a_row_dropped_from_the_file_is_disabled_and_comes_back_with_its_entry(tmp_path):
    store = MemoryStore()
    cli_row = Endpoint(id="11111111-1111-4111-8111-111111111111", name="from the cli",
                       metadata={"module_name": "handlers.echo", "class_name": "EchoHandler"})
    await store.create_endpoint(cli_row)
    await apply(store, load(written(tmp_path, YAML), SETTINGS))
    only_chat = yaml.safe_load(YAML)
    del only_chat["endpoints"][0]
    dropped = await apply(store, load(written(tmp_path, yaml.safe_dump(only_chat)), SETTINGS))
    assert dropped.disabled == [ECHO_ID]
    assert not (await store.get_endpoint(ECHO_ID)).enabled
    assert (await store.get_endpoint(cli_row.id)).enabled  # not the file's: left alone
    back = await apply(store, load(written(tmp_path, YAML), SETTINGS))
    assert back.updated == [ECHO_ID] and (await store.get_endpoint(ECHO_ID)).enabled


async def test_export_reads_back_as_the_same_rows(tmp_path):
    rows = load(written(tmp_path, YAML), SETTINGS)
    for fmt, name in (("yaml", "again.yaml"), ("toml", "again.toml")):
        text = export(rows, SETTINGS, fmt)
        assert "env:A2A_TEST_CHAT_KEY" in text and "endpoints_file" not in text
        again = load(written(tmp_path, text, name), SETTINGS)
        assert [(r.id, r.name, r.tenant, r.enabled, r.card, r.metadata) for r in again] == \
            [(r.id, r.name, r.tenant, r.enabled, r.card, r.metadata) for r in rows]


@pytest.mark.parametrize(
    ("settings", "where"),
    [
        ({"api_key": "sk-literal-value"}, "settings.api_key"),
        ({"extra_headers": {"X-Api-Key": "sk-literal-value"}}, "settings.extra_headers.X-Api-Key"),
        ({"base_url": "http://u:sk-literal-value@backend/v1"}, "settings.base_url"),
    ],
)
def test_export_refuses_a_row_holding_a_secret_as_such(settings, where):
    row = Endpoint(id=CHAT_ID, name="chat", metadata={
        "module_name": "handlers.openai_chat", "class_name": "OpenAIChatHandler", **settings})
    with pytest.raises(EndpointsFileError) as refused:
        export([row], SETTINGS, "yaml")
    assert f"{CHAT_ID} {where}" in str(refused.value) and "sk-literal-value" not in str(
        refused.value
    )


def test_toml_export_of_a_null_setting_says_to_use_yaml():
    row = Endpoint(
        id=CHAT_ID,
        name="chat",
        metadata={
            "module_name": "handlers.openai_chat",
            "class_name": "OpenAIChatHandler",
            "system_prompt": None,
        },
    )
    with pytest.raises(EndpointsFileError, match="export as YAML"):
        export([row], SETTINGS, "toml")
    assert "system_prompt: null" in export([row], SETTINGS, "yaml")


ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_files_load(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_API_KEY", "unused")
    monkeypatch.setenv("CHAT_API_KEY", "unused")
    assert len(load(ROOT / "deploy" / "endpoints.example.yaml", SETTINGS)) == 3
    doc = (ROOT / "docs" / "endpoints-file.md").read_text()
    blocks = [block.split("\n", 1) for block in doc.split("```")[1::2]]
    examples = [(kind, text) for kind, text in blocks if kind in ("yaml", "toml")]
    assert [kind for kind, _ in examples] == ["yaml", "toml"]
    for kind, text in examples:
        (row,) = load(written(tmp_path, text, f"doc.{kind}"), SETTINGS)
        assert row.metadata["hermes_api_key"] == "env:HERMES_API_KEY"
