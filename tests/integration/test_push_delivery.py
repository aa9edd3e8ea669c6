"""Push notifications reach a webhook receiver; private webhook URLs are refused by default."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from aiohttp import web

from tests.harness import running_gateway

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
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/webhook", received, arrived
    await runner.cleanup()


def send_body(text: str, push: dict | None = None) -> dict:
    params: dict = {"message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}}
    if push:
        params["configuration"] = {"taskPushNotificationConfig": push}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}


async def test_inline_config_delivers_stream_responses_with_authorization(receiver):
    url, received, _ = receiver
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        push = {"id": "cfg", "url": url, "token": "tok-1",
                "authentication": {"scheme": "Bearer", "credentials": "webhook-secret"}}
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("notify me", push), headers=V10)
        task = r.json()["result"]["task"]
        for _ in range(100):
            states = [b["statusUpdate"]["status"]["state"] for _, b in received]
            if "TASK_STATE_COMPLETED" in states:
                break
            await asyncio.sleep(0.05)
    assert "TASK_STATE_COMPLETED" in states
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
        create = {"jsonrpc": "2.0", "id": 2, "method": "CreateTaskPushNotificationConfig",
                  "params": {"taskId": task["id"], "url": url}}
        assert (await http.post(gw.jsonrpc_url(ep), json=create, headers=V10)).json()["result"]["id"] == task["id"]
        follow = send_body("answer")
        follow["params"]["message"]["taskId"] = task["id"]
        await http.post(gw.jsonrpc_url(ep), json=follow, headers=V10)
        await asyncio.wait_for(arrived.wait(), 5)
    assert received[0][1]["statusUpdate"]["taskId"] == task["id"]


async def test_private_webhook_urls_are_refused_unless_allowed():
    async with running_gateway(push_allow_private_urls=False) as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        push = {"url": "http://127.0.0.1:9/webhook"}
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("x", push), headers=V10)
        err = r.json()["error"]
        assert err["code"] == -32602 and "not allowed" in err["message"]
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("x"), headers=V10)
        task_id = r.json()["result"]["task"]["id"]
        for target in ("http://10.1.2.3/h", "http://localhost/h", "file:///etc/passwd"):
            create = {"jsonrpc": "2.0", "id": 2, "method": "CreateTaskPushNotificationConfig",
                      "params": {"taskId": task_id, "url": target}}
            assert (await http.post(gw.jsonrpc_url(ep), json=create, headers=V10)).json()["error"]["code"] == -32602
