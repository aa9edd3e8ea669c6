"""Console sessions: what a gateway operator's browser holds after logging in with an
operator key, so that its ``EventSource`` (which cannot send headers) may read the feed.

A session is a cookie ``<payload>.<signature>``: the payload is the expiry time, the
session's CSRF token and a reference to the operator key it logged in with (a session of a
key no longer configured is refused), the signature an HMAC-SHA-256 of it under ``console_session_secret``.
Nothing is kept on the server, so every replica with the same secret takes it. The cookie is
HttpOnly, SameSite=Strict and Secure over https. A state-changing call made with a session
must repeat its CSRF token in the ``X-CSRF-Token`` header (a page of another origin cannot
read it); calls made with an operator key need none.
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
class Session:
    csrf: str
    expires: float
    """Epoch seconds."""
    key_ref: str
    """The operator key it was opened with (``OperatorKeys.ref_of``)."""


class ConsoleSessions:
    """Issues and checks signed session cookies."""

    def __init__(self, secret: str, lifetime_seconds: float, clock: Callable[[], float] = time.time) -> None:
        self._key = hashlib.sha256(b"a2a-gateway console session\x00" + (secret or secrets.token_hex(32)).encode()).digest()
        self.lifetime_seconds = lifetime_seconds
        self._clock = clock

    def __repr__(self) -> str:
        return "ConsoleSessions()"

    def issue(self, key_ref: str) -> tuple[Session, str]:
        """A new session of the operator key ``key_ref`` and its cookie value."""
        session = Session(secrets.token_urlsafe(24), self._clock() + self.lifetime_seconds, key_ref)
        payload = _b64(orjson.dumps({"exp": session.expires, "csrf": session.csrf, "key": key_ref}))
        return session, f"{payload}.{self._sign(payload)}"

    def read(self, headers: Mapping[str, str]) -> Session | None:
        """The valid, unexpired session of the request's cookie, else None."""
        value = _cookie(headers.get("Cookie", ""))
        payload, _, signature = value.partition(".")
        if not payload or not hmac.compare_digest(signature, self._sign(payload)):
            return None
        try:
            body = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            session = Session(str(body["csrf"]), float(body["exp"]), str(body["key"]))
        except (binascii.Error, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None
        return session if session.expires > self._clock() else None

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())


def csrf_ok(session: Session, headers: Mapping[str, str]) -> bool:
    return hmac.compare_digest(headers.get(CSRF_HEADER, "").encode(), session.csrf.encode())


def _cookie(header: str) -> str:
    if not header:
        return ""
    try:
        morsel = SimpleCookie(header).get(COOKIE)
    except CookieError:
        return ""
    return morsel.value if morsel is not None else ""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
