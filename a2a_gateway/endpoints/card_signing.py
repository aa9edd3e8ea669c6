"""Signed agent cards: the gateway's card-signing keys, a card's JWS signature and the JWKS.

Each entry of ``card_signing_keys`` is a file or ``env:NAME`` holding one key, PEM or JWK,
ES256 (P-256) or EdDSA (Ed25519). The first entry signs and must be a private key; the
others are only published in the JWKS (``/.well-known/jwks.json``), so cards signed before a
rotation still verify until their key is removed from the list. A key's ``kid`` is the JWK's
own ``kid`` or else its RFC 7638 thumbprint. ``card_keys`` reads them into this module's
``SigningKey`` records and builds the signer (loading ``cryptography`` and PyJWT): a gateway
without keys never imports it, and this module never imports ``card_keys``.

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from a2a.types import AgentCard
from a2a.utils.constants import PROTOCOL_VERSION_0_3

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from jwt import PyJWK

    PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey

__all__ = ["JWKS_PATH", "CardSigner", "CardSigningKeyError", "SigningKey"]

JWKS_PATH = "/.well-known/jwks.json"


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


def source_of(entry: str) -> str:
    """How an entry of ``card_signing_keys`` is named in errors: never the key itself."""
    return entry if entry.startswith("env:") else f"file {entry}"


class CardSigner:
    """Signs cards with the first key and publishes all of them; with no keys, signs nothing.
    ``private`` is the first key as the a2a-sdk's signer takes it (``card_keys`` makes it)."""

    def __init__(self, keys: Sequence[SigningKey] = (), private: PyJWK | None = None) -> None:
        self.keys = tuple(keys)
        self.jwks: dict[str, Any] = {"keys": [k.public_jwk for k in self.keys]}
        self._private = private

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def sign(self, card: AgentCard, base_url: str) -> AgentCard:
        """Append the signatures (1.0 card, 0.3 reading) to ``card`` in place and return it;
        unchanged without keys."""
        if self._private is None:
            return card
        from a2a.utils.signing import create_agent_card_signer  # PyJWT: loaded only with keys

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

