"""Public keys that verify bearer JWTs: read from a JWK, a public-key PEM or a certificate,
and matched to a token's algorithm.

Of the token checks, only this module (and ``auth.tokens``) touches ``cryptography`` and PyJWT
(``card_keys`` does for card signing): the gateway loads them when an endpoint declares JWT auth
or an ID token of the console's OIDC issuer is checked, not at start-up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from jwt import PyJWK, PyJWTError

_CURVES = {"ES256": ec.SECP256R1, "ES384": ec.SECP384R1, "ES512": ec.SECP521R1}


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """A public key that may verify a token: from a JWKS or the row's static keys."""

    key: Any
    kid: str | None = None
    alg: str | None = None
    """The algorithm the key is published for, when its JWK says."""

    def fits(self, alg: str) -> bool:
        """Whether a token signed with ``alg`` may be checked with this key."""
        if self.alg is not None and self.alg != alg:
            return False
        if alg.startswith(("RS", "PS")):
            return isinstance(self.key, rsa.RSAPublicKey)
        if alg in _CURVES:
            return isinstance(self.key, ec.EllipticCurvePublicKey) and isinstance(
                self.key.curve, _CURVES[alg]
            )
        if alg == "EdDSA":
            return isinstance(self.key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey)
        return False


def jwk_key(data: dict[str, Any]) -> VerificationKey:
    """A public JWK as a key; ``ValueError`` for a private, symmetric or unreadable one."""
    if "d" in data or data.get("kty") == "oct":
        raise ValueError("a JWK must be a public key (no \"d\", not \"oct\")")
    try:
        jwk = PyJWK(data)
    except (PyJWTError, ValueError, TypeError, AttributeError):  # fields of the wrong shape
        raise ValueError(f"unreadable JWK (kty {str(data.get('kty'))[:20]!r})") from None
    alg = data.get("alg") if isinstance(data.get("alg"), str) else None
    kid = data.get("kid") if isinstance(data.get("kid"), str) else None
    return VerificationKey(jwk.key, kid=kid, alg=alg)


def static_key(value: str | dict[str, Any]) -> VerificationKey:
    """A key written in the row: a JWK (object or JSON text), a public-key PEM or a certificate."""
    if isinstance(value, dict):
        return jwk_key(value)
    text = value.strip()
    if text.startswith("{"):
        try:
            return jwk_key(json.loads(text))
        except json.JSONDecodeError:
            raise ValueError("a key that starts with { must be a JWK in JSON") from None
    try:
        if "BEGIN CERTIFICATE" in text:
            return VerificationKey(x509.load_pem_x509_certificate(text.encode()).public_key())
        return VerificationKey(load_pem_public_key(text.encode()))
    except ValueError:
        raise ValueError("a key must be a JWK, a PEM public key or a PEM certificate") from None
