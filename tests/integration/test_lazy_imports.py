"""What a cold start loads: ``build_app`` on ``memory://`` leaves the store drivers, the
a2a-sdk's server package (its gRPC handler, event queues, 0.3 types), gRPC, OpenTelemetry,
PyJWT and ``cryptography`` (JWT auth, card signing), the parsers of endpoints and config
files (PyYAML, tomllib, tomli-w), Redis and the cross-replica live hubs, the ``mcp`` SDK
with the MCP facade's tools, and the console (off by default) unimported; each loads when
its part is used. The DynamoDB store loads botocore alone (not boto3), and start-up builds no
push notification client.

Every check runs in a fresh interpreter, so modules other tests imported do not count.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.stores.dynamo_support import fresh_tables, use_moto_credentials
from tests.stores.pg_support import fresh_database

NOT_AT_START = (
    "asyncpg",
    "boto3",
    "botocore",
    "aiosqlite",
    "grpc",
    "opentelemetry",
    "jwt",
    "cryptography",
    "yaml",
    "tomllib",
    "tomli_w",
    "a2a_gateway.auth.public_keys",
    "a2a_gateway.endpoints.card_keys",
    "a2a.server.request_handlers",
    "a2a.server.events",
    "a2a.compat.v0_3.types",
    "a2a_gateway.tasks.request_handler",
    "a2a_gateway.transport.grpc_binding",
    "handlers.echo",
    "redis",
    "a2a_gateway.live.redis",
    "a2a_gateway.live.postgres",
    "a2a_gateway.live.feed_relay",
    "mcp",
    "a2a_gateway.transport.mcp_asgi",
    "a2a_gateway.transport.mcp_tools",
    "a2a_gateway.transport.mcp_results",
    "a2a_gateway.console.pages",
)


def _loaded_after(script: str) -> set[str]:
    """The modules of ``NOT_AT_START`` loaded once ``script`` has run in a fresh interpreter."""
    probe = textwrap.dedent(script) + textwrap.dedent(f"""
        import json, sys
        print(json.dumps([m for m in {NOT_AT_START!r} if m in sys.modules]))
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


BUILD = """
    from a2a_gateway.app import build_app
    from a2a_gateway.settings import GatewaySettings
    build_app(GatewaySettings(store={store!r}))
"""


def test_build_app_on_memory_loads_no_driver_sdk_server_grpc_jwt_or_yaml() -> None:
    assert _loaded_after(BUILD.format(store="memory://")) == set()


def test_card_signing_keys_load_pyjwt_and_cryptography(tmp_path) -> None:
    key = tmp_path / "card.pem"
    key.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    script = f"""
    from a2a_gateway.app import build_app
    from a2a_gateway.settings import GatewaySettings
    build_app(GatewaySettings(store="memory://", card_signing_keys=[{str(key)!r}]))
    """
    assert _loaded_after(script) == {"jwt", "cryptography", "a2a_gateway.endpoints.card_keys"}


def test_jwt_auth_with_static_keys_loads_cryptography() -> None:
    pem = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    script = f"""
    from a2a_gateway.auth.config import endpoint_auth
    auth = endpoint_auth(
        {{"auth": {{"jwt": {{"issuer": "i", "audience": "a", "keys": [{pem!r}]}}}}}},
        default_header="X-API-Key", allow_anonymous=False)
    assert auth.jwt.keys[0].fits("ES256") and not auth.jwt.keys[0].fits("RS256")
    """
    assert {"cryptography", "a2a_gateway.auth.public_keys"} <= _loaded_after(script)


@pytest.mark.parametrize(("suffix", "parser"), [(".yaml", "yaml"), (".toml", "tomllib")])
def test_an_endpoints_file_loads_only_its_parser(tmp_path, suffix: str, parser: str) -> None:
    path = tmp_path / f"endpoints{suffix}"
    path.write_text("endpoints: []\n" if suffix == ".yaml" else "endpoints = []\n")
    script = f"""
    from a2a_gateway.app import build_app
    from a2a_gateway.settings import GatewaySettings
    build_app(GatewaySettings(store="memory://", endpoints_file={str(path)!r}))
    """
    assert _loaded_after(script) == {parser}


OPEN_AND_LIST = """
    import asyncio
    from a2a_gateway.stores import open_store
    async def main():
        store = await open_store({url!r})
        await store.list_endpoints()
        await store.aclose()
    asyncio.run(main())
"""


def test_sqlite_store_loads_only_its_driver(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    assert _loaded_after(BUILD.format(store=url) + OPEN_AND_LIST.format(url=url)) == {"aiosqlite"}


async def test_postgres_store_loads_only_its_driver() -> None:
    async with fresh_database() as url:
        assert _loaded_after(BUILD.format(store=url) + OPEN_AND_LIST.format(url=url)) == {"asyncpg"}


async def test_dynamodb_store_loads_only_its_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    use_moto_credentials(monkeypatch)
    async with fresh_tables() as url:
        loaded = _loaded_after(BUILD.format(store=url) + OPEN_AND_LIST.format(url=url))
    assert loaded == {"botocore"}  # the client is botocore's alone: no boto3, no s3transfer


def test_start_up_loads_the_sdk_server_package_and_the_first_requests_are_served() -> None:
    """``build_app`` leaves the a2a-sdk's server package unloaded, start-up loads it (every
    request and card needs it: the first caller does not wait for it) and builds one httpx
    client, the backend's (the push notifier's waits for a delivery); the card carries its
    0.3 fields; 1.0 and 0.3 requests are answered, a bad 0.3 one with invalid params. Without
    Redis or PostgreSQL no cross-replica hub loads, and A2A requests load nothing of MCP."""
    script = """
    import asyncio, sys
    import httpx
    from tests.support.harness import running_gateway
    from tests.support.messages import rpc, send_params

    built = []  # every httpx client made in this process, by its keyword arguments
    make_client = httpx.AsyncClient.__init__
    def counted(self, *args, **kwargs):
        built.append(kwargs)
        make_client(self, *args, **kwargs)
    httpx.AsyncClient.__init__ = counted

    async def main():
        async with running_gateway() as gw, httpx.AsyncClient(timeout=60) as http:
            assert (await http.get(gw.base_url + "/healthz")).status_code == 200
            # the backend client and this one: the push notifier builds its own (no proxy from
            # the environment) at its first delivery
            assert [sorted(kwargs) for kwargs in built] == [
                ["limits", "timeout", "transport"], ["timeout"]]
            assert "a2a_gateway.tasks.request_handler" in sys.modules
            endpoint_id = await gw.add_endpoint("handlers.echo:EchoHandler", settings={"delay": 0})
            card = await http.get(gw.endpoint_url(endpoint_id) + "/.well-known/agent-card.json")
            assert card.status_code == 200, card.text
            assert {"url", "preferredTransport"} <= set(card.json()), card.text
            url = gw.jsonrpc_url(endpoint_id)
            r10 = await http.post(
                url, json=rpc("SendMessage", send_params()), headers={"A2A-Version": "1.0"})
            state = r10.json()["result"]["task"]["status"]["state"]
            assert state == "TASK_STATE_COMPLETED", r10.text
            r03 = await http.post(url, json=rpc("message/send", {"message": {
                "messageId": "m", "kind": "message", "role": "user",
                "parts": [{"kind": "text", "text": "hi"}]}}))
            assert r03.json()["result"]["status"]["state"] == "completed", r03.text
            bad = await http.post(url, json=rpc("tasks/get", {"id": 5}))
            assert bad.json()["error"]["code"] == -32602, bad.text

    asyncio.run(main())
"""
    loaded = _loaded_after(script)
    assert {
        "a2a.server.request_handlers",
        "a2a.compat.v0_3.types",
        "a2a_gateway.tasks.request_handler",
        "handlers.echo",
    } <= loaded
    assert not loaded & {"asyncpg", "boto3", "botocore", "aiosqlite"}
    # a replica alone on memory:// runs no cross-replica hub, and no MCP request came
    assert not loaded & {
        "redis",
        "a2a_gateway.live.redis",
        "a2a_gateway.live.postgres",
        "mcp",
        "a2a_gateway.transport.mcp_asgi",
        "a2a_gateway.transport.mcp_tools",
    }


def test_lambda_start_up_is_frozen_and_leaves_the_collector_on() -> None:
    """The Lambda handler's import (the init phase) and its first invocation (start-up) run
    without garbage collection and freeze what they built: the collector is on afterwards and
    later collections leave start-up's objects out. The first invocation is answered."""
    script = """
    import asyncio, gc, os
    os.environ.update(A2A_GATEWAY_STORE="memory://", A2A_GATEWAY_LOG_LEVEL="error")
    from tests.support.lambda_runtime import function_url_event
    before = gc.get_freeze_count()
    from a2a_gateway import lambda_handler
    assert gc.isenabled()
    after_init = gc.get_freeze_count()
    assert after_init > before + 20_000, (before, after_init)  # the imports' objects
    answer = lambda_handler.handler(function_url_event("GET", "/healthz"), None)
    assert answer["statusCode"] == 200, answer
    assert gc.isenabled()
    assert gc.get_freeze_count() > after_init + 5_000, after_init  # start-up's objects
    gateway = lambda_handler._gateway()
    asyncio.run_coroutine_threadsafe(gateway.session.close(), gateway.loop).result()
    """
    loaded = _loaded_after(script)
    assert "a2a_gateway.tasks.request_handler" in loaded  # start-up ran
    assert not loaded & {"asyncpg", "boto3", "botocore", "aiosqlite", "redis", "mcp"}
