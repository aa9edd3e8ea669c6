"""Property-based fuzzing of the agent catalog (``/.well-known/ai-catalog.json``, ``/agents``)
of a running gateway: generated methods, paths and query strings, credentials (a valid key,
keys of an endpoint kept out of the catalog, made-up keys and tokens, other schemes, none),
``If-None-Match`` values (the current ETags, junk, lists, ``*``), Host and protocol headers.

No reply is a 5xx or holds a traceback; a 200 is a well-formed catalog or card list; every
other reply is a JSON error; and no reply names an endpoint the credential does not open.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2a_gateway.auth.api_keys import make_key
from tests.support.examples import examples
from tests.support.fuzz_requests import served_in_thread, server_error_of
from tests.support.harness import RunningGateway, running_gateway

pytestmark = pytest.mark.timeout(600)
EXAMPLES = examples(1500)
CATALOG = "/.well-known/ai-catalog.json"
AGENTS = "/agents"
HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


@dataclass
class Catalogued:
    base_url: str
    public: str
    keyed: str
    key: str
    hidden: tuple[str, ...]
    """Endpoints no generated request may see: one public but kept out of the catalog, one
    behind keys kept out of the catalog (``hidden_key`` is its key), one behind keys."""
    hidden_key: str
    etags: tuple[str, ...] = ()


async def _key(gw: RunningGateway, endpoint_id: str) -> str:
    secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
    row, key = make_key(secret, endpoint_id=endpoint_id, tenant="default")
    await gw.store.create_api_key(row)
    return key


@asynccontextmanager
async def _catalogued() -> AsyncIterator[Catalogued]:
    async with running_gateway(allow_unauthenticated_endpoints=False) as gw:
        public = await gw.add_endpoint(name="Public", settings={"delay": 0, "public": True})
        keyed = await gw.add_endpoint(name="Keyed", settings={"delay": 0})
        unlisted = await gw.add_endpoint(name="Unlisted",
                                         settings={"delay": 0, "public": True, "catalog": False})
        unlisted_keyed = await gw.add_endpoint(name="Unlisted keyed",
                                               settings={"delay": 0, "catalog": False})
        other = await gw.add_endpoint(name="Other keyed", settings={"delay": 0})
        yield Catalogued(gw.base_url, public, keyed, await _key(gw, keyed),
                         (unlisted, unlisted_keyed, other), await _key(gw, unlisted_keyed))


@pytest.fixture(scope="module")
def target() -> Iterator[Catalogued]:
    with served_in_thread(_catalogued) as served, httpx.Client(timeout=30) as http:
        found = served.value
        etags = []
        for path in (CATALOG, AGENTS):
            for headers in ({}, {"X-API-Key": found.key}):
                etags.append(http.get(found.base_url + path, headers=headers).headers["ETag"])
        found.etags = tuple(etags)
        yield found


@st.composite
def _credentials(draw: st.DrawFn, target: Catalogued) -> tuple[dict[str, str], str]:
    """Credential headers, and ``valid`` when they hold the listed endpoint's key."""
    made_up = target.key[:-1] + ("A" if target.key[-1] != "A" else "B")
    kind = draw(st.sampled_from(["none", "valid", "bearer", "hidden", "made-up", "junk",
                                 "basic", "both"]))
    headers = {
        "none": {},
        "valid": {"X-API-Key": target.key},
        "bearer": {"Authorization": f"Bearer {target.key}"},
        "hidden": {"X-API-Key": target.hidden_key},
        "made-up": {draw(st.sampled_from(["X-API-Key", "Authorization"])): f"Bearer {made_up}"},
        "junk": {draw(st.sampled_from(["X-API-Key", "Authorization", "X-Forwarded-User"])):
                 draw(HEADER_TEXT)},
        "basic": {"Authorization": "Basic " + draw(HEADER_TEXT)},
        "both": {"X-API-Key": draw(st.sampled_from([target.key, made_up, ""])),
                 "Authorization": draw(st.sampled_from([f"Bearer {target.key}", "Bearer x"]))},
    }[kind]
    # the first credential found decides: the key header unless it is empty, else the bearer
    valid = kind in ("valid", "bearer") or kind == "both" and (
        headers["X-API-Key"] or headers["Authorization"].removeprefix("Bearer ")) == target.key
    return headers, "valid" if valid else kind


@st.composite
def _requests(draw: st.DrawFn, target: Catalogued) -> tuple[str, str, dict[str, str], str]:
    method = draw(st.sampled_from(["GET"] * 6 + ["HEAD"] * 2 + ["POST", "PUT", "DELETE",
                                                                 "OPTIONS", "PATCH"]))
    path = draw(st.sampled_from([CATALOG, AGENTS]))
    path += draw(st.sampled_from(["", "", "", "/", "/x", "%00", "..", "/" + target.public]))
    if draw(st.booleans()):
        keys = st.sampled_from(["pageSize", "q", "tenant", "A2A-Version", "x", ""])
        pairs = draw(st.lists(st.tuples(keys, st.text(max_size=20)), max_size=4))
        path += "?" + "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs)
    headers, credential = draw(_credentials(target))
    if draw(st.booleans()):
        headers["If-None-Match"] = draw(st.one_of(
            st.sampled_from(target.etags), st.just("*"), HEADER_TEXT,
            st.lists(st.sampled_from(target.etags), min_size=1, max_size=3).map(", ".join)))
    if draw(st.integers(0, 4)) == 0:
        headers["Host"] = draw(st.sampled_from(
            ["example.com", "a:1", "[::1]:8080", "", "x" * 300]))
    if draw(st.integers(0, 4)) == 0:
        headers["A2A-Version"] = draw(st.sampled_from(["1.0", "0.3", "", "9"]))
    # h11 sends no value with white space around it
    return method, path, {k: v.strip() for k, v in headers.items()}, credential


def _problems(target: Catalogued, method: str, path: str, credential: str,
              response: httpx.Response) -> list[str]:
    text = response.text
    if server_error := server_error_of(response, text, allowed=()):
        return [server_error]
    leaked = [e for e in target.hidden if e in text]
    if credential != "valid" and target.keyed in text:
        leaked.append(target.keyed)
    if leaked:
        return [f"names endpoints it may not: {leaked}"]
    route = path.partition("?")[0]
    if response.status_code == 200 and method == "GET":
        body = response.json()
        if route == CATALOG:
            assert body["specVersion"] == "1.0" and isinstance(body["entries"], list)
        else:
            assert route == AGENTS and all("name" in card for card in body), route
    elif response.status_code not in (200, 304) and method != "HEAD":
        assert "error" in response.json(), text[:200]
    return []


def test_generated_catalog_requests_get_no_5xx_and_see_only_what_they_may(
    target: Catalogued,
) -> None:
    statuses: Counter[int] = Counter()
    with httpx.Client(timeout=30) as client:

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(st.data())
        def each_request(data: st.DataObject) -> None:
            method, path, headers, credential = data.draw(_requests(target))
            response = client.request(method, target.base_url + path, headers=headers)
            statuses[response.status_code] += 1
            found = _problems(target, method, path, credential, response)
            assert found == [], (method, path, headers, found)

        each_request()
    # the generated requests reach the catalog, its 304s and its refusals
    assert statuses[200] > EXAMPLES // 10 and statuses[304] > 0 and statuses[401] > 0
