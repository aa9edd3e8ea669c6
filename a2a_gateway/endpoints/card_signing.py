"""Signed agent cards: the gateway's card-signing keys, a card's JWS signature and the JWKS.

Each entry of ``card_signing_keys`` is a file or ``env:NAME`` holding one key, PEM or JWK,
ES256 (P-256) or EdDSA (Ed25519). The first entry signs and must be a private key; the
others are only published in the JWKS (``/.well-known/jwks.json``), so cards signed before a
rotation still verify until their key is removed from the list. A key's ``kid`` is the JWK's
own ``kid`` or else its RFC 7638 thumbprint. ``card_keys`` reads them (and loads
``cryptography`` and PyJWT): a gateway without keys never imports it. Both use the key record
of ``card_signing_key``, so neither imports the other's module at import time.

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
from typing import TYPE_CHECKING, Any

from a2a.types import AgentCard
from a2a.utils.constants import PROTOCOL_VERSION_0_3

from a2a_gateway.card_signing_key import CardSigningKeyError, SigningKey, source_of

if TYPE_CHECKING:
    from jwt import PyJWK

__all__ = ["JWKS_PATH", "CardSigner", "CardSigningKeyError", "SigningKey", "load_card_signer"]

JWKS_PATH = "/.well-known/jwks.json"


class CardSigner:
    """Signs cards with the first key and publishes all of them; with no keys, signs nothing."""

    def __init__(self, keys: Sequence[SigningKey] = ()) -> None:
        self.keys = tuple(keys)
        self.jwks: dict[str, Any] = {"keys": [k.public_jwk for k in self.keys]}
        first = self.keys[0] if self.keys else None
        self._private: PyJWK | None = None
        if first is not None and first.private is not None:
            from a2a_gateway.card_keys import signing_jwk

            self._private = signing_jwk(first.private, first.alg)

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


def load_card_signer(entries: Sequence[str]) -> CardSigner:
    """The signer of the configured keys; raises ``CardSigningKeyError`` for a bad entry."""
    if not entries:
        return CardSigner()
    from a2a_gateway.card_keys import load_key  # cryptography and PyJWT: loaded only with keys

    keys = [load_key(entry, position) for position, entry in enumerate(entries, start=1)]
    if keys and keys[0].private is None:
        raise CardSigningKeyError(
            f"card signing key 1 ({source_of(entries[0])}) is a public key: "
            "the first key signs and must be private"
        )
    kids = [k.kid for k in keys]
    if len(set(kids)) != len(kids):
        raise CardSigningKeyError("card signing keys must have distinct kids")
    return CardSigner(keys)
