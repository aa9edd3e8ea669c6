"""Console sessions: what a gateway operator's browser holds after logging in (with an
operator key, or through the OIDC issuer: ``console.oidc``), so that its ``EventSource``
(which cannot send headers) may read the feed.

A session is a cookie ``<payload>.<signature>``: the payload is the expiry time, the
session's CSRF token and who logged in (a reference to the operator key, of which a session
is refused once the key is no longer configured; or the OIDC issuer, subject and name), the
signature an HMAC-SHA-256 of it under a key derived from ``console_session_secret``.
Nothing is kept on the server, so every replica with the same secret takes it. The cookie is
HttpOnly, SameSite=Strict and Secure over https. A state-changing call made with a session
must repeat its CSRF token in the ``X-CSRF-Token`` header (a page of another origin cannot
read it); calls made with an operator key need none. ``Sealer`` signs other short-lived
values under the same secret (the OIDC login's state), each purpose under its own key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie

import orjson

COOKIE = "a2a_gateway_console"
CSRF_HEADER = "X-CSRF-Token"


@dataclass(frozen=True, slots=True)
class OidcUser:
    """Who signed in through the OIDC issuer."""

    issuer: str
    subject: str
    """The ID token's ``sub``."""
    name: str
    """What the page shows: ``name``, ``preferred_username``, ``email`` or ``sub``."""


@dataclass(frozen=True, slots=True)
class Session:
    csrf: str
    expires: float
    """Epoch seconds."""
    key_ref: str | None
    """The operator key it was opened with (``OperatorKeys.ref_of``); None: an OIDC login."""
    oidc: OidcUser | None = None
    """Who signed in through the OIDC issuer (None: an operator key)."""


class Sealer:
    """Signs JSON objects as ``<payload>.<signature>`` and opens only values it signed."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def __repr__(self) -> str:
        return "Sealer()"

    def seal(self, body: dict[str, object]) -> str:
        payload = _b64(orjson.dumps(body))
        return f"{payload}.{self._sign(payload)}"

    def open(self, value: str) -> dict[str, object] | None:
        payload, _, signature = value.partition(".")
        # a sealed value is ASCII; compare_digest refuses to compare any other str
        if (
            not payload
            or not value.isascii()
            or not hmac.compare_digest(signature, self._sign(payload))
        ):
            return None
        try:
            body = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (binascii.Error, orjson.JSONDecodeError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())


class ConsoleSessions:
    """Issues and checks signed session cookies."""

    def __init__(
        self, secret: str, lifetime_seconds: float, clock: Callable[[], float] = time.time
    ) -> None:
        self._secret = secret or secrets.token_hex(32)
        self._sealer = self.sealer("a2a-gateway console session")
        self.lifetime_seconds = lifetime_seconds
        self._clock = clock

    def __repr__(self) -> str:
        return "ConsoleSessions()"

    def sealer(self, purpose: str) -> Sealer:
        """A sealer under the sessions' secret for ``purpose`` (its values open nowhere else)."""
        return Sealer(hashlib.sha256(purpose.encode() + b"\x00" + self._secret.encode()).digest())

    def issue(self, key_ref: str | None, oidc: OidcUser | None = None) -> tuple[Session, str]:
        """A new session of the operator key ``key_ref`` (or of the OIDC user ``oidc``) and
        its cookie value."""
        session = Session(
            secrets.token_urlsafe(24), self._clock() + self.lifetime_seconds, key_ref, oidc
        )
        body: dict[str, object] = {"exp": session.expires, "csrf": session.csrf}
        if oidc is not None:
            body["oidc"] = {"iss": oidc.issuer, "sub": oidc.subject, "name": oidc.name}
        else:
            body["key"] = key_ref
        return session, self._sealer.seal(body)

    def read(self, headers: Mapping[str, str]) -> Session | None:
        """The valid, unexpired session of the request's cookie, else None."""
        body = self._sealer.open(cookie_value(headers, COOKIE))
        if body is None:
            return None
        try:
            user = body.get("oidc")
            oidc = (
                OidcUser(str(user["iss"]), str(user["sub"]), str(user["name"]))
                if user is not None
                else None
            )
            key_ref = None if oidc is not None else str(body["key"])
            session = Session(str(body["csrf"]), float(body["exp"]), key_ref, oidc)
        except (KeyError, TypeError, ValueError):
            return None
        return session if session.expires > self._clock() else None


def csrf_ok(session: Session, headers: Mapping[str, str]) -> bool:
    presented = headers.get(CSRF_HEADER, "").encode(
        errors="surrogateescape"
    )  # the header's bytes as sent
    return hmac.compare_digest(presented, session.csrf.encode())


def cookie_value(headers: Mapping[str, str], name: str) -> str:
    """The value of the request's cookie ``name`` ("" when it has none)."""
    header = headers.get("Cookie", "")
    if not header:
        return ""
    try:
        morsel = SimpleCookie(header).get(name)
    except CookieError:
        return ""
    return morsel.value if morsel is not None else ""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
