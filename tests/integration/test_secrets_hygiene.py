"""No secret the gateway is given shows anywhere it writes or answers.

One ``serve`` process at log level debug holds every kind of secret: the API key secret, a
caller's API key, a JWT caller's token, handler settings given literally (a Hermes key, an
OpenAI-style key that a local backend receives and echoes in its error), a push config's
credentials, token and a webhook URL with ``user:password@`` and ``?token=``, and a
card-signing key. After good and bad calls, every byte the process wrote, every response
(bodies and headers) and the output of the endpoint and key commands are searched for each
secret. The caller's key appears exactly once: the last line ``keys create`` prints.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import jwt
import orjson
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from jwt.algorithms import OKPAlgorithm

from a2a_gateway.logs import drop_secrets, mask_url_credentials
from tests.cli_process import run_cli, serving
from tests.webhooks import webhook_receiver

V10 = {"A2A-Version": "1.0"}
ISSUER, AUDIENCE = "https://issuer.test", "secrets-hygiene"


def secret(name: str) -> str:
    return f"{name}-S3CRET-{secrets.token_hex(8)}"


class FakeChatBackend:
    """``POST /v1/chat/completions``: a streamed answer, or, for a message containing "fail",
    a 400 whose body quotes the presented key and headers (a careless provider's error)."""

    def __init__(self) -> None:
        self.authorizations: list[str] = []
        self.api_keys: list[str] = []
        self.port = 0

    async def completions(self, request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("Authorization", "")
        self.authorizations.append(authorization)
        self.api_keys.append(request.headers.get("X-Api-Key", ""))
        body = await request.json()
        if "fail" in body["messages"][-1]["content"]:
            message = f"unknown model for key {authorization.removeprefix('Bearer ')}, headers {dict(request.headers)}"
            return web.json_response({"error": {"message": message, "type": "invalid_request_error"}},
                                     status=400)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in ({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hello"}}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}):
            await response.write(b"data: " + orjson.dumps({"id": "c1", "object": "chat.completion.chunk",
                                                           **chunk}) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response


@asynccontextmanager
async def chat_backend() -> AsyncIterator[FakeChatBackend]:
    backend = FakeChatBackend()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", backend.completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    backend.port = site._server.sockets[0].getsockname()[1]
    try:
        yield backend
    finally:
        await runner.cleanup()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pem(key: Any) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def pem_body(text: str) -> str:
    """The base64 lines of a PEM, joined: what a leak of the key would contain."""
    return "".join(line for line in text.splitlines() if not line.startswith("-----"))[:40]


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}


def send(text: str, push: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                                          "parts": [{"text": text}]}}
    if push:
        params["configuration"] = {"taskPushNotificationConfig": push}
    return rpc("SendMessage", params)


def written(response: httpx.Response) -> str:
    """Everything the gateway sent back: status line, headers and body."""
    headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
    return f"{response.status_code}\n{headers}\n{response.text}"


def test_a_logged_url_keeps_no_credential_of_its_query():
    event = {"event": "HTTP Request: POST https://hooks.example/in?id=7&token=t0k&X-Amz-Credential=AKIA"
                      "&X-Amz-Signature=5ig&key=k3y&access_token=acc \"HTTP/1.1 204\"",
             "target": "https://u:p4ss@hooks.example/in?api_key=k3y#top"}
    masked = mask_url_credentials(None, "info", event)
    assert masked["event"] == ("HTTP Request: POST https://hooks.example/in?id=7&token=***&X-Amz-Credential=***"
                               "&X-Amz-Signature=***&key=***&access_token=*** \"HTTP/1.1 204\"")
    assert masked["target"] == "https://***@hooks.example/in?api_key=***#top"


def test_fields_named_like_a_header_credential_are_dropped():
    event = {"event": "x", "X-Api-Key": "k", "x-auth-token": "t", "Proxy-Authorization": "p", "X-Route": "blue"}
    assert drop_secrets(None, "info", event) == {
        "event": "x", "X-Api-Key": "***", "x-auth-token": "***", "Proxy-Authorization": "***", "X-Route": "blue"}


async def test_no_secret_in_logs_answers_or_cli_output(tmp_path):
    jwt_key = ec.generate_private_key(ec.SECP256R1())
    impostor_key = ec.generate_private_key(ec.SECP256R1())
    card_key = {**OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate(), as_dict=True), "kid": "card-1"}
    push_password, push_query_token = secret("hook-password"), secret("hook-query")
    push_credentials, push_token = secret("push-credentials"), secret("push-token")
    hermes_key, chat_key = secret("hermes-key"), secret("chat-key")
    chat_url_password = secret("chat-url-password")
    hermes_url_password, chat_header = secret("hermes-url-password"), secret("chat-header")
    jwks_url_password, jwks_url_token = secret("jwks-url-password"), secret("jwks-url-token")
    env = {
        "A2A_GATEWAY_API_KEY_SECRET": secret("api-key-secret"),
        "A2A_GATEWAY_CARD_SIGNING_KEYS": '["env:HYGIENE_CARD_KEY"]',
        "HYGIENE_CARD_KEY": json.dumps(card_key),
        "HYGIENE_JWT_PUBLIC_KEY": jwt_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode(),
        "A2A_GATEWAY_PUSH_ALLOW_PRIVATE_URLS": "true",
        "A2A_GATEWAY_PUSH_RETRY_BASE_SECONDS": "0.1",
        "A2A_GATEWAY_PUSH_POLL_SECONDS": "0.1",
    }
    cli_output: list[str] = []

    def cli(*args: str) -> str:
        done = run_cli(*args, cwd=tmp_path, **env)
        assert done.returncode == 0, done.stderr
        cli_output.append(done.stdout + done.stderr)
        return done.stdout.strip().splitlines()[-1]

    async with chat_backend() as backend, webhook_receiver() as hooks:
        chat = cli("endpoints", "add", "--name", "chat", "--handler", "handlers.openai_chat:OpenAIChatHandler",
                   "--set", f"base_url=http://127.0.0.1:{backend.port}/v1", "--set", f"api_key={chat_key}",
                   "--set", json.dumps({"X-Route": "blue", "X-Api-Key": chat_header}, separators=(",", ":"))
                   .join(("extra_headers=", "")),
                   "--card", json.dumps({"capabilities": {"pushNotifications": True}}))
        hermes = cli("endpoints", "add", "--name", "hermes", "--handler", "handlers.hermes:HermesAgentHandler",
                     "--public", "--set",
                     f"hermes_api_url=http://hermes:{hermes_url_password}@127.0.0.1:{closed_port()}",
                     "--set", f"hermes_api_key={hermes_key}")
        signed_in = cli("endpoints", "add", "--name", "jwt", "--handler", "handlers.echo:EchoHandler",
                        "--set", "delay=0", "--auth", json.dumps({"jwt": {
                            "issuer": ISSUER, "audience": AUDIENCE, "keys": ["env:HYGIENE_JWT_PUBLIC_KEY"]}}))
        unreachable = cli("endpoints", "add", "--name", "unreachable chat", "--public",
                          "--handler", "handlers.openai_chat:OpenAIChatHandler",
                          "--set", f"base_url=http://chat:{chat_url_password}@127.0.0.1:{closed_port()}/v1")
        jwks_url = (f"http://jwks:{jwks_url_password}@127.0.0.1:{closed_port()}/jwks.json"
                    f"?token={jwks_url_token}")
        fetched = cli("endpoints", "add", "--name", "jwks", "--handler", "handlers.echo:EchoHandler",
                      "--set", "delay=0", "--auth", json.dumps({"jwt": {
                          "issuer": ISSUER, "audience": AUDIENCE, "jwks_url": jwks_url}}))
        done = run_cli("keys", "create", "--endpoint", chat, "--name", "hygiene", cwd=tmp_path, **env)
        assert done.returncode == 0, done.stderr
        api_key = done.stdout.strip().splitlines()[-1]
        key_stdout_before_last = done.stdout.strip().splitlines()[:-1]
        cli_output.append("\n".join(key_stdout_before_last) + done.stderr)

        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 600}
        token = jwt.encode(claims, jwt_key, algorithm="ES256")
        forged = jwt.encode(claims, impostor_key, algorithm="ES256")
        bad_api_key = f"a2agw_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"
        garbage_key = secret("garbage-key")
        hook_url = f"http://hookuser:{push_password}@127.0.0.1:{hooks.port}/hook?token={push_query_token}"
        # two webhooks: httpx turns a URL's user:password into Basic authentication, which
        # would replace the configured credentials
        push = {"url": hook_url, "token": push_token}
        push_with_credentials = {"url": hooks.url("/authenticated"), "token": push_token,
                                 "authentication": {"scheme": "Bearer", "credentials": push_credentials}}

        process_output: list[str] = []
        answers: dict[str, httpx.Response] = {}
        async with serving("serve", cwd=tmp_path, output=process_output, A2A_GATEWAY_LOG_LEVEL="debug",
                           **env) as listening:
            base = listening[1]
            async with httpx.AsyncClient(timeout=30) as http:
                async def call(name: str, endpoint: str, body: dict[str, Any], **headers: str) -> None:
                    answers[name] = await http.post(f"{base}/{endpoint}/a2a", json=body, headers={**V10, **headers})

                keyed = {"X-API-Key": api_key}
                await call("pushed", chat, send("hello with push", push), **keyed)
                task_id = answers["pushed"].json()["result"]["task"]["id"]
                await call("backend error", chat, send("please fail", push_with_credentials), **keyed)
                await call("Hermes unreachable", hermes, send("hello hermes"))
                await call("chat unreachable", unreachable, send("hello nobody"))
                await call("no key", chat, send("no key"))
                await call("unknown key", chat, send("bad key"), **{"X-API-Key": bad_api_key})
                await call("malformed key", chat, send("garbage key"), **{"X-API-Key": garbage_key})
                await call("token for key", chat, send("a token where a key goes"), Authorization=f"Bearer {token}")
                await call("signed in", signed_in, send("signed in"), Authorization=f"Bearer {token}")
                await call("forged", signed_in, send("forged"), Authorization=f"Bearer {forged}")
                await call("key for token", signed_in, send("a key where a token goes"),
                           Authorization=f"Bearer {api_key}")
                await call("JWKS unreachable", fetched, send("keys from an unreachable JWKS"),
                           Authorization=f"Bearer {token}")
                for name, refused in (("ftp webhook", hook_url.replace("http://", "ftp://")),
                                      ("private webhook", hook_url.replace("127.0.0.1", "10.0.0.1")),
                                      ("closed webhook", hook_url.replace(f":{hooks.port}/hook", ":1/closed"))):
                    await call(name, chat, send("webhook", {"url": refused, "token": push_token}), **keyed)
                await call("GetTask", chat, rpc("GetTask", {"id": task_id}), **keyed)
                await call("ListTasks", chat, rpc("ListTasks", {}), **keyed)
                await call("unknown task", chat, rpc("GetTask", {"id": str(uuid.uuid4())}), **keyed)
                await call("unknown method", chat, rpc("NoSuchMethod", {}), **keyed)
                await call("extended card", chat, rpc("GetExtendedAgentCard", {}), **keyed)
                await hooks.wait_for("/hook", count=2)
                await hooks.wait_for("/authenticated", count=2)
                for endpoint in (chat, hermes, unreachable, signed_in, fetched):
                    answers[f"card {endpoint}"] = await http.get(f"{base}/{endpoint}/.well-known/agent-card.json")
                answers["JWKS"] = await http.get(f"{base}/.well-known/jwks.json")
                answers["REST ListTasks"] = await http.get(f"{base}/{chat}/a2a/rest/tasks", headers={**V10, **keyed})
        for endpoint in (chat, hermes, unreachable, signed_in, fetched):
            cli("endpoints", "show", endpoint)
        cli("endpoints", "list")
        cli("endpoints", "check")
        cli("keys", "list")

    # the calls did what they were meant to, so the secrets were in use
    def state(name: str) -> str:
        return answers[name].json()["result"]["task"]["status"]["state"]

    assert [state(n) for n in ("pushed", "signed in", "closed webhook")] == ["TASK_STATE_COMPLETED"] * 3
    assert [state(n) for n in ("backend error", "Hermes unreachable", "chat unreachable")] == ["TASK_STATE_FAILED"] * 3
    refused = ("no key", "unknown key", "malformed key", "token for key", "forged", "key for token",
               "JWKS unreachable")
    assert [answers[n].status_code for n in refused] == [401] * len(refused)
    assert [answers[n].json()["error"]["code"] for n in ("ftp webhook", "private webhook")] == [-32602] * 2
    assert backend.authorizations[0] == f"Bearer {chat_key}" and backend.api_keys[0] == chat_header
    headers, _ = hooks.posts_to("/authenticated")[0]
    assert headers["Authorization"] == f"Bearer {push_credentials}"
    assert headers["X-A2A-Notification-Token"] == push_token
    assert len(answers["JWKS"].json()["keys"]) == 1 and answers["REST ListTasks"].status_code == 200
    logs = "".join(process_output)
    assert "push_delivered" in logs and "chat_backend_request_failed" in logs and "jwks_fetch_failed" in logs

    secret_values = {
        "API key secret setting": env["A2A_GATEWAY_API_KEY_SECRET"],
        "caller's API key": api_key, "unknown API key": bad_api_key, "malformed API key": garbage_key,
        "JWT": token, "JWT signature": token.rsplit(".", 1)[1], "forged JWT": forged,
        "JWT signing key": pem_body(pem(jwt_key)),
        "card-signing key": card_key["d"],
        "Hermes key setting": hermes_key, "chat key setting": chat_key,
        "chat URL password": chat_url_password, "Hermes URL password": hermes_url_password, "chat header": chat_header,
        "JWKS URL password": jwks_url_password, "JWKS URL token": jwks_url_token,
        "webhook URL password": push_password, "webhook URL token": push_query_token,
        "push credentials": push_credentials, "push token": push_token,
    }
    places = {
        "process output": logs,
        "answers": "\n\n".join(written(a) for a in answers.values()),
        "CLI output": "\n\n".join(cli_output),
    }
    leaks = [f"{what} in {where}: …{text[max(0, text.index(value) - 160):text.index(value) + 40]}…"
             for what, value in secret_values.items() for where, text in places.items() if value in text]
    assert leaks == []
    assert "HTTP Request" not in logs  # httpx's line per request (URLs with their query) is quiet
