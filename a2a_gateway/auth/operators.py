"""Operators: who may watch an endpoint (its event feed) rather than just call it.

Two kinds:

* **Gateway operators** hold one of the gateway's operator keys (setting ``operator_keys``),
  sent as ``Authorization: Bearer <key>``; they may watch every endpoint. The setting holds
  each key, or ``sha256:<hex>`` of it so the configuration need not hold the key at all;
  the gateway keeps only the digests and compares the presented key's digest with each in
  constant time. Keys are never logged or repeated in an answer.
* **Endpoint operators** are callers of one endpoint, authenticated by that endpoint's own
  schemes exactly as for a call (``auth.callers``), whom its auth declaration names:

      "auth": {"api_key": {}, "jwt": {...},
               "operators": {"principals": ["ops-alice"],
                             "jwt_claim": "groups", "jwt_values": ["a2a-operators"]}}

  by principal (an API key's principal, a JWT's principal claim, a trusted proxy's identity)
  or by a JWT claim such as an OIDC ``groups`` claim.

With the console on, a console session (``auth.sessions``, the cookie of a login with an
operator key, or of a sign-in through the OIDC issuer ``console_oidc_issuer``: ``console.oidc``)
is a gateway operator too; its state-changing calls need its CSRF token. A session outlives
neither its key nor the OIDC issuer it came from in the settings.

Why the declaration rather than a role on API key rows: every credential an endpoint takes
already names a principal, and API keys, JWTs and proxy identities are all verified in one
place. Naming operators in the row adds no store field, no key format and no second
verification path — an operator is a caller the endpoint trusts further — and it works the
same for OIDC groups. A key of endpoint X is invalid on endpoint Y, and a principal named on
X is nobody on Y.

No credential is 401 with ``WWW-Authenticate`` (also on a public endpoint: watching always
needs one); a valid caller who is not an operator is 403.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from a2a.auth.user import User
from a2a.utils.errors import InvalidRequestError
from pydantic import SecretStr

from a2a_gateway.auth.callers import Authenticator, Caller, InvalidCredentialError, bearer_token
from a2a_gateway.auth.config import EndpointAuthView, EndpointOperators
from a2a_gateway.auth.sessions import ConsoleSessions, Session
from a2a_gateway.errors import GatewayError, UnauthenticatedError

DIGEST_PREFIX = "sha256:"


class NotAnOperatorError(GatewayError):
    """A valid credential of someone who is not an operator of this endpoint."""

    http_status = 403
    status = "PERMISSION_DENIED"
    a2a_error = InvalidRequestError
    message = "this credential is not an operator's of this endpoint"


class OperatorKeyError(ValueError):
    """An ``operator_keys`` entry that cannot be used (said without the value)."""


@dataclass(frozen=True, slots=True)
class Operator:
    name: str
    """``gateway operator`` or the endpoint operator's principal (for logs)."""
    gateway: bool
    """Holds a gateway operator key (may watch every endpoint)."""
    session: Session | None = None
    """The console session the credential is (None: a key or a caller's credential)."""


class OperatorKeys:
    """The digests of the gateway operator keys."""

    def __init__(self, configured: Sequence[SecretStr]) -> None:
        self._digests = [
            _digest_of(i, entry.get_secret_value()) for i, entry in enumerate(configured)
        ]

    def __repr__(self) -> str:
        return f"OperatorKeys({len(self._digests)} keys)"

    def __bool__(self) -> bool:
        return bool(self._digests)

    def match(self, presented: str) -> bool:
        return self.ref_of(presented) is not None

    def ref_of(self, presented: str) -> str | None:
        """The reference of the configured key ``presented`` is (None: it is none): what a
        console session names, so that removing the key ends its sessions too."""
        digest = hashlib.sha256(
            presented.encode(errors="surrogateescape")
        ).digest()  # header bytes as sent
        found = None
        for known in self._digests:
            if hmac.compare_digest(digest, known):  # every entry compared, in constant time
                found = known
        return _ref(found) if found is not None else None

    def has_ref(self, ref: str) -> bool:
        return any(hmac.compare_digest(ref, _ref(known)) for known in self._digests)


def _ref(digest: bytes) -> str:
    return hashlib.sha256(b"operator key ref\x00" + digest).hexdigest()[:16]


def _digest_of(index: int, entry: str) -> bytes:
    entry = entry.strip()
    if entry.startswith(DIGEST_PREFIX):
        try:
            digest = bytes.fromhex(entry[len(DIGEST_PREFIX):])
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise OperatorKeyError(
                f"operator_keys entry {index}: sha256: must be followed by 64 hex digits"
            )
        return digest
    if len(entry) < 16:
        raise OperatorKeyError(
            f"operator_keys entry {index}: a key must have at least 16 characters"
        )
    return hashlib.sha256(entry.encode()).digest()


class OperatorAuth:
    def __init__(
        self,
        keys: OperatorKeys,
        callers: Authenticator,
        sessions: ConsoleSessions | None = None,
        oidc_issuer: str = "",
    ) -> None:
        self._keys = keys
        self._callers = callers
        self.sessions = sessions
        """Console sessions taken as gateway operators (None: the console is off)."""
        self._oidc_issuer = oidc_issuer
        """The issuer whose sign-ins are taken ("": none)."""

    def key_ref(self, presented: str) -> str | None:
        """The reference of the gateway operator key ``presented`` is, if it is one."""
        return self._keys.ref_of(presented) if self._keys else None

    def gateway_operator(self, headers: Mapping[str, str]) -> Operator | None:
        """The gateway operator whose key (or console session) the request carries, if any."""
        bearer = bearer_token(headers)
        if bearer is not None and self.key_ref(bearer) is not None:
            return Operator("gateway operator", gateway=True)
        session = (
            self.sessions.read(headers) if self.sessions is not None and bearer is None else None
        )
        if session is None:
            return None
        if (
            session.oidc is not None
            and self._oidc_issuer
            and session.oidc.issuer == self._oidc_issuer
        ):
            return Operator(f"oidc:{session.oidc.subject}", gateway=True, session=session)
        if session.key_ref is not None and self._keys.has_ref(session.key_ref):
            return Operator("console session", gateway=True, session=session)
        return None

    def require_gateway_operator(self, headers: Mapping[str, str]) -> Operator:
        """A gateway operator (what watching every endpoint needs); 401 otherwise."""
        found = self.gateway_operator(headers)
        if found is not None:
            return found
        if bearer_token(headers) is not None:
            raise InvalidCredentialError("the bearer token is not a gateway operator key")
        raise UnauthenticatedError(
            "this needs a gateway operator key (Authorization: Bearer <key>)"
        )

    async def endpoint_operator(
        self, headers: Mapping[str, str], endpoint: EndpointAuthView
    ) -> Operator:
        """An operator of ``endpoint``; 401 without a valid credential, 403 for a caller who is
        not one."""
        found = self.gateway_operator(headers)
        if found is not None:
            return found
        user = await self._callers.caller(headers, endpoint)
        if not user.is_authenticated:
            raise UnauthenticatedError("watching this endpoint needs an operator's credential")
        if not is_operator(user, endpoint.auth.operators):
            raise NotAnOperatorError()
        return Operator(user.user_name, gateway=False)


def is_operator(user: User, operators: EndpointOperators) -> bool:
    if user.user_name in operators.principals:
        return True
    if operators.jwt_claim is None or not isinstance(user, Caller):
        return False
    value = user.claims.get(operators.jwt_claim)
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return any(isinstance(v, str) and v in operators.jwt_values for v in values)
