"""The console's OIDC sign-in without an issuer: the signed flow cookie (state, nonce, PKCE
verifier; tampered, expired or a session cookie instead: refused), the callback's checks
that come before any call to the issuer (state, iss, the issuer's error), who counts as an
operator by the claim, sessions naming the OIDC user (refused once the issuer is no longer
configured), and the settings an issuer needs."""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import parse_qs

import httpx
import pytest
from pydantic import SecretStr, ValidationError

from a2a_gateway.auth.callers import build_authenticator
from a2a_gateway.auth.operators import OperatorAuth, OperatorKeys
from a2a_gateway.auth.sessions import COOKIE, ConsoleSessions, OidcUser
from a2a_gateway.console.oidc import IssuerMetadata, LoginFlow, OidcLogin, SignInError
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.memory import MemoryStore

ISSUER = "https://id.example.test"
KEY = "operator-key-" + "k" * 20


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def settings(**changes) -> GatewaySettings:
    return GatewaySettings(**{
        "console": True, "console_oidc_issuer": ISSUER, "console_oidc_client_id": "console",
        "console_oidc_operator_values": ["a2a-operators", "admins"], **changes,
    })


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sessions(clock) -> ConsoleSessions:
    return ConsoleSessions("session-secret", 3600, clock=clock)


@pytest.fixture
async def login(sessions, clock):
    async with httpx.AsyncClient() as http:  # never used: no test reaches the issuer
        yield OidcLogin(settings(), http, sessions, clock=clock)


def test_pkce_challenge_is_s256_of_the_verifier():
    flow = LoginFlow("s", "n", "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk", "https://gw/cb", 0)
    assert flow.challenge == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"  # RFC 7636, appendix B
    fresh = LoginFlow.new("https://gw/cb", 0)
    assert len({fresh.state, fresh.nonce, fresh.verifier}) == 3 and len(fresh.verifier) >= 43
    digest = hashlib.sha256(fresh.verifier.encode()).digest()
    assert fresh.challenge == base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_the_flow_cookie_opens_only_as_sealed_and_until_it_expires(login, sessions, clock):
    flow = LoginFlow.new("https://gw/console/oidc/callback", clock.now + 600)
    sealed = login.seal(flow)
    assert login.open(sealed) == flow
    payload, _, signature = sealed.partition(".")
    flip = {"A": "B"}.get(signature[0], "A")  # another first character of the signature
    for forged in (
        f"{payload}.{flip}{signature[1:]}",
        f"{payload[:-2]}{payload[-1]}{payload[-2]}.{signature}",
        f"{payload}.",
        "",
        "garbage",
        f"{payload}.\u00e9{signature[1:]}",
        f"\udcff{payload}.{signature}",
    ):
        with pytest.raises(SignInError, match="No sign-in is under way") as refused:
            login.open(forged)
        assert refused.value.status == 400
    other_secret = OidcLogin(
        settings(), login._http, ConsoleSessions("another-secret", 3600, clock=clock), clock=clock
    )
    with pytest.raises(SignInError, match="No sign-in is under way"):
        other_secret.open(sealed)
    clock.now += 601
    with pytest.raises(SignInError, match="longer than 600 seconds"):
        login.open(sealed)


def test_a_session_cookie_is_no_flow_cookie_and_a_flow_cookie_no_session(login, sessions, clock):
    _, session_cookie = sessions.issue("ref")
    with pytest.raises(SignInError):
        login.open(session_cookie)
    flow_cookie = login.seal(LoginFlow.new("https://gw/cb", clock.now + 600))
    assert sessions.read({"Cookie": f"{COOKIE}={flow_cookie}"}) is None


@pytest.mark.parametrize(("query", "status", "message"), [
    ({"state": "other", "code": "c"}, 400, "state does not match"),
    ({"code": "c"}, 400, "state does not match"),
    ({"state": "STATE", "code": "c", "iss": "https://evil.example"}, 400, "another issuer"),
    ({"state": "STATE", "error": "access_denied"}, 403, r"did not sign you in \(access_denied\)"),
    ({"state": "STATE", "error": "<b>phish</b>"}, 400, r"did not sign you in \(an error\)"),
    ({"state": "STATE"}, 400, "has no code"),
])
async def test_the_callback_refuses_before_calling_the_issuer(login, clock, query, status, message):
    flow = LoginFlow("STATE", "nonce", "verifier", "https://gw/cb", clock.now + 600)
    with pytest.raises(SignInError, match=message) as refused:
        await login.finish(flow, query)
    assert refused.value.status == status
    assert "phish" not in refused.value.message


@pytest.mark.parametrize("groups", [["dev", "admins"], "a2a-operators"])
def test_a_user_whose_claim_holds_an_operator_value_is_an_operator(login, groups):
    user = login._operator({"sub": "u-1", "name": "Alice", "groups": groups})
    assert user == OidcUser(ISSUER, "u-1", "Alice")


@pytest.mark.parametrize("claims", [
    {"sub": "u-2", "preferred_username": "bob", "groups": ["dev", "a2a-operators-not"]},
    {"sub": "u-2", "preferred_username": "bob", "groups": "dev"},
    {"sub": "u-2", "preferred_username": "bob"},
    {"sub": "u-2", "preferred_username": "bob", "groups": [{"a2a-operators": 1}]},
])
def test_anyone_else_is_refused_with_403_naming_only_the_user(login, claims):
    with pytest.raises(SignInError) as refused:
        login._operator(claims)
    assert refused.value.status == 403
    assert "bob" in refused.value.message and "not a gateway operator" in refused.value.message
    assert "dev" not in refused.value.message and "a2a-operators" not in refused.value.message


def test_the_name_shown_falls_back_to_the_email_then_the_subject(login):
    assert login._operator({"sub": "u", "email": "c@x", "groups": ["admins"]}).name == "c@x"
    assert login._operator({"sub": "u", "groups": ["admins"]}).name == "u"


async def test_an_oidc_session_is_a_gateway_operator_while_its_issuer_is_configured(sessions):
    _, cookie = sessions.issue(None, OidcUser(ISSUER, "u-1", "Alice"))
    headers = {"Cookie": f"{COOKIE}={cookie}"}
    found = sessions.read(headers)
    assert (
        found is not None
        and found.key_ref is None
        and found.oidc == OidcUser(ISSUER, "u-1", "Alice")
    )
    async with httpx.AsyncClient() as http:
        callers = build_authenticator(GatewaySettings(), MemoryStore(), http)
        keys = OperatorKeys([SecretStr(KEY)])
        operator = OperatorAuth(keys, callers, sessions, oidc_issuer=ISSUER).gateway_operator(
            headers
        )
        assert operator is not None and operator.gateway and operator.name == "oidc:u-1"
        assert (
            OperatorAuth(keys, callers, sessions, oidc_issuer="").gateway_operator(headers) is None
        )
        assert (
            OperatorAuth(keys, callers, sessions, oidc_issuer="https://other").gateway_operator(
                headers
            )
            is None
        )
        _, key_cookie = sessions.issue(keys.ref_of(KEY))
        by_key = OperatorAuth(keys, callers, sessions, oidc_issuer=ISSUER).gateway_operator(
            {"Cookie": f"{COOKIE}={key_cookie}"})
        assert (
            by_key is not None and by_key.name == "console session" and by_key.session.oidc is None
        )


DISCOVERY = {
    "issuer": ISSUER,
    "authorization_endpoint": f"{ISSUER}/auth",
    "token_endpoint": f"{ISSUER}/token",
    "jwks_uri": f"{ISSUER}/jwks",
}


def test_discovery_takes_asymmetric_algorithms_and_defaults_to_client_secret_basic():
    metadata = IssuerMetadata.parse(ISSUER, {**DISCOVERY, "id_token_signing_alg_values_supported": [
        "none", "HS256", "RS256", "ES256"]})
    assert metadata.id_token_algorithms == ("ES256", "RS256")
    assert metadata.token_auth_methods == ("client_secret_basic",)  # OpenID Discovery's default
    assert IssuerMetadata.parse(ISSUER, DISCOVERY).id_token_algorithms == ("RS256",)


@pytest.mark.parametrize(("document", "message"), [
    ({**DISCOVERY, "issuer": "https://evil.example"}, "another issuer"),
    ({k: v for k, v in DISCOVERY.items() if k != "token_endpoint"}, "no token_endpoint"),
    ({**DISCOVERY, "jwks_uri": "file:///etc/keys"}, "no jwks_uri"),
    (["not", "an", "object"], "not a JSON object"),
])
def test_a_discovery_document_of_another_issuer_or_without_endpoints_is_refused(document, message):
    with pytest.raises(ValueError, match=message):
        IssuerMetadata.parse(ISSUER, document)


@pytest.mark.parametrize(
    ("secret", "method", "sent_basic", "in_body"),
    [
        (
            "s+e/c r:t",
            "auto",
            "console%3A1:s%2Be%2Fc+r%3At",
            {"client_id": None, "client_secret": None},
        ),
        (
            "s+e/c r:t",
            "client_secret_post",
            None,
            {"client_id": "console:1", "client_secret": "s+e/c r:t"},
        ),
        ("", "auto", None, {"client_id": "console:1", "client_secret": None}),
    ],
    ids=["basic", "post", "public"],
)
async def test_the_code_is_exchanged_with_the_verifier_and_the_client_authenticated_as_set(
        sessions, clock, secret, method, sent_basic, in_body):
    sent: list[httpx.Request] = []

    def issuer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/openid-configuration"):
            return httpx.Response(200, json={**DISCOVERY, "token_endpoint_auth_methods_supported": [
                "client_secret_post", "client_secret_basic"]})
        sent.append(request)
        return httpx.Response(
            400, json={"error": "invalid_grant", "error_description": "grant request is invalid"}
        )

    configured = settings(console_oidc_client_id="console:1", console_oidc_client_secret=secret,
                          console_oidc_client_auth=method)
    async with httpx.AsyncClient(transport=httpx.MockTransport(issuer)) as http:
        login = OidcLogin(configured, http, sessions, clock=clock)
        flow = LoginFlow(
            "STATE", "nonce", "the-verifier", "https://gw/console/oidc/callback", clock.now + 600
        )
        with pytest.raises(
            SignInError, match=r"refused to exchange the sign-in code \(invalid_grant\)"
        ):
            await login.finish(flow, {"state": "STATE", "code": "the-code"})
    [request] = sent
    assert request.url == f"{ISSUER}/token"
    form = {k: v[0] for k, v in parse_qs(request.content.decode()).items()}
    assert form["grant_type"] == "authorization_code" and form["code"] == "the-code"
    assert form["code_verifier"] == "the-verifier" and form["redirect_uri"] == "https://gw/console/oidc/callback"
    for name, value in in_body.items():
        assert form.get(name) == value, name
    basic = request.headers.get("Authorization")
    assert (
        base64.b64decode(basic.removeprefix("Basic ")).decode() if basic else None
    ) == sent_basic


@pytest.mark.parametrize(
    ("answer", "status", "message"),
    [
        (httpx.Response(200, json={"sub": "u-1", "roles": ["admins"]}), None, None),
        (
            httpx.Response(200, json={"sub": "someone-else", "roles": ["admins"]}),
            400,
            "names another user",
        ),
        (httpx.Response(401, json={"error": "invalid_token"}), 400, r"no JSON claims \(HTTP 401\)"),
        (
            httpx.Response(
                200, text="eyJhbGciOi.signed.userinfo", headers={"Content-Type": "application/jwt"}
            ),
            400,
            "no JSON claims",
        ),
        (httpx.ConnectError("refused"), 502, "cannot be reached now"),
    ],
)
async def test_userinfo_claims_must_name_the_id_tokens_subject(
    sessions, clock, answer, status, message
):
    seen: list[str] = []

    def issuer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        if isinstance(answer, Exception):
            raise answer
        return answer

    async with httpx.AsyncClient(transport=httpx.MockTransport(issuer)) as http:
        login = OidcLogin(
            settings(console_oidc_operator_claim="roles"), http, sessions, clock=clock
        )
        if status is None:
            assert (await login._userinfo(f"{ISSUER}/me", "the-access-token", "u-1"))["roles"] == [
                "admins"
            ]
        else:
            with pytest.raises(SignInError, match=message) as refused:
                await login._userinfo(f"{ISSUER}/me", "the-access-token", "u-1")
            assert (
                refused.value.status == status and "the-access-token" not in refused.value.message
            )
    assert seen == ["Bearer the-access-token"]


@pytest.mark.parametrize(("changes", "message"), [
    ({"console_oidc_issuer": "http://id.example.test"}, "must be an https URL"),
    ({"console_oidc_client_id": ""}, "needs console_oidc_client_id"),
    ({"console_oidc_operator_values": []}, "console_oidc_operator_values"),
    ({"console_oidc_operator_claim": ""}, "console_oidc_operator_claim"),
])
def test_an_issuer_needs_https_a_client_id_and_operator_values(changes, message):
    with pytest.raises(ValidationError, match=message):
        settings(**changes)


def test_settings_take_loopback_http_and_comma_separated_values(monkeypatch):
    assert settings(console_oidc_issuer="http://127.0.0.1:5556").console_oidc_issuer == "http://127.0.0.1:5556"
    monkeypatch.setenv("A2A_GATEWAY_CONSOLE_OIDC_OPERATOR_VALUES", "ops, admins")
    assert GatewaySettings().console_oidc_operator_values == ["ops", "admins"]
    assert settings(
        console_oidc_client_secret="s3cret"
    ).console_oidc_client_secret.get_secret_value() not in repr(
        settings(console_oidc_client_secret="s3cret")
    )
