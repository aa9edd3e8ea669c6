"""What the admin API's tests share: the gateway operator key they run with, a call to
``/admin/api`` with it (or with other headers), a caller's API key on an endpoint, and the
check that a route refuses everyone but an operator."""

from __future__ import annotations

import uuid

import httpx

from a2a_gateway.auth.api_keys import make_key
from tests.support.harness import RunningGateway

OPERATOR_KEY = "op-" + uuid.uuid4().hex
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}
API_KEY_SECRET = b"a2a-gateway-api-key"  # the default api_key_secret


async def admin(
    gw: RunningGateway, method: str, path: str, *, headers: dict[str, str] | None = None, **kwargs
) -> httpx.Response:
    """``method /admin/api<path>`` as the operator (``headers``: as someone else)."""
    async with httpx.AsyncClient(base_url=gw.base_url, timeout=30) as http:
        return await http.request(
            method,
            f"/admin/api{path}",
            headers=AS_OPERATOR if headers is None else headers,
            **kwargs,
        )


async def new_caller_key(gw: RunningGateway, endpoint_id: str, principal: str = "alice") -> str:
    """A new API key of a caller (not an operator) of ``endpoint_id``."""
    row, key = make_key(
        API_KEY_SECRET, endpoint_id=endpoint_id, tenant="default", principal=principal
    )
    await gw.store.create_api_key(row)
    return key


async def assert_needs_an_operator(
    gw: RunningGateway, method: str, path: str, key: str
) -> list[httpx.Response]:
    """401 with a Bearer challenge without a credential and with an unknown bearer token, 403
    for the caller's API ``key`` in either header (not repeated); the 403 answers."""
    none = await admin(gw, method, path, headers={})
    assert none.status_code == 401 and none.headers["WWW-Authenticate"].startswith("Bearer"), (
        path,
        none.text,
    )
    refusals = []
    for sent in ({"Authorization": f"Bearer {key}"}, {"X-API-Key": key}):
        refused = await admin(gw, method, path, headers=sent)
        assert refused.status_code == 403, (path, refused.text)
        assert key not in refused.text
        refusals.append(refused)
    wrong = await admin(
        gw, method, path, headers={"Authorization": "Bearer not-an-operator-key-at-all"}
    )
    assert wrong.status_code == 401, (path, wrong.text)
    return refusals
