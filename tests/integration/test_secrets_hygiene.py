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

import json
import secrets
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import jwt
import orjson
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from jwt.algorithms import OKPAlgorithm

from a2a_gateway.observability.logs import drop_secrets, mask_url_credentials
from tests.support.cli_process import run_cli, serving
from tests.support.local_server import serve_locally
from tests.support.messages import rpc, send_body
from tests.support.webhooks import webhook_receiver

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
            key = authorization.removeprefix("Bearer ")
            message = f"unknown model for key {key}, headers {dict(request.headers)}"
            return web.json_response(
                {"error": {"message": message, "type": "invalid_request_error"}}, status=400
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in (
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hello"}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ):
            await response.write(
                b"data: "
                + orjson.dumps({"id": "c1", "object": "chat.completion.chunk", **chunk})
                + b"\n\n"
            )
        await response.write(b"data: [DONE]\n\n")
        return response


@asynccontextmanager
async def chat_backend() -> AsyncIterator[FakeChatBackend]:
    backend = FakeChatBackend()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", backend.completions)
    async with serve_locally(app) as base_url:
        backend.port = int(base_url.rsplit(":", 1)[1])
        yield backend


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def written(response: httpx.Response) -> str:
    """Everything the gateway sent back: status line, headers and body."""
    headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
    return f"{response.status_code}\n{headers}\n{response.text}"


def test_a_logged_url_keeps_no_credential_of_its_query():
    event = {"event": "HTTP Request: POST https://hooks.example/in?id=7&token=t0k&X-Amz-Credential=AKIA"
                      "&X-Amz-Signature=5ig&key=k3y&access_token=acc \"HTTP/1.1 204\"",
             "target": "https://u:p4ss@hooks.example/in?api_key=k3y#top"}
    masked = mask_url_credentials(None, "info", event)
    assert masked["event"] == ("HTTP Request: POST https://hooks.example/in?id=7&token=***"
                               "&X-Amz-Credential=***"
                               "&X-Amz-Signature=***&key=***&access_token=*** \"HTTP/1.1 204\"")
    assert masked["target"] == "https://***@hooks.example/in?api_key=***#top"


def test_fields_named_like_a_header_credential_are_dropped():
    event = {"event": "x", "X-Api-Key": "k", "x-auth-token": "t", "Proxy-Authorization": "p",
             "X-Route": "blue"}
    assert drop_secrets(None, "info", event) == {
        "event": "x",
        "X-Api-Key": "***",
        "x-auth-token": "***",
        "Proxy-Authorization": "***",
        "X-Route": "blue",
    }


class Secrets:
    """A distinct, greppable value for every kind of secret the gateway is given."""

    def __init__(self) -> None:
        self.api_key_secret = secret("api-key-secret")
        self.jwt_key = ec.generate_private_key(ec.SECP256R1())
        self.card_key = {**OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate(), as_dict=True),
                         "kid": "card-1"}
        self.chat_key, self.chat_header = secret("chat-key"), secret("chat-header")
        self.chat_url_password = secret("chat-url-password")
        self.hermes_key, self.hermes_url_password = (
            secret("hermes-key"),
            secret("hermes-url-password"),
        )
        self.jwks_url_password, self.jwks_url_token = (
            secret("jwks-url-password"),
            secret("jwks-url-token"),
        )
        self.hook_password, self.hook_query = secret("hook-password"), secret("hook-query")
        self.push_credentials, self.push_token = secret("push-credentials"), secret("push-token")
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 600}
        self.token = jwt.encode(claims, self.jwt_key, algorithm="ES256")
        self.forged = jwt.encode(claims, ec.generate_private_key(ec.SECP256R1()), algorithm="ES256")
        self.unknown_key = f"a2agw_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)}"
        self.malformed_key = secret("malformed-key")
        self.api_key = ""  # made by keys create

    def env(self) -> dict[str, str]:
        """The gateway's environment: the secrets it reads from there, and loopback webhooks."""
        public = self.jwt_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo)
        return {
            "A2A_GATEWAY_API_KEY_SECRET": self.api_key_secret,
            "A2A_GATEWAY_CARD_SIGNING_KEYS": '["env:HYGIENE_CARD_KEY"]',
            "HYGIENE_CARD_KEY": json.dumps(self.card_key),
            "HYGIENE_JWT_PUBLIC_KEY": public.decode(),
            "A2A_GATEWAY_PUSH_ALLOW_PRIVATE_URLS": "true",
            "A2A_GATEWAY_PUSH_RETRY_BASE_SECONDS": "0.1",
            "A2A_GATEWAY_PUSH_POLL_SECONDS": "0.1",
        }

    def hook_url(self, port: int, path: str = "/hook") -> str:
        return f"http://hookuser:{self.hook_password}@127.0.0.1:{port}{path}?token={self.hook_query}"

    def values(self) -> dict[str, str]:
        return {
            "API key secret setting": self.api_key_secret,
            "card-signing key": self.card_key["d"],
            "caller's API key": self.api_key,
            "unknown API key": self.unknown_key,
            "malformed API key": self.malformed_key,
            "JWT": self.token,
            "JWT signature": self.token.rsplit(".", 1)[1],
            "forged JWT": self.forged,
            "chat key setting": self.chat_key,
            "chat header setting": self.chat_header,
            "chat URL password": self.chat_url_password,
            "Hermes key setting": self.hermes_key,
            "Hermes URL password": self.hermes_url_password,
            "JWKS URL password": self.jwks_url_password,
            "JWKS URL token": self.jwks_url_token,
            "webhook URL password": self.hook_password,
            "webhook URL token": self.hook_query,
            "push credentials": self.push_credentials,
            "push token": self.push_token,
        }


class Cli:
    """The gateway's commands in one directory and environment; their output is kept."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env
        self.output: list[str] = []

    def __call__(self, *args: str) -> str:
        """Run a command that must succeed; its last line."""
        done = run_cli(*args, cwd=self.cwd, **self.env)
        assert done.returncode == 0, done.stderr
        self.output.append(done.stdout + done.stderr)
        return done.stdout.strip().splitlines()[-1]

    def create_key(self, endpoint: str) -> str:
        """``keys create``: the key is its last line and shows nowhere else."""
        done = run_cli("keys", "create", "--endpoint", endpoint, "--name", "hygiene", cwd=self.cwd,
                       **self.env)
        assert done.returncode == 0, done.stderr
        *before, key = done.stdout.strip().splitlines()
        assert (done.stdout + done.stderr).count(key) == 1
        self.output.append("\n".join(before) + done.stderr)
        return key


def add_endpoints(cli: Cli, s: Secrets, chat_port: int) -> dict[str, str]:
    """Endpoint ids by name: a chat bridge with its key and a header set literally, the same
    bridge and a Hermes agent at closed ports with ``user:password@`` URLs, JWT endpoints with a
    key from the environment and with an unreachable JWKS URL that carries credentials."""
    def jwt_auth(**source: Any) -> str:
        return json.dumps({"jwt": {"issuer": ISSUER, "audience": AUDIENCE, **source}})

    chat = "handlers.openai_chat:OpenAIChatHandler"
    headers = json.dumps({"X-Route": "blue", "X-Api-Key": s.chat_header})
    jwks_url = (f"http://jwks:{s.jwks_url_password}@127.0.0.1:{closed_port()}/jwks.json"
                f"?token={s.jwks_url_token}")
    return {
        "chat": cli(
            "endpoints",
            "add",
            "--name",
            "chat",
            "--handler",
            chat,
            "--set",
            f"base_url=http://127.0.0.1:{chat_port}/v1",
            "--set",
            f"api_key={s.chat_key}",
            "--set",
            f"extra_headers={headers}",
            "--card",
            json.dumps({"capabilities": {"pushNotifications": True}}),
        ),
        "unreachable chat": cli(
            "endpoints",
            "add",
            "--name",
            "unreachable chat",
            "--public",
            "--handler",
            chat,
            "--set",
            f"base_url=http://chat:{s.chat_url_password}@127.0.0.1:{closed_port()}/v1",
        ),
        "hermes": cli(
            "endpoints",
            "add",
            "--name",
            "hermes",
            "--public",
            "--handler",
            "handlers.hermes:HermesAgentHandler",
            "--set",
            f"hermes_api_url=http://hermes:{s.hermes_url_password}@127.0.0.1:{closed_port()}",
            "--set",
            f"hermes_api_key={s.hermes_key}",
        ),
        "jwt": cli(
            "endpoints",
            "add",
            "--name",
            "jwt",
            "--handler",
            "handlers.echo:EchoHandler",
            "--set",
            "delay=0",
            "--auth",
            jwt_auth(keys=["env:HYGIENE_JWT_PUBLIC_KEY"]),
        ),
        "jwks": cli(
            "endpoints",
            "add",
            "--name",
            "jwks",
            "--handler",
            "handlers.echo:EchoHandler",
            "--set",
            "delay=0",
            "--auth",
            jwt_auth(jwks_url=jwks_url),
        ),
    }


async def drive(http: httpx.AsyncClient, base: str, ids: dict[str, str], s: Secrets,
                hook_port: int) -> dict[str, httpx.Response]:
    """Good and bad calls, answers by name: tasks that complete and that fail at the backend,
    push deliveries, refused credentials and webhooks, reads, errors, cards and the JWKS."""
    answers: dict[str, httpx.Response] = {}

    async def call(name: str, endpoint: str, body: dict[str, Any], authorization: str = "",
                   api_key: str = "") -> None:
        headers = {**V10, **({"Authorization": authorization} if authorization else {}),
                   **({"X-API-Key": api_key} if api_key else {})}
        answers[name] = await http.post(f"{base}/{ids[endpoint]}/a2a", json=body, headers=headers)

    key = s.api_key
    # httpx turns a URL's user:password into Basic authentication, replacing configured
    # credentials: they go to a second webhook
    hook = s.hook_url(hook_port)
    await call(
        "pushed",
        "chat",
        send_body("hello with push", push={"url": hook, "token": s.push_token}),
        api_key=key,
    )
    authenticated = {"url": f"http://127.0.0.1:{hook_port}/authenticated", "token": s.push_token,
                     "authentication": {"scheme": "Bearer", "credentials": s.push_credentials}}
    await call("backend error", "chat", send_body("please fail", push=authenticated), api_key=key)
    await call("chat unreachable", "unreachable chat", send_body("hello nobody"))
    await call("Hermes unreachable", "hermes", send_body("hello hermes"))
    await call("no key", "chat", send_body("no key"))
    await call("unknown key", "chat", send_body("unknown key"), api_key=s.unknown_key)
    await call("malformed key", "chat", send_body("malformed key"), api_key=s.malformed_key)
    await call("token for key", "chat", send_body("a token where a key goes"), f"Bearer {s.token}")
    await call("signed in", "jwt", send_body("signed in"), f"Bearer {s.token}")
    await call("forged", "jwt", send_body("forged"), f"Bearer {s.forged}")
    await call("key for token", "jwt", send_body("a key where a token goes"), f"Bearer {key}")
    await call(
        "JWKS unreachable", "jwks", send_body("keys from an unreachable JWKS"), f"Bearer {s.token}"
    )
    for name, url in (("ftp webhook", hook.replace("http://", "ftp://")),
                      ("private webhook", hook.replace("127.0.0.1", "10.0.0.1")),
                      ("closed webhook", hook.replace(f":{hook_port}/hook", ":1/closed"))):
        await call(
            name,
            "chat",
            send_body("webhook", push={"url": url, "token": s.push_token}),
            api_key=key,
        )
    task_id = answers["pushed"].json()["result"]["task"]["id"]
    await call("GetTask", "chat", rpc("GetTask", {"id": task_id}), api_key=key)
    await call("ListTasks", "chat", rpc("ListTasks", {}), api_key=key)
    await call("unknown task", "chat", rpc("GetTask", {"id": str(uuid.uuid4())}), api_key=key)
    await call("unknown method", "chat", rpc("NoSuchMethod", {}), api_key=key)
    await call("extended card", "chat", rpc("GetExtendedAgentCard", {}), api_key=key)
    answers["REST ListTasks"] = await http.get(f"{base}/{ids['chat']}/a2a/rest/tasks",
                                               headers={**V10, "X-API-Key": key})
    for name, endpoint in ids.items():
        answers[f"card of {name}"] = await http.get(
            f"{base}/{endpoint}/.well-known/agent-card.json"
        )
    answers["JWKS"] = await http.get(f"{base}/.well-known/jwks.json")
    return answers


def state(answer: httpx.Response) -> str:
    return answer.json()["result"]["task"]["status"]["state"]


async def test_no_secret_in_logs_answers_or_cli_output(tmp_path):
    s = Secrets()
    cli = Cli(tmp_path, s.env())
    process_output: list[str] = []
    async with chat_backend() as backend, webhook_receiver() as hooks:
        ids = add_endpoints(cli, s, backend.port)
        s.api_key = cli.create_key(ids["chat"])
        async with (
            serving(
                "serve",
                cwd=tmp_path,
                output=process_output,
                A2A_GATEWAY_LOG_LEVEL="debug",
                **cli.env,
            ) as listening,
            httpx.AsyncClient(timeout=30) as http,
        ):
            answers = await drive(http, listening[1], ids, s, hooks.port)
            await hooks.wait_for("/hook", count=2)
            await hooks.wait_for("/authenticated", count=2)
    for endpoint in ids.values():
        cli("endpoints", "show", endpoint)
    cli("endpoints", "list")
    cli("endpoints", "check")
    cli("keys", "list")
    logs = "".join(process_output)

    # the calls did what they were meant to, so the secrets were in use
    completed = ("pushed", "signed in", "closed webhook")
    assert [state(answers[n]) for n in completed] == ["TASK_STATE_COMPLETED"] * 3
    failed = ("backend error", "chat unreachable", "Hermes unreachable")
    assert [state(answers[n]) for n in failed] == ["TASK_STATE_FAILED"] * 3
    refused = ("no key", "unknown key", "malformed key", "token for key", "forged", "key for token",
               "JWKS unreachable")
    assert [answers[n].status_code for n in refused] == [401] * len(refused)
    assert [answers[n].json()["error"]["code"] for n in ("ftp webhook", "private webhook")] == [
        -32602
    ] * 2
    assert (
        backend.authorizations[0] == f"Bearer {s.chat_key}" and backend.api_keys[0] == s.chat_header
    )
    headers, _ = hooks.posts_to("/authenticated")[0]
    assert headers["Authorization"] == f"Bearer {s.push_credentials}"
    assert headers["X-A2A-Notification-Token"] == s.push_token
    assert len(answers["JWKS"].json()["keys"]) == 1 and answers["REST ListTasks"].status_code == 200
    logged = ("push_delivered", "chat_backend_request_failed", "jwks_fetch_failed")
    assert all(event in logs for event in logged)

    places = {
        "process output": logs,
        "answers": "\n\n".join(f"{name}: {written(a)}" for name, a in answers.items()),
        "CLI output": "\n\n".join(cli.output),
    }
    leaks = [
        f"{what} in {where}: …{text[max(0, text.index(value) - 160) : text.index(value) + 40]}…"
        for what, value in s.values().items()
        for where, text in places.items()
        if value in text
    ]
    assert leaks == []
    assert "HTTP Request" not in logs  # httpx's line per request (URLs with their query) is quiet
