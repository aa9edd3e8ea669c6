"""The JWKS cache: fetched once, again when stale or for an unknown kid, never more often than
``refresh_seconds``; a failed fetch keeps the keys it had. A clock stands in for time and an
httpx mock transport for the issuer."""

from __future__ import annotations

import json

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from a2a_gateway.auth.jwks import JwksCache

URL = "https://issuer.example/jwks.json"


def public_jwk(kid: str) -> dict:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    return {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key)), "kid": kid}


class Issuer:
    def __init__(self) -> None:
        self.published: list[dict] = []
        self.fetches = 0
        self.status = 200

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.fetches += 1
        return httpx.Response(self.status, json={"keys": self.published})


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def setup():
    issuer, clock = Issuer(), Clock()
    http = httpx.AsyncClient(transport=httpx.MockTransport(issuer.handle))
    cache = JwksCache(
        http,
        cache_seconds=300,
        refresh_seconds=30,
        timeout_seconds=5,
        max_bytes=100_000,
        clock=clock,
    )
    yield issuer, clock, cache
    await http.aclose()


async def test_an_unknown_kid_fetches_again_at_most_once_per_refresh_interval(setup):
    issuer, clock, cache = setup
    issuer.published = [public_jwk("a")]
    assert [k.kid for k in await cache.keys(URL, "a")] == ["a"]
    assert [k.kid for k in await cache.keys(URL, "a")] == ["a"] and issuer.fetches == 1
    issuer.published.append(public_jwk("b"))
    for kid in ("b", "c", "d"):  # within 30 s of the last fetch: no fetch, whatever the kid
        assert "b" not in [k.kid for k in await cache.keys(URL, kid)]
    assert issuer.fetches == 1
    clock.now += 30
    assert [k.kid for k in await cache.keys(URL, "b")] == ["a", "b"] and issuer.fetches == 2
    clock.now += 30
    await cache.keys(URL, "b")  # known: no fetch
    assert issuer.fetches == 2
    clock.now += 300  # stale
    await cache.keys(URL, None)
    assert issuer.fetches == 3


async def test_a_failed_fetch_keeps_the_known_keys_and_unusable_keys_are_skipped(setup):
    issuer, clock, cache = setup
    issuer.published = [public_jwk("a"), {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
                        {**public_jwk("enc"), "use": "enc"}, {"kty": "RSA", "kid": "broken"}]
    ec_private = ec.generate_private_key(ec.SECP256R1())
    issuer.published.append(
        {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec_private)), "kid": "private"}
    )
    assert [k.kid for k in await cache.keys(URL, "a")] == [
        "a"
    ]  # no secret, encryption, broken or private key
    issuer.status = 500
    clock.now += 400
    assert [k.kid for k in await cache.keys(URL, "a")] == ["a"]
    assert issuer.fetches == 2
