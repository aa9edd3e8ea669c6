"""Bearer JWTs and a trusted proxy's identity header, through a running gateway.

Tokens are signed with keys made here and published by a local JWKS server (an aiohttp app
on 127.0.0.1); the gateway fetches it with its own HTTP client. Refused tokens answer 401
with RFC 6750's ``invalid_token`` challenge and the request's id, and create nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from a2a_gateway.auth.api_keys import make_key
from a2a_gateway.stores.base import Scope, TaskQuery
from tests.support.harness import RunningGateway, running_gateway
from tests.support.local_server import serve_locally
from tests.support.messages import rpc, send_body, send_params
from tests.support.waiting import eventually

V10 = {"A2A-Version": "1.0"}
ISSUER = "https://issuer.example"
AUDIENCE = "a2a-gateway"


class SigningKey:
    """A private key and the public JWK a JWKS would publish for it."""

    def __init__(self, kid: str, kind: str = "RSA") -> None:
        self.kid = kid
        if kind == "RSA":
            self.private, self.alg = (
                rsa.generate_private_key(public_exponent=65537, key_size=2048),
                "RS256",
            )
            algorithm = jwt.algorithms.RSAAlgorithm
        elif kind == "EC":
            self.private, self.alg = ec.generate_private_key(ec.SECP256R1()), "ES256"
            algorithm = jwt.algorithms.ECAlgorithm
        else:
            self.private, self.alg = ed25519.Ed25519PrivateKey.generate(), "EdDSA"
            algorithm = jwt.algorithms.OKPAlgorithm
        self.jwk = {
            **json.loads(algorithm.to_jwk(self.private.public_key())),
            "kid": kid,
            "use": "sig",
        }
        self.pem = (
            self.private.public_key()
            .public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )

    def token(
        self,
        sub: str = "alice",
        *,
        kid: str | None = "same",
        headers: dict | None = None,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": sub,
            "iat": now,
            "exp": now + 300,
            **claims,
        }
        payload = {k: v for k, v in payload.items() if v is not None}
        extra = {"kid": self.kid if kid == "same" else kid} if kid is not None else {}
        return jwt.encode(
            payload, self.private, algorithm=self.alg, headers={**extra, **(headers or {})}
        )


def hs256_with(secret: bytes, payload: dict, kid: str) -> str:
    """An HS256 token keyed with ``secret`` (PyJWT refuses to make one with a PEM key)."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = f"{b64(json.dumps({'alg': 'HS256', 'typ': 'JWT', 'kid': kid}).encode())}." \
                    f"{b64(json.dumps(payload).encode())}"
    return (
        f"{signing_input}.{b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())}"
    )


class JwksServer:
    """Publishes ``keys`` at ``url`` and counts the fetches."""

    def __init__(self) -> None:
        self.keys: list[SigningKey] = []
        self.fetches = 0
        self.url = ""

    async def serve(self, request: web.Request) -> web.Response:
        self.fetches += 1
        return web.json_response({"keys": [k.jwk for k in self.keys]})


@pytest.fixture
async def jwks() -> AsyncIterator[JwksServer]:
    server = JwksServer()
    app = web.Application()
    app.router.add_get("/jwks.json", server.serve)
    async with serve_locally(app) as base_url:
        server.url = f"{base_url}/jwks.json"
        yield server


GATEWAY = {
    "allow_unauthenticated_endpoints": False,
    "trusted_proxies": ["127.0.0.1"],
    "api_key_cache_seconds": 0,
}


@pytest.fixture
async def gw() -> AsyncIterator[RunningGateway]:
    async with running_gateway(**GATEWAY, jwks_refresh_seconds=3.0) as running:
        yield running


@pytest.fixture
async def quick_refresh_gw() -> AsyncIterator[RunningGateway]:
    """``gw`` fetching a JWKS again after 1 s instead of 3 s, for a test that waits that out."""
    async with running_gateway(**GATEWAY, jwks_refresh_seconds=1.0) as running:
        yield running


def jwt_auth(jwks_url: str | None = None, **options: Any) -> dict:
    source = {"jwks_url": jwks_url} if jwks_url else {}
    return {"jwt": {"issuer": ISSUER, "audience": AUDIENCE, **source, **options}}


async def post(
    url: str, body: dict, token: str | None = None, headers: dict | None = None
) -> httpx.Response:
    sent = {**V10, **({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(url, json=body, headers=sent)


async def test_a_token_names_the_caller_and_two_subjects_do_not_see_each_others_tasks(gw, jwks):
    key = SigningKey("k1")
    jwks.keys = [key]
    endpoint = await gw.add_endpoint(settings={"delay": 0, "auth": jwt_auth(jwks.url)})
    url, rest = gw.jsonrpc_url(endpoint), gw.rest_url(endpoint)
    alice, alice_again, bob = key.token("alice"), key.token("alice", jti="2"), key.token("bob")
    task = (await post(url, send_body("private ?input"), alice)).json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    bobs_get = await post(url, rpc("GetTask", {"id": task["id"]}), bob)
    assert bobs_get.json()["error"]["code"] == -32001
    assert (await post(url, rpc("ListTasks"), bob)).json()["result"]["tasks"] == []
    assert (await post(url, send_body("answer", taskId=task["id"]), bob)).json()["error"][
        "code"
    ] == -32001
    async with httpx.AsyncClient(timeout=30) as http:
        bobs_rest = await http.get(
            f"{rest}/tasks/{task['id']}", headers={**V10, "Authorization": f"Bearer {bob}"}
        )
        alices_rest = await http.get(
            f"{rest}/tasks/{task['id']}", headers={**V10, "Authorization": f"Bearer {alice}"}
        )
        async with http.stream(
            "POST",
            url,
            json=send_body("streamed", method="SendStreamingMessage"),
            headers={**V10, "Authorization": f"Bearer {alice}"},
        ) as stream:
            streamed = (await stream.aread()).decode()
    assert bobs_rest.status_code == 404 and alices_rest.status_code == 200
    assert "TASK_STATE_COMPLETED" in streamed

    mine = (await post(url, rpc("ListTasks"), alice_again)).json()["result"]["tasks"]
    assert len(mine) == 2 and task["id"] in [t["id"] for t in mine]  # the sent and the streamed one
    assert "private" not in bobs_get.text
    assert jwks.fetches == 1  # cached


async def test_refused_tokens_are_401_with_the_invalid_token_challenge_and_create_nothing(gw, jwks):
    key, stranger = SigningKey("k1"), SigningKey("k1")  # the stranger reuses the published kid
    jwks.keys = [key]
    endpoint = await gw.add_endpoint(
        settings={"delay": 0, "auth": jwt_auth(jwks.url, algorithms=["RS256"])}
    )
    url, rest = gw.jsonrpc_url(endpoint), gw.rest_url(endpoint)
    now = int(time.time())
    public_pem = key.pem.encode()
    refused = {
        "expired": (key.token(exp=now - 120), "expired"),
        "not yet valid": (key.token(nbf=now + 600), "not valid yet"),
        "issued in the future": (key.token(iat=now + 600), "not valid yet"),
        "wrong issuer": (key.token(iss="https://elsewhere.example"), "another issuer"),
        "wrong audience": (key.token(aud="someone-else"), "another audience"),
        "no exp": (key.token(exp=None), "required claim"),
        "no sub": (key.token(sub=None), "no sub claim"),
        "alg none": (
            jwt.encode(
                {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now + 300},
                None,
                algorithm="none",
                headers={"kid": "k1"},
            ),
            "not accepted",
        ),
        "HS256 keyed with the public key": (
            hs256_with(
                public_pem, {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now + 300}, "k1"
            ),
            "not accepted",
        ),
        "signed by another key": (stranger.token(), "signature is not valid"),
        "ES256 where RS256 is configured": (SigningKey("k1", "EC").token(), "not accepted"),
        "not a JWT": ("not-a-jwt", "not a JWT"),
    }
    for case, (token, reason) in refused.items():
        answer = await post(url, send_body("should not exist"), token)
        assert answer.status_code == 401, (case, answer.text)
        challenge = answer.headers["WWW-Authenticate"]
        assert challenge.startswith('Bearer realm="a2a-gateway", error="invalid_token"'), (
            case,
            challenge,
        )
        body = answer.json()
        assert (
            body["id"] == "req-1"
            and body["error"]["code"] == -32600
            and reason in body["error"]["message"]
        ), (case, body)
        assert token not in answer.text
    async with httpx.AsyncClient(timeout=30) as http:
        rest_answer = await http.post(
            f"{rest}/message:send",
            json=send_params(),
            headers={**V10, "Authorization": f"Bearer {key.token(exp=now - 120)}"},
        )
    assert (
        rest_answer.status_code == 401
        and rest_answer.json()["error"]["status"] == "UNAUTHENTICATED"
    )
    missing = await post(url, send_body())
    assert missing.status_code == 401 and "error=" not in missing.headers["WWW-Authenticate"]
    assert "a JWT from https://issuer.example" in missing.json()["error"]["message"]
    listed = await post(url, rpc("ListTasks"), key.token("alice"))
    assert listed.json()["result"]["tasks"] == []


async def test_a_rotated_key_is_fetched_and_an_unknown_kid_is_refused_after_a_rate_limited_refresh(
    quick_refresh_gw, jwks
):
    gw = quick_refresh_gw
    old, new = SigningKey("2026-01"), SigningKey("2026-02")
    jwks.keys = [old]
    endpoint = await gw.add_endpoint(settings={"delay": 0, "auth": jwt_auth(jwks.url)})
    url = gw.jsonrpc_url(endpoint)
    assert (await post(url, rpc("ListTasks"), old.token())).status_code == 200
    assert jwks.fetches == 1

    jwks.keys = [old, new]  # the issuer rotates: the new key is published
    # refused until jwks_refresh_seconds have passed since the last fetch, then fetched once
    await eventually(lambda: post(url, rpc("ListTasks"), new.token()), interval=0.2,
                     until=lambda answer: answer.status_code == 200, what="the new key is fetched")
    assert jwks.fetches == 2
    assert (await post(url, rpc("ListTasks"), old.token())).status_code == 200  # both known now

    made_up = SigningKey("made-up")
    answers = []

    async def unknown_kid() -> int:
        answers.append(await post(url, rpc("ListTasks"), made_up.token()))
        return jwks.fetches

    # fetched once more for the unknown kid, once jwks_refresh_seconds have passed again
    await eventually(unknown_kid, until=lambda fetches: fetches == 3, interval=0.2,
                     what="the unknown kid is looked up")
    assert {a.status_code for a in answers} == {401}  # still unknown
    assert "no key of the issuer matches" in answers[-1].json()["error"]["message"]
    assert jwks.fetches == 3
    # how often an unknown kid may fetch is tested with a clock in tests/unit/test_jwks_cache.py


async def test_static_keys_from_the_environment_and_inline_jwks(gw, monkeypatch):
    ec_key, ed_key, rsa_key = SigningKey("ec", "EC"), SigningKey("ed", "OKP"), SigningKey("rsa")
    monkeypatch.setenv("TEST_JWT_PUBLIC_KEY", ec_key.pem)
    endpoint = await gw.add_endpoint(settings={"delay": 0, "auth": jwt_auth(
        keys=["env:TEST_JWT_PUBLIC_KEY", ed_key.jwk], algorithms=["ES256", "EdDSA"])})
    url = gw.jsonrpc_url(endpoint)
    assert (await post(url, rpc("ListTasks"), ec_key.token(kid=None))).status_code == 200
    assert (await post(url, rpc("ListTasks"), ed_key.token())).status_code == 200
    assert (await post(url, rpc("ListTasks"), rsa_key.token())).status_code == 401


async def test_principal_and_tenant_come_from_the_configured_claims(gw, jwks):
    key = SigningKey("k1")
    jwks.keys = [key]
    endpoint = await gw.add_endpoint(settings={"delay": 0, "auth": jwt_auth(
        jwks.url, principal_claim="email", tenant_claim="org")})
    url = gw.jsonrpc_url(endpoint)
    carol_a = key.token("x", email="carol@example.com", org="org-a")
    carol_b = key.token("y", email="carol@example.com", org="org-b")
    dave_a = key.token("z", email="dave@example.com", org="org-a")
    task = (await post(url, send_body(), carol_a)).json()["result"]["task"]
    assert (
        await post(
            url,
            rpc("GetTask", {"id": task["id"]}),
            key.token("other-sub", email="carol@example.com", org="org-a"),
        )
    ).status_code == 200
    for stranger in (carol_b, dave_a):
        assert (await post(url, rpc("GetTask", {"id": task["id"]}), stranger)).json()["error"][
            "code"
        ] == -32001
    stored = await gw.store.get_task(Scope("org-a", endpoint, "carol@example.com"), task["id"])
    assert stored is not None
    no_tenant = await post(url, rpc("ListTasks"), key.token("x", email="carol@example.com"))
    assert no_tenant.status_code == 401 and "no org claim" in no_tenant.json()["error"]["message"]


async def test_credentials_of_another_endpoint_are_refused(gw, jwks):
    key = SigningKey("k1")
    jwks.keys = [key]
    first = await gw.add_endpoint(settings={"delay": 0, "auth": jwt_auth(jwks.url)})
    second = await gw.add_endpoint(settings={"delay": 0, "auth": {
        "jwt": {"issuer": ISSUER, "audience": "second", "jwks_url": jwks.url}, "api_key": {}}})
    keys_only = await gw.add_endpoint(settings={"delay": 0})
    secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
    row, first_key = make_key(secret, endpoint_id=first, tenant="default", principal="alice")
    await gw.store.create_api_key(row)
    token = key.token("alice")
    assert (await post(gw.jsonrpc_url(first), rpc("ListTasks"), token)).status_code == 200
    for_second = await post(gw.jsonrpc_url(second), rpc("ListTasks"), token)
    assert for_second.status_code == 401 and "another audience" in for_second.text
    assert (await post(gw.jsonrpc_url(second), rpc("ListTasks"), first_key)).status_code == 401
    # a JWT-only endpoint takes no API keys; a key-only endpoint reads a JWT as a (bad) key
    no_keys = await post(gw.jsonrpc_url(first), rpc("ListTasks"), first_key)
    assert no_keys.status_code == 401 and "takes no API keys" in no_keys.text
    assert (await post(gw.jsonrpc_url(keys_only), rpc("ListTasks"), token)).status_code == 401


async def test_the_trusted_header_is_taken_only_from_a_configured_proxy_address(gw):
    endpoint = await gw.add_endpoint(
        settings={"delay": 0, "auth": {"trusted_header": {"header": "X-Forwarded-Email"}}}
    )
    url = gw.jsonrpc_url(endpoint)
    proxy = httpx.AsyncClient(timeout=30)  # from 127.0.0.1, the configured proxy
    elsewhere = httpx.AsyncClient(
        timeout=30, transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    )
    async with proxy, elsewhere:
        def as_user(client: httpx.AsyncClient, body: dict, user: str | None, **extra: str) -> Any:
            headers = {**V10, **({"X-Forwarded-Email": user} if user else {}), **extra}
            return client.post(url, json=body, headers=headers)

        task = (await as_user(proxy, send_body(), "erin@example.com")).json()["result"]["task"]
        assert (
            await as_user(proxy, rpc("GetTask", {"id": task["id"]}), "erin@example.com")
        ).status_code == 200
        frank = await as_user(proxy, rpc("GetTask", {"id": task["id"]}), "frank@example.com")
        assert frank.json()["error"]["code"] == -32001
        assert (await as_user(proxy, rpc("ListTasks"), None)).status_code == 401

        spoofed = [
            await as_user(elsewhere, rpc("GetTask", {"id": task["id"]}), "erin@example.com"),
            await as_user(elsewhere, rpc("GetTask", {"id": task["id"]}), "erin@example.com",
                          **{"X-Forwarded-For": "127.0.0.1", "X-Real-IP": "127.0.0.1"}),
            await as_user(elsewhere, send_body(), "erin@example.com"),
        ]
    for answer in spoofed:
        assert answer.status_code == 401 and answer.json()["id"] == "req-1", answer.text
    assert (
        len(
            (
                await gw.store.list_tasks(
                    Scope("default", endpoint, "erin@example.com"), TaskQuery(page_size=50)
                )
            ).tasks
        )
        == 1
    )


async def test_without_trusted_proxies_the_header_is_ignored():
    async with running_gateway(allow_unauthenticated_endpoints=False) as gw:
        endpoint = await gw.add_endpoint(settings={"delay": 0, "auth": {"trusted_header": {}}})
        answer = await post(
            gw.jsonrpc_url(endpoint), rpc("ListTasks"), headers={"X-Forwarded-User": "erin"}
        )
    assert answer.status_code == 401


CARD_CASES = [
    # (auth declaration, public, schemes advertised, requirements)
    (None, False, {"apiKey", "bearer"}, [["apiKey"], ["bearer"]]),
    (None, True, set(), []),
    ({"jwt": "…"}, False, {"jwt"}, [["jwt"]]),
    (
        {"jwt": "…", "api_key": {"header": "X-Key"}},
        False,
        {"apiKey", "bearer", "jwt"},
        [["apiKey"], ["bearer"], ["jwt"]],
    ),
    ({"trusted_header": {}}, False, {"proxy"}, [["proxy"]]),
    (
        {"jwt": "…", "trusted_header": {"header": "x-amzn-oidc-identity"}},
        False,
        {"jwt", "proxy"},
        [["jwt"], ["proxy"]],
    ),
    ({"jwt": "…"}, True, {"jwt"}, []),
]


@pytest.mark.parametrize(("declaration", "public", "schemes", "requirements"), CARD_CASES)
async def test_the_card_advertises_each_accepted_scheme_as_an_alternative(
    gw, declaration, public, schemes, requirements
):
    settings: dict[str, Any] = {"delay": 0, "public": public}
    if declaration is not None:
        settings["auth"] = {
            **declaration,
            **(jwt_auth("https://issuer.example/jwks") if "jwt" in declaration else {}),
        }
    endpoint = await gw.add_endpoint(settings=settings)
    async with httpx.AsyncClient(timeout=30) as http:
        card = (await http.get(f"{gw.endpoint_url(endpoint)}/.well-known/agent-card.json")).json()
    advertised = card.get("securitySchemes", {})
    assert set(advertised) == schemes
    assert [sorted(r["schemes"]) for r in card.get("securityRequirements", [])] == requirements
    assert [sorted(r) for r in card.get("security", [])] == requirements  # the 0.3 form
    if "jwt" in schemes:
        assert advertised["jwt"]["httpAuthSecurityScheme"] == {
            "scheme": "Bearer", "bearerFormat": "JWT", "description": "a JWT issued by https://issuer.example"}
    if "proxy" in schemes:
        header = (declaration["trusted_header"] or {}).get("header", "X-Forwarded-User")
        assert advertised["proxy"]["apiKeySecurityScheme"]["name"] == header
    if declaration and "api_key" in declaration:
        assert advertised["apiKey"]["apiKeySecurityScheme"]["name"] == "X-Key"
    sdk_card = await gw.card(endpoint)  # the a2a-sdk reads it
    assert set(sdk_card.security_schemes) == schemes


EXTENDED = {"capabilities": {"extendedAgentCard": True}, "extended": {"skills": [
    {"id": "vip", "name": "VIP", "description": "only in the extended card", "tags": ["x"]}]}}


async def test_the_extended_card_is_served_only_to_authenticated_callers(gw, jwks):
    key = SigningKey("k1")
    jwks.keys = [key]
    private = await gw.add_endpoint(
        settings={"delay": 0, "auth": jwt_auth(jwks.url)}, card=EXTENDED
    )
    public = await gw.add_endpoint(
        settings={"delay": 0, "public": True, "auth": jwt_auth(jwks.url)}, card=EXTENDED
    )
    token = key.token("alice")

    async def fetch_all(endpoint: str, token: str | None) -> list[httpx.Response]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(timeout=30) as http:
            return [
                await http.post(
                    gw.jsonrpc_url(endpoint),
                    json=rpc("GetExtendedAgentCard", rid=7),
                    headers={**V10, **headers},
                ),
                await http.get(
                    f"{gw.rest_url(endpoint)}/extendedAgentCard", headers={**V10, **headers}
                ),
                await http.post(
                    gw.jsonrpc_url(endpoint),
                    json=rpc("agent/getAuthenticatedExtendedCard", rid=7),
                    headers=headers,
                ),
            ]

    for endpoint in (private, public):
        served = await fetch_all(endpoint, token)
        assert [s["id"] for s in served[0].json()["result"]["skills"]] == ["vip"]
        assert "vip" in [s["id"] for s in served[1].json()["skills"]]
        assert "vip" in [s["id"] for s in served[2].json()["result"]["skills"]]
    without = await fetch_all(private, None)
    assert [r.status_code for r in without] == [401, 401, 401]
    assert without[0].json()["id"] == 7
    anonymous = await fetch_all(public, None)
    assert anonymous[0].json()["id"] == 7 and anonymous[0].json()["error"]["code"] == -32007
    assert (
        anonymous[1].status_code == 400
        and "EXTENDED_AGENT_CARD_NOT_CONFIGURED" in anonymous[1].text
    )
    assert anonymous[2].json()["error"]["code"] == -32007
    assert all("vip" not in r.text for r in without + anonymous)

    declared_only = await gw.add_endpoint(
        settings={"delay": 0}, card={"capabilities": {"extendedAgentCard": True}}
    )
    async with httpx.AsyncClient(timeout=30) as http:
        cards = {ep: (await http.get(f"{gw.endpoint_url(ep)}/.well-known/agent-card.json")).json()
                 for ep in (private, declared_only)}
    assert cards[private]["capabilities"]["extendedAgentCard"] is True
    assert cards[private]["supportsAuthenticatedExtendedCard"] is True
    assert not cards[declared_only]["capabilities"].get("extendedAgentCard")  # none configured
    assert "supportsAuthenticatedExtendedCard" not in cards[declared_only]


async def test_an_unreachable_or_broken_jwks_refuses_tokens_with_401_never_500(gw, jwks):
    key = SigningKey("k1")
    closed = await gw.add_endpoint(settings={"delay": 0, "auth": jwt_auth("http://127.0.0.1:9/jwks.json")})
    broken = await gw.add_endpoint(
        settings={"delay": 0, "auth": jwt_auth(jwks.url.replace("jwks.json", "nothing"))}
    )
    for endpoint in (closed, broken):
        answer = await post(gw.jsonrpc_url(endpoint), rpc("ListTasks"), key.token())
        assert answer.status_code == 401 and answer.json()["id"] == "req-1"
        assert "cannot be fetched now" in answer.json()["error"]["message"]
