"""Caller authentication with API keys, through a running gateway, on every store.

An endpoint that is not public answers a missing, malformed, revoked, expired or foreign key
with 401 on every binding; a valid key (``X-API-Key`` or ``Authorization: Bearer``) makes its
principal the owner of the tasks it creates, and another principal sees them as not existing.
"""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from a2a_gateway.auth.api_keys import make_key
from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import rpc, send_body, send_params
from tests.support.waiting import eventually

V10 = {"A2A-Version": "1.0"}


@pytest.fixture
def gw(keyed_every_store: RunningGateway) -> RunningGateway:
    return keyed_every_store


class Keys:
    """Keys written as ``a2a-gateway keys create`` writes them."""

    def __init__(self, gw: RunningGateway) -> None:
        self.gw = gw
        self.secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()

    async def create(self, endpoint_id: str, **options) -> tuple[str, str]:
        endpoint = await self.gw.store.get_endpoint(endpoint_id)
        row, key = make_key(self.secret, endpoint_id=endpoint_id, tenant=endpoint.tenant, **options)
        await self.gw.store.create_api_key(row)
        return row.id, key


async def call(
    http: httpx.AsyncClient, url: str, body: dict, key: str | None = None, *, bearer: bool = False
) -> httpx.Response:
    headers = dict(V10)
    if key is not None:
        headers.update({"Authorization": f"Bearer {key}"} if bearer else {"X-API-Key": key})
    return await http.post(url, json=body, headers=headers)


async def test_no_or_bad_key_is_401_on_every_route_and_creates_nothing(gw):
    endpoint = await gw.add_endpoint(settings={"delay": 0})
    other = await gw.add_endpoint(settings={"delay": 0})
    _, foreign = await Keys(gw).create(other)
    rpc_url, rest = gw.jsonrpc_url(endpoint), gw.rest_url(endpoint)
    stream = send_body(method="SendStreamingMessage")
    async with httpx.AsyncClient(timeout=10) as http:
        for key in (None, "", "nonsense", foreign, foreign[:-2] + "xx"):
            headers = {**V10, **({"X-API-Key": key} if key is not None else {})}
            answers = [
                await http.post(rpc_url, json=send_body(), headers=headers),
                await http.post(
                    rpc_url, json=stream, headers={**headers, "Accept": "text/event-stream"}
                ),
                await http.post(f"{rest}/message:send", json=send_params(), headers=headers),
                await http.get(f"{rest}/tasks", headers=headers),
                await http.get(f"{rest}/tasks/some-id:subscribe", headers=headers),
            ]
            for response in answers:
                assert response.status_code == 401, (key, response.text)
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
                assert response.headers["Content-Type"].startswith("application/json")
            assert (
                answers[0].json()["id"] == "req-1" and answers[0].json()["error"]["code"] == -32600
            )
            assert answers[2].json()["error"]["status"] == "UNAUTHENTICATED"
            if key:
                assert key not in "".join(r.text for r in answers)
        card = await http.get(f"{gw.endpoint_url(endpoint)}/.well-known/agent-card.json")
    assert card.status_code == 200
    schemes = card.json()["securitySchemes"]
    assert schemes["apiKey"]["apiKeySecurityScheme"] == {
        "location": "header",
        "name": "X-API-Key",
        "description": "an API key from a2a-gateway keys create",
    }
    assert schemes["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card.json()["security"] == [{"apiKey": []}, {"bearer": []}]  # the 0.3 form
    _, key = await Keys(gw).create(endpoint)
    async with httpx.AsyncClient(timeout=10) as http:
        listed = await call(http, rpc_url, rpc("ListTasks", {}), key)
    assert listed.json()["result"]["tasks"] == []


async def test_a_key_owns_its_tasks_and_another_principal_sees_none_of_them(gw):
    endpoint = await gw.add_endpoint(settings={"delay": 0})
    keys = Keys(gw)
    _, alice = await keys.create(endpoint, principal="alice")
    _, alice_rotated = await keys.create(endpoint, principal="alice")
    _, bob = await keys.create(endpoint)  # principal defaults to the key's own id
    url, rest = gw.jsonrpc_url(endpoint), gw.rest_url(endpoint)
    async with httpx.AsyncClient(timeout=10) as http:
        sent = (await call(http, url, send_body("secret plans ?input"), alice, bearer=True)).json()
        task = sent["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        task_id, context_id = task["id"], task["contextId"]
        config = {"taskId": task_id, "id": "hook", "url": "http://127.0.0.1:9/hook"}
        assert (
            "result"
            in (
                await call(http, url, rpc("CreateTaskPushNotificationConfig", config), alice)
            ).json()
        )

        # bob: every operation on alice's task answers as for a task that does not exist
        not_found = [
            await call(http, url, rpc("GetTask", {"id": task_id}), bob),
            await call(http, url, rpc("GetTask", {"id": task_id, "currentGeneration": 1}), bob),
            await call(http, url, rpc("CancelTask", {"id": task_id}), bob),
            await call(http, url, rpc("SubscribeToTask", {"id": task_id}), bob),
            await call(
                http,
                url,
                rpc("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "hook"}),
                bob,
            ),
            await call(http, url, rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}), bob),
            await call(
                http, url, rpc("CreateTaskPushNotificationConfig", {**config, "id": "bobs"}), bob
            ),
            await call(http, url, send_body("answer", taskId=task_id), bob),
            await call(http, url, {**send_body("answer", taskId=task_id), "params": {
                **send_body("answer", taskId=task_id)["params"],
                "configuration": {"ifGenerationMatch": 2}}}, bob),
        ]
        for response in not_found:
            assert response.json()["error"]["code"] == -32001, response.text
        deleted = await call(
            http,
            url,
            rpc("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "hook"}),
            bob,
        )
        assert deleted.json()["error"]["code"] == -32001
        bob_rest = await http.get(f"{rest}/tasks/{task_id}", headers={**V10, "X-API-Key": bob})
        assert bob_rest.status_code == 404
        listed = await call(http, url, rpc("ListTasks", {}), bob)
        assert listed.json()["result"]["tasks"] == []
        joined = (await call(http, url, send_body("join", contextId=context_id), bob)).json()
        elsewhere = (
            await call(http, url, send_body("join", contextId="no-such-context"), bob)
        ).json()
        assert (
            joined.keys() == elsewhere.keys()
        )  # someone else's context is as one that does not exist
        if "error" in joined:
            assert joined["error"]["code"] == elsewhere["error"]["code"]
        else:
            assert [m["parts"][0]["text"] for m in joined["result"]["task"]["history"]] == ["join"]

        # alice with her rotated key is the same caller: she sees and answers her task
        got = await call(http, url, rpc("GetTask", {"id": task_id}), alice_rotated)
        assert got.json()["result"]["id"] == task_id
        hooks = await call(
            http, url, rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}), alice_rotated
        )
        assert [c["id"] for c in hooks.json()["result"]["configs"]] == ["hook"]
        answered = await call(http, url, send_body("go on", taskId=task_id), alice_rotated)
        assert answered.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        mine = await call(http, url, rpc("ListTasks", {}), alice)
    assert [t["id"] for t in mine.json()["result"]["tasks"]] == [task_id]
    assert "secret plans" not in listed.text + "".join(r.text for r in not_found)


async def test_revoked_and_expired_keys_stop_working(gw):
    endpoint = await gw.add_endpoint(settings={"delay": 0})
    keys = Keys(gw)
    key_id, key = await keys.create(endpoint)
    _, short_lived = await keys.create(endpoint, expires_days=1 / 86400)  # one second
    url = gw.jsonrpc_url(endpoint)
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await call(http, url, rpc("ListTasks", {}), key)).status_code == 200
        assert (await call(http, url, rpc("ListTasks", {}), short_lived)).status_code == 200
        assert await gw.store.revoke_api_key(key_id, datetime.now(UTC))
        assert (await call(http, url, rpc("ListTasks", {}), key)).status_code == 401
        await eventually(lambda: call(http, url, rpc("ListTasks", {}), short_lived), timeout=10,
                         until=lambda answer: answer.status_code == 401,
                         what="the one-second key expires")


async def test_public_endpoints_take_anonymous_calls_and_still_check_a_presented_key(gw):
    endpoint = await gw.add_endpoint(settings={"delay": 0, "public": True})
    _, key = await Keys(gw).create(endpoint, principal="carol")
    url = gw.jsonrpc_url(endpoint)
    async with httpx.AsyncClient(timeout=10) as http:
        anonymous = await call(http, url, send_body())
        carols = await call(http, url, send_body("mine"), key)
        bad = await call(http, url, send_body(), key[:-1] + ("A" if key[-1] != "A" else "B"))
        card = await http.get(f"{gw.endpoint_url(endpoint)}/.well-known/agent-card.json")
        seen_by_anonymous = await call(http, url, rpc("ListTasks", {}))
        seen_by_carol = await call(http, url, rpc("ListTasks", {}), key)
    assert anonymous.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert carols.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert bad.status_code == 401
    assert "securitySchemes" not in card.json()
    assert [t["id"] for t in seen_by_anonymous.json()["result"]["tasks"]] == [
        anonymous.json()["result"]["task"]["id"]
    ]
    assert [t["id"] for t in seen_by_carol.json()["result"]["tasks"]] == [
        carols.json()["result"]["task"]["id"]
    ]


async def test_another_endpoint_sees_nothing_of_a_task_and_refuses_its_keys(gw):
    first = await gw.add_endpoint(settings={"delay": 0})
    second = await gw.add_endpoint(settings={"delay": 0})
    public = await gw.add_endpoint(settings={"delay": 0, "public": True})
    keys = Keys(gw)
    _, key_first = await keys.create(first, principal="dave")
    _, key_second = await keys.create(second, principal="dave")  # same principal, other endpoint
    async with httpx.AsyncClient(timeout=10) as http:
        sent = await call(http, gw.jsonrpc_url(first), send_body("first's ?input"), key_first)
        task_id = sent.json()["result"]["task"]["id"]
        refused = await call(
            http, gw.jsonrpc_url(second), rpc("GetTask", {"id": task_id}), key_first
        )
        answers = []
        for url, key in ((gw.jsonrpc_url(second), key_second), (gw.jsonrpc_url(public), None)):
            answers += [
                await call(http, url, rpc("GetTask", {"id": task_id}), key),
                await call(http, url, rpc("CancelTask", {"id": task_id}), key),
                await call(http, url, rpc("SubscribeToTask", {"id": task_id}), key),
                await call(
                    http, url, rpc("ListTaskPushNotificationConfigs", {"taskId": task_id}), key
                ),
                await call(http, url, send_body("answer", taskId=task_id), key),
            ]
            listed = await call(http, url, rpc("ListTasks", {}), key)
            assert listed.json()["result"]["tasks"] == []
        still = await call(http, gw.jsonrpc_url(first), rpc("GetTask", {"id": task_id}), key_first)
    assert refused.status_code == 401
    for response in answers:
        assert response.json()["error"]["code"] == -32001, response.text
    assert still.json()["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_push_configs_per_task_and_messages_per_task_are_limited():
    async with running_gateway(max_push_configs_per_task=2, max_task_history=2) as gw:
        endpoint = await gw.add_endpoint(settings={"delay": 0})
        url = gw.jsonrpc_url(endpoint)
        async with httpx.AsyncClient(timeout=10) as http:
            task = (await call(http, url, send_body("a ?input"))).json()["result"]["task"]
            configs = [
                await call(http, url, rpc("CreateTaskPushNotificationConfig",
                                          {"taskId": task["id"], "id": f"c{i}", "url": "http://127.0.0.1:9/h"}))
                for i in range(3)
            ]
            replaced = await call(http, url, rpc("CreateTaskPushNotificationConfig",
                                                 {"taskId": task["id"], "id": "c1", "url": "http://127.0.0.1:8/h"}))
            # the task holds the message and the agent's prompt: 2, the limit
            past = await call(http, url, send_body("c", taskId=task["id"]))
            kept = await call(http, url, rpc("GetTask", {"id": task["id"]}))
    assert ["result" in c.json() for c in configs] == [True, True, False]
    assert (
        configs[2].json()["error"]["code"] == -32602
        and "max_push_configs_per_task" in configs[2].text
    )
    assert "result" in replaced.json()
    assert past.json()["error"]["code"] == -32602 and "max_task_history" in past.text
    assert kept.json()["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert len(kept.json()["result"]["history"]) == 2


async def test_each_caller_has_its_own_rate_limit_answered_with_429_and_retry_after(gw):
    endpoint = await gw.add_endpoint(
        settings={"delay": 0, "rate_limit": {"per_second": 0.2, "burst": 2}}
    )
    keys = Keys(gw)
    _, alice = await keys.create(endpoint)
    _, bob = await keys.create(endpoint)
    url, rest = gw.jsonrpc_url(endpoint), gw.rest_url(endpoint)
    async with httpx.AsyncClient(timeout=10) as http:
        allowed = [await call(http, url, rpc("ListTasks", {}), alice) for _ in range(2)]
        limited = await call(http, url, send_body(), alice)
        limited_rest = await http.get(f"{rest}/tasks", headers={**V10, "X-API-Key": alice})
        for_bob = await call(http, url, rpc("ListTasks", {}), bob)
    assert [r.status_code for r in allowed] == [200, 200]
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "5"
    assert (
        limited.json()["id"] == "req-1" and "rate limit of 0.2 requests per second" in limited.text
    )
    assert (
        limited_rest.status_code == 429
        and limited_rest.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    )
    assert for_bob.status_code == 200  # another caller's bucket is full


async def test_a_malformed_rate_limit_is_the_endpoints_problem():
    async with running_gateway() as gw:
        endpoint = await gw.add_endpoint(settings={"rate_limit": {"per_second": "lots"}})
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await call(http, gw.jsonrpc_url(endpoint), send_body())
    assert answer.status_code == 503 and "invalid rate_limit: per_second" in answer.text
