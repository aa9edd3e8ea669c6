"""``GET /admin/api/handlers`` through a running gateway: the shipped handlers its allowlist
admits, each with a description and its settings' JSON schema (every field described, secrets
marked); a handler outside the allowlist is not listed; only an operator may ask (401/403).
The route reads no store, so one store kind is enough."""

from __future__ import annotations

from tests.support.admin_support import (
    OPERATOR_KEY,
    admin,
    assert_needs_an_operator,
    new_caller_key,
)
from tests.support.harness import running_gateway

SHIPPED = {
    "handlers.a2a_remote:A2ARemoteHandler",
    "handlers.adk:AdkHandler",
    "handlers.ag_ui:AgUiHandler",
    "handlers.agentcore:AgentCoreHandler",
    "handlers.agno:AgnoHandler",
    "handlers.echo:EchoHandler",
    "handlers.hermes:HermesAgentHandler",
    "handlers.n8n:N8nHandler",
    "handlers.langgraph:LangGraphHandler",
    "handlers.openai_chat:OpenAIChatHandler",
    "handlers.openclaw:OpenClawHandler",
    "handlers.responses:ResponsesHandler",
    "handlers.tck:TckHandler",
}


async def test_every_allowed_handler_is_listed_with_its_described_settings_and_secrets():
    async with running_gateway(operator_keys=[OPERATOR_KEY]) as gw:
        key = await new_caller_key(gw, await gw.add_endpoint())
        await assert_needs_an_operator(gw, "GET", "/handlers", key)
        answer = await admin(gw, "GET", "/handlers")
        assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store"
        handlers = {h["handler"]: h for h in answer.json()["handlers"]}
        again = await admin(gw, "GET", "/handlers")

    assert SHIPPED <= set(handlers), sorted(handlers)
    assert again.content == answer.content
    for path, handler in handlers.items():
        assert handler["description"] and "\n" not in handler["description"], path
        properties = handler["settings"]["properties"]
        assert properties, path
        for name, field in properties.items():
            assert field.get("description"), f"{path} {name} has no description"
        assert sorted(n for n, f in properties.items() if f.get("x-secret")) == handler["secrets"]
    chat = handlers["handlers.openai_chat:OpenAIChatHandler"]
    assert {"api_key"} <= set(chat["secrets"]) and "model" not in chat["secrets"]
    assert chat["settings"]["properties"]["model"]["default"] == "default"
    assert chat["settings"]["properties"]["timeout"]["type"] == "number"
    assert chat["settings"]["properties"]["extra_headers"]["type"] == "object"
    assert chat["settings"]["properties"]["response_mode"]["enum"] == ["task", "message"]
    remote = handlers["handlers.a2a_remote:A2ARemoteHandler"]
    assert {"oauth2_client_secret", "remote_api_key", "remote_bearer_token"} <= set(
        remote["secrets"]
    )
    echo = handlers["handlers.echo:EchoHandler"]
    assert echo["settings"]["properties"]["delay"]["default"] == 0.05 and echo["secrets"] == []


async def test_a_handler_outside_the_allowlist_is_not_listed():
    async with running_gateway(
        operator_keys=[OPERATOR_KEY], handler_allowlist=["handlers.echo", "tests."]
    ) as gw:
        answer = await admin(gw, "GET", "/handlers")
    assert answer.status_code == 200
    assert [h["handler"] for h in answer.json()["handlers"]] == ["handlers.echo:EchoHandler"]
