"""The ``auth`` declaration of an endpoint row: checked by the registry, ``endpoints add --auth``
and ``endpoints check``, each problem one line naming the field."""

from __future__ import annotations

import asyncio
import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from a2a_gateway.endpoints.registry import check_endpoint
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores import open_store
from a2a_gateway.stores.base import Endpoint
from tests.support.cli_process import run_cli, stored_endpoints

ECHO = ["--handler", "handlers.echo:EchoHandler"]
JWKS = "https://issuer.example/jwks.json"
_rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PUBLIC_PEM = (
    _rsa.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
)
PRIVATE_PEM = _rsa.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


def jwt_decl(**fields) -> dict:
    return {
        "jwt": {"issuer": "https://issuer.example", "audience": "gw", "jwks_url": JWKS, **fields}
    }


def row(auth) -> Endpoint:
    return Endpoint(
        id="6f1c3f3e-8f59-4f5a-9d1e-3f0b9c1d2e4f",
        name="t",
        metadata={"module_name": "handlers.echo", "class_name": "EchoHandler", "auth": auth},
    )


@pytest.mark.parametrize(
    ("auth", "problem"),
    [
        ({}, "invalid auth: declare at least one of api_key, jwt, trusted_header"),
        ([], "invalid auth: Input should be a valid dictionary"),
        ({"oauth": {}}, "invalid auth.oauth: Extra inputs are not permitted"),
        ({"jwt": {"audience": "gw", "jwks_url": JWKS}}, "invalid auth.jwt.issuer: Field required"),
        (jwt_decl(jwks_url=None), "invalid auth.jwt: give either jwks_url or keys"),
        (jwt_decl(keys=[PUBLIC_PEM]), "invalid auth.jwt: give either jwks_url or keys"),
        (jwt_decl(algorithms=["HS256"]), "invalid auth.jwt.algorithms: not accepted: HS256"),
        (jwt_decl(algorithms=["none", "RS256"]), "invalid auth.jwt.algorithms: not accepted: none"),
        (jwt_decl(algorithms=[]), "invalid auth.jwt.algorithms: not accepted: an empty list"),
        (
            jwt_decl(jwks_url="http://issuer.example/jwks"),
            "invalid auth.jwt.jwks_url: must be an https:// URL",
        ),
        (
            jwt_decl(jwks_url=None, keys=[PRIVATE_PEM]),
            "invalid auth.jwt.keys.0: a key must be a JWK, a PEM public key",
        ),
        (
            jwt_decl(jwks_url=None, keys=[{"kty": "oct", "k": "c2VjcmV0"}]),
            "invalid auth.jwt.keys.0: a JWK must be a public key",
        ),
        (
            jwt_decl(jwks_url=None, keys=["{not json"]),
            "invalid auth.jwt.keys.0: a key that starts with { must be a JWK",
        ),
        (jwt_decl(principal="sub"), "invalid auth.jwt.principal: Extra inputs are not permitted"),
        (
            {"trusted_header": {"header": ""}},
            "invalid auth.trusted_header.header: String should have at least 1 character",
        ),
    ],
)
def test_invalid_declarations_are_one_line_problems(auth, problem):
    check = check_endpoint(row(auth), GatewaySettings())
    assert len(check.problems) == 1 and check.problems[0].startswith(problem), check.problems
    assert "\n" not in check.problems[0] and PRIVATE_PEM not in check.problems[0]


def test_valid_declarations_pass_and_unset_environment_keys_are_notes(monkeypatch):
    monkeypatch.delenv("A2A_TEST_UNSET_JWT_KEY", raising=False)
    ec_pem = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
    monkeypatch.setenv("A2A_TEST_JWT_KEY", ec_pem)
    auth = {
        "api_key": {"header": "X-Key"},
        "trusted_header": {"header": "X-Forwarded-Email"},
        **jwt_decl(
            jwks_url=None,
            keys=["env:A2A_TEST_UNSET_JWT_KEY", "env:A2A_TEST_JWT_KEY", PUBLIC_PEM],
            algorithms=["RS256", "ES256"],
            tenant_claim="org",
        ),
    }
    check = check_endpoint(row(auth), GatewaySettings())
    assert check.problems == []
    assert (
        "auth.jwt.keys.0 reads the environment variable A2A_TEST_UNSET_JWT_KEY,"
        " which is not set here"
        in check.notes
    )
    assert any("A2A_GATEWAY_TRUSTED_PROXIES" in note for note in check.notes)
    trusted = check_endpoint(row(auth), GatewaySettings(trusted_proxies=["10.0.0.0/8"]))
    assert not any("TRUSTED_PROXIES" in note for note in trusted.notes)


def test_endpoints_add_takes_auth_and_refuses_a_bad_one_in_one_line(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"
    declared = jwt_decl(tenant_claim="org")
    done = run_cli(
        "endpoints", "add", "--store", store, "--name", "j", *ECHO, "--auth", json.dumps(declared)
    )
    assert done.returncode == 0, done.stderr
    endpoint_id = done.stdout.strip().splitlines()[-1]
    assert "callers need a JWT from https://issuer.example" in done.stderr
    shown = json.loads(
        run_cli("endpoints", "show", "--store", store, endpoint_id, check=True).stdout
    )
    assert shown["metadata"]["auth"] == declared
    for bad, fragment in (
        (
            '{"jwt": {"issuer": "x", "audience": "y", "jwks_url": "'
            + JWKS
            + '", "algorithms": ["HS256"]}}',
            "invalid auth.jwt.algorithms: not accepted: HS256",
        ),
        ("{not json", "--auth is not valid JSON"),
    ):
        refused = run_cli("endpoints", "add", "--store", store, "--name", "x", *ECHO, "--auth", bad)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert fragment in refused.stderr
        assert refused.stderr.strip().splitlines()[-1].startswith("a2a-gateway: ")
    assert [ep.id for ep in stored_endpoints(store)] == [endpoint_id]


def test_endpoints_check_reports_a_stored_bad_declaration(tmp_path):
    store = f"sqlite:///{tmp_path}/cli.db"

    async def write() -> None:
        opened = await open_store(store)
        try:
            await opened.create_endpoint(row({"jwt": {"issuer": "x", "audience": "y"}}))
        finally:
            await opened.aclose()

    asyncio.run(write())
    done = run_cli("endpoints", "check", "--store", store)
    assert done.returncode != 0
    assert f"{row(None).id}: invalid auth.jwt: give either jwks_url or keys" in done.stderr
