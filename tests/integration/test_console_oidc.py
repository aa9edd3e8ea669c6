"""Signing in to the console through a real OpenID Provider (tests/oidc_provider, panva's
oidc-provider) over plain HTTP, through a running gateway: an operator of the issuer's
``a2a-operators`` group gets a console session that lists endpoints and changes them with its
CSRF token (confidential clients with client_secret_basic and client_secret_post, and a
public client with PKCE only; a wrong client secret is a 400), also when the operator claim
comes from the userinfo endpoint only; a user outside the group gets 403; a tampered state, a
replayed callback, an ID token of another sign-in (its nonce), a sign-in cancelled at the
issuer and an issuer that cannot be reached are each a 4xx (or 502) page, never a 500, with no
token or code in it (nor in the logs); a sign-in begun on one replica completes on another
with the same session secret."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from a2a_gateway.auth.sessions import COOKIE
from a2a_gateway.console.oidc import FLOW_COOKIE, OIDC_LOGIN
from a2a_gateway.stores.base import AuditQuery
from tests.support.harness import RunningGateway, running_gateway
from tests.support.oidc_support import (
    CONFIDENTIAL,
    PUBLIC,
    SECRET_POST,
    issuer,
    oidc_settings,
    sign_in_at_issuer,
)

pytestmark = pytest.mark.timeout(120)
OPERATOR = "alice:a2a-operators,dev"


@asynccontextmanager
async def oidc_gateway(client: dict = CONFIDENTIAL, **settings) -> AsyncIterator[RunningGateway]:
    async with running_gateway(
        **{**oidc_settings(issuer(), client), "console_session_secret": "s" * 32, **settings}
    ) as gw:
        yield gw


@pytest.fixture
async def gw() -> AsyncIterator[RunningGateway]:
    async with oidc_gateway() as running:
        yield running


@pytest.fixture
async def browser() -> AsyncIterator[httpx.AsyncClient]:
    """One cookie jar for the gateway and the issuer, as a browser has."""
    async with httpx.AsyncClient(timeout=60) as http:
        yield http


async def start(browser: httpx.AsyncClient, gw: RunningGateway) -> str:
    """``/console/oidc/login``: the issuer's authorization URL it sends the browser to."""
    response = await browser.get(f"{gw.base_url}/console/oidc/login", follow_redirects=False)
    assert response.status_code == 303, response.text
    assert browser.cookies.get(FLOW_COOKIE)
    return response.headers["Location"]


async def callback_url(
    browser: httpx.AsyncClient, gw: RunningGateway, login: str = OPERATOR, **how
) -> str:
    return await sign_in_at_issuer(
        browser, await start(browser, gw), login, f"{gw.base_url}/console/oidc/", **how
    )


def assert_refusal_page(response: httpx.Response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in response.headers["Content-Security-Policy"]
    for word in words:
        assert word in response.text, (word, response.text)
    for secret in ("code=", "eyJ", CONFIDENTIAL["client_secret"]):
        assert secret not in response.text
    assert COOKIE not in [c.split("=")[0] for c in response.headers.get_list("Set-Cookie")]


@pytest.mark.parametrize(
    ("client", "auth"),
    [(CONFIDENTIAL, "auto"), (SECRET_POST, "client_secret_post"), (PUBLIC, "auto")],
    ids=["client_secret_basic", "client_secret_post", "public-pkce"],
)
async def test_an_operator_signs_in_and_uses_the_admin_api_with_its_csrf_token(
    client, auth, browser, capsys
):
    async with oidc_gateway(client, console_oidc_client_auth=auth) as gw:
        endpoint_id = await gw.add_endpoint(name="oidc target")
        authorization = await start(browser, gw)
        asked = parse_qs(urlsplit(authorization).query)
        assert asked["code_challenge_method"] == ["S256"] and asked["client_id"] == [
            client["client_id"]
        ]
        assert asked["redirect_uri"] == [f"{gw.base_url}/console/oidc/callback"]
        assert "groups" in asked["scope"][0].split() and asked["nonce"] and asked["state"]
        back = await sign_in_at_issuer(
            browser, authorization, OPERATOR, f"{gw.base_url}/console/oidc/"
        )
        done = await browser.get(back, follow_redirects=False)
        assert done.status_code == 303 and done.headers["Location"] == f"{gw.base_url}/console"
        assert browser.cookies.get(COOKIE) and not browser.cookies.get(FLOW_COOKIE)

        session = (await browser.get(f"{gw.base_url}/console/api/session")).json()
        assert session["operator"] == {"via": "oidc", "name": "alice", "issuer": issuer()}
        listed = await browser.get(f"{gw.base_url}/admin/api/endpoints")
        assert listed.status_code == 200 and endpoint_id in listed.text
        disable = f"{gw.base_url}/admin/api/endpoints/{endpoint_id}/disable"
        assert (await browser.post(disable)).status_code == 403  # no CSRF token
        assert (await gw.store.get_endpoint(endpoint_id)).enabled
        changed = await browser.post(disable, headers={"X-CSRF-Token": session["csrf"]})
        assert changed.status_code == 200, changed.text
        assert not (await gw.store.get_endpoint(endpoint_id)).enabled
        audited = (await gw.store.list_audit_entries(AuditQuery())).entries
        assert [(e.action, e.actor) for e in audited] == [
            ("endpoint.disabled", f"oidc:{OPERATOR}"), ("console.signed_in", f"oidc:{OPERATOR}")
        ]
    logged = capsys.readouterr().out
    assert "console_oidc_signed_in" in logged and "alice:a2a-operators,dev" in logged  # the subject
    code = parse_qs(urlsplit(back).query)["code"][0]
    for secret in (code, "eyJ", client.get("client_secret", code), session["csrf"]):
        assert secret not in logged


async def test_the_redirect_uri_is_under_the_public_base_url_and_the_flow_cookie_lax_and_secure(
    browser,
):
    async with oidc_gateway(public_base_url="https://gw.example.test/") as gw:
        response = await browser.get(f"{gw.base_url}/console/oidc/login", follow_redirects=False)
    assert response.status_code == 303
    asked = parse_qs(urlsplit(response.headers["Location"]).query)
    assert asked["redirect_uri"] == ["https://gw.example.test/console/oidc/callback"]
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith(f"{FLOW_COOKIE}=")
    for attribute in ("HttpOnly", "Secure", "SameSite=Lax", "Path=/console/oidc", "Max-Age=601"):
        assert attribute in cookie, cookie


async def test_a_wrong_client_secret_is_a_400_page_that_does_not_show_it(browser):
    async with oidc_gateway(console_oidc_client_secret="not-the-client-secret-at-all") as gw:
        refused = await browser.get(await callback_url(browser, gw), follow_redirects=False)
    assert_refusal_page(refused, 400, "refused to exchange the sign-in code (invalid_client)")
    assert "not-the-client-secret-at-all" not in refused.text
    assert not browser.cookies.get(COOKIE)


async def test_a_user_outside_the_operator_group_gets_403_and_no_session(gw, browser):
    refused = await browser.get(
        await callback_url(browser, gw, "bob:developers"), follow_redirects=False
    )
    assert_refusal_page(refused, 403, "bob", "not a gateway operator", "groups")
    assert "developers" not in refused.text  # the claim's values are not repeated
    [failed] = (await gw.store.list_audit_entries(AuditQuery())).entries
    assert (failed.action, failed.actor, failed.details["status"]) == (
        "console.sign_in_failed", "oidc:bob:developers", 403
    )
    assert not browser.cookies.get(COOKIE)
    assert (await browser.get(f"{gw.base_url}/admin/api/endpoints")).status_code == 401


async def test_an_operator_claim_only_the_userinfo_endpoint_gives_is_read_there(browser):
    async with oidc_gateway(console_oidc_operator_claim="roles") as gw:
        refused = await browser.get(
            await callback_url(browser, gw, "bob:developers"), follow_redirects=False
        )
        assert_refusal_page(refused, 403, "bob", "roles claim holds none")
        browser.cookies.clear()  # bob's session at the issuer too
        signed_in = await browser.get(await callback_url(browser, gw), follow_redirects=False)
        assert signed_in.status_code == 303, signed_in.text
        assert (await browser.get(f"{gw.base_url}/admin/api/endpoints")).status_code == 200


async def test_a_tampered_state_is_refused(gw, browser):
    back = urlsplit(await callback_url(browser, gw))
    query = {k: v[0] for k, v in parse_qs(back.query).items()}
    tampered = await browser.get(
        f"{gw.base_url}{back.path}?{urlencode({**query, 'state': 'x' + query['state']})}",
        follow_redirects=False,
    )
    assert_refusal_page(tampered, 400, "state does not match")
    assert not browser.cookies.get(COOKIE)


async def test_a_replayed_callback_is_refused(gw, browser, capsys):
    back = await callback_url(browser, gw)
    flow = browser.cookies.get(FLOW_COOKIE)
    assert (await browser.get(back, follow_redirects=False)).status_code == 303
    browser.cookies.clear()
    again = await browser.get(back, follow_redirects=False)  # the flow cookie went with the first
    assert_refusal_page(again, 400, "No sign-in is under way")
    browser.cookies.set(FLOW_COOKIE, flow)  # even with it: the issuer takes a code once
    replayed = await browser.get(back, follow_redirects=False)
    assert_refusal_page(replayed, 400, "refused to exchange the sign-in code", "invalid_grant")
    assert not browser.cookies.get(COOKIE)
    logged = capsys.readouterr().out
    assert "console_oidc_sign_in_failed" in logged and "invalid_grant" in logged
    assert parse_qs(urlsplit(back).query)["code"][0] not in logged


async def test_a_sign_in_begun_on_one_replica_completes_on_another_with_the_same_secret(browser):
    async with oidc_gateway() as first, oidc_gateway() as second, \
            oidc_gateway(console_session_secret="t" * 32) as stranger:
        back = urlsplit(await callback_url(browser, first))
        flow = browser.cookies.get(FLOW_COOKIE)
        refused = await browser.get(
            f"{stranger.base_url}{back.path}?{back.query}", follow_redirects=False
        )
        assert_refusal_page(refused, 400, "No sign-in is under way")
        browser.cookies.set(FLOW_COOKIE, flow)
        done = await browser.get(
            f"{second.base_url}{back.path}?{back.query}", follow_redirects=False
        )
        assert done.status_code == 303, done.text
        for replica in (first, second):
            assert (await browser.get(f"{replica.base_url}/admin/api/endpoints")).status_code == 200
        assert (await browser.get(f"{stranger.base_url}/admin/api/endpoints")).status_code == 401


async def test_an_id_token_of_another_sign_in_is_refused_by_its_nonce(gw, browser):
    back = await callback_url(browser, gw)
    login = gw.app[OIDC_LOGIN]
    flow = login.open(browser.cookies.get(FLOW_COOKIE))
    other = dataclasses.replace(
        flow, nonce=uuid.uuid4().hex
    )  # same state and verifier, another nonce
    browser.cookies.set(FLOW_COOKIE, login.seal(other))
    refused = await browser.get(back, follow_redirects=False)
    assert_refusal_page(refused, 400, "nonce differs")
    assert not browser.cookies.get(COOKIE)


async def test_a_sign_in_cancelled_at_the_issuer_is_refused_with_its_error(gw, browser):
    back = await callback_url(browser, gw, cancel=True)
    assert "error=access_denied" in back
    refused = await browser.get(back, follow_redirects=False)
    assert_refusal_page(refused, 403, "did not sign you in (access_denied)")


async def test_a_callback_without_the_flow_cookie_is_refused(gw, browser):
    refused = await browser.get(
        f"{gw.base_url}/console/oidc/callback?code=abc&state=def", follow_redirects=False
    )
    assert_refusal_page(refused, 400, "No sign-in is under way")


async def test_an_issuer_that_cannot_be_reached_is_a_502_page(browser):
    async with running_gateway(
        **oidc_settings("http://127.0.0.1:9"), console_oidc_timeout_seconds=5
    ) as gw:
        options = (await browser.get(f"{gw.base_url}/console/api/oidc")).json()
        assert options == {"issuer": "http://127.0.0.1:9", "login": "/console/oidc/login"}
        refused = await browser.get(f"{gw.base_url}/console/oidc/login", follow_redirects=False)
        assert_refusal_page(refused, 502, "cannot be reached now", "operator key")
        assert not browser.cookies.get(FLOW_COOKIE)
