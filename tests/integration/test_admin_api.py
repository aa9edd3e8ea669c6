"""The admin API (``/admin/api/…``) with plain HTTP through a running gateway: endpoints
(listed without settings values, enabled and disabled — a disabled one's card is 404 —,
created with the checks of ``endpoints add``), keys (shown once, listed without secret,
revoked), tasks of every endpoint and principal (listed, read, canceled); 401 without a
credential, 403 for a caller's API key."""

from __future__ import annotations

import uuid

import httpx
import orjson
import pytest
from a2a.types import TaskState
from httpx_sse import aconnect_sse

from a2a_gateway.auth.api_keys import make_key
from tests.stores.pg_support import admin_dsn, fresh_database
from tests.support.admin_support import API_KEY_SECRET as SECRET
from tests.support.admin_support import (
    AS_OPERATOR,
    OPERATOR_KEY,
    admin,
    assert_needs_an_operator,
    new_caller_key,
)
from tests.support.harness import running_gateway
from tests.support.held import HELD_ECHO, add_held_echo
from tests.support.messages import send_request
from tests.support.waiting import eventually


@pytest.fixture
async def gw():
    async with running_gateway(operator_keys=[OPERATOR_KEY], endpoint_cache_seconds=0.2) as running:
        yield running


async def test_no_credential_is_401_a_callers_key_403_an_unknown_bearer_401(gw):
    endpoint_id = await gw.add_endpoint()
    key = await new_caller_key(gw, endpoint_id)
    paths = [
        ("GET", "/endpoints"),
        ("GET", "/tasks"),
        ("POST", f"/endpoints/{endpoint_id}/disable"),
        ("POST", f"/endpoints/{endpoint_id}/keys"),
    ]
    for method, path in paths:
        await assert_needs_an_operator(gw, method, path, key)
    assert (await gw.store.get_endpoint(endpoint_id)).enabled  # nothing refused changed anything
    assert len(await gw.store.list_api_keys(endpoint_id)) == 1


async def test_endpoints_are_listed_without_settings_values(gw):
    endpoint_id = await gw.add_endpoint(
        handler="handlers.openai_chat:OpenAIChatHandler",
        settings={
            "base_url": "http://127.0.0.1:9/v1",
            "model": "m",
            "api_key": "sk-literal-secret-value",
            "extra_headers": {"X-Token": "literal-header-token"},
            "system_prompt": "env:SOME_TOKEN",
        },
        name="llm",
    )
    answer = await admin(gw, "GET", "/endpoints")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith(
        "application/json"
    )
    assert (
        answer.headers["Cache-Control"] == "no-store"
        and answer.headers["X-Content-Type-Options"] == "nosniff"
    )
    for value in ("sk-literal-secret-value", "SOME_TOKEN", "literal-header-token"):
        assert value not in answer.text
    assert "127.0.0.1:9" not in answer.text
    (shown,) = [e for e in answer.json()["endpoints"] if e["id"] == endpoint_id]
    assert shown["name"] == "llm" and shown["enabled"] is True
    assert shown["handler"] == "handlers.openai_chat:OpenAIChatHandler"
    assert shown["cardUrl"] == f"{gw.base_url}/{endpoint_id}/.well-known/agent-card.json"
    assert shown["auth"]["anonymous"] is True and shown["auth"]["apiKey"] is True
    settings = {s["name"]: s for s in shown["settings"]}
    assert settings["api_key"] == {"name": "api_key", "env": False, "secret": True}
    assert settings["system_prompt"] == {"name": "system_prompt", "env": True, "secret": False}
    assert set(settings) == {"base_url", "model", "api_key", "extra_headers", "system_prompt"}


async def test_endpoints_of_the_endpoints_file_are_marked(tmp_path):
    declared_id = str(uuid.uuid4())
    declared = tmp_path / "endpoints.yaml"
    declared.write_text(f"endpoints:\n  - id: {declared_id}\n    name: declared\n"
                        "    handler: handlers.echo:EchoHandler\n    public: true\n")
    async with running_gateway(operator_keys=[OPERATOR_KEY], endpoints_file=str(declared)) as gw:
        other_id = await gw.add_endpoint()
        listed = {e["id"]: e for e in (await admin(gw, "GET", "/endpoints")).json()["endpoints"]}
        disabled = (await admin(gw, "POST", f"/endpoints/{declared_id}/disable")).json()
    assert (
        listed[declared_id]["endpointsFile"] is True and listed[other_id]["endpointsFile"] is False
    )
    assert disabled["endpointsFile"] is True and disabled["enabled"] is False


async def test_disable_makes_the_card_404_and_enable_brings_it_back(gw):
    endpoint_id = await gw.add_endpoint()
    card_url = f"{gw.endpoint_url(endpoint_id)}/.well-known/agent-card.json"
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.get(card_url)).status_code == 200
        disabled = await admin(gw, "POST", f"/endpoints/{endpoint_id}/disable")
        assert disabled.status_code == 200 and disabled.json()["enabled"] is False
        assert (await gw.store.get_endpoint(endpoint_id)).enabled is False

        async def card_status() -> int:
            return (await http.get(card_url)).status_code

        await eventually(
            card_status, until=lambda status: status == 404, what="the disabled endpoint's card 404"
        )
        enabled = await admin(gw, "POST", f"/endpoints/{endpoint_id}/enable")
        assert enabled.json()["enabled"] is True
        await eventually(
            card_status, until=lambda status: status == 200, what="the enabled endpoint's card back"
        )
    assert (await admin(gw, "POST", f"/endpoints/{uuid.uuid4()}/disable")).status_code == 404
    assert (await admin(gw, "POST", "/endpoints/not-a-uuid/disable")).status_code == 404


async def test_create_runs_the_checks_of_endpoints_add(gw):
    bad = await admin(
        gw,
        "POST",
        "/endpoints",
        json={
            "name": "x",
            "handler": "handlers.echo:EchoHandler",
            "settings": {"no_such_setting": 1},
        },
    )
    assert bad.status_code == 400
    assert any("unknown setting no_such_setting" in p for p in bad.json()["problems"])
    outside = await admin(gw, "POST", "/endpoints", json={"name": "x", "handler": "os:system"})
    assert outside.status_code == 400 and "allowlist" in " ".join(outside.json()["problems"])
    shape = await admin(
        gw, "POST", "/endpoints", json={"name": 3, "handler": "handlers.echo:EchoHandler", "x": 1}
    )
    assert shape.status_code == 400 and len(shape.json()["problems"]) == 2
    assert (await admin(gw, "POST", "/endpoints", content=b"[1]")).status_code == 400
    assert (await admin(gw, "POST", "/endpoints", content=b"{nope")).status_code == 400
    assert await gw.store.list_endpoints() == []

    made = await admin(
        gw,
        "POST",
        "/endpoints",
        json={
            "name": "echo",
            "handler": "handlers.echo:EchoHandler",
            "settings": {"delay": 0},
            "public": True,
        },
    )
    assert made.status_code == 201, made.text
    endpoint_id = made.json()["endpoint"]["id"]
    async with gw.client(endpoint_id, streaming=False) as client:
        events = [e async for e in client.send_message(send_request("made by the admin api"))]
    assert events[-1].task.status.state == TaskState.TASK_STATE_COMPLETED
    again = await admin(gw, "POST", "/endpoints", json={"id": endpoint_id, "name": "echo",
                                                         "handler": "handlers.echo:EchoHandler"})
    assert again.status_code == 409


async def test_keys_are_shown_once_listed_without_secret_and_revoked(gw):
    endpoint_id = await gw.add_endpoint()
    made = await admin(
        gw, "POST", f"/endpoints/{endpoint_id}/keys", json={"principal": "bob", "name": "ci"}
    )
    assert made.status_code == 201
    key, key_id = made.json()["key"], made.json()["id"]
    assert key.startswith(f"a2agw_{key_id}_") and made.json()["principal"] == "bob"
    listed = await admin(gw, "GET", f"/endpoints/{endpoint_id}/keys")
    assert [k["id"] for k in listed.json()["keys"]] == [key_id]
    secret = key.removeprefix(f"a2agw_{key_id}_")  # may hold "_" itself (URL-safe base64)
    assert key not in listed.text and secret not in listed.text and "hash" not in listed.text
    assert listed.json()["keys"][0]["state"] == "active"
    async with running_gateway(store=gw.store, allow_unauthenticated_endpoints=False) as strict:
        async with strict.client(endpoint_id, streaming=False, api_key=key) as client:
            events = [e async for e in client.send_message(send_request("with the new key"))]
        assert events[-1].task.status.state == TaskState.TASK_STATE_COMPLETED
    assert (
        await admin(gw, "POST", f"/endpoints/{endpoint_id}/keys", json={"expiresDays": -1})
    ).status_code == 400
    assert (
        await admin(gw, "POST", f"/endpoints/{endpoint_id}/keys", json={"principal": 5})
    ).status_code == 400
    revoked = await admin(gw, "POST", f"/endpoints/{endpoint_id}/keys/{key_id}/revoke")
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    other = await gw.add_endpoint()
    assert (await admin(gw, "POST", f"/endpoints/{other}/keys/{key_id}/revoke")).status_code == 404


async def test_an_unknown_endpoint_or_key_with_a_line_break_in_its_id_is_404_naming_it(gw):
    endpoint_id = await gw.add_endpoint()
    for method, path, named in [
        ("GET", "/endpoints/not%0Aan-id", "no endpoint 'not\\nan-id'"),
        ("POST", "/endpoints/not%0D%0Aan-id/disable", "no endpoint 'not\\r\\nan-id'"),
        ("POST", f"/endpoints/{endpoint_id}/keys/k%0Ay/revoke", "no key 'k\\ny' of this"),
    ]:
        answer = await admin(gw, method, path)
        assert answer.status_code == 404, (
            path,
            answer.text,
        )  # an HTTP reason cannot hold a line break
        assert named in answer.json()["error"]["message"]


async def test_a_body_holding_a_nul_or_a_key_expiring_past_the_calendar_is_400_and_adds_nothing(gw):
    endpoint_id = await gw.add_endpoint()
    refused = [("/endpoints", {"name": "a\u0000b", "handler": "handlers.echo:EchoHandler"}, "NUL"),
               ("/endpoints", {"name": "ok", "handler": "handlers.echo:EchoHandler",
                               "settings": {"nested": [{"deep": "x\u0000"}]}}, "NUL"),
               (f"/endpoints/{endpoint_id}/keys", {"principal": "p\u0000"}, "NUL"),
               (f"/endpoints/{endpoint_id}/keys", {"expiresDays": 1e300}, "expiresDays")]
    for path, body, named in refused:
        answer = await admin(gw, "POST", path, json=body)
        assert answer.status_code == 400, (
            body,
            answer.text,
        )  # before: 500 (PostgreSQL text, timedelta)
        assert named in answer.json()["error"]["message"]
    deep = b"[" * 5000 + b"]" * 5000  # nesting orjson refuses
    assert (await admin(gw, "POST", "/endpoints", content=deep)).status_code == 400
    assert [e.id for e in await gw.store.list_endpoints()] == [endpoint_id]
    assert await gw.store.list_api_keys(endpoint_id) == []


async def test_tasks_of_every_endpoint_and_principal_are_listed_read_and_canceled(gw):
    first, second = (
        await gw.add_endpoint(settings={"delay": 0}),
        await gw.add_endpoint(settings={"delay": 0}),
    )
    rows = []
    for endpoint_id, principal in ((first, "alice"), (second, "bob")):
        row, key = make_key(SECRET, endpoint_id=endpoint_id, tenant="default", principal=principal)
        await gw.store.create_api_key(row)
        rows.append(key)
    async with running_gateway(store=gw.store, allow_unauthenticated_endpoints=False) as strict:
        asked = {}
        for (endpoint_id, principal), key in zip(
            ((first, "alice"), (second, "bob")), rows, strict=True
        ):
            async with strict.client(endpoint_id, streaming=False, api_key=key) as client:
                task = [e async for e in client.send_message(send_request(f"{principal} ?input"))][
                    -1
                ].task
                assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
                asked[principal] = task
    listed = (await admin(gw, "GET", "/tasks")).json()
    shown = {t["principal"]: t for t in listed["tasks"]}
    assert set(shown) == {"alice", "bob"} and listed["nextPageToken"] == ""
    assert shown["alice"]["endpointId"] == first and shown["bob"]["endpointId"] == second
    assert shown["alice"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert shown["alice"]["contextId"] == asked["alice"].context_id
    only = (await admin(gw, "GET", f"/tasks?endpointId={second}")).json()["tasks"]
    assert [t["principal"] for t in only] == ["bob"]
    by_context = (await admin(gw, "GET", f"/tasks?contextId={asked['alice'].context_id}")).json()[
        "tasks"
    ]
    assert [t["taskId"] for t in by_context] == [asked["alice"].id]
    assert (await admin(gw, "GET", "/tasks?state=completed")).json()["tasks"] == []
    assert (await admin(gw, "GET", "/tasks?state=bogus")).status_code == 400

    task_id = asked["alice"].id
    read = await admin(gw, "GET", f"/endpoints/{first}/tasks/{task_id}?principal=alice")
    assert (
        read.status_code == 200
        and read.json()["task"]["history"][0]["parts"][0]["text"] == "alice ?input"
    )
    assert (
        await admin(gw, "GET", f"/endpoints/{first}/tasks/{task_id}?principal=bob")
    ).status_code == 404
    assert (await admin(gw, "GET", f"/endpoints/{first}/tasks/{task_id}")).status_code == 400
    canceled = await admin(gw, "POST", f"/endpoints/{first}/tasks/{task_id}/cancel?principal=alice")
    assert canceled.status_code == 200 and canceled.json()["state"] == "TASK_STATE_CANCELED"
    again = await admin(gw, "POST", f"/endpoints/{first}/tasks/{task_id}/cancel?principal=alice")
    assert again.status_code == 409 and again.json()["error"]["status"] == "FAILED_PRECONDITION"
    assert [
        t["principal"]
        for t in (await admin(gw, "GET", "/tasks?state=input-required")).json()["tasks"]
    ] == ["bob"]


# the console's session ---------------------------------------------------------------------

async def login(http: httpx.AsyncClient, key: str = OPERATOR_KEY) -> str:
    """Log ``http`` in (it keeps the cookie); the session's CSRF token."""
    answer = await http.post("/console/api/login", json={"key": key})
    assert answer.status_code == 200, answer.text
    return answer.json()["csrf"]


async def test_console_is_off_by_default():
    async with running_gateway(operator_keys=[OPERATOR_KEY]) as gw:
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=30) as http:
            assert (await http.get("/console")).status_code == 404
            assert (
                await http.post("/console/api/login", json={"key": OPERATOR_KEY})
            ).status_code == 404


async def test_a_console_session_reads_the_admin_api_and_feed_and_its_changes_need_the_csrf_token():
    async with running_gateway(
        operator_keys=[OPERATOR_KEY], console=True, endpoint_cache_seconds=0.2
    ) as gw:
        endpoint_id = await gw.add_endpoint()
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=30) as http:
            assert (
                await http.post("/console/api/login", json={"key": "wrong-key-of-enough-length"})
            ).status_code == 401
            assert (
                await http.post("/console/api/login", json={"key": f"Bearer {OPERATOR_KEY}"})
            ).status_code == 401
            assert (await http.post("/console/api/login", content=b"[]")).status_code == 400
            assert (await http.get("/console/api/session")).status_code == 401
            logged_in = await http.post("/console/api/login", json={"key": OPERATOR_KEY})
            csrf = logged_in.json()["csrf"]
            attributes = {
                a.strip().partition("=")[0].lower()
                for a in logged_in.headers["Set-Cookie"].split(";")
            }
            assert {
                "httponly",
                "samesite",
                "path",
                "max-age",
            } <= attributes and "secure" not in attributes
            assert "samesite=strict" in logged_in.headers["Set-Cookie"].lower()
            (set_cookie,) = [c for c in http.cookies.jar if c.name == "a2a_gateway_console"]
            assert OPERATOR_KEY not in set_cookie.value and csrf not in set_cookie.value
            assert (await http.get("/console/api/session")).json()["csrf"] == csrf

            listed = await http.get("/admin/api/endpoints")
            assert listed.status_code == 200 and [e["id"] for e in listed.json()["endpoints"]] == [
                endpoint_id
            ]
            async with http.stream("GET", "/events") as feed:
                assert feed.status_code == 200 and feed.headers["content-type"].startswith(
                    "text/event-stream"
                )

            for sent in ({}, {"X-CSRF-Token": "not-the-token"}):
                refused = await http.post(
                    f"/admin/api/endpoints/{endpoint_id}/disable", headers=sent
                )
                assert refused.status_code == 403 and "CSRF" in refused.text
                assert (
                    await http.post(f"/admin/api/endpoints/{endpoint_id}/keys", headers=sent)
                ).status_code == 403
                assert (await http.post("/console/api/logout", headers=sent)).status_code == 403
            assert (
                await gw.store.get_endpoint(endpoint_id)
            ).enabled and await gw.store.list_api_keys() == []
            done = await http.post(
                f"/admin/api/endpoints/{endpoint_id}/disable", headers={"X-CSRF-Token": csrf}
            )
            assert (
                done.status_code == 200 and not (await gw.store.get_endpoint(endpoint_id)).enabled
            )

            assert (
                await http.post("/console/api/logout", headers={"X-CSRF-Token": csrf})
            ).status_code == 200
            assert (await http.get("/admin/api/endpoints")).status_code == 401

        async with httpx.AsyncClient(base_url=gw.base_url, timeout=30) as forged:
            forged.cookies.set("a2a_gateway_console", set_cookie.value[:-2] + "xx")
            assert (await forged.get("/admin/api/endpoints")).status_code == 401
            assert (await forged.get("/events")).status_code == 401


async def test_a_session_cookie_with_non_ascii_characters_is_no_session():
    async with running_gateway(operator_keys=[OPERATOR_KEY], console=True) as gw:
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=30) as http:
            for value in (
                '"x.\\303\\251"',
                '"\\303\\251.x"',
            ):  # quoted octal escapes: "x.Ã©", "Ã©.x"
                sent = {"Cookie": f"a2a_gateway_console={value}"}
                for method, path, status in [
                    ("GET", "/admin/api/endpoints", 401),
                    ("GET", "/events", 401),
                    ("GET", "/console/api/session", 401),
                    ("POST", "/console/api/logout", 200),
                ]:
                    answer = await http.request(method, path, headers=sent)
                    assert answer.status_code == status, (path, value, answer.text)  # before: 500


async def test_sessions_expire_and_another_gateways_secret_does_not_take_them():
    async with running_gateway(
        operator_keys=[OPERATOR_KEY],
        console=True,
        console_session_seconds=1.0,
        console_session_secret="one-secret",
    ) as gw:
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=30) as http:
            await login(http)
            value = http.cookies["a2a_gateway_console"]
            assert (await http.get("/admin/api/endpoints")).status_code == 200
            async with running_gateway(operator_keys=[OPERATOR_KEY], console=True,
                                       console_session_secret="another-secret") as other:
                async with httpx.AsyncClient(base_url=other.base_url, timeout=30) as elsewhere:
                    elsewhere.cookies.set("a2a_gateway_console", value)
                    assert (await elsewhere.get("/admin/api/endpoints")).status_code == 401
            await eventually(
                lambda: http.get("/admin/api/endpoints"),
                until=lambda r: r.status_code == 401,
                what="the expired session refused",
            )


async def test_the_console_page_is_served_with_a_strict_content_security_policy():
    async with running_gateway(operator_keys=[OPERATOR_KEY], console=True) as gw:
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=30) as http:
            page = await http.get("/console")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            policy = page.headers["Content-Security-Policy"]
            assert (
                "default-src 'self'" in policy
                and "script-src 'self'" in policy
                and "unsafe" not in policy
            )
            assert (
                "frame-ancestors 'none'" in policy
                and page.headers["X-Content-Type-Options"] == "nosniff"
            )
            assert "<script>" not in page.text and "http" not in page.text.replace("http-equiv", "")
            for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
                asset = await http.get(f"/console/static/{name}")
                assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
            assert "innerHTML" not in (await http.get("/console/static/console.js")).text
            assert (await http.get("/console/static/..%2Fpages.py")).status_code == 404
            assert (await http.get("/console/static/session.py")).status_code == 404


async def test_the_session_cookie_is_secure_when_the_gateway_is_served_over_https():
    async with running_gateway(operator_keys=[OPERATOR_KEY], console=True,
                               public_base_url="https://gateway.example") as gw:
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=30) as http:
            logged_in = await http.post("/console/api/login", json={"key": OPERATOR_KEY})
    assert "secure" in {a.strip().lower() for a in logged_in.headers["Set-Cookie"].split(";")}


async def test_an_operator_follows_a_running_tasks_own_stream_text_chunks_included(
    gw, monkeypatch
):
    # the run waits after its first word until the operator's stream has begun (a 2 s run
    # could end during the refused requests on a loaded machine: a 409, or no live chunks)
    endpoint_id, release = await add_held_echo(gw, monkeypatch, settings={"delay": 0.05})
    row, key = make_key(SECRET, endpoint_id=endpoint_id, tenant="default", principal="carol")
    await gw.store.create_api_key(row)
    words = " ".join(f"w{i}" for i in range(40))
    async with running_gateway(store=gw.store, allow_unauthenticated_endpoints=False,
                               operator_keys=[OPERATOR_KEY],  # the run is this one's
                               handler_allowlist=["handlers.", HELD_ECHO.partition(":")[0]]
                               ) as strict:
        async with strict.client(endpoint_id, api_key=key) as client:
            caller = client.send_message(send_request(words))
            try:
                first = await anext(caller)
                task_id = first.task.id
                url = (
                    f"{strict.base_url}/admin/api/endpoints/{endpoint_id}/tasks/{task_id}"
                    "/stream?principal=carol"
                )
                async with httpx.AsyncClient(timeout=60) as http:
                    assert (await http.get(url)).status_code == 401
                    assert (
                        await http.get(url, headers={"Authorization": f"Bearer {key}"})
                    ).status_code == 403
                    assert (
                        await http.get(url.replace("carol", "dave"), headers=AS_OPERATOR)
                    ).status_code == 404
                    async with aconnect_sse(http, "GET", url, headers=AS_OPERATOR) as source:
                        seen = []
                        async for sse in source.aiter_sse():
                            if sse.data:
                                seen.append(orjson.loads(sse.data))
                                release.set()  # followed from here on: the run goes on
            finally:
                release.set()
            rest = [event async for event in caller]
    assert (
        "task" in seen[0] and seen[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    )
    chunks = [e["artifactUpdate"] for e in seen if "artifactUpdate" in e]
    assert len(chunks) > 2 and any(c.get("append") for c in chunks)  # text as it arrived
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    ended = await admin(
        gw, "GET", f"/endpoints/{endpoint_id}/tasks/{task_id}/stream?principal=carol"
    )
    assert ended.status_code == 409


@pytest.mark.postgres
async def test_a_replica_lists_follows_and_cancels_a_task_running_on_another():
    admin_dsn()  # skips without PostgreSQL (fails under CI)
    words = " ".join(f"w{i}" for i in range(400))  # 0.05 s a word: 20 s unless canceled
    async with fresh_database() as url, \
            running_gateway(url, replica_id="a", operator_keys=[OPERATOR_KEY]) as a, \
            running_gateway(url, replica_id="b", operator_keys=[OPERATOR_KEY]) as b:
        endpoint_id = await a.add_endpoint(settings={"delay": 0.05})
        async with a.client(endpoint_id) as client:
            caller = client.send_message(send_request(words))
            task_id = (await anext(caller)).task.id
            listed = (await admin(b, "GET", f"/tasks?endpointId={endpoint_id}")).json()["tasks"]
            assert [(t["taskId"], t["state"]) for t in listed] == [(task_id, "TASK_STATE_WORKING")]
            url_b = (
                f"{b.base_url}/admin/api/endpoints/{endpoint_id}/tasks/{task_id}"
                "/stream?principal=anonymous"
            )
            async with httpx.AsyncClient(timeout=60) as http:
                async with aconnect_sse(http, "GET", url_b, headers=AS_OPERATOR) as source:
                    seen, canceled = [], None
                    async for sse in source.aiter_sse():
                        if sse.data:
                            seen.append(orjson.loads(sse.data))
                        if (
                            canceled is None
                            and len([e for e in seen if "artifactUpdate" in e]) == 2
                        ):
                            canceled = await admin(
                                b,
                                "POST",
                                f"/endpoints/{endpoint_id}/tasks/{task_id}/cancel"
                                "?principal=anonymous",
                            )
                            assert canceled.status_code == 200, canceled.text
            rest = [event async for event in caller]
    assert canceled.json()["state"] == "TASK_STATE_CANCELED"
    assert seen[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    text = "".join(
        p["text"]
        for e in seen
        if "artifactUpdate" in e
        for p in e["artifactUpdate"]["artifact"]["parts"]
    )
    assert text.startswith("echo: w0") and len(text) < len(f"echo: {words}")


async def test_a_session_ends_with_the_operator_key_it_was_opened_with():
    other_key = "op-" + uuid.uuid4().hex
    async with running_gateway(operator_keys=[OPERATOR_KEY, other_key], console=True,
                               console_session_secret="shared-secret") as gw:
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=30) as http:
            await login(http)
            value = http.cookies["a2a_gateway_console"]
    async with running_gateway(operator_keys=[other_key], console=True,
                               console_session_secret="shared-secret") as rotated:
        async with httpx.AsyncClient(base_url=rotated.base_url, timeout=30) as http:
            http.cookies.set("a2a_gateway_console", value)
            assert (await http.get("/admin/api/endpoints")).status_code == 401
            await login(http, other_key)
            assert (await http.get("/admin/api/endpoints")).status_code == 200
