"""A card-signing key as the gateway holds it, and the error of an unusable one: shared by
``card_signing`` (the signer) and ``card_keys`` (reading keys, with ``cryptography`` and
PyJWT), and light enough that importing it loads neither."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

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


def source_of(entry: str) -> str:
    """How an entry of ``card_signing_keys`` is named in errors: never the key itself."""
    return entry if entry.startswith("env:") else f"file {entry}"
