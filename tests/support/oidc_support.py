"""The real OpenID Provider the console's OIDC tests sign in at (tests/oidc_provider, started
by .ci/services/70-oidc.sh, ``A2A_TEST_OIDC_ISSUER``): its clients, the gateway settings that
use one, and a user's way through its development login form over plain HTTP.

A login ``name:group1,group2`` signs in a user named ``name`` whose ``groups`` claim is
``[group1, group2]`` (tests/oidc_provider/provider.mjs)."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import orjson

from tests.support.harness import require_env

ISSUER_VAR = "A2A_TEST_OIDC_ISSUER"
CLIENTS = {client["token_endpoint_auth_method"]: client for client in orjson.loads(
    (Path(__file__).parents[1] / "oidc_provider" / "clients.json").read_bytes())}
"""The provider's clients by how each authenticates at its token endpoint."""
CONFIDENTIAL, SECRET_POST, PUBLIC = (
    CLIENTS["client_secret_basic"],
    CLIENTS["client_secret_post"],
    CLIENTS["none"],
)
OPERATORS_GROUP = "a2a-operators"
_FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')
_CANCEL_LINK = re.compile(r'<a href="([^"]+)">\[ Cancel \]</a>')


def issuer() -> str:
    """The provider's URL; the test skips without it (a failure in CI)."""
    return require_env(ISSUER_VAR)


def configured_issuer() -> str | None:
    """The provider's URL, or None: for suites whose other parts run without it."""
    return os.environ.get(ISSUER_VAR) or None


def oidc_settings(issuer_url: str, client: dict[str, Any] = CONFIDENTIAL) -> dict[str, Any]:
    """Gateway settings for a console whose operators are the issuer's ``a2a-operators``."""
    return {
        "console": True,
        "console_oidc_issuer": issuer_url,
        "console_oidc_client_id": client["client_id"],
        "console_oidc_client_secret": client.get("client_secret", ""),
        "console_oidc_operator_claim": "groups",
        "console_oidc_operator_values": [OPERATORS_GROUP],
    }


async def sign_in_at_issuer(
    http: httpx.AsyncClient,
    authorization_url: str,
    login: str,
    back_to: str,
    *,
    cancel: bool = False,
) -> str:
    """Follows the issuer's pages from ``authorization_url`` as a browser would, signing in as
    ``login`` and consenting (``cancel``: pressing its Cancel link instead); returns the URL the
    issuer sends the browser back to (under ``back_to``), not yet opened."""
    url, method, form = authorization_url, "GET", None
    for _ in range(10):
        response = await http.request(method, url, data=form, follow_redirects=False)
        if response.is_redirect:
            url, method, form = urljoin(url, response.headers["Location"]), "GET", None
            if url.startswith(back_to):
                return url
            continue
        assert response.status_code == 200, (response.status_code, response.text[:500])
        if cancel:
            url, method, form = (
                urljoin(url, html.unescape(_CANCEL_LINK.search(response.text)[1])),
                "GET",
                None,
            )
            continue
        action = _FORM_ACTION.search(response.text)
        assert action, response.text[:500]
        url, method = urljoin(url, html.unescape(action[1])), "POST"
        consent = 'name="prompt" value="consent"' in response.text
        form = (
            {"prompt": "consent"}
            if consent
            else {"prompt": "login", "login": login, "password": "any"}
        )
    raise AssertionError("the issuer never sent the browser back")
