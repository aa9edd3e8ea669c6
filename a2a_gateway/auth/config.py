"""Who may call an endpoint: the ``auth`` declaration of its row, checked and typed.

    "auth": {"api_key": {"header": "X-API-Key"},
             "jwt": {"issuer": "...", "audience": "...", "jwks_url": "https://.../jwks.json"},
             "trusted_header": {"header": "X-Forwarded-User"}}

Any combination; each scheme is an alternative. A row without ``auth`` takes API keys in the
gateway's ``api_key_header``, as before declarations existed. ``public: true`` (or the gateway's
``allow_unauthenticated_endpoints``) also takes callers without credentials; a credential
that is presented is checked all the same.

JWT verification keys are public keys only: a JWKS URL, or static keys (PEM, certificate PEM
or JWK, inline or as ``env:NAME``). Only asymmetric algorithms are accepted, so a token signed
with HMAC (for instance with the published public key as the secret) is never taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from a2a_gateway.errors import EndpointMisconfiguredError
from a2a_gateway.settings import HandlerSettingsError, expand_env_refs

if TYPE_CHECKING:
    from a2a_gateway.auth.public_keys import VerificationKey
    from a2a_gateway.auth.rate_limit import RateLimit

ASYMMETRIC_ALGORITHMS = frozenset({
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
})
"""What ``jwt.algorithms`` may list: never ``none``, never an HMAC (HS*) algorithm."""
class _Declaration(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ApiKeyDeclaration(_Declaration):
    header: str | None = None
    """Where the key is sent; default the gateway's ``api_key_header``."""


class JwtDeclaration(_Declaration):
    issuer: str = Field(min_length=1)
    audience: str | list[str]
    jwks_url: str | None = None
    keys: list[str | dict[str, Any]] = []
    algorithms: list[str] = ["RS256", "ES256"]
    principal_claim: str = "sub"
    tenant_claim: str | None = None

    @field_validator("algorithms")
    @classmethod
    def _asymmetric(cls, value: list[str]) -> list[str]:
        wrong = [a for a in value if a not in ASYMMETRIC_ALGORITHMS]
        if wrong or not value:
            raise ValueError(
                f"not accepted: {', '.join(wrong) or 'an empty list'} "
                f"(one or more of {', '.join(sorted(ASYMMETRIC_ALGORITHMS))})"
            )
        return value

    @field_validator("jwks_url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value)
        local = parts.hostname in ("localhost", "127.0.0.1", "::1")
        if not parts.hostname or not (
            parts.scheme == "https" or (parts.scheme == "http" and local)
        ):
            raise ValueError("must be an https:// URL (http:// only on localhost)")
        return value

    @model_validator(mode="after")
    def _one_key_source(self) -> JwtDeclaration:
        if (self.jwks_url is None) == (not self.keys):
            raise ValueError("give either jwks_url or keys")
        return self


class TrustedHeaderDeclaration(_Declaration):
    header: str = Field("X-Forwarded-User", min_length=1)


class OperatorsDeclaration(_Declaration):
    principals: list[str] = []
    """Callers of the endpoint (by principal, through any of its schemes) who are its operators."""
    jwt_claim: str | None = None
    """A JWT claim (e.g. ``groups``) that makes a caller an operator when it holds one of
    ``jwt_values`` (a string claim, or a list of strings)."""
    jwt_values: list[str] = []

    @model_validator(mode="after")
    def _someone(self) -> OperatorsDeclaration:
        if (self.jwt_claim is None) != (not self.jwt_values):
            raise ValueError("give jwt_claim and jwt_values together")
        if not self.principals and self.jwt_claim is None:
            raise ValueError("name operators by principals or by jwt_claim and jwt_values")
        return self


class AuthDeclaration(_Declaration):
    api_key: ApiKeyDeclaration | None = None
    jwt: JwtDeclaration | None = None
    trusted_header: TrustedHeaderDeclaration | None = None
    operators: OperatorsDeclaration | None = None
    """Who among the callers may watch the endpoint (its event feed); not a scheme."""

    @model_validator(mode="after")
    def _some_scheme(self) -> AuthDeclaration:
        if self.api_key is None and self.jwt is None and self.trusted_header is None:
            raise ValueError("declare at least one of api_key, jwt, trusted_header")
        return self


@dataclass(frozen=True, slots=True)
class JwtConfig:
    issuer: str
    audience: str | list[str]
    algorithms: list[str]
    principal_claim: str
    tenant_claim: str | None
    jwks_url: str | None
    keys: tuple[VerificationKey, ...] = ()


@dataclass(frozen=True, slots=True)
class EndpointOperators:
    """Callers of an endpoint who are also its operators (``auth.operators``)."""

    principals: frozenset[str] = frozenset()
    jwt_claim: str | None = None
    jwt_values: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class EndpointAuth:
    """The schemes an endpoint takes, as the authenticator and the card builder use them."""

    anonymous: bool = False
    """Callers without credentials are taken (as principal ``anonymous``)."""
    api_key_header: str | None = None
    """Header of the API key (``Authorization: Bearer`` works too); None: no API keys."""
    jwt: JwtConfig | None = None
    trusted_header: str | None = None
    """Identity header set by a trusted reverse proxy; None: not taken."""
    declared: bool = field(default=False)
    """The row declares its schemes (a public endpoint then advertises them too)."""
    operators: EndpointOperators = EndpointOperators()
    """Callers who may also watch the endpoint (none unless declared)."""


@dataclass(frozen=True, slots=True)
class EndpointAuthView:
    """What checking a caller needs of an endpoint, and all auth sees of it: the endpoint the
    API keys belong to, its schemes and its rate limit per caller (None: unlimited). The
    endpoint registry's runtime of a row provides it."""

    endpoint_id: str
    auth: EndpointAuth
    rate_limit: RateLimit | None = None


def endpoint_auth(
    metadata: dict[str, Any],
    *,
    default_header: str,
    allow_anonymous: bool,
    resolve_env: bool = True,
) -> EndpointAuth:
    """The row's schemes; ``EndpointMisconfiguredError`` with a one-line problem. With
    ``resolve_env`` False (a check away from the gateway), a key in an unset ``env:`` variable
    is left out instead of refused."""
    anonymous = bool(metadata.get("public")) or allow_anonymous
    raw = metadata.get("auth")
    if raw is None:
        return EndpointAuth(anonymous=anonymous, api_key_header=default_header)
    declaration = parse_declaration(raw)
    jwt = declaration.jwt
    return EndpointAuth(
        anonymous=anonymous,
        api_key_header=(declaration.api_key.header or default_header)
        if declaration.api_key
        else None,
        jwt=_jwt_config(jwt, resolve_env) if jwt else None,
        trusted_header=declaration.trusted_header.header if declaration.trusted_header else None,
        declared=True,
        operators=_operators(declaration.operators),
    )


def _operators(declaration: OperatorsDeclaration | None) -> EndpointOperators:
    if declaration is None:
        return EndpointOperators()
    return EndpointOperators(frozenset(declaration.principals), declaration.jwt_claim,
                             frozenset(declaration.jwt_values))


def parse_declaration(raw: Any) -> AuthDeclaration:
    try:
        return AuthDeclaration.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("auth", *first["loc"]))
        message = first["msg"].removeprefix("Value error, ")
        raise EndpointMisconfiguredError(f"invalid {where}: {message}") from None


def _jwt_config(declaration: JwtDeclaration, resolve_env: bool) -> JwtConfig:
    from a2a_gateway.auth.public_keys import static_key  # cryptography: loaded only for JWT auth

    keys = []
    for i, value in enumerate(declaration.keys):
        try:
            keys.append(static_key(expand_env_refs(value)))
        except HandlerSettingsError as exc:
            if resolve_env:
                raise EndpointMisconfiguredError(f"invalid auth.jwt.keys.{i}: {exc}") from None
        except ValueError as exc:
            raise EndpointMisconfiguredError(f"invalid auth.jwt.keys.{i}: {exc}") from None
    return JwtConfig(
        issuer=declaration.issuer, audience=declaration.audience, algorithms=declaration.algorithms,
        principal_claim=declaration.principal_claim, tenant_claim=declaration.tenant_claim,
        jwks_url=declaration.jwks_url, keys=tuple(keys),
    )
