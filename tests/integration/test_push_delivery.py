"""Push notifications reach a webhook receiver; webhook URLs that lead to the internal network
are refused (when a config is created and again on delivery), redirects are not followed, and
the POST goes to the address that was checked."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from tests.support.harness import running_gateway
from tests.support.local_server import serve_locally
from tests.support.messages import rpc, send_body
from tests.support.waiting import eventually
from tests.support.webhooks import fake_dns, webhook_receiver

V10 = {"A2A-Version": "1.0"}


@pytest.fixture
async def receiver():
    received: list[tuple[dict, dict]] = []
    arrived = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.json()))
        arrived.set()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/webhook", hook)
    async with serve_locally(app) as base_url:
        yield f"{base_url}/webhook", received, arrived


async def test_inline_config_delivers_stream_responses_with_authorization(receiver):
    url, received, _ = receiver
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        push = {"id": "cfg", "url": url, "token": "tok-1",
                "authentication": {"scheme": "Bearer", "credentials": "webhook-secret"}}
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("notify me", push=push), headers=V10)
        task = r.json()["result"]["task"]
        await eventually(lambda: [b["statusUpdate"]["status"]["state"] for _, b in received],
                         until=lambda states: "TASK_STATE_COMPLETED" in states,
                         what="the COMPLETED notification arrives")
    headers, body = received[-1]
    assert headers["Authorization"] == "Bearer webhook-secret"
    assert headers["X-A2A-Notification-Token"] == "tok-1"
    assert headers["Content-Type"] == "application/a2a+json"
    assert body["statusUpdate"]["taskId"] == task["id"]


async def test_config_created_later_gets_the_next_update(receiver):
    url, received, arrived = receiver
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("wait ?input"), headers=V10)
        task = r.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        create = rpc("CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": url})
        assert (await http.post(gw.jsonrpc_url(ep), json=create, headers=V10)).json()["result"][
            "id"
        ] == task["id"]
        await http.post(
            gw.jsonrpc_url(ep), json=send_body("answer", taskId=task["id"]), headers=V10
        )
        await asyncio.wait_for(arrived.wait(), 5)
    assert received[0][1]["statusUpdate"]["taskId"] == task["id"]


async def test_private_webhook_urls_are_refused_unless_allowed():
    async with running_gateway(push_allow_private_urls=False) as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        push = {"url": "http://127.0.0.1:9/webhook"}
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("x", push=push), headers=V10)
        err = r.json()["error"]
        assert err["code"] == -32602 and "not allowed" in err["message"]
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("x"), headers=V10)
        task_id = r.json()["result"]["task"]["id"]
        for target in ("http://10.1.2.3/h", "http://localhost/h", "file:///etc/passwd"):
            create = rpc("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": target})
            assert (await http.post(gw.jsonrpc_url(ep), json=create, headers=V10)).json()["error"][
                "code"
            ] == -32602


@pytest.fixture
async def hooks():
    async with webhook_receiver() as receiver:
        yield receiver


async def test_a_name_that_resolves_to_a_private_address_is_refused_at_config_time(hooks):
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        gw.gateway.push.guard.resolver = fake_dns({"hooks.internal.test": "10.20.30.40"})
        ep = await gw.add_endpoint(settings={"delay": 0})
        inline = {"url": "http://hooks.internal.test/a2a"}
        err = (
            await http.post(gw.jsonrpc_url(ep), json=send_body("x", push=inline), headers=V10)
        ).json()
        assert err["id"] == "req-1" and err["error"]["code"] == -32602
        assert err["error"]["message"] == (
            "push notification url is not allowed:"
            " hooks.internal.test resolves to a private address"
        )
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("wait ?input"), headers=V10)
        task_id = r.json()["result"]["task"]["id"]
        for url, reason in [
            ("http://hooks.internal.test/a2a", "resolves to a private address"),
            ("http://169.254.169.254/latest/meta-data/", "is a cloud metadata address"),
            ("http://[::ffff:10.0.0.1]/", "is a private address"),
            ("http://unknown.test/", "unknown.test does not resolve"),
        ]:
            create = rpc("CreateTaskPushNotificationConfig", {"taskId": task_id, "url": url}, rid=7)
            err = (await http.post(gw.jsonrpc_url(ep), json=create, headers=V10)).json()
            assert err["id"] == 7 and err["error"]["code"] == -32602
            assert reason in err["error"]["message"]
        listed = rpc("ListTaskPushNotificationConfigs", {"taskId": task_id})
        assert (await http.post(gw.jsonrpc_url(ep), json=listed, headers=V10)).json()["result"].get(
            "configs", []) == []
    assert hooks.posts == []


async def test_the_post_goes_to_the_checked_address_with_the_name_as_host(hooks):
    # hooks.test exists only in the gateway's resolver: the POST reaches the receiver only
    # because the connection goes to the address the guard checked
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        gw.gateway.push.guard.resolver = fake_dns({"hooks.test": "127.0.0.1"})
        ep = await gw.add_endpoint(settings={"delay": 0})
        push = {"url": hooks.url("/pinned", host="hooks.test")}
        await http.post(gw.jsonrpc_url(ep), json=send_body("hi", push=push), headers=V10)
        await hooks.wait_for("/pinned")
    assert hooks.posts[0][1]["Host"] == f"hooks.test:{hooks.port}"


async def test_a_name_rebound_to_a_private_address_after_the_config_is_not_called(hooks):
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        dns = {"hooks.test": "127.0.0.1", "steady.test": "127.0.0.1"}
        gw.gateway.push.guard.resolver = fake_dns(dns)
        ep = await gw.add_endpoint(settings={"delay": 0})
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("wait ?input"), headers=V10)
        task_id = r.json()["result"]["task"]["id"]
        for config_id, url in [("rebound", hooks.url("/rebound", "hooks.test")),
                               ("steady", hooks.url("/steady", "steady.test"))]:
            create = rpc("CreateTaskPushNotificationConfig",
                         {"taskId": task_id, "id": config_id, "url": url})
            answer = await http.post(gw.jsonrpc_url(ep), json=create, headers=V10)
            assert "result" in answer.json()
        dns["hooks.test"] = "10.0.0.9"  # the name now leads inside
        await http.post(gw.jsonrpc_url(ep), json=send_body("answer", taskId=task_id), headers=V10)
        await hooks.wait_for("/steady")
        await asyncio.sleep(0.3)  # a few poll intervals: nothing was left to retry
        assert await gw.store.claim_push_deliveries("t", time.time() + 1e6, time.time() + 2e6) == []
    assert "/rebound" not in hooks.paths()


async def test_a_redirect_is_not_followed(hooks):
    hooks.redirects["/moved"] = hooks.url("/inside")
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("wait ?input"), headers=V10)
        task_id = r.json()["result"]["task"]["id"]
        for config_id, path in [("moved", "/moved"), ("steady", "/steady")]:
            create = rpc("CreateTaskPushNotificationConfig",
                         {"taskId": task_id, "id": config_id, "url": hooks.url(path)})
            answer = await http.post(gw.jsonrpc_url(ep), json=create, headers=V10)
            assert "result" in answer.json()
        await http.post(gw.jsonrpc_url(ep), json=send_body("answer", taskId=task_id), headers=V10)
        await hooks.wait_for("/moved")
        await hooks.wait_for("/steady")
        await asyncio.sleep(0.3)  # a few poll intervals: nothing was left to retry
        assert await gw.store.claim_push_deliveries("t", time.time() + 1e6, time.time() + 2e6) == []
    assert hooks.paths().count("/moved") == 1 and "/inside" not in hooks.paths()


async def test_each_post_carries_authorization_token_and_an_id_kept_across_retries(hooks):
    hooks.statuses["/flaky"] = [500, 503]
    fast = {"push_retry_base_seconds": 0.1, "push_poll_seconds": 0.1}
    async with running_gateway(**fast) as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        push = {"id": "cfg", "url": hooks.url("/flaky"), "token": "tok-1",
                "authentication": {"scheme": "Basic", "credentials": "dXNlcjpwdw=="}}
        r = await http.post(
            gw.jsonrpc_url(ep), json=send_body("wait ?input", push=push), headers=V10
        )
        task_id = r.json()["result"]["task"]["id"]
        await http.post(gw.jsonrpc_url(ep), json=send_body("answer", taskId=task_id), headers=V10)
        await hooks.wait_for("/flaky", count=5)
        await asyncio.sleep(0.5)  # a short while in which nothing more may come
    posts = hooks.posts_to("/flaky")
    by_id: dict[str, list[dict]] = {}
    for headers, body in posts:
        assert headers["Authorization"] == "Basic dXNlcjpwdw=="
        assert headers["X-A2A-Notification-Token"] == "tok-1"
        assert headers["Content-Type"] == "application/a2a+json"
        assert body["statusUpdate"]["taskId"] == task_id
        by_id.setdefault(headers["X-A2A-Notification-Id"], []).append(body)
    # one id per notified state change (WORKING, INPUT_REQUIRED, COMPLETED), the same on each
    # retry of it: 3 deliveries, 2 of their attempts answered 500/503, so 5 POSTs
    assert len(posts) == 5 and len(by_id) == 3
    assert all(bodies == bodies[:1] * len(bodies) for bodies in by_id.values())
    assert sorted(b[0]["statusUpdate"]["status"]["state"] for b in by_id.values()) == [
        "TASK_STATE_COMPLETED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING"]


async def test_webhook_url_credentials_appear_in_no_error_and_no_log(hooks, caplog):
    caplog.set_level(logging.WARNING)
    hooks.statuses["/creds"] = [500]
    fast = {"push_retry_base_seconds": 0.1, "push_poll_seconds": 0.1}
    async with running_gateway(**fast) as gw, httpx.AsyncClient() as http:
        gw.gateway.push.guard.resolver = fake_dns({"inside.test": "10.0.0.3"})
        ep = await gw.add_endpoint(settings={"delay": 0})
        with capture_logs() as logs:
            answers = []
            for refused in ("http://admin:pw-s3cret@inside.test/h?key=q-s3cret",
                            "ftp://admin:pw-s3cret@inside.test/h", "http://admin:pw-s3cret@/h"):
                body = send_body("x", push={"url": refused})
                r = await http.post(gw.jsonrpc_url(ep), json=body, headers=V10)
                assert r.json()["error"]["code"] == -32602
                answers.append(r.text)
            sent = {"url": f"http://admin:pw-s3cret@127.0.0.1:{hooks.port}/creds?key=q-s3cret"}
            r = await http.post(gw.jsonrpc_url(ep), json=send_body("y", push=sent), headers=V10)
            answers.append(r.text)
            await hooks.wait_for("/creds", count=3)  # WORKING (500, then 204) and COMPLETED
    # what the gateway writes: its answers, its own log events, and warnings of the
    # libraries it calls (the a2a-sdk's URL validator used to log whole webhook URLs)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    written = " ".join(answers + [str(e) for e in logs] + warnings)
    assert "push_attempt_failed" in written
    assert "s3cret" not in written
