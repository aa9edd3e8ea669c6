"""Card-signing keys: each entry of ``card_signing_keys`` read from its file or ``env:NAME``,
PEM or JWK, ES256 (P-256) or EdDSA (Ed25519), with its ``kid`` and public JWK, and the
``card_signing.CardSigner`` of them.

Imported (with ``cryptography`` and PyJWT) only when keys are configured (``app``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key
from jwt.algorithms import ECAlgorithm, OKPAlgorithm
from jwt.api_jwk import PyJWK
from jwt.exceptions import PyJWKError

from a2a_gateway.endpoints.card_signing import (
    CardSigner,
    CardSigningKeyError,
    SigningKey,
    source_of,
)
from a2a_gateway.settings import HandlerSettingsError, expand_env_refs

PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def load_card_signer(entries: Sequence[str]) -> CardSigner:
    """The signer of the configured keys; raises ``CardSigningKeyError`` for a bad entry."""
    if not entries:
        return CardSigner()
    keys = [load_key(entry, position) for position, entry in enumerate(entries, start=1)]
    first = keys[0]
    if first.private is None:
        raise CardSigningKeyError(
            f"card signing key 1 ({source_of(entries[0])}) is a public key: "
            "the first key signs and must be private"
        )
    kids = [k.kid for k in keys]
    if len(set(kids)) != len(kids):
        raise CardSigningKeyError("card signing keys must have distinct kids")
    return CardSigner(keys, _signing_jwk(first.private, first.alg))


def _signing_jwk(private: PrivateKey, alg: str) -> PyJWK:
    """A private key as the a2a-sdk's signer takes it."""
    return PyJWK(_private_jwk(private), alg)


def load_key(entry: str, position: int) -> SigningKey:
    """Entry ``position`` of ``card_signing_keys``; ``CardSigningKeyError`` when unusable."""
    where = f"card signing key {position}"
    if "-----BEGIN" in entry or entry.lstrip().startswith("{"):
        raise CardSigningKeyError(f"{where} is not a file name or env:NAME (put the key in one)")
    where += f" ({source_of(entry)})"
    text = _read(entry, where)
    # the parsers' messages may quote the key: say only what it is not
    try:
        key, kid = _from_jwk(text) if text.lstrip().startswith("{") else (_from_pem(text), None)
    except TypeError:
        raise CardSigningKeyError(f"{where} is an encrypted PEM key (not supported)") from None
    except (ValueError, PyJWKError):
        raise CardSigningKeyError(f"{where} is not a PEM or JWK key") from None
    return _signing_key(key, kid, where)


def _read(entry: str, where: str) -> str:
    if entry.startswith("env:"):
        try:
            return str(expand_env_refs(entry))
        except HandlerSettingsError as exc:
            raise CardSigningKeyError(f"{where}: {exc}") from None
    try:
        return Path(entry).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a text file"
        raise CardSigningKeyError(f"{where} cannot be read: {reason.lower()}") from None


def _from_pem(text: str) -> object:
    """The private key in ``text``, else its public key (``TypeError``: encrypted)."""
    try:
        return load_pem_private_key(text.encode(), password=None)
    except ValueError:
        return load_pem_public_key(text.encode())


def _from_jwk(text: str) -> tuple[object, str | None]:
    jwk = json.loads(text)
    if not isinstance(jwk, dict) or "keys" in jwk:
        raise ValueError("one JWK per entry")
    kid = jwk.get("kid")
    return PyJWK(jwk).key, kid if isinstance(kid, str) and kid else None


def _signing_key(key: object, kid: str | None, where: str) -> SigningKey:
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        if key.curve.name != "secp256r1":
            raise CardSigningKeyError(f"{where}: unsupported algorithm (EC {key.curve.name}); "
                                      "use ES256 (P-256) or EdDSA (Ed25519)")
        alg, to_jwk = "ES256", ECAlgorithm.to_jwk
    elif isinstance(key, (ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey)):
        alg, to_jwk = "EdDSA", OKPAlgorithm.to_jwk
    else:
        raise CardSigningKeyError(f"{where}: unsupported algorithm ({type(key).__name__}); "
                                  "use ES256 (P-256) or EdDSA (Ed25519)")
    private = key if isinstance(key, PrivateKey) else None
    public = key.public_key() if private is not None else key
    jwk = to_jwk(public, as_dict=True)
    kid = kid or _thumbprint(jwk)
    return SigningKey(kid, alg, {**jwk, "kid": kid, "alg": alg, "use": "sig"}, private)


def _private_jwk(key: PrivateKey) -> dict[str, Any]:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return ECAlgorithm.to_jwk(key, as_dict=True)
    return OKPAlgorithm.to_jwk(key, as_dict=True)


def _thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: SHA-256 of the required members, sorted, without whitespace."""
    members = ("crv", "kty", "x", "y") if jwk["kty"] == "EC" else ("crv", "kty", "x")
    canonical = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    digest = hashlib.sha256(canonical.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
