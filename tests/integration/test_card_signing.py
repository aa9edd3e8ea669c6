"""Signed agent cards (CARD-SIGN-001..004), checked with the a2a-sdk's own verifier.

Every card the gateway serves (an endpoint's, the root card of the default endpoint, the
extended card on each binding) carries a JWS made with the first configured key; the JWKS at
``/.well-known/jwks.json`` publishes every configured key, public parts only. A changed
field, or a card signed by a key no longer configured, fails verification.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client.card_resolver import A2ACardResolver, parse_agent_card
from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.types import AgentCard
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm
from jwt.api_jwk import PyJWK
from jwt.exceptions import PyJWKError

from a2a_gateway.auth.api_keys import make_key
from tests.support.cli_process import LISTENING, ROOT, cli_env, run_cli
from tests.support.harness import RunningGateway, collect, reconstruct, running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually

V10 = {"A2A-Version": "1.0"}
EXTENDED = {"capabilities": {"extendedAgentCard": True},
            "extended": {"skills": [{"id": "admin", "name": "Admin", "description": "more",
                                     "tags": ["admin"]}]}}


def es256_pem(path: Path) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(path)


def eddsa_jwk(path: Path, kid: str = "ed-1") -> str:
    jwk = OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate(), as_dict=True)
    path.write_text(json.dumps({**jwk, "kid": kid}))
    return str(path)


def jwks_verifier(jwks_url: str) -> Callable[[AgentCard], None]:
    """The a2a-sdk's verifier with keys from the gateway's JWKS (fetched per verification)."""

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        for jwk in httpx.get(jwks_url).raise_for_status().json()["keys"]:
            if jwk["kid"] == kid:
                return PyJWK(jwk)
        raise PyJWKError(f"no key {kid} in {jwks_url}")

    return create_signature_verifier(key_provider, ["ES256", "EdDSA"])


async def verify(card: AgentCard | dict[str, Any], jwks_url: str) -> None:
    """Raise unless the card (a served document or a parsed card) has a valid signature.
    The verifier fetches synchronously, so it runs beside the gateway's event loop."""
    parsed = parse_agent_card(json.loads(json.dumps(card))) if isinstance(card, dict) else card
    await asyncio.to_thread(jwks_verifier(jwks_url), parsed)


def protected_header(card: dict[str, Any]) -> dict[str, Any]:
    """The protected header the card's signatures share (one over the 1.0 card, one over its
    0.3 reading)."""
    headers = [
        json.loads(base64.urlsafe_b64decode(s["protected"] + "=" * (-len(s["protected"]) % 4)))
        for s in card["signatures"]
    ]
    assert len(headers) == 2 and headers[0] == headers[1]
    return headers[0]


async def served_card(gw: RunningGateway, path: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{gw.base_url}{path}")).raise_for_status().json()


@pytest.fixture(params=["ES256 PEM", "EdDSA JWK"])
def signing_key(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "ES256 PEM":
        return es256_pem(tmp_path / "card.pem")
    return eddsa_jwk(tmp_path / "card.jwk")


async def test_every_served_card_verifies_with_the_sdk_verifier(signing_key: str) -> None:
    async with running_gateway(card_signing_keys=[signing_key]) as gw:
        strict = await gw.add_endpoint(settings={"strict_v1_card": True}, card=EXTENDED)
        default = await gw.add_endpoint(card=EXTENDED)
        jwks_url = f"{gw.base_url}/.well-known/jwks.json"
        for endpoint_id in (strict, default):
            card = await served_card(gw, f"/{endpoint_id}/.well-known/agent-card.json")
            header = protected_header(card)
            alg = "ES256" if signing_key.endswith(".pem") else "EdDSA"
            assert header["alg"] == alg and header["typ"] == "JOSE" and header["kid"]
            assert header["jku"] == jwks_url
            await verify(card, jwks_url)
            # the SDK's card resolver, as a client discovers the endpoint
            async with httpx.AsyncClient() as http:
                resolver = A2ACardResolver(http, gw.endpoint_url(endpoint_id))
                resolved = await resolver.get_agent_card()
            await asyncio.to_thread(jwks_verifier(jwks_url), resolved)
        default_card = await served_card(gw, f"/{default}/.well-known/agent-card.json")
        assert default_card["protocolVersion"] and default_card["url"]  # the 0.3 fields too
        assert "url" not in await served_card(gw, f"/{strict}/.well-known/agent-card.json")


async def test_the_root_card_of_the_default_endpoint_is_signed(tmp_path: Path) -> None:
    default = "5c0ac3a2-1a53-4d0a-9f64-93a7fd1a4a51"
    async with running_gateway(card_signing_keys=[es256_pem(tmp_path / "k.pem")],
                               default_endpoint=default) as gw:
        await gw.add_endpoint(endpoint_id=default)
        card = await served_card(gw, "/.well-known/agent-card.json")
        assert card["url"].endswith(f"/{default}/a2a")
        await verify(card, f"{gw.base_url}/.well-known/jwks.json")


async def test_a_card_with_one_field_changed_fails_verification(signing_key: str) -> None:
    async with running_gateway(card_signing_keys=[signing_key]) as gw:
        endpoint_id = await gw.add_endpoint(card={"skills": [
            {"id": "s", "name": "Skill", "description": "does things", "tags": ["t"]}]})
        jwks_url = f"{gw.base_url}/.well-known/jwks.json"
        card = await served_card(gw, f"/{endpoint_id}/.well-known/agent-card.json")
        await verify(card, jwks_url)
        tampered = [
            {**card, "description": card["description"] + "!"},
            {**card, "skills": [{**card["skills"][0], "description": "does other things"}]},
            {**card, "supportedInterfaces": [
                {**i, "url": i["url"].replace("127.0.0.1", "evil.example")}
                for i in card["supportedInterfaces"]]},
        ]
        for changed in tampered:
            with pytest.raises(InvalidSignaturesError):
                await verify(changed, jwks_url)


async def test_extended_cards_are_signed_on_every_binding(signing_key: str) -> None:
    async with running_gateway(
        card_signing_keys=[signing_key],
        allow_unauthenticated_endpoints=False,
        api_key_cache_seconds=0,
    ) as gw:
        endpoint_id = await gw.add_endpoint(card=EXTENDED)
        secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
        row, key = make_key(secret, endpoint_id=endpoint_id, tenant="default")
        await gw.store.create_api_key(row)
        jwks_url = f"{gw.base_url}/.well-known/jwks.json"
        auth = {"X-API-Key": key}
        async with httpx.AsyncClient() as http:
            rest = await http.get(f"{gw.rest_url(endpoint_id)}/extendedAgentCard",
                                  headers={**V10, **auth})
            v10 = await http.post(gw.jsonrpc_url(endpoint_id), headers={**V10, **auth}, json={
                "jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}})
            v03 = await http.post(gw.jsonrpc_url(endpoint_id), headers=auth, json={
                "jsonrpc": "2.0", "id": 2, "method": "agent/getAuthenticatedExtendedCard"})
        for card in (rest.raise_for_status().json(), v10.json()["result"]):
            assert "admin" in [s["id"] for s in card["skills"]]  # the extended card's own
            assert protected_header(card)["jku"] == jwks_url
            await verify(card, jwks_url)
        # a 0.3 client reads the 0.3 form back into a 1.0 card, as the a2a-sdk does
        compat = types_v03.AgentCard.model_validate(v03.json()["result"])
        await verify(conversions.to_core_agent_card(compat), jwks_url)


async def test_rotation_keeps_old_cards_valid_until_the_old_key_is_retired(tmp_path: Path) -> None:
    old, new = es256_pem(tmp_path / "old.pem"), eddsa_jwk(tmp_path / "new.jwk")

    async def card_and_jwks(keys: list[str]) -> tuple[dict[str, Any], str]:
        async with running_gateway(card_signing_keys=keys) as gw:
            endpoint_id = await gw.add_endpoint()
            card = await served_card(gw, f"/{endpoint_id}/.well-known/agent-card.json")
            jwks = await served_card(gw, "/.well-known/jwks.json")
        return card, jwks

    old_card, old_jwks = await card_and_jwks([old])
    new_card, rotated_jwks = await card_and_jwks([new, old])
    assert protected_header(new_card)["kid"] == "ed-1"  # the first key signs
    assert [k["kid"] for k in rotated_jwks["keys"]] == ["ed-1", old_jwks["keys"][0]["kid"]]
    async with running_gateway(card_signing_keys=[new, old]) as rotated:
        for card in (old_card, new_card):
            await verify(card, f"{rotated.base_url}/.well-known/jwks.json")
    async with running_gateway(card_signing_keys=[new]) as retired:
        jwks_url = f"{retired.base_url}/.well-known/jwks.json"
        await verify(new_card, jwks_url)
        with pytest.raises(InvalidSignaturesError):
            await verify(old_card, jwks_url)


async def test_a_retiring_key_may_be_configured_as_its_public_key_only(tmp_path: Path) -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    public_pem = tmp_path / "old.pub.pem"
    public_pem.write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    new = eddsa_jwk(tmp_path / "new.jwk")
    async with running_gateway(card_signing_keys=[new, str(public_pem)]) as gw:
        jwks = await served_card(gw, "/.well-known/jwks.json")
    assert [k["kty"] for k in jwks["keys"]] == ["OKP", "EC"]
    public_first = run_cli("serve", "--store", "memory://",
                           A2A_GATEWAY_CARD_SIGNING_KEYS=json.dumps([str(public_pem)]))
    assert public_first.returncode == 1
    assert "is a public key: the first key signs and must be private" in public_first.stderr


async def test_the_jwks_holds_public_keys_only_with_card_cache_headers(tmp_path: Path) -> None:
    keys = [es256_pem(tmp_path / "a.pem"), eddsa_jwk(tmp_path / "b.jwk")]
    async with running_gateway(card_signing_keys=keys, card_max_age_seconds=123) as gw:
        async with httpx.AsyncClient() as http:
            first = await http.get(f"{gw.base_url}/.well-known/jwks.json")
            again = await http.get(f"{gw.base_url}/.well-known/jwks.json",
                                   headers={"If-None-Match": first.headers["ETag"]})
    assert first.status_code == 200 and first.headers["Cache-Control"] == "public, max-age=123"
    assert again.status_code == 304
    jwks = first.json()
    assert len(jwks["keys"]) == 2
    for jwk in jwks["keys"]:
        assert not {"d", "p", "q", "dp", "dq", "qi", "k"} & set(jwk)
        assert jwk["use"] == "sig" and jwk["alg"] in {"ES256", "EdDSA"}
    assert {k["kty"] for k in jwks["keys"]} == {"EC", "OKP"}


async def test_without_keys_cards_are_unsigned_and_there_is_no_jwks() -> None:
    async with running_gateway() as gw:
        endpoint_id = await gw.add_endpoint()
        card = await served_card(gw, f"/{endpoint_id}/.well-known/agent-card.json")
        async with httpx.AsyncClient() as http:
            jwks = await http.get(f"{gw.base_url}/.well-known/jwks.json")
    assert "signatures" not in card
    assert jwks.status_code == 404


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_the_sdk_client_discovers_and_talks_to_a_signed_endpoint(
    tmp_path: Path, version: str
) -> None:
    async with running_gateway(card_signing_keys=[es256_pem(tmp_path / "k.pem")]) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0.0})
        assert (await gw.card(endpoint_id)).signatures
        async with gw.client(endpoint_id, version=version) as client:
            events = await collect(client.send_message(send_request("hello signed")))
    assert "hello signed" in "".join(reconstruct(events).values())


async def test_the_card_is_signed_once_per_cached_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_gateway(card_signing_keys=[es256_pem(tmp_path / "k.pem")]) as gw:
        endpoint_id = await gw.add_endpoint()
        signed: list[str] = []
        sign = gw.gateway.card_signer.sign

        def counting(card: AgentCard, base_url: str) -> AgentCard:
            signed.append(base_url)
            return sign(card, base_url)

        monkeypatch.setattr(gw.gateway.card_signer, "sign", counting)
        bodies = {json.dumps(await served_card(gw, f"/{endpoint_id}/.well-known/agent-card.json"))
                  for _ in range(3)}
    assert len(signed) == 1 and len(bodies) == 1


# -- bad keys: one line at startup, and a key never printed --------------------------------------


def written(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def pkcs8(key: Any, encryption: Any = None) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption or serialization.NoEncryption())


BAD_KEYS: dict[str, tuple[Callable[[Path], str], str]] = {
    "missing file": (lambda d: str(d / "absent.pem"), "cannot be read: no such file or directory"),
    "a directory": (str, "cannot be read: is a directory"),
    "not a key": (lambda d: written(d / "k.pem", b"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n"
                                                  b"-----END PRIVATE KEY-----\n"),
                  "is not a PEM or JWK key"),
    "not JSON": (lambda d: written(d / "k.jwk", b"{nope"), "is not a PEM or JWK key"),
    "RSA": (lambda d: written(d / "k.pem", pkcs8(rsa.generate_private_key(65537, 2048))),
            "unsupported algorithm (RSAPrivateKey)"),
    "EC P-384": (lambda d: written(d / "k.jwk", json.dumps(ECAlgorithm.to_jwk(
                     ec.generate_private_key(ec.SECP384R1()), as_dict=True)).encode()),
                 "unsupported algorithm (EC secp384r1)"),
    "encrypted": (lambda d: written(d / "k.pem", pkcs8(ec.generate_private_key(ec.SECP256R1()),
                                                       serialization.BestAvailableEncryption(b"pw"))),
                  "encrypted PEM key"),
}


@pytest.mark.parametrize("case", BAD_KEYS)
def test_a_bad_signing_key_is_one_line_at_startup_without_the_key(
    tmp_path: Path, case: str
) -> None:
    make, expected = BAD_KEYS[case]
    entry = make(tmp_path)
    done = run_cli(
        "serve", "--store", "memory://", A2A_GATEWAY_CARD_SIGNING_KEYS=json.dumps([entry])
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stdout == ""
    assert done.stderr.startswith(f"a2a-gateway: card signing key 1 (file {entry})")
    assert expected in done.stderr
    if Path(entry).is_file():
        assert_no_key_material(Path(entry).read_text(), done.stderr)


def test_key_material_in_place_of_a_file_name_is_refused_without_echo(tmp_path: Path) -> None:
    pem = Path(es256_pem(tmp_path / "k.pem")).read_text()
    for entry in (pem, Path(eddsa_jwk(tmp_path / "k.jwk")).read_text()):
        done = run_cli(
            "serve", "--store", "memory://", A2A_GATEWAY_CARD_SIGNING_KEYS=json.dumps([entry])
        )
        assert done.returncode == 1 and done.stderr.count("\n") == 1
        assert "is not a file name or env:NAME" in done.stderr
        assert_no_key_material(entry, done.stderr)


def test_an_unset_key_variable_is_one_line(tmp_path: Path) -> None:
    done = run_cli("serve", "--store", "memory://",
                   A2A_GATEWAY_CARD_SIGNING_KEYS='["env:CARD_KEY_NOT_SET"]')
    assert done.returncode == 1
    assert done.stderr == ("a2a-gateway: card signing key 1 (env:CARD_KEY_NOT_SET): "
                           "environment variable CARD_KEY_NOT_SET is not set\n")


def assert_no_key_material(key_text: str, output: str) -> None:
    try:
        secrets = [json.loads(key_text)["d"]]
    except (ValueError, KeyError, TypeError):
        secrets = [line for line in key_text.splitlines() if line and not line.startswith("-----")]
    for secret in secrets:
        assert secret not in output


async def test_a_key_from_the_environment_signs_and_never_reaches_the_logs(tmp_path: Path) -> None:
    pem = Path(es256_pem(tmp_path / "k.pem")).read_text()
    log = tmp_path / "gateway.log"
    env = cli_env(CARD_KEY=pem, A2A_GATEWAY_CARD_SIGNING_KEYS='["env:CARD_KEY"]',
                  A2A_GATEWAY_LOG_LEVEL="debug")
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "a2a_gateway", "demo", "--store", "memory://", "--port", "0",
            cwd=ROOT, env=env, stdout=out, stderr=out)
        try:
            def listening() -> re.Match[str] | None:
                assert proc.returncode is None, log.read_text()
                return LISTENING.search(log.read_text())

            base = (await eventually(listening, interval=0.1, what="the gateway listens")).group(1)
            async with httpx.AsyncClient() as http:
                card = (await http.get(f"{base}/00000000-0000-4000-8000-00000000ec40"
                                       "/.well-known/agent-card.json")).json()
                await http.get(f"{base}/.well-known/jwks.json")
                await http.get(f"{base}/nowhere/.well-known/agent-card.json")
            await verify(card, f"{base}/.well-known/jwks.json")
        finally:
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(20):
                await proc.wait()
    output = log.read_text()
    assert "listening on" in output
    assert_no_key_material(pem, output)
