"""Property-based fuzzing of the operator surfaces of a running gateway: the admin API
(``/admin/api/…``), the console's routes (page, login, session, logout, OIDC sign-in and
callback against the real provider), the event feed (``/events``, ``/{endpoint}/events``) and
a worker gateway's ``POST /events``, with generated methods, paths (ids valid, unknown, of
other endpoints), query strings (repeated, huge, badly encoded, forged page tokens),
credentials (operator key, caller key, junk, none; session cookies valid, tampered,
expired; CSRF token right, wrong, missing) and bodies. Without an OpenID Provider
(``A2A_TEST_OIDC_ISSUER``) the console runs without OIDC sign-in and only the OIDC surface skips.

Every reply is below 500 (the OIDC routes may answer 502 when the issuer cannot be reached),
has no traceback, echoes no secret, and is a JSON error (an HTML page on the console's
browser routes); nothing in the store changes but through a valid operator credential (a
session's with its CSRF token) in a 2xx answer, and after the run the store holds exactly
the endpoints, keys and tasks it began with plus those such answers created.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2a_gateway.auth.api_keys import make_key
from a2a_gateway.auth.callers import bearer_token
from a2a_gateway.auth.sessions import COOKIE, CSRF_HEADER, ConsoleSessions
from a2a_gateway.console.oidc import FLOW_COOKIE, OIDC_LOGIN, LoginFlow
from a2a_gateway.stores.base import AuditQuery
from a2a_gateway.tasks.dispatch import EVENT_KEY, RUN_TASK, SWEEP
from tests.support.fuzz_requests import (
    RecordingStore,
    Served,
    deep_json,
    encoded_body,
    ints,
    json_values,
    path_segment,
    served_in_thread,
    server_error_of,
    texts,
)
from tests.support.harness import running_gateway
from tests.support.oidc_support import CONFIDENTIAL, configured_issuer, issuer, oidc_settings

pytestmark = pytest.mark.timeout(600)
EXAMPLES = 400
OPERATOR_KEY = "op-fuzz-operator-key-0123456789abcdef"
SESSION_SECRET = "fuzz-console-session-secret-0123456789"
PRINCIPAL = "fuzz-caller"
HYPOTHESIS = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))


@dataclass
class Operated:
    """The gateways under test and what the test made through valid calls."""

    base_url: str
    worker_url: str
    store: RecordingStore
    endpoints: list[str]
    """Two endpoints with a caller key each: the first's tasks (two) completed, the second's
    (one) running for an hour."""
    caller_key: str
    key_id: str
    tasks: list[str]
    page_token: str
    session_cookie: str
    csrf: str
    expired_cookie: str
    issuer: str = ""
    """The OpenID Provider the console signs in at ("": a console without OIDC sign-in)."""
    flow_cookie: str = ""
    flow_state: str = ""
    expired_flow_cookie: str = ""
    created: dict[str, set[str]] = field(
        default_factory=lambda: {"endpoints": set(), "keys": set()}
    )
    """Ids named by 201 answers to valid calls."""
    initial: dict[str, frozenset[Any]] = field(default_factory=dict)
    """The store before the first generated request."""

    @property
    def secrets(self) -> list[str]:
        """What no reply may contain (but a login's or session's own CSRF token)."""
        return [
            OPERATOR_KEY,
            SESSION_SECRET,
            CONFIDENTIAL["client_secret"],
            self.caller_key,
            self.session_cookie,
            self.expired_cookie,
            self.flow_cookie,
            self.expired_flow_cookie,
        ]


async def _send_message(
    http: httpx.AsyncClient, base_url: str, endpoint_id: str, key: str, text: str, wait: bool = True
) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"returnImmediately": not wait}}}
    response = await http.post(f"{base_url}/{endpoint_id}/a2a", json=body,
                               headers={"Authorization": f"Bearer {key}", "A2A-Version": "1.0"})
    return response.json()["result"]["task"]["id"]


@asynccontextmanager
async def operated(issuer_url: str | None) -> AsyncIterator[Operated]:
    store = RecordingStore()
    # the key RecordingStore signs its page tokens with
    options = {"allow_unauthenticated_endpoints": False, "log_level": "critical",
               "page_token_key": "fuzz-page-token-key"}
    console = oidc_settings(issuer_url) if issuer_url else {"console": True}
    async with (
        running_gateway(
            store=store,
            operator_keys=[OPERATOR_KEY],
            console_session_secret=SESSION_SECRET,
            **console,
            **options,
        ) as gw,
        running_gateway(store=store, worker=True, replica_id="fuzz-worker", **options) as worker,
        httpx.AsyncClient(timeout=60) as http,
    ):
        endpoints = [
            await gw.add_endpoint(settings={"delay": 0}),
            await gw.add_endpoint(settings={"delay": 3600}),
        ]
        secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
        row, caller_key = make_key(
            secret, endpoint_id=endpoints[0], tenant="default", principal=PRINCIPAL
        )
        slow_row, slow_key = make_key(
            secret, endpoint_id=endpoints[1], tenant="default", principal=PRINCIPAL
        )
        for key_row in (row, slow_row):
            await store.create_api_key(key_row)
        tasks = [
            await _send_message(http, gw.base_url, endpoints[0], caller_key, text)
            for text in ("one", "two")
        ]
        tasks.append(
            await _send_message(http, gw.base_url, endpoints[1], slow_key, "running", wait=False)
        )
        operator = {"Authorization": f"Bearer {OPERATOR_KEY}"}
        page = (
            await http.get(f"{gw.base_url}/admin/api/tasks?page_size=1", headers=operator)
        ).json()
        login = await http.post(f"{gw.base_url}/console/api/login", json={"key": OPERATOR_KEY})
        expired = ConsoleSessions(SESSION_SECRET, 60, clock=lambda: time.time() - 3600)
        _, expired_cookie = expired.issue(gw.gateway.operators.key_ref(OPERATOR_KEY))
        target = Operated(
            gw.base_url,
            worker.base_url,
            store,
            endpoints,
            caller_key,
            row.id,
            tasks,
            page["nextPageToken"],
            login.cookies[COOKIE],
            login.json()["csrf"],
            expired_cookie,
        )
        if issuer_url:
            start = await http.get(f"{gw.base_url}/console/oidc/login", follow_redirects=False)
            stale = LoginFlow.new(f"{gw.base_url}/console/oidc/callback", time.time() - 60)
            target.issuer, target.flow_cookie = issuer_url, start.cookies[FLOW_COOKIE]
            target.flow_state = parse_qs(urlsplit(start.headers["Location"]).query)["state"][0]
            target.expired_flow_cookie = gw.app[OIDC_LOGIN].seal(stale)
        yield target


@pytest.fixture(scope="module")
def served() -> Iterator[Served[Operated]]:
    with served_in_thread(lambda: operated(configured_issuer())) as running:
        running.value.initial = running.run(_store_state(running.value.store))
        yield running


# the store before and after ----------------------------------------------------------------


async def _store_state(store: RecordingStore) -> dict[str, frozenset[Any]]:
    endpoints = await store.list_endpoints()
    tasks = set()
    for endpoint in endpoints:
        page = await store.list_endpoint_tasks(endpoint.id, page_size=1000)
        tasks |= {
            (scope.endpoint_id, scope.principal, task.id, task.status.state)
            for scope, task in page.tasks
        }
    audit = (await store.list_audit_entries(AuditQuery(page_size=100_000))).entries
    return {
        # a sign-in (or a failed one) is recorded, whoever tries: it changes nothing else
        "audit": frozenset((e.id, e.action, e.actor, e.at) for e in audit
                           if not e.action.startswith("console.sign")),
        "endpoints": frozenset((e.id, e.enabled, e.updated_at) for e in endpoints),
        "keys": frozenset((k.id, k.endpoint_id, k.revoked_at, tuple(sorted(k.limits.items())))
                          for k in await store.list_api_keys()),
        "tasks": frozenset(tasks),
    }


# generated requests -------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    url: str
    headers: dict[str, Any]
    body: bytes
    may_change: bool
    """It carries a valid operator credential (a session's with its CSRF token)."""
    html_allowed: bool = False
    echoed: list[str] = field(default_factory=list)
    """Values of the request no reply may repeat (codes)."""


def _tampered(value: str) -> st.SearchStrategy[str]:
    return st.integers(0, len(value) - 1).map(
        lambda i: value[:i] + ("A" if value[i] != "A" else "B") + value[i + 1 :]
    )


@st.composite
def _credentials(draw: st.DrawFn, target: Operated) -> tuple[dict[str, Any], bool]:
    """Authorization, cookies and CSRF header, and whether they make a valid operator."""
    headers: dict[str, Any] = {}  # str, or bytes as sent (not UTF-8)
    auth = draw(
        st.sampled_from(
            ["operator"] * 3 + ["caller", "caller-header", "junk", "bytes", "none", "none"]
        )
    )
    if auth == "operator":
        headers["Authorization"] = f"Bearer {OPERATOR_KEY}"
    elif auth == "caller":
        headers["Authorization"] = f"Bearer {target.caller_key}"
    elif auth == "caller-header":
        headers["X-API-Key"] = target.caller_key
    elif auth == "bytes":
        headers["Authorization"] = draw(
            st.sampled_from([b"Bearer \xff", b"Bearer \xc3(", b"Bearer op-\xe9"])
        )
    elif auth == "junk":
        headers["Authorization"] = draw(
            st.one_of(
                st.sampled_from(
                    [
                        "Bearer",
                        "Basic b3A6b3A=",
                        f"Bearer {OPERATOR_KEY}x",
                        f"bearer  {OPERATOR_KEY[:-1]}",
                        "Bearer a2a_nope",
                        f"Token {OPERATOR_KEY}",
                    ]
                ),
                st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=40),
            )
        )
    cookie = draw(
        st.sampled_from(["session", "session", "tampered", "expired", "junk", "other-name", "none"])
    )
    session_valid = cookie == "session"
    if cookie != "none":
        value = {
            "session": target.session_cookie,
            "tampered": draw(_tampered(target.session_cookie)),
            "expired": target.expired_cookie,
            "other-name": target.session_cookie,
            "junk": draw(st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=60)),
        }[cookie]
        name = "other" if cookie == "other-name" else COOKIE
        headers["Cookie"] = draw(
            st.sampled_from(
                [
                    f"{name}={value}",
                    f'{name}="{value}"; x=1',
                    f"a=b; {name}={value}",
                    f"{name}={value}; {name}=junk",
                ]
            )
        )
        if headers["Cookie"].endswith(f"{name}=junk"):
            session_valid = False
    csrf = draw(st.sampled_from(["right", "right", "wrong", "bytes", "none"]))
    if csrf == "bytes":
        headers[CSRF_HEADER] = target.csrf.encode() + b"\xff"
    elif csrf != "none":
        headers[CSRF_HEADER] = (
            target.csrf
            if csrf == "right"
            else draw(
                st.one_of(
                    _tampered(target.csrf),
                    st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=40),
                )
            )
        )
    if draw(st.integers(0, 15)) == 0:
        headers["Host"] = draw(
            st.sampled_from([b"\xff", b"gw\xc3.example", "a b", "[::1", "x:99999", "@"])
        )
    authorization = headers.get("Authorization", "")
    bearer = (
        bearer_token({"Authorization": authorization})
        if isinstance(authorization, str)
        else "not UTF-8"
    )
    # a session counts only without a bearer token (another Authorization, e.g. Basic, is no
    # credential)
    return headers, bearer == OPERATOR_KEY or (bearer is None and session_valid and csrf == "right")


_ids = st.sampled_from(["valid"] * 3 + ["other"] * 2 + ["uuid", "junk"])


def _endpoint_id(draw: st.DrawFn, target: Operated) -> str:
    which = draw(_ids)
    if which == "junk":
        return path_segment(draw)
    return {"valid": target.endpoints[0], "other": target.endpoints[1],
            "uuid": str(draw(st.uuids()))}[which]


_query_values = st.one_of(
    ints.map(str),
    texts,
    st.sampled_from(["", " ", "%", "%zz", "%ff%fe", "٣", "1e3", "+5", "-1", "0x10", "5 "]),
    st.integers(100, 5000).map(lambda n: "9" * n),
    st.integers(300, 6000).map(lambda n: "x" * n),
)
STATES = [
    "working",
    "input-required",
    "TASK_STATE_COMPLETED",
    "completed",
    "canceled",
    "unspecified",
    "TASK_STATE_UNSPECIFIED",
    "bogus",
    "working,completed",
    ",",
    "submitted ,failed",
]


@st.composite
def _query(draw: st.DrawFn, target: Operated, names: list[str]) -> str:
    """A query string of ``names`` (repeated, raw, or percent-encoded) with hostile values."""
    pairs = []
    for _ in range(draw(st.integers(0, 5))):
        name = draw(st.one_of(st.sampled_from(names), st.text(max_size=6)))
        value = draw(st.one_of(
            _query_values, st.sampled_from(STATES),
            st.sampled_from([target.page_token, target.page_token[:-2], target.page_token + "x",
                             "eyJ0IjoxfQ", PRINCIPAL, target.endpoints[0], target.endpoints[1],
                             ",".join(target.endpoints), target.tasks[0], "fleet",
                             "replica", "2026-12-01", "2026-12-01T10:00:00+14:00", "0001-01-01",
                             "9999-12-31", "endpoint,principal,day", "day,day", "tenant",
                             "endpoint.disabled", "key.created"]),
            _tampered(target.page_token)))
        encode = draw(st.booleans())
        pairs.append(
            f"{quote(name, safe='') if encode else name}="
            f"{quote(value, safe='') if encode else value}"
        )
    return _query_string(pairs)


MAX_QUERY = 7000
"""Below the request line the gateway reads (``max_header_bytes``, 8190 by default): aiohttp
refuses a longer one itself, before the gateway's routes."""


def _query_string(pairs: list[str]) -> str:
    kept = []
    for pair in pairs:
        if sum(map(len, kept)) + len(pair) < MAX_QUERY:
            kept.append(pair)
    return "?" + "&".join(kept) if kept else ""


def _safe_raw(text: str) -> str:
    """``text`` as httpx sends it in a URL: characters it would refuse percent-encoded."""
    return "".join(c if 33 <= ord(c) < 127 and c not in "#" else quote(c, safe="") for c in text)


@st.composite
def _body(draw: st.DrawFn, headers: dict[str, str]) -> bytes:
    value = draw(
        st.one_of(
            json_values,
            deep_json,
            st.fixed_dictionaries(
                {},
                optional={
                    "principal": st.one_of(texts, ints, st.just("x" * 300)),
                    "name": st.one_of(texts, ints),
                    "expiresDays": st.one_of(ints, st.floats(), texts, st.booleans()),
                    "id": st.one_of(texts, st.uuids().map(str)),
                    "handler": texts,
                    "key": st.one_of(texts, st.just(OPERATOR_KEY), st.just("x" * 5000)),
                },
            ),
        )
    )
    shape = draw(st.sampled_from(["encoded"] * 4 + ["bad-utf8", "huge", "none"]))
    content_type = draw(
        st.sampled_from(
            [
                "application/json",
                "text/plain",
                "application/x-www-form-urlencoded",
                "multipart/form-data",
                "application/json; charset=latin-1",
                None,
            ]
        )
    )
    if content_type:
        headers["Content-Type"] = content_type
    if shape == "bad-utf8":
        return b'{"key": "\xff\xfe", "name": "\xc3"}'
    if shape == "huge":
        return b'{"a": "' + b"x" * draw(st.sampled_from([70_000, 1_200_000, 6_000_000])) + b'"}'
    if shape == "none":
        return b""
    body, _ = draw(encoded_body(value, headers))
    return body


ADMIN_ROUTES = [
    ("GET", "/endpoints"),
    ("POST", "/endpoints"),
    ("GET", "/endpoints/{e}"),
    ("DELETE", "/endpoints/{u}"),
    ("POST", "/endpoints/{e}/enable"),
    ("POST", "/endpoints/{e}/disable"),
    ("GET", "/endpoints/{e}/keys"),
    ("POST", "/endpoints/{e}/keys"),
    ("POST", "/endpoints/{e}/keys/{k}/revoke"),
    ("PUT", "/endpoints/{e}/keys/{k}/limits"),
    ("PUT", "/endpoints/{e}/keys/{k}/limits"),
    ("GET", "/tasks"),
    ("GET", "/tasks"),
    ("GET", "/endpoints/{e}/tasks/{t}"),
    ("POST", "/endpoints/{e}/tasks/{t}/cancel"),
    ("POST", "/endpoints/{e}/tasks/{t}/cancel"),
    ("GET", "/endpoints/{e}/tasks/{t}/stream"),
    ("GET", "/stats"),
    ("GET", "/handlers"),
    ("GET", "/usage"),
    ("GET", "/usage"),
    ("GET", "/audit"),
    ("GET", "/audit"),
    ("DELETE", "/audit"),
    ("PUT", "/audit/{junk}"),
    ("GET", "/{junk}"),
    ("POST", "/endpoints/{e}/{junk}"),
]
"""(method, path) of the admin API's routes, and some that are none."""


METHODS = ["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD"]


def _method(draw: st.DrawFn, routed: str) -> str:
    """Mostly the route's own method, else any (405s and bodies where none is read)."""
    return routed if draw(st.integers(0, 4)) else draw(st.sampled_from(METHODS))


def _valid_body(draw: st.DrawFn, path: str) -> bytes | None:
    """Mostly the body a valid call would have, so that changes happen too (a valid create
    needs a valid credential and body on a creating route: at one in two, some runs drew
    none, and which runs do is not fixed, as the drawn shapes follow the ids of each run)."""
    if draw(st.integers(0, 3)) == 0:
        return None
    if path.endswith("/keys"):
        return orjson.dumps(draw(st.fixed_dictionaries({}, optional={
            "name": st.text(max_size=10), "principal": st.text(min_size=1, max_size=10),
            "expiresDays": st.integers(1, 400), "limits": _limits()})))
    if path.endswith("/limits"):
        return orjson.dumps({"limits": draw(_limits())})
    if path.endswith(("/disable", "/revoke")):  # the kill switch, or not
        return orjson.dumps({"cancelRunning": draw(st.booleans())})
    return b"" if not path.endswith("/endpoints") else orjson.dumps(
        {"name": "made by fuzz", "handler": "handlers.echo:EchoHandler"})


def _limits() -> st.SearchStrategy[Any]:
    """Quota limits, valid or not: known and unknown names, numbers in and out of range,
    other JSON values."""
    names = st.sampled_from(["concurrent_tasks", "tasks_per_minute", "tasks_per_day",
                             "tokens_per_day", "cost_per_month", "tasks_per_mnute", ""])
    values = st.one_of(st.integers(-5, 10**16), st.floats(allow_nan=True), st.booleans(),
                       st.text(max_size=5), st.none())
    return st.one_of(st.dictionaries(names, values, max_size=3), json_values)


ADMIN_QUERY = [
    "endpoint",
    "endpointId",
    "state",
    "context",
    "contextId",
    "page_size",
    "page_token",
    "principal",
    "tenant",
    "scope",
    "from",
    "to",
    "group_by",
    "key",
    "action",
    "target",
    "actor",
]


@st.composite
def admin_requests(draw: st.DrawFn, target: Operated) -> Request:
    headers, may_change = draw(_credentials(target))
    routed, path = draw(st.sampled_from(ADMIN_ROUTES))
    path = path.replace("{e}", _endpoint_id(draw, target))
    key_id = target.key_id if draw(st.booleans()) else path_segment(draw)
    task_id = draw(
        st.sampled_from([*target.tasks, target.tasks[2], "no-such-task", "%00", "a%0Ab"])
    )
    path = path.replace("{k}", key_id).replace("{t}", task_id).replace("{junk}", path_segment(draw))
    # deleting: an unknown id or junk (the test's endpoints must stay; deletion is tested in
    # test_audit_log)
    path = path.replace("{u}", draw(st.sampled_from([str(draw(st.uuids())), path_segment(draw)])))
    if draw(st.integers(0, 4)) == 0:
        headers["Last-Event-ID"] = _safe_raw(draw(st.one_of(texts, ints.map(str))))
    method = _method(draw, routed)
    valid = _valid_body(draw, path) if method in ("POST", "PUT") else None
    body = valid if valid is not None else draw(_body(headers)) if method != "GET" else b""
    query = _safe_raw(draw(_query(target, ADMIN_QUERY)))
    if "/tasks/" in path and draw(st.booleans()):
        query = f"{query or '?'}&principal={PRINCIPAL}"
    if path == "/usage" and draw(st.booleans()):
        headers["Accept"] = "text/csv"
    url = f"{target.base_url}/admin/api{path}{query}"
    return Request(method, url, headers, body, may_change)


CONSOLE_ROUTES = [
    ("GET", "/console"),
    ("GET", "/console/"),
    ("GET", "/console/static/console.js"),
    ("GET", "/console/static/{junk}"),
    ("GET", "/console/static/..%2Fsession.py"),
    ("POST", "/console/api/login"),
    ("POST", "/console/api/login"),
    ("GET", "/console/api/session"),
    ("POST", "/console/api/logout"),
    ("GET", "/console/{junk}"),
]
OIDC_ROUTES = [
    ("GET", "/console/api/oidc"),
    ("GET", "/console/oidc/login"),
    ("GET", "/console/oidc/callback"),
    ("GET", "/console/oidc/callback"),
    ("GET", "/console/oidc/callback"),
    ("GET", "/console/{junk}"),
]
"""The OIDC sign-in's routes (and one that is none), fuzzed only with an OpenID Provider."""


@st.composite
def console_requests(draw: st.DrawFn, target: Operated,
                     routes: list[tuple[str, str]] = CONSOLE_ROUTES) -> Request:
    headers, may_change = draw(_credentials(target))
    routed, path = draw(st.sampled_from(routes))
    path = path.replace("{junk}", path_segment(draw))
    echoed: list[str] = []
    if path == "/console/oidc/callback":
        flow = draw(st.sampled_from(["valid", "valid", "tampered", "expired", "none"]))
        if flow != "none":
            value = {"valid": target.flow_cookie, "tampered": draw(_tampered(target.flow_cookie)),
                     "expired": target.expired_flow_cookie}[flow]
            headers["Cookie"] = (
                f"{headers['Cookie']}; {FLOW_COOKIE}={value}"
                if "Cookie" in headers
                else f"{FLOW_COOKIE}={value}"
            )
        params = draw(
            st.dictionaries(
                st.sampled_from(["code", "state", "iss", "error", "error_description"]),
                st.one_of(
                    texts,
                    _query_values,
                    st.just(target.flow_state),
                    st.just(target.issuer),
                    st.sampled_from(["access_denied", "x y"]),
                ),
                max_size=5,
            )
        )
        if draw(st.booleans()):
            params["state"] = target.flow_state
        if draw(st.booleans()):
            params["code"] = "fuzz-code-" + draw(
                st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=8, max_size=30)
            )
        echoed = [v for k, v in params.items() if k == "code" and len(v) >= 8]
        path += _query_string([f"{k}={quote(v, safe='')}" for k, v in params.items()])
    elif draw(st.booleans()):
        path += _safe_raw(draw(_query(target, ["key", "next", "state", "code"])))
    method = _method(draw, routed)
    if path.startswith("/console/api/login") and draw(st.booleans()):
        method, headers["Content-Type"] = "POST", "application/json"
        body = orjson.dumps(
            {
                "key": draw(
                    st.one_of(
                        st.sampled_from([OPERATOR_KEY, target.caller_key, "", "x"]), json_values
                    )
                )
            }
        )
    else:
        body = draw(_body(headers)) if method != "GET" else b""
    browser = path.startswith(("/console/oidc/", "/console/static/")) or path.split("?")[0] in (
        "/console",
        "/console/",
    )
    # the console's calls change nothing in the store: a login opens a session, kept only in
    # its cookie
    return Request(
        method,
        target.base_url + path,
        headers,
        body,
        may_change,
        html_allowed=browser,
        echoed=echoed,
    )


@st.composite
def feed_requests(draw: st.DrawFn, target: Operated) -> Request:
    headers, may_change = draw(_credentials(target))
    path = draw(
        st.sampled_from(
            ["/events"] * 3 + ["/{e}/events"] * 3 + ["/{e}/events/", "/{e}/events/{junk}"]
        )
    )
    path = path.replace("{e}", _endpoint_id(draw, target)).replace("{junk}", path_segment(draw))
    if draw(st.booleans()):
        headers["Last-Event-ID"] = _safe_raw(
            draw(
                st.one_of(
                    texts,
                    ints.map(str),
                    st.sampled_from(["0", "1-0", "0:0", "-1", "99999999999999999999"]),
                    st.integers(100, 6000).map(lambda n: "7" * n),
                )
            )
        )  # aiohttp refuses a header over 8190 bytes
    method = _method(draw, "GET")
    body = draw(_body(headers)) if method in ("POST", "DELETE") else b""
    query = draw(_query(target, ["state", "contextId", "endpointId"]))
    url = f"{target.base_url}{path}{_safe_raw(query)}"
    return Request(method, url, headers, body, may_change)


@st.composite
def worker_requests(draw: st.DrawFn, target: Operated) -> Request:
    headers: dict[str, str] = {}
    ref = {"tenant": "default", "endpoint_id": target.endpoints[0], "principal": PRINCIPAL,
           "task_id": target.tasks[0]}
    event = draw(
        st.one_of(
            st.just({EVENT_KEY: SWEEP}),
            st.fixed_dictionaries(
                {EVENT_KEY: st.just(RUN_TASK)},
                optional={
                    name: st.one_of(
                        st.just(value),
                        texts,
                        ints,
                        json_values,
                        st.sampled_from(target.endpoints + target.tasks),
                    )
                    for name, value in ref.items()
                },
            ),
            st.just({EVENT_KEY: RUN_TASK, **ref}),
            st.dictionaries(
                st.one_of(st.just(EVENT_KEY), st.text(max_size=8)),
                st.one_of(st.sampled_from([RUN_TASK, SWEEP, "RUN_TASK"]), json_values),
                max_size=4,
            ),
            deep_json,
            json_values,
        )
    )
    shape = draw(st.sampled_from(["event"] * 6 + ["bad-utf8", "bytes", "huge"]))
    body = {
        "event": json.dumps(event).encode(),  # orjson stops at 255 levels
        "bad-utf8": b'{"a2a_gateway": "\xff\xfe"}',
        "bytes": draw(st.binary(max_size=40)),
        "huge": b'{"a2a_gateway":"sweep","x":"'
        + b"x" * draw(st.sampled_from([300_000, 2_000_000]))
        + b'"}',
    }[shape]
    if draw(st.booleans()):
        headers["Content-Type"] = draw(
            st.sampled_from(["application/json", "text/plain", "application/octet-stream"])
        )
    method = draw(st.sampled_from(["POST"] * 6 + ["GET", "PUT"]))
    path = draw(st.sampled_from(["/events", "/events", "/events/", "/events?x=1"]))
    return Request(
        method, target.worker_url + path, headers, body, may_change=False
    )  # no task waits for it


# checking replies ----------------------------------------------------------------------------


def _first_event(response: httpx.Response) -> bytes:
    """The first SSE event of a stream that may never end."""
    read = b""
    for chunk in response.iter_bytes():
        read += chunk
        if b"\n\n" in read or len(read) > 1_000_000:
            break
    return read


def _reply_problems(
    request: Request, response: httpx.Response, body: bytes, target: Operated
) -> list[str]:
    text = body.decode(errors="replace")
    found = server_error_of(response, text, allowed=(502,) if request.html_allowed else (503,))
    if found:
        return [found]
    shown_headers = "\n".join(
        f"{k}: {v}" for k, v in response.headers.items() if k.lower() != "set-cookie"
    )
    secrets = [*target.secrets, *request.echoed]
    own_csrf = response.status_code == 200 and urlsplit(request.url).path in ("/console/api/login",
                                                                               "/console/api/session")
    if not own_csrf:
        secrets.append(target.csrf)
    echoed = [s[:12] for s in secrets if s and (s in text or s in shown_headers)]
    if echoed:
        return [f"{response.status_code} echoes a secret ({echoed}): {text[:200]}"]
    content_type = response.headers.get("Content-Type", "")
    if response.status_code < 400 or request.method == "HEAD":
        if content_type.startswith("text/event-stream") and not body.startswith(
            (b"event:", b"id:", b"data:", b":")
        ):
            return [f"an event stream starting {body[:80]!r}"]
        return []
    if content_type.startswith("text/html") and request.html_allowed:
        return (
            []
            if "<html" in text
            else [f"{response.status_code} HTML without a page: {text[:100]!r}"]
        )
    if not content_type.startswith("application/json"):
        return [f"{response.status_code} {content_type!r} error: {text[:100]!r}"]
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        return [f"{response.status_code} error body is not JSON: {text[:100]!r}"]
    error = reply.get("error") if isinstance(reply, dict) else None
    if isinstance(error, str):
        # the admin API's and the console's own refusals: {"error": "...", "problems"?: [...]}
        return []
    if not isinstance(error, dict) or error.get("code") != response.status_code or not isinstance(
            error.get("message"), str):
        return [
            f"{response.status_code} error is neither AIP-193 nor {{'error': str}}: {text[:200]}"
        ]
    return []


def _note_created(
    request: Request, response: httpx.Response, body: bytes, target: Operated
) -> None:
    if response.status_code != 201:
        return
    reply = orjson.loads(body)
    if urlsplit(request.url).path.endswith("/keys"):
        target.created["keys"].add(reply["id"])
    else:
        target.created["endpoints"].add(reply["endpoint"]["id"])


def check(served: Served[Operated], client: httpx.Client, request: Request) -> int:
    """Sends ``request`` and checks its reply and the store; the reply's status."""
    target = served.value
    before = served.run(_store_state(target.store))
    try:
        with client.stream(
            request.method, request.url, headers=request.headers, content=request.body
        ) as response:
            streaming = response.headers.get("Content-Type", "").startswith("text/event-stream")
            body = _first_event(response) if streaming else response.read()
    except httpx.TimeoutException:
        raise AssertionError(f"no answer to {request.method} {request.url[:200]}") from None
    found = _reply_problems(request, response, body, target)
    assert found == [], (
        request.method,
        request.url[:300],
        request.headers,
        request.body[:200],
        found,
    )
    after = served.run(_store_state(target.store))
    if not (request.may_change and response.status_code < 300):
        assert after == before, ("changed by", request.method, request.url[:300], request.headers,
                                 response.status_code)
    _note_created(request, response, body, target)
    return response.status_code


def _each(strategy: Any, served: Served[Operated]) -> Counter[int]:
    """Checks generated requests of ``strategy``; how many replies had each status."""
    statuses: Counter[int] = Counter()
    with httpx.Client(timeout=httpx.Timeout(60, read=20)) as client:
        for (
            endpoint_id
        ) in served.value.endpoints:  # as the setup left them, whatever an earlier surface did
            enabled = client.post(
                f"{served.value.base_url}/admin/api/endpoints/{endpoint_id}/enable",
                headers={"Authorization": f"Bearer {OPERATOR_KEY}"},
            )
            assert enabled.status_code == 200, enabled.text

        @HYPOTHESIS
        @given(st.data())
        def each_request(data: st.DataObject) -> None:
            statuses[check(served, client, data.draw(strategy(served.value)))] += 1

        each_request()
    return statuses


def _seen(statuses: Counter[int], *expected: int) -> None:
    """The generated requests reached past the checks they test (each status was answered)."""
    assert all(statuses[status] for status in expected), statuses


def test_generated_admin_api_requests(served: Served[Operated]) -> None:
    _seen(_each(admin_requests, served), 200, 201, 400, 401, 403, 404, 405)


def test_generated_console_requests(served: Served[Operated]) -> None:
    _seen(_each(console_requests, served), 200, 400, 401, 404, 405)


def test_generated_oidc_sign_in_requests(served: Served[Operated]) -> None:
    issuer()  # skips without the OpenID Provider (a failure in CI)
    _seen(
        _each(lambda target: console_requests(target, OIDC_ROUTES), served), 200, 303, 400, 404, 405
    )


def test_generated_event_feed_requests(served: Served[Operated]) -> None:
    _seen(_each(feed_requests, served), 200, 400, 401, 404, 405)


def test_generated_worker_events_change_nothing(served: Served[Operated]) -> None:
    _seen(_each(worker_requests, served), 200, 400, 405)


def test_head_on_a_stream_route_is_405_and_the_connection_stays_usable(
    served: Served[Operated],
) -> None:
    """Before: HEAD on the feed (or a task's stream) streamed its events after a bodiless
    answer, so the next answer on the connection began inside an event ("illegal status line")."""
    target, operator = served.value, {"Authorization": f"Bearer {OPERATOR_KEY}"}
    paths = ["/events", f"/{target.endpoints[0]}/events",
             f"/admin/api/endpoints/{target.endpoints[0]}/tasks/{target.tasks[0]}/stream?principal={PRINCIPAL}"]
    with httpx.Client(
        base_url=target.base_url, timeout=httpx.Timeout(60, read=20), headers=operator
    ) as client:
        for path in paths:
            assert client.head(path).status_code == 405, path
            assert client.get("/admin/api/stats").status_code == 200


def test_header_bytes_that_are_not_utf8_are_refused_not_a_500(served: Served[Operated]) -> None:
    """Before: a CSRF token or bearer token that is not UTF-8 was a 500 (hashing it), and so
    was such a Host header wherever the gateway names its own URL (cards, the admin API's
    endpoints, the OIDC sign-in)."""
    target = served.value
    session = {"Cookie": f"{COOKIE}={target.session_cookie}"}
    operator = {"Authorization": f"Bearer {OPERATOR_KEY}"}
    cases = [
        (
            "POST",
            f"/admin/api/endpoints/{target.endpoints[0]}/enable",
            {**session, CSRF_HEADER: b"\xff\xfe"},
            403,
        ),
        ("POST", "/console/api/logout", {**session, CSRF_HEADER: b"\xff"}, 403),
        ("GET", "/admin/api/endpoints", {"Authorization": b"Bearer \xff"}, 401),
        ("GET", "/events", {"Authorization": b"Bearer \xc3"}, 401),
        ("GET", "/admin/api/endpoints", {**operator, "Host": b"\xff"}, 400),
        (
            "GET",
            f"/{target.endpoints[0]}/.well-known/agent-card.json",
            {"Host": b"gw\xfe.example"},
            400,
        ),
        *([("GET", "/console/oidc/login", {"Host": b"\xff"}, 400)] if target.issuer else []),
    ]
    with httpx.Client(base_url=target.base_url, timeout=60) as client:
        for method, path, headers, status in cases:
            response = client.request(method, path, headers=headers)
            assert response.status_code == status, (path, headers, response.text)
            assert response.json()["error"], response.text  # the admin API's, or the console's own
        # on the A2A binding too (every call names the gateway's URL): an envelope echoing the id,
        # no task
        sent = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": {
            "messageId": "host", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}
        key = client.post(
            f"/admin/api/endpoints/{target.endpoints[0]}/keys", headers=operator, json={}
        ).json()
        target.created["keys"].add(key["id"])  # the caller's key may be revoked by a generated call
        created = len(target.store.created)
        response = client.post(f"/{target.endpoints[0]}/a2a", json=sent, headers={
            "Host": b"\xff", "Authorization": f"Bearer {key['key']}", "A2A-Version": "1.0"})
        assert response.status_code == 400 and response.json()["id"] == 7, response.text
        assert response.json()["error"]["code"] == -32600 and len(target.store.created) == created


def test_a_change_with_a_host_that_is_not_utf8_is_refused_before_it_is_made(
    served: Served[Operated],
) -> None:
    """Before: disabling an endpoint or adding one was stored, then answered 400 (500 before
    the Host check) as the answer could not name the endpoint's card URL."""
    target = served.value
    headers = {"Authorization": f"Bearer {OPERATOR_KEY}", "Host": b"\xff"}
    before = served.run(_store_state(target.store))
    with httpx.Client(base_url=target.base_url, timeout=60) as client:
        disabled = client.post(
            f"/admin/api/endpoints/{target.endpoints[1]}/disable", headers=headers
        )
        added = client.post("/admin/api/endpoints", headers=headers,
                            json={"name": "not added", "handler": "handlers.echo:EchoHandler"})
    assert (disabled.status_code, added.status_code) == (400, 400), (disabled.text, added.text)
    assert served.run(_store_state(target.store)) == before


def test_the_store_holds_what_valid_calls_made(served: Served[Operated]) -> None:
    """Run last: the endpoints, keys and tasks are those the test began with and those its
    valid calls' 201 answers named; no task was created but the setup's."""
    target = served.value
    now, initial = served.run(_store_state(target.store)), target.initial
    assert {e[0] for e in now["endpoints"]} == {
        e[0] for e in initial["endpoints"]
    } | target.created["endpoints"]
    assert {k[0] for k in now["keys"]} == {k[0] for k in initial["keys"]} | target.created["keys"]
    assert {t[2] for t in now["tasks"]} == set(target.tasks)
    assert len(target.store.created) == len(target.tasks)
    assert initial["audit"] <= now["audit"]  # entries are only ever added
    assert all(actor.startswith("key:") for _, _, actor, _ in now["audit"] - initial["audit"])
