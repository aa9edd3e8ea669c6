"""The agent catalog (``/.well-known/ai-catalog.json``, ``/agents``) through a running gateway,
on every store.

The gateway takes no anonymous calls but on ``public`` rows. Its endpoints: a public one with
skills, one public but kept out of the catalog, one public but disabled, one public whose
handler cannot be loaded, one public whose ``catalog`` flag is not a boolean, one behind API
keys (the caller holds a key), another behind API keys (the caller holds none), one behind
JWTs of an issuer whose public key is in the row and one behind the identity header of a
trusted proxy (the test's own address).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from a2a_gateway.auth.api_keys import make_key
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.harness import RunningGateway, running_gateway

CATALOG = "/.well-known/ai-catalog.json"
AGENTS = "/agents"
OPERATOR_KEY = "op-" + uuid.uuid4().hex
ISSUER = "https://issuer.example"
AUDIENCE = "catalog-test"
AN_HOUR = 3600
SKILLS = [
    {"id": "translate", "name": "Translate", "description": "Translates text", "tags": ["text"]},
    {"id": "summarize", "name": "Summarize", "description": "Shortens text", "tags": ["text"]},
]


@dataclass
class Fleet:
    gw: RunningGateway
    ids: dict[str, str]
    """Endpoint id by role (see the module's docstring)."""
    key: str
    """An API key of ``ids["keyed"]``."""
    other_key: str
    """An API key of ``ids["unlisted_keyed"]``, an endpoint that is kept out of the catalog."""
    token: str
    """A JWT that ``ids["jwt"]`` takes."""

    def url(self, path: str) -> str:
        return self.gw.base_url + path


async def _add(gw: RunningGateway, name: str, *, enabled: bool = True,
               handler: str = "handlers.echo:EchoHandler", **gateway_keys: Any) -> str:
    return await gw.add_endpoint(handler, name=name, enabled=enabled,
                                 settings={"delay": 0, **gateway_keys},
                                 card={"skills": SKILLS} if name == "Public agent" else None)


async def _key(gw: RunningGateway, endpoint_id: str) -> str:
    secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
    row, key = make_key(secret, endpoint_id=endpoint_id, tenant="default", principal="carol")
    await gw.store.create_api_key(row)
    return key


def _jwt_auth() -> tuple[dict[str, Any], str]:
    """An ``auth`` declaration taking JWTs of ``ISSUER``, and a token it takes."""
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    now = int(time.time())
    token = jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "dave", "iat": now,
                        "exp": now + 600}, private, algorithm="ES256")
    auth = {"jwt": {"issuer": ISSUER, "audience": AUDIENCE, "keys": [pem.decode()],
                    "algorithms": ["ES256"]}}
    return auth, token


@pytest.fixture(params=STORE_KINDS)
async def fleet(request, tmp_path, monkeypatch) -> AsyncIterator[Fleet]:
    async with (
        fresh_store_url(request.param, tmp_path, monkeypatch) as url,
        running_gateway(url, allow_unauthenticated_endpoints=False, operator_keys=[OPERATOR_KEY],
                        endpoint_cache_seconds=AN_HOUR, trusted_proxies=["127.0.0.1/32"]) as gw,
    ):
        jwt_auth, token = _jwt_auth()
        ids = {
            "public": await _add(gw, "Public agent", public=True),
            "unlisted": await _add(gw, "Unlisted agent", public=True, catalog=False),
            "disabled": await _add(gw, "Disabled agent", public=True, enabled=False),
            "broken": await _add(gw, "Broken agent", public=True,
                                 handler="handlers.no_such_module:Nothing"),
            "bad_flag": await _add(gw, "Bad flag agent", public=True, catalog="no"),
            "keyed": await _add(gw, "Keyed agent"),
            "other_keyed": await _add(gw, "Other keyed agent"),
            "unlisted_keyed": await _add(gw, "Unlisted keyed agent", catalog=False),
            "jwt": await _add(gw, "JWT agent", auth=jwt_auth),
            "proxied": await _add(gw, "Proxied agent",
                                  auth={"trusted_header": {"header": "X-Forwarded-User"}}),
        }
        yield Fleet(gw, ids, await _key(gw, ids["keyed"]), await _key(gw, ids["unlisted_keyed"]),
                    token)


def _listed(document: dict[str, Any]) -> list[str]:
    return [e["url"].split("/")[-3] for e in document["entries"]]


async def _both(
    http: httpx.AsyncClient, fleet: Fleet, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, httpx.Response]:
    catalog = await http.get(fleet.url(CATALOG), headers=headers)
    agents = await http.get(fleet.url(AGENTS), headers=headers)
    return catalog, agents


def _leaked(fleet: Fleet, responses: tuple[httpx.Response, ...], allowed: set[str]) -> set[str]:
    """Roles of endpoints other than ``allowed`` whose id or name is anywhere in the bodies."""
    text = "".join(r.text for r in responses)
    names = {"keyed": "Keyed agent", "other_keyed": "Other keyed agent", "jwt": "JWT agent",
             "unlisted": "Unlisted agent", "unlisted_keyed": "Unlisted keyed agent",
             "proxied": "Proxied agent"}
    return {role for role, endpoint_id in fleet.ids.items()
            if role not in allowed and (endpoint_id in text or names.get(role, "\0") in text)}


async def test_anonymous_callers_see_only_public_enabled_listed_endpoints(fleet):
    async with httpx.AsyncClient(timeout=30) as http:
        catalog, agents = await _both(http, fleet)
        assert catalog.status_code == agents.status_code == 200
        document = catalog.json()
        assert _listed(document) == [fleet.ids["public"]]
        assert _leaked(fleet, (catalog, agents), {"public"}) == set()
        assert document["specVersion"] == "1.0"
        assert document["host"]["identifier"] == fleet.gw.base_url
        entry = document["entries"][0]
        assert entry["type"] == entry["mediaType"] == "application/a2a-agent-card+json"
        assert entry["displayName"] == "Public agent"
        assert entry["tags"] == ["Translate", "Summarize"]
        assert entry["identifier"] == f"urn:uuid:{fleet.ids['public']}"
        card = await http.get(entry["url"])
        assert card.status_code == 200
        assert agents.json() == [card.json()]  # the very card its route serves
        assert entry["description"] == card.json()["description"]


async def test_a_credential_adds_the_endpoints_it_opens_and_no_other(fleet):
    ids = fleet.ids
    async with httpx.AsyncClient(timeout=30) as http:
        for headers, opened in [
            ({"X-API-Key": fleet.key}, "keyed"),
            ({"Authorization": f"Bearer {fleet.key}"}, "keyed"),
            ({"Authorization": f"Bearer {fleet.token}"}, "jwt"),
            ({"X-Forwarded-User": "erin"}, "proxied"),
        ]:
            catalog, agents = await _both(http, fleet, headers)
            assert catalog.status_code == agents.status_code == 200, catalog.text
            assert sorted(_listed(catalog.json())) == sorted([ids["public"], ids[opened]])
            names = {"keyed": "Keyed agent", "jwt": "JWT agent", "proxied": "Proxied agent"}
            assert {c["name"] for c in agents.json()} == {"Public agent", names[opened]}
            assert _leaked(fleet, (catalog, agents), {"public", opened}) == set()
        # a valid key of an endpoint kept out of the catalog shows the public ones only
        catalog, agents = await _both(http, fleet, {"X-API-Key": fleet.other_key})
        assert _listed(catalog.json()) == [ids["public"]]
        assert _leaked(fleet, (catalog, agents), {"public"}) == set()


async def test_a_credential_that_opens_nothing_is_refused(fleet):
    made_up = fleet.key[:-4] + "AAAA"
    async with httpx.AsyncClient(timeout=30) as http:
        for headers in [{"X-API-Key": made_up}, {"Authorization": "Bearer not-a-token"},
                        {"Authorization": f"Bearer {fleet.token}x"}]:
            for response in await _both(http, fleet, headers):
                assert response.status_code == 401
                assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
                assert _leaked(fleet, (response,), set()) == set()
        # another scheme than bearer is no credential of the gateway's: the public view
        catalog, _ = await _both(http, fleet, {"Authorization": "Basic dXNlcjpwYXNz"})
        assert _listed(catalog.json()) == [fleet.ids["public"]]


async def test_etags_answer_304_and_change_with_the_view_and_the_endpoints(fleet):
    async with httpx.AsyncClient(timeout=30) as http:
        etags = {}
        for path in (CATALOG, AGENTS):
            first = await http.get(fleet.url(path))
            etag = etags[path] = first.headers["ETag"]
            assert first.headers["Cache-Control"].startswith("private, max-age=")
            assert "x-api-key" in first.headers["Vary"].lower()
            again = await http.get(fleet.url(path), headers={"If-None-Match": etag})
            assert again.status_code == 304 and again.content == b""
            keyed = await http.get(fleet.url(path),
                                   headers={"If-None-Match": etag, "X-API-Key": fleet.key})
            assert keyed.status_code == 200 and keyed.headers["ETag"] != etag
        # an operator disables the public endpoint: gone from the next answer, though rows are
        # cached for an hour
        disable = await http.post(
            fleet.url(f"/admin/api/endpoints/{fleet.ids['public']}/disable"),
            headers={"Authorization": f"Bearer {OPERATOR_KEY}"})
        assert disable.status_code == 200
        for path in (CATALOG, AGENTS):
            after = await http.get(fleet.url(path), headers={"If-None-Match": etags[path]})
            assert after.status_code == 200
            assert fleet.ids["public"] not in after.text


async def test_many_requests_cost_one_store_read(fleet, monkeypatch):
    store = fleet.gw.store
    calls: Counter[str] = Counter()
    for name in ("list_endpoints", "get_endpoint", "get_api_key"):
        original = getattr(store, name)

        async def counted(*args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return await _original(*args, **kwargs)

        monkeypatch.setattr(store, name, counted)
    fleet.gw.gateway.registry.forget()  # as after an operator's change: the listing is re-read
    callers = [{}, {"X-API-Key": fleet.key}, {"Authorization": f"Bearer {fleet.token}"}]
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(20):
            for headers in callers:
                for response in await _both(http, fleet, headers):
                    assert response.status_code == 200
    assert calls == Counter({"list_endpoints": 1, "get_api_key": 1})
