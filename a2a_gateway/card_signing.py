"""Signed agent cards: the gateway's card-signing keys, a card's JWS signature and the JWKS.

Each entry of ``card_signing_keys`` is a file or ``env:NAME`` holding one key, PEM or JWK,
ES256 (P-256) or EdDSA (Ed25519). The first entry signs and must be a private key; the
others are only published in the JWKS (``/.well-known/jwks.json``), so cards signed before a
rotation still verify until their key is removed from the list. A key's ``kid`` is the JWK's
own ``kid`` or else its RFC 7638 thumbprint.

A signature is a detached JWS whose protected header holds ``alg``, ``kid``, ``typ: JOSE``
and ``jku`` (the JWKS URL), over the RFC 8785 canonical JSON of the 1.0 card without
``signatures``. It is made by the a2a-sdk's signer, so the a2a-sdk's verifier (which real
clients use) accepts it. The SDK drops *every* empty value before canonicalising, where the
spec keeps REQUIRED fields even when empty: the two differ only for such a card, e.g. one
whose capabilities are all false (``"capabilities": {}`` is signed without it).

A card gets a second signature, by the same key, over the card a 0.3 reader rebuilds from
its 0.3 form: a 0.3 card lists no 1.0 interfaces, so the a2a-sdk reading the 0.3 binding
(``agent/getAuthenticatedExtendedCard``) holds a card with the 0.3 interface only (so a
verifier also accepts the card cut down to that interface: what a 0.3 client sees). The 0.3
fields a default card also carries (``url``, ``preferredTransport``, ...) are covered by
neither: the a2a-sdk reads such a card through its 1.0 fields.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2a.types import AgentCard
from a2a.utils.constants import PROTOCOL_VERSION_0_3
from a2a.utils.signing import create_agent_card_signer
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key
from jwt.algorithms import ECAlgorithm, OKPAlgorithm
from jwt.api_jwk import PyJWK
from jwt.exceptions import PyJWKError

from a2a_gateway.settings import HandlerSettingsError, expand_env_refs

JWKS_PATH = "/.well-known/jwks.json"

PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


class CardSigningKeyError(ValueError):
    """A card-signing key cannot be used; the message names the entry, never its contents."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    kid: str
    alg: str
    public_jwk: dict[str, Any]
    """Public members only, with ``kid``, ``alg`` and ``use``: what the JWKS publishes."""
    private: PrivateKey | None
    """None for a key that is only published (a retiring key)."""


class CardSigner:
    """Signs cards with the first key and publishes all of them; with no keys, signs nothing."""

    def __init__(self, keys: Sequence[SigningKey] = ()) -> None:
        self.keys = tuple(keys)
        self.jwks: dict[str, Any] = {"keys": [k.public_jwk for k in self.keys]}
        first = self.keys[0] if self.keys else None
        self._private = (
            PyJWK(_private_jwk(first.private), first.alg) if first and first.private else None
        )

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def sign(self, card: AgentCard, base_url: str) -> AgentCard:
        """Append the signatures (1.0 card, 0.3 reading) to ``card`` in place and return it;
        unchanged without keys."""
        if self._private is None:
            return card
        current = self.keys[0]
        sign = create_agent_card_signer(self._private, {
            "alg": current.alg, "kid": current.kid, "typ": "JOSE",
            "jku": base_url.rstrip("/") + JWKS_PATH,
        })
        readings = [card]
        if any(i.protocol_version == PROTOCOL_VERSION_0_3 for i in card.supported_interfaces):
            from a2a.compat.v0_3 import conversions  # the 0.3 types: loaded only to sign for 0.3

            readings.append(conversions.to_core_agent_card(conversions.to_compat_agent_card(card)))
        signatures = [sign(reading).signatures[-1] for reading in readings]
        card.signatures.extend(signatures[1:])  # the first is on ``card`` already
        return card


def load_card_signer(entries: Sequence[str]) -> CardSigner:
    """The signer of the configured keys; raises ``CardSigningKeyError`` for a bad entry."""
    keys = [_load_key(entry, position) for position, entry in enumerate(entries, start=1)]
    if keys and keys[0].private is None:
        raise CardSigningKeyError(
            f"card signing key 1 ({_source(entries[0])}) is a public key: "
            "the first key signs and must be private"
        )
    kids = [k.kid for k in keys]
    if len(set(kids)) != len(kids):
        raise CardSigningKeyError("card signing keys must have distinct kids")
    return CardSigner(keys)


def _source(entry: str) -> str:
    return entry if entry.startswith("env:") else f"file {entry}"


def _load_key(entry: str, position: int) -> SigningKey:
    where = f"card signing key {position}"
    if "-----BEGIN" in entry or entry.lstrip().startswith("{"):
        raise CardSigningKeyError(f"{where} is not a file name or env:NAME (put the key in one)")
    where += f" ({_source(entry)})"
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
