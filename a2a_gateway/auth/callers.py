"""The caller of a request: its credential checked against the schemes of the endpoint it calls,
then admitted by the endpoint's rate limit (``auth.rate_limit``).

The schemes an endpoint takes are its ``EndpointAuth`` (``auth.config``). Credentials are
looked for in this order, and the first one found decides (an invalid one is refused, never
passed over for the next):

1. the trusted identity header, only when the TCP peer is a configured proxy address
   (from anyone else the header is ignored);
2. the API key header;
3. ``Authorization: Bearer``: a value with the API key prefix is an API key, anything else a
   JWT when the endpoint takes JWTs (an API key otherwise).

Without any, a public endpoint takes the call anonymously and every other answers 401. A
credential for another endpoint is as invalid as a made-up one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from a2a.auth.user import UnauthenticatedUser, User

from a2a_gateway.auth.api_keys import KEY_PREFIX, ApiKeyVerifier
from a2a_gateway.auth.config import EndpointAuth, EndpointAuthView
from a2a_gateway.auth.jwks import JwksCache
from a2a_gateway.auth.peer import PEER, IpNetwork, is_trusted, networks
from a2a_gateway.auth.rate_limit import FleetRateLimiter, RateLimiter
from a2a_gateway.auth.tokens import InvalidToken, JwtVerifier
from a2a_gateway.errors import UnauthenticatedError
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import ApiKey, Store

MAX_PRINCIPAL_LENGTH = 256
"""Longest identity a proxy header may carry."""


class Caller(User):
    """An authenticated caller; ``user_name`` is the principal its tasks belong to, and
    ``tenant`` (from a token claim) narrows them further when set."""

    def __init__(
        self, principal: str, tenant: str | None = None, claims: Mapping[str, Any] | None = None,
        key: ApiKey | None = None,
    ) -> None:
        self._principal = principal
        self.tenant = tenant
        self.claims = claims or {}
        """The claims of the caller's JWT (none for other credentials)."""
        self.key = key
        """The API key row the caller presented (None for other credentials)."""

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._principal


ANONYMOUS = UnauthenticatedUser()


class InvalidCredentialError(UnauthenticatedError):
    """A credential was presented and is not valid (RFC 6750's ``invalid_token``)."""

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": f'Bearer realm="a2a-gateway", error="invalid_token", '
                                    f'error_description="{self.message}"'}


class Authenticator:
    def __init__(
        self, keys: ApiKeyVerifier, tokens: JwtVerifier, trusted_proxies: tuple[IpNetwork, ...],
        limiter: RateLimiter | FleetRateLimiter | None = None,
    ) -> None:
        self._keys = keys
        self._tokens = tokens
        self._trusted_proxies = trusted_proxies
        self._limiter = limiter or RateLimiter()

    async def caller(self, headers: Mapping[str, str], endpoint: EndpointAuthView) -> User:
        """The authenticated caller, admitted by the endpoint's rate limit."""
        user = await self._authenticate(headers, endpoint)
        if endpoint.rate_limit is not None:
            who = user.user_name if user.is_authenticated else f"anonymous@{PEER.get()}"
            if isinstance(self._limiter, FleetRateLimiter):
                await self._limiter.admit(endpoint.endpoint_id, who, endpoint.rate_limit)
            else:
                self._limiter.admit(endpoint.endpoint_id, who, endpoint.rate_limit)
        return user

    async def opens(self, headers: Mapping[str, str], endpoint: EndpointAuthView) -> bool:
        """Whether the credential in ``headers`` authenticates a caller of ``endpoint``, as
        ``caller`` would, without counting a request against its rate limit (the agent catalog
        lists the endpoints a credential opens)."""
        try:
            user = await self._authenticate(headers, endpoint)
        except UnauthenticatedError:
            return False
        return user.is_authenticated

    async def _authenticate(self, headers: Mapping[str, str], endpoint: EndpointAuthView) -> User:
        auth = endpoint.auth
        if auth.trusted_header and is_trusted(PEER.get(), self._trusted_proxies):
            identity = headers.get(auth.trusted_header, "").strip()
            if identity:
                if len(identity) > MAX_PRINCIPAL_LENGTH:
                    raise InvalidCredentialError(f"the {auth.trusted_header} header is too long")
                return Caller(identity)
        if auth.api_key_header:
            key = headers.get(auth.api_key_header, "").strip()
            if key:
                return await self._key_caller(endpoint, key)
        bearer = bearer_token(headers)
        if bearer is not None and (auth.api_key_header or auth.jwt):
            if auth.jwt is not None and not bearer.startswith(KEY_PREFIX):
                return await self._token_caller(auth, bearer)
            if auth.api_key_header is None:
                raise InvalidCredentialError("this endpoint takes no API keys")
            return await self._key_caller(endpoint, bearer)
        if auth.anonymous:
            return ANONYMOUS
        raise UnauthenticatedError(f"this endpoint needs {needed(auth)}")

    async def _key_caller(self, endpoint: EndpointAuthView, key: str) -> Caller:
        row = await self._keys.verify(endpoint.endpoint_id, key)
        if row is None:
            raise InvalidCredentialError("the API key is not valid for this endpoint")
        return Caller(row.principal, key=row)

    async def _token_caller(self, auth: EndpointAuth, token: str) -> Caller:
        assert auth.jwt is not None
        try:
            identity = await self._tokens.identity(auth.jwt, token)
        except InvalidToken as exc:
            raise InvalidCredentialError(str(exc)) from None
        return Caller(identity.principal, identity.tenant, identity.claims)


def needed(auth: EndpointAuth) -> str:
    """What a caller of the endpoint may send, in words."""
    ways = []
    if auth.api_key_header:
        ways.append(
            f"an API key (in the {auth.api_key_header} header or as Authorization: Bearer <key>)"
        )
    if auth.jwt:
        ways.append(f"a JWT from {auth.jwt.issuer} (as Authorization: Bearer <token>)")
    if auth.trusted_header:
        ways.append("a sign-in through the gateway's authenticating proxy")
    return " or ".join(ways)


def bearer_token(headers: Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def build_authenticator(
    settings: GatewaySettings, store: Store, http: httpx.AsyncClient, redis: Any = None
) -> Authenticator:
    """The authenticator of ``settings``; its rate limits count for the fleet in ``redis``
    when one is given, else in this process."""
    keys = ApiKeyVerifier(store, settings.api_key_secret.get_secret_value().encode(),
                          settings.api_key_cache_seconds)
    jwks = JwksCache(
        http,
        cache_seconds=settings.jwks_cache_seconds,
        refresh_seconds=settings.jwks_refresh_seconds,
        timeout_seconds=settings.jwks_timeout_seconds,
        max_bytes=settings.jwks_max_bytes,
    )
    limiter = FleetRateLimiter(redis, settings.redis_prefix) if redis is not None else None
    return Authenticator(
        keys, JwtVerifier(jwks, settings.jwt_leeway_seconds), networks(settings.trusted_proxies),
        limiter,
    )
