"""The caller of a request: its credential checked against the endpoint it calls.

A public endpoint (``--public``) takes anonymous calls; every other endpoint needs an API key,
in the configured header (default ``X-API-Key``) or as ``Authorization: Bearer <key>``. A
credential that is presented is always checked, on public endpoints too (so keys separate
callers there as well), and a key of another endpoint is as invalid as a made-up one.
"""

from __future__ import annotations

from collections.abc import Mapping

from a2a.auth.user import UnauthenticatedUser, User

from a2a_gateway.auth.api_keys import ApiKeyVerifier
from a2a_gateway.errors import UnauthenticatedError
from a2a_gateway.registry import EndpointRuntime


class Caller(User):
    """An authenticated caller; ``user_name`` is the principal its tasks belong to."""

    def __init__(self, principal: str) -> None:
        self._principal = principal

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._principal


ANONYMOUS = UnauthenticatedUser()


class Authenticator:
    def __init__(self, keys: ApiKeyVerifier, header: str) -> None:
        self._keys = keys
        self._header = header
        """Where a key is looked for on endpoints that need none (``runtime.api_key_header``
        is None there)."""

    async def caller(self, headers: Mapping[str, str], runtime: EndpointRuntime) -> User:
        header = runtime.api_key_header or self._header
        presented = presented_key(headers, header)
        if presented is None:
            if runtime.api_key_header is not None:
                raise UnauthenticatedError(
                    f"this endpoint needs an API key: send it in the {header} header "
                    "or as Authorization: Bearer <key>"
                )
            return ANONYMOUS
        row = await self._keys.verify(runtime.endpoint.id, presented)
        if row is None:
            raise UnauthenticatedError("the API key is not valid for this endpoint")
        return Caller(row.principal)


def presented_key(headers: Mapping[str, str], header: str) -> str | None:
    key = headers.get(header, "").strip()
    if key:
        return key
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None
