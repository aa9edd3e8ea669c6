"""Settings and handler loading: a handler's settings (endpoint metadata over gateway settings
over the handler's defaults, ``env:NAME`` references), the gateway's own settings (flags over
environment over file over defaults), the handler allowlist and the pinned handler contract."""

from __future__ import annotations

import httpx
import pytest
from pydantic import SecretStr

import handlers.base
from a2a_gateway.endpoints.registry import load_handler_class
from a2a_gateway.errors import EndpointMisconfiguredError
from a2a_gateway.settings import (
    GatewaySettings,
    HandlerSettingsError,
    expand_env_refs,
    load_settings,
    resolve_handler_settings,
)
from handlers.base import HandlerSettings
from handlers.echo import EchoHandler


class DemoSettings(HandlerSettings):
    url: str = "http://default"
    api_key: SecretStr = SecretStr("")
    timeout: float = 30.0


def test_handler_settings_chain_metadata_over_gateway_over_defaults(monkeypatch):
    monkeypatch.setenv("DEMO_KEY", "s3cret-value")
    gateway = GatewaySettings(handler_settings={
        "handlers.demo": {"url": "http://from-module", "timeout": 5},
        "handlers.demo:Demo": {"url": "http://from-class"},
    })
    metadata = {
        "module_name": "handlers.demo",
        "class_name": "Demo",
        "api_key": "env:DEMO_KEY",
        "timeout": 7,
    }
    settings = resolve_handler_settings(DemoSettings, "handlers.demo:Demo", metadata, gateway)
    assert settings.url == "http://from-class"
    assert settings.timeout == 7
    assert settings.api_key.get_secret_value() == "s3cret-value"
    assert "s3cret" not in repr(settings)
    plain = resolve_handler_settings(DemoSettings, "handlers.other:X", {}, GatewaySettings())
    assert plain.url == "http://default"


def test_missing_env_ref_and_bad_values_are_clear_errors(monkeypatch):
    monkeypatch.delenv("NOPE_NOT_SET", raising=False)
    with pytest.raises(HandlerSettingsError, match="NOPE_NOT_SET is not set"):
        expand_env_refs({"a": ["env:NOPE_NOT_SET"]})
    with pytest.raises(HandlerSettingsError, match="timeout"):
        resolve_handler_settings(DemoSettings, "m:C", {"timeout": "soon"}, GatewaySettings())


def test_settings_precedence_flags_env_file_defaults(monkeypatch, tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text('port = 9001\nstore = "memory://"\nlog_level = "debug"\n')
    monkeypatch.setenv("A2A_GATEWAY_PORT", "9002")
    settings = load_settings(str(config), host="0.0.0.0", port=None)
    assert settings.port == 9002 and settings.store == "memory://"
    assert settings.log_level == "debug" and settings.host == "0.0.0.0"
    assert load_settings(str(config), port=9003).port == 9003


def test_handler_class_allowlist():
    assert (
        load_handler_class(
            {"module_name": "handlers.echo", "class_name": "EchoHandler"}, ["handlers."]
        )
        is EchoHandler
    )
    with pytest.raises(EndpointMisconfiguredError, match="allowlist"):
        load_handler_class({"module_name": "os", "class_name": "system"}, ["handlers."])
    with pytest.raises(EndpointMisconfiguredError, match="allowlist"):
        load_handler_class({"module_name": "handlersx.evil", "class_name": "X"}, ["handlers."])
    with pytest.raises(EndpointMisconfiguredError, match="cannot be imported"):
        load_handler_class(
            {"module_name": "handlers.missing_mod", "class_name": "X"}, ["handlers."]
        )
    with pytest.raises(EndpointMisconfiguredError, match="not a handler class"):
        load_handler_class({"module_name": "handlers.base", "class_name": "Turn"}, ["handlers."])


def test_handler_contract_exports_are_pinned():
    assert sorted(handlers.base.__all__) == [
        "ArtifactDelta",
        "AuthRequired",
        "Canceled",
        "Completed",
        "Failed",
        "FileInput",
        "Handler",
        "HandlerEvent",
        "HandlerRequest",
        "HandlerSettings",
        "InputRejectedError",
        "InputRequired",
        "Progress",
        "Rejected",
        "Reply",
        "ResponseModeSettings",
        "RunStarted",
        "SessionUpdate",
        "TextDelta",
        "Turn",
        "data_part",
        "file_part",
        "text_part",
    ]


async def test_echo_handler_default_settings_are_typed():
    async with httpx.AsyncClient() as http:
        handler = EchoHandler(EchoHandler.Settings(delay=0), http)
        assert handler.settings.delay == 0.0 and handler.settings.response_mode == "task"
