"""Signing in to the console through an OpenID Provider (``console_oidc_issuer``): the
Authorization Code flow with PKCE (S256), ``state`` and ``nonce``.

* ``GET /console/oidc/login`` sends the browser to the issuer's authorization endpoint (from
  its discovery document, read with the gateway's HTTP client and kept for
  ``jwks_cache_seconds``). The flow's state, nonce, PKCE verifier and redirect URI travel in
  a short-lived signed cookie (``auth.sessions.Sealer``), so nothing is kept on the server
  and any replica with the same ``console_session_secret`` completes a sign-in another began.
  That cookie is SameSite=Lax: the issuer's redirect back is a cross-site navigation.
* ``GET /console/oidc/callback`` checks the state, exchanges the code at the token endpoint
  with the verifier (the client authenticates with ``client_secret_basic`` or
  ``client_secret_post`` as ``console_oidc_client_auth`` or else the discovery document says;
  a public client sends its id only), verifies the ID token (signature by the issuer's JWKS
  through ``auth.tokens``, iss, aud = the client id, exp, nonce), and takes the user as a
  gateway operator when the ``console_oidc_operator_claim`` claim holds one of
  ``console_oidc_operator_values``. An ID token without that claim has it read from the
  issuer's userinfo endpoint (with the access token; the answer must name the same ``sub``),
  as some issuers keep groups out of ID tokens. It then opens the same console session as an
  operator key's login, naming the user.
* ``GET /console/api/oidc`` tells the login page which issuer it may offer.

The redirect URI is ``<public_base_url>/console/oidc/callback`` (the request's scheme and host
without ``public_base_url``). Every failure is an HTML page saying what happened and what to
do: 4xx for the browser's or the issuer's refusals, 403 for a user who is not an operator,
502 when the issuer cannot be reached; never a token, a code or a claim's value other than
the user's own name, in the page or in the logs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus, urlencode

import httpx
import orjson
import structlog
from aiohttp import web

from a2a_gateway.auth.config import ASYMMETRIC_ALGORITHMS, JwtConfig
from a2a_gateway.auth.jwks import JwksCache
from a2a_gateway.auth.sessions import ConsoleSessions, OidcUser, cookie_value
from a2a_gateway.auth.tokens import InvalidToken, JwtVerifier
from a2a_gateway.console.pages import REFUSED_SIGN_INS, SECURITY_HEADERS, set_session_cookie
from a2a_gateway.governance.audit import record
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.state import GATEWAY

log = structlog.get_logger(__name__)

FLOW_COOKIE = "a2a_gateway_console_oidc"
FLOW_PATH = "/console/oidc"
CALLBACK_PATH = "/console/oidc/callback"
_ERROR_CODE = re.compile(r"[a-z_]{1,64}")
"""What an OAuth error code looks like (anything else is not repeated on the page)."""


class SignInError(Exception):
    """Why a sign-in failed, as the page says it."""

    def __init__(self, status: int, message: str, subject: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.subject = subject
        """The ID token's ``sub`` when the failure came after it was verified ("" before)."""


@dataclass(frozen=True, slots=True)
class LoginFlow:
    """One sign-in under way: what the callback must find again."""

    state: str
    nonce: str
    verifier: str
    """The PKCE code verifier (the issuer got its S256 challenge)."""
    redirect_uri: str
    expires: float
    """Epoch seconds."""

    @classmethod
    def new(cls, redirect_uri: str, expires: float) -> LoginFlow:
        state, nonce, verifier = (
            secrets.token_urlsafe(32),
            secrets.token_urlsafe(32),
            secrets.token_urlsafe(48),
        )
        return cls(state, nonce, verifier, redirect_uri, expires)

    @property
    def challenge(self) -> str:
        return (
            base64.urlsafe_b64encode(hashlib.sha256(self.verifier.encode()).digest())
            .rstrip(b"=")
            .decode()
        )


@dataclass(frozen=True, slots=True)
class IssuerMetadata:
    """What the gateway uses of the issuer's discovery document."""

    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    token_auth_methods: tuple[str, ...]
    id_token_algorithms: tuple[str, ...]
    userinfo_endpoint: str | None = None

    @classmethod
    def parse(cls, issuer: str, document: object) -> IssuerMetadata:
        if not isinstance(document, dict):
            raise ValueError("the discovery document is not a JSON object")
        if document.get("issuer") != issuer:
            raise ValueError("the discovery document names another issuer than console_oidc_issuer")
        urls = {}
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            value = document.get(name)
            if not isinstance(value, str) or not value.startswith(("https://", "http://")):
                raise ValueError(f"the discovery document has no {name}")
            urls[name] = value
        methods = document.get("token_endpoint_auth_methods_supported", ["client_secret_basic"])
        algorithms = document.get("id_token_signing_alg_values_supported", ["RS256"])
        userinfo = document.get("userinfo_endpoint")
        return cls(
            **urls,
            userinfo_endpoint=userinfo
            if isinstance(userinfo, str) and userinfo.startswith(("https://", "http://"))
            else None,
            token_auth_methods=tuple(m for m in methods if isinstance(m, str))
            if isinstance(methods, list)
            else (),
            id_token_algorithms=tuple(
                sorted(
                    ASYMMETRIC_ALGORITHMS.intersection(
                        algorithms if isinstance(algorithms, list) else []
                    )
                )
            ),
        )


class OidcLogin:
    """The console's sign-in through ``console_oidc_issuer``."""

    def __init__(
        self,
        settings: GatewaySettings,
        http: httpx.AsyncClient,
        sessions: ConsoleSessions,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.issuer = settings.console_oidc_issuer
        self._client_id = settings.console_oidc_client_id
        self._client_secret = settings.console_oidc_client_secret.get_secret_value()
        self._auth_method = settings.console_oidc_client_auth
        scopes = settings.console_oidc_scopes.split()
        self._scope = " ".join(["openid", *(s for s in scopes if s != "openid")])
        self._claim = settings.console_oidc_operator_claim
        self._operator_values = frozenset(settings.console_oidc_operator_values)
        self.login_seconds = settings.console_oidc_login_seconds
        self._timeout = settings.console_oidc_timeout_seconds
        self._metadata_seconds = settings.jwks_cache_seconds
        self._http = http
        self._flows = sessions.sealer("a2a-gateway console oidc login")
        self._tokens = JwtVerifier(
            JwksCache(
                http,
                cache_seconds=settings.jwks_cache_seconds,
                refresh_seconds=settings.jwks_refresh_seconds,
                timeout_seconds=self._timeout,
                max_bytes=settings.jwks_max_bytes,
            ),
            settings.jwt_leeway_seconds,
        )
        self._clock = clock
        self._metadata: tuple[IssuerMetadata, float] | None = None

    def __repr__(self) -> str:
        return f"OidcLogin({self.issuer!r})"

    # the start ---------------------------------------------------------------------------

    async def start(self, redirect_uri: str) -> tuple[str, str]:
        """The issuer's authorization URL to send the browser to, and the flow cookie's value."""
        metadata = await self.metadata()
        flow = LoginFlow.new(redirect_uri, self._clock() + self.login_seconds)
        query = urlencode({
            "response_type": "code", "client_id": self._client_id, "redirect_uri": redirect_uri,
            "scope": self._scope, "state": flow.state, "nonce": flow.nonce,
            "code_challenge": flow.challenge, "code_challenge_method": "S256",
        })
        separator = "&" if "?" in metadata.authorization_endpoint else "?"
        return f"{metadata.authorization_endpoint}{separator}{query}", self.seal(flow)

    def seal(self, flow: LoginFlow) -> str:
        return self._flows.seal(
            {
                "state": flow.state,
                "nonce": flow.nonce,
                "verifier": flow.verifier,
                "redirect": flow.redirect_uri,
                "exp": flow.expires,
            }
        )

    def open(self, value: str) -> LoginFlow:
        """The flow of the browser's cookie; ``SignInError`` when it has none that is valid."""
        body = self._flows.open(value) if value else None
        try:
            flow = (
                LoginFlow(
                    str(body["state"]),
                    str(body["nonce"]),
                    str(body["verifier"]),
                    str(body["redirect"]),
                    float(body["exp"]),
                )
                if body is not None
                else None
            )
        except (KeyError, TypeError, ValueError):
            flow = None
        if flow is None:
            raise SignInError(
                400,
                "No sign-in is under way in this browser (it was completed already, or "
                "began in another browser). Start again from the console.",
            )
        if flow.expires <= self._clock():
            raise SignInError(400, f"The sign-in took longer than {self.login_seconds:g} seconds "
                                   "(console_oidc_login_seconds). Start again from the console.")
        return flow

    # the callback ------------------------------------------------------------------------

    async def finish(self, flow: LoginFlow, query: Mapping[str, str]) -> OidcUser:
        """The operator the issuer's answer ``query`` signs in; ``SignInError`` otherwise."""
        if not hmac.compare_digest(query.get("state", "").encode(), flow.state.encode()):
            raise SignInError(400, "The sign-in's state does not match the one this browser began "
                                   "(an old or forged link). Start again from the console.")
        if "iss" in query and query["iss"] != self.issuer:
            raise SignInError(400, "The answer comes from another issuer than console_oidc_issuer.")
        if "error" in query:
            code = query["error"] if _ERROR_CODE.fullmatch(query["error"]) else "an error"
            raise SignInError(
                403 if code == "access_denied" else 400,
                f"The identity provider did not sign you in ({code}). "
                "Start again from the console.",
            )
        code = query.get("code", "")
        if not code:
            raise SignInError(
                400, "The identity provider's answer has no code. Start again from the console."
            )
        metadata = await self.metadata()
        id_token, access_token = await self._exchange(metadata, flow, code)
        claims = await self._verified_claims(metadata, id_token, flow)
        if self._claim not in claims and metadata.userinfo_endpoint and access_token:
            claims = {
                **await self._userinfo(metadata.userinfo_endpoint, access_token, claims["sub"]),
                **claims,
            }
        return self._operator(claims)

    async def _exchange(
        self, metadata: IssuerMetadata, flow: LoginFlow, code: str
    ) -> tuple[str, str | None]:
        """The ID token and the access token (if any) the code is exchanged for."""
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": flow.redirect_uri,
                "code_verifier": flow.verifier}
        auth = None
        method = self._client_auth(metadata)
        if method == "client_secret_basic":  # RFC 6749, 2.3.1: both form-encoded first
            auth = httpx.BasicAuth(quote_plus(self._client_id), quote_plus(self._client_secret))
        elif method == "client_secret_post":
            form |= {"client_id": self._client_id, "client_secret": self._client_secret}
        else:
            form["client_id"] = self._client_id
        try:
            response = await self._http.post(
                metadata.token_endpoint,
                data=form,
                auth=auth,
                timeout=self._timeout,
                headers={"Accept": "application/json"},
                follow_redirects=False,
            )
            body = orjson.loads(response.content) if response.content else {}
        except httpx.HTTPError as exc:
            log.warning("console_oidc_token_endpoint_unreachable", error=type(exc).__name__)
            raise SignInError(
                502,
                "The identity provider's token endpoint cannot be reached now. Try again later.",
            ) from None
        except orjson.JSONDecodeError:
            body = {}
        if response.status_code != 200:
            error = body.get("error") if isinstance(body, dict) else None
            code = (
                error
                if isinstance(error, str) and _ERROR_CODE.fullmatch(error)
                else f"HTTP {response.status_code}"
            )
            log.warning("console_oidc_code_refused", status=response.status_code, error=code)
            raise SignInError(
                400,
                f"The identity provider refused to exchange the sign-in code ({code}): it may "
                "have been used already or have expired. Start again from the console.",
            )
        token = body.get("id_token") if isinstance(body, dict) else None
        if not isinstance(token, str):
            raise SignInError(
                400,
                "The identity provider's token response has no ID token (is openid among "
                "the client's scopes?).",
            )
        access_token = body.get("access_token")
        return token, access_token if isinstance(access_token, str) else None

    async def _userinfo(self, url: str, access_token: str, subject: str) -> dict[str, Any]:
        """The user's claims from the issuer's userinfo endpoint (where issuers that keep the
        operator claim out of the ID token give it); they must name the ID token's subject."""
        try:
            response = await self._http.get(url, headers={"Authorization": f"Bearer {access_token}",
                                                          "Accept": "application/json"},
                                            timeout=self._timeout, follow_redirects=False)
        except httpx.HTTPError as exc:
            log.warning("console_oidc_userinfo_unreachable", error=type(exc).__name__)
            raise SignInError(
                502,
                "The identity provider's userinfo endpoint cannot be reached now. Try again later.",
            ) from None
        try:
            claims = orjson.loads(response.content) if response.status_code == 200 else None
        except orjson.JSONDecodeError:
            claims = None
        if not isinstance(claims, dict):
            raise SignInError(
                400,
                f"The identity provider's userinfo endpoint gave no JSON claims (HTTP "
                f"{response.status_code}); its {self._claim} claim cannot be read.",
            )
        if claims.get("sub") != subject:
            raise SignInError(
                400, "The identity provider's userinfo names another user than its ID token."
            )
        return claims

    def _client_auth(self, metadata: IssuerMetadata) -> str:
        if not self._client_secret:
            return "none"
        if self._auth_method != "auto":
            return self._auth_method
        for method in ("client_secret_basic", "client_secret_post"):
            if method in metadata.token_auth_methods:
                return method
        raise SignInError(
            400,
            "The identity provider takes neither client_secret_basic nor client_secret_post "
            "at its token endpoint (console_oidc_client_auth).",
        )

    async def _verified_claims(
        self, metadata: IssuerMetadata, token: str, flow: LoginFlow
    ) -> dict[str, Any]:
        config = JwtConfig(issuer=self.issuer, audience=self._client_id,
                           algorithms=list(metadata.id_token_algorithms or ("RS256",)),
                           principal_claim="sub", tenant_claim=None, jwks_url=metadata.jwks_uri)
        try:
            claims = (await self._tokens.identity(config, token)).claims
        except InvalidToken as exc:
            raise SignInError(
                400,
                f"The identity provider's ID token is not valid: {exc}. Start again from "
                "the console.",
            ) from None
        nonce = claims.get("nonce")
        if not isinstance(nonce, str) or not hmac.compare_digest(
            nonce.encode(), flow.nonce.encode()
        ):
            raise SignInError(
                400,
                "The ID token is not of the sign-in this browser began (its nonce differs). "
                "Start again from the console.",
            )
        audiences = claims.get("aud")
        if (
            isinstance(audiences, list)
            and len(audiences) > 1
            and claims.get("azp") != self._client_id
        ):
            raise SignInError(400, "The ID token was issued to another client (azp).")
        return claims

    def _operator(self, claims: dict[str, Any]) -> OidcUser:
        name = next((v for k in ("name", "preferred_username", "email", "sub")
                     if isinstance(v := claims.get(k), str) and v), "")[:200]
        user = OidcUser(self.issuer, str(claims["sub"]), name)
        value = claims.get(self._claim)
        values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        if not any(isinstance(v, str) and v in self._operator_values for v in values):
            log.warning("console_oidc_not_an_operator", subject=user.subject)
            raise SignInError(
                403,
                f"{name} signed in at {self.issuer}, but is not a gateway operator: the "
                f"user's {self._claim} claim holds none of the operator values "
                "(console_oidc_operator_values).",
                subject=user.subject,
            )
        return user

    # the issuer's metadata ---------------------------------------------------------------

    async def metadata(self) -> IssuerMetadata:
        """The issuer's discovery document, fetched again after ``jwks_cache_seconds``."""
        if (
            self._metadata is not None
            and self._clock() - self._metadata[1] < self._metadata_seconds
        ):
            return self._metadata[0]
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            response = await self._http.get(url, timeout=self._timeout, follow_redirects=False)
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            metadata = IssuerMetadata.parse(self.issuer, orjson.loads(response.content))
        except (httpx.HTTPError, orjson.JSONDecodeError, ValueError) as exc:
            reason = (
                str(exc).splitlines()[0][:200]
                if isinstance(exc, ValueError)
                else type(exc).__name__
            )
            log.warning("console_oidc_discovery_failed", url=url, error=reason)
            if self._metadata is not None:
                return self._metadata[0]  # keep what the issuer said last
            raise SignInError(
                502,
                f"The identity provider {self.issuer} cannot be reached now ({reason}). "
                "Try again later, or log in with an operator key.",
            ) from None
        self._metadata = (metadata, self._clock())
        return metadata


OIDC_LOGIN = web.AppKey("console_oidc_login", OidcLogin)


def _page(status: int, title: str, message: str) -> web.Response:
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)} · a2a-gateway console</title>"
        '<link rel="stylesheet" href="/console/static/console.css"></head><body>'
        "<header><h1>a2a-gateway</h1></header><main>"
        f'<h2 id="sign-in-title">{html.escape(title)}</h2><p id="sign-in-message" class="error">'
        f'{html.escape(message)}</p><p><a href="/console">Back to the console</a></p>'
        "</main></body></html>"
    )
    return web.Response(status=status, text=body, content_type="text/html",
                        headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})


async def sign_in(request: web.Request) -> web.StreamResponse:
    login = request.app[OIDC_LOGIN]
    base = request.app[GATEWAY].base_url(request).rstrip("/")
    try:
        url, flow = await login.start(base + CALLBACK_PATH)
    except SignInError as exc:
        return _page(exc.status, "Sign-in unavailable", exc.message)
    response = web.Response(status=303, headers={"Location": url, "Cache-Control": "no-store",
                                                 "Referrer-Policy": "no-referrer"})
    response.set_cookie(
        FLOW_COOKIE,
        flow,
        max_age=int(login.login_seconds) + 1,
        path=FLOW_PATH,
        httponly=True,
        samesite="Lax",
        secure=base.startswith("https://"),
    )
    return response


async def callback(request: web.Request) -> web.StreamResponse:
    login = request.app[OIDC_LOGIN]
    gateway = request.app[GATEWAY]
    base = gateway.base_url(request).rstrip("/")
    sessions = gateway.operators.sessions
    assert sessions is not None  # the routes exist only with the console on
    try:
        flow = login.open(cookie_value(request.headers, FLOW_COOKIE))
        user = await login.finish(flow, request.query)
    except SignInError as exc:
        log.warning("console_oidc_sign_in_failed", status=exc.status, reason=exc.message)
        await request.app[REFUSED_SIGN_INS].record(
            gateway.store, f"oidc:{exc.subject}" if exc.subject else "unknown",
            {"method": "oidc", "issuer": login.issuer, "status": exc.status,
             "reason": exc.message},
        )
        response = _page(exc.status, "Sign-in failed", exc.message)
    else:
        _, cookie = sessions.issue(None, user)
        log.info("console_oidc_signed_in", subject=user.subject, issuer=user.issuer)
        await record(gateway.store, f"oidc:{user.subject}", "console.signed_in",
                     details={"method": "oidc", "issuer": user.issuer, "name": user.name})
        response = web.Response(
            status=303, headers={"Location": base + "/console", "Cache-Control": "no-store"}
        )
        set_session_cookie(response, sessions, cookie, secure=base.startswith("https://"))
    response.del_cookie(FLOW_COOKIE, path=FLOW_PATH)  # a sign-in completes once
    return response


async def options(request: web.Request) -> web.Response:
    """What the login page offers: ``{"issuer": ..., "login": "/console/oidc/login"}``."""
    login = request.app[OIDC_LOGIN]
    return web.json_response({"issuer": login.issuer, "login": f"{FLOW_PATH}/login"},
                             headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})


def add_oidc_routes(app: web.Application) -> None:
    app.router.add_get(f"{FLOW_PATH}/login", sign_in)
    app.router.add_get(CALLBACK_PATH, callback)
    app.router.add_get("/console/api/oidc", options)
