"""Bearer JWTs: the signature, issuer, audience and times of a token, and who it names.

The token's ``alg`` must be one the endpoint lists (asymmetric only, see ``auth.config``), and
the key must be of that algorithm's type, so no key is ever used with an algorithm it was not
made for. ``exp`` is required; ``exp``, ``nbf`` and ``iat`` are checked with ``leeway``
seconds of clock skew.

PyJWT (and with it ``cryptography``) is imported by the first token checked: a gateway whose
endpoints take no JWTs never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from a2a_gateway.auth.config import ASYMMETRIC_ALGORITHMS, JwtConfig
from a2a_gateway.auth.jwks import JwksCache

if TYPE_CHECKING:
    from a2a_gateway.auth.public_keys import VerificationKey


class InvalidToken(Exception):
    """Why a token is refused (said to the caller: never the token or a claim's value)."""


@dataclass(frozen=True, slots=True)
class TokenIdentity:
    principal: str
    tenant: str | None
    claims: dict[str, Any] = field(default_factory=dict)
    """All claims of the token (e.g. ``groups``, for ``auth.operators``)."""


def _refusal(exc: Exception) -> str:
    """What to tell the caller about a token PyJWT refused."""
    import jwt

    refusals: list[tuple[type[jwt.PyJWTError], str]] = [
        (jwt.ExpiredSignatureError, "the token has expired"),
        (jwt.ImmatureSignatureError, "the token is not valid yet (nbf or iat in the future)"),
        (jwt.InvalidIssuerError, "the token is from another issuer"),
        (jwt.InvalidAudienceError, "the token is for another audience"),
        (jwt.MissingRequiredClaimError, "the token lacks a required claim (exp, iss, aud)"),
        (jwt.InvalidSignatureError, "the token's signature is not valid"),
    ]
    return next((m for t, m in refusals if isinstance(exc, t)), "the token is not valid")


class JwtVerifier:
    def __init__(self, jwks: JwksCache, leeway_seconds: float) -> None:
        self._jwks = jwks
        self._leeway = leeway_seconds

    async def identity(self, config: JwtConfig, token: str) -> TokenIdentity:
        """Who a valid token names; ``InvalidToken`` otherwise."""
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("the bearer token is not a JWT") from None
        alg = header.get("alg")
        if alg not in config.algorithms:
            shown = alg if alg in ASYMMETRIC_ALGORITHMS else "this algorithm"
            raise InvalidToken(f"tokens signed with {shown} are not accepted here "
                               f"(accepted: {', '.join(config.algorithms)})")
        kid = header.get("kid") if isinstance(header.get("kid"), str) else None
        keys = await self._keys(config, kid)
        if not keys and config.jwks_url is not None and not self._jwks.has_keys(config.jwks_url):
            raise InvalidToken(
                "the issuer's keys (its JWKS) cannot be fetched now; try again later"
            )
        candidates = [k for k in keys if k.fits(alg)]
        if not candidates:
            raise InvalidToken("no key of the issuer matches the token (kid, alg)")
        claims = self._decode(config, token, alg, candidates)
        return TokenIdentity(
            principal=_claim(claims, config.principal_claim),
            tenant=_claim(claims, config.tenant_claim) if config.tenant_claim else None,
            claims=claims,
        )

    async def _keys(self, config: JwtConfig, kid: str | None) -> list[VerificationKey]:
        keys = list(config.keys)
        if config.jwks_url is not None:
            keys += await self._jwks.keys(config.jwks_url, kid)
        if kid is not None and any(k.kid == kid for k in keys):
            return [k for k in keys if k.kid == kid]
        return [k for k in keys if k.kid is None] if kid is not None else keys

    def _decode(
        self, config: JwtConfig, token: str, alg: str, keys: list[VerificationKey]
    ) -> dict[str, Any]:
        import jwt

        refusal = "the token's signature is not valid"
        for key in keys:
            try:
                return jwt.decode(
                    token,
                    key.key,
                    algorithms=[alg],
                    audience=config.audience,
                    issuer=config.issuer,
                    leeway=self._leeway,
                    options={"require": ["exp", "iss", "aud"]},
                )
            except jwt.InvalidSignatureError:
                continue  # another static key may have signed it
            except jwt.PyJWTError as exc:
                refusal = _refusal(exc)
                break
        raise InvalidToken(refusal)


def _claim(claims: dict[str, Any], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidToken(f"the token has no {name} claim to name the caller by")
    return value
