"""Quotas through a running gateway, on every store, with the a2a-sdk client (raw HTTP where a
status code or header is the point).

One flow per store: a key's task window refuses the request over it (429, ``Retry-After``,
the JSON-RPC id, the limit named, REST ``RESOURCE_EXHAUSTED``), creates no task, leaves other
keys alone, and admits again once the window turned (the quotas' clock is moved); a key's
concurrency slot refuses with 403 while its task runs and frees when it ends; an endpoint's
limit binds its callers together; token and money budgets refuse once the usage ledger holds
more (tasks through the chat bridge against the scripted LLM, priced by the endpoint's ``cost``)
than it; a follow-up message to an admitted task is not a new task.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from a2a.types import Task, TaskState, a2a_pb2_grpc

from a2a_gateway.auth.api_keys import make_key
from a2a_gateway.governance.quotas import BUDGET_CACHE_SECONDS
from a2a_gateway.stores.base import Scope, TaskQuery
from tests.stores.store_urls import fresh_store_url
from tests.support.admin_support import OPERATOR_KEY, admin
from tests.support.harness import RunningGateway, collect, require_env, running_gateway
from tests.support.held import add_held_echo
from tests.support.messages import send_body, send_params, send_request
from tests.support.waiting import eventually

V10 = {"A2A-Version": "1.0"}
PRICE = {"currency": "USD", "per_task": 0.001, "per_1k_input_tokens": 0.5,
         "per_1k_output_tokens": 1.5}
PROMPT = "FAKE_SLOW words=3 delay=0.01"
"""The scripted LLM answers three words (3 completion tokens) to a 10-token prompt."""
MINUTE_START = 1_800_000_000.0 - 1_800_000_000.0 % 86400 + 3600
"""A whole hour of a day (so minute, hour and day windows all start there)."""


@pytest.fixture
def gw(keyed_every_store: RunningGateway) -> RunningGateway:
    return keyed_every_store


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _key(gw: RunningGateway, endpoint_id: str, limits: dict) -> tuple[str, str]:
    secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
    row, key = make_key(secret, endpoint_id=endpoint_id, tenant="default")
    row.limits = limits
    await gw.store.create_api_key(row)
    return row.id, key


async def _tasks_of(gw: RunningGateway, endpoint_id: str, principal: str) -> int:
    page = await gw.store.list_tasks(Scope("default", endpoint_id, principal), TaskQuery())
    return len(page.tasks)


async def _send(gw: RunningGateway, endpoint_id: str, key: str, text: str = "hi") -> Task:
    async with gw.client(endpoint_id, streaming=False, api_key=key) as client:
        (event,) = await collect(client.send_message(send_request(text)))
    return event.task


async def test_each_quota_kind_refuses_before_any_work(gw, monkeypatch):
    """One flow per store (a gateway's start costs more than the checks)."""
    require_env("A2A_TEST_LLM_URL")
    await _windows_refuse_and_reset(gw)
    await _concurrency_and_endpoint_limits(gw, monkeypatch)
    await _token_and_money_budgets(gw)


async def _windows_refuse_and_reset(gw: RunningGateway) -> None:
    clock = gw.gateway.quotas.clock = Clock(MINUTE_START + 10)
    endpoint = await gw.add_endpoint(settings={"delay": 0})
    limited_id, limited = await _key(gw, endpoint, {"tasks_per_minute": 2, "tasks_per_day": 50})
    free_id, free = await _key(gw, endpoint, {})

    # windows: two tasks in this minute, the third refused on every binding, nothing created
    for text in ("one", "two"):
        assert (await _send(gw, endpoint, limited, text)).status.state == (
            TaskState.TASK_STATE_COMPLETED
        )
    async with gw.client(endpoint, streaming=False, api_key=limited) as client:
        with pytest.raises(Exception, match="429"):  # the SDK client raises on the status
            await collect(client.send_message(send_request("three")))
    async with httpx.AsyncClient(timeout=10) as http:
        headers = {**V10, "X-API-Key": limited}
        rpc = await http.post(gw.jsonrpc_url(endpoint), json=send_body(rid="quota-7"),
                              headers=headers)
        rest = await http.post(f"{gw.rest_url(endpoint)}/message:send", json=send_params(),
                               headers=headers)
    assert rpc.status_code == 429 and rpc.headers["Retry-After"] == "50"
    error = rpc.json()
    assert error["id"] == "quota-7" and error["error"]["code"] == -32600
    assert "tasks_per_minute of 2" in error["error"]["message"]
    assert "resets at 2027-01-15T01:01:00Z (in 50 s)" in error["error"]["message"]
    assert f"key {limited_id}" in error["error"]["message"]
    assert rest.status_code == 429 and rest.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert await _tasks_of(gw, endpoint, limited_id) == 2
    async with httpx.AsyncClient(timeout=10) as http:
        metrics = (await http.get(f"{gw.base_url}/metrics")).text
    assert 'a2a_gateway_quota_refusals_total{limit="tasks_per_minute",subject="key"}' in metrics
    # another key of the same endpoint is not bound by it
    assert (await _send(gw, endpoint, free)).status.state == TaskState.TASK_STATE_COMPLETED

    # the next minute admits again (the refusals gave back the day's counts they took)
    clock.now = MINUTE_START + 60
    assert (await _send(gw, endpoint, limited)).status.state == TaskState.TASK_STATE_COMPLETED
    assert await _tasks_of(gw, endpoint, limited_id) == 3

    # a follow-up message to an existing task is not a new task: not refused
    slow = await gw.add_endpoint(settings={"delay": 0})
    asking_id, asking = await _key(gw, slow, {"tasks_per_hour": 1})
    first = await _send(gw, slow, asking, "?input")
    assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    async with gw.client(slow, streaming=False, api_key=asking) as client:
        (answer,) = await collect(client.send_message(
            send_request("yes", task_id=first.id, context_id=first.context_id)
        ))
    assert "tasks_per_hour of 1" in (await _refusal(gw, slow, asking)).json()["error"]["message"]
    assert answer.task.id == first.id
    assert await _tasks_of(gw, slow, asking_id) == 1


async def _concurrency_and_endpoint_limits(
    gw: RunningGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw.gateway.quotas.clock = Clock(MINUTE_START + 10)
    # the run is held after its first word until the refusal is seen (a 0.4 s run could end
    # before the refused request arrived on a loaded machine)
    endpoint, release = await add_held_echo(gw, monkeypatch, settings={"delay": 0})
    busy_id, busy = await _key(gw, endpoint, {"concurrent_tasks": 1, "tasks_per_minute": 2})

    # one running task holds the key's only slot: 403 (no window resets it), then free again;
    # each refusal gave back the minute's count it had taken before the slot refused
    async with gw.client(endpoint, streaming=False, api_key=busy) as client:
        try:
            (running,) = await collect(
                client.send_message(send_request("a b c d", immediately=True))
            )
            refused = await _refusal(gw, endpoint, busy, rid=9)
        finally:
            release.set()
        assert refused.status_code == 403 and "Retry-After" not in refused.headers
        assert refused.json()["id"] == 9
        assert "concurrent_tasks of 1" in refused.json()["error"]["message"]
        await eventually(lambda: gw.store.get_task(Scope("default", endpoint, busy_id),
                                                   running.task.id),
                         until=lambda s: s is not None
                         and s.task.status.state == TaskState.TASK_STATE_COMPLETED,
                         what="the running task ended")
        await eventually(lambda: _try(gw, endpoint, busy), what="the slot was released")
    assert await _tasks_of(gw, endpoint, busy_id) == 2
    over = await _refusal(gw, endpoint, busy)  # the minute counted two tasks, not the refusals
    assert over.status_code == 429 and "tasks_per_minute of 2" in over.json()["error"]["message"]

    # an endpoint's limit binds all its callers together
    shared = await gw.add_endpoint(settings={"delay": 0, "limits": {"tasks_per_hour": 2}})
    (_, one), (_, two) = await _key(gw, shared, {}), await _key(gw, shared, {})
    await _send(gw, shared, one)
    await _send(gw, shared, two)
    refused = await _refusal(gw, shared, one)
    assert refused.status_code == 429
    assert f"tasks_per_hour of 2 for endpoint {shared}" in refused.json()["error"]["message"]



async def _token_and_money_budgets(gw: RunningGateway) -> None:
    """Through the chat bridge against the scripted LLM: each task uses 13 tokens and costs
    0.0105 USD at the endpoint's price, recorded when it ends; a budget refuses the task after
    the one that crossed it (the running one was not cut)."""
    clock = gw.gateway.quotas.clock = Clock(time.time())  # the ledger's days are real ones
    chat = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler", settings={
        "base_url": f"{os.environ['A2A_TEST_LLM_URL'].rstrip('/')}/v1", "api_key": "sk-scripted",
        "model": "scripted", "cost": PRICE,
    })
    _, tokens = await _key(gw, chat, {"tokens_per_day": 20})
    _, money = await _key(gw, chat, {"cost_per_month": 0.015})
    for key, name in ((tokens, "tokens_per_day of 20"), (money, "cost_per_month of 0.015")):
        for _ in range(2):  # 0, then 13 tokens (0.0105 USD) used: below the budget
            clock.now += BUDGET_CACHE_SECONDS + 1  # each start reads the ledger afresh
            assert (await _send(gw, chat, key, PROMPT)).status.state == (
                TaskState.TASK_STATE_COMPLETED
            )
        clock.now += BUDGET_CACHE_SECONDS + 1
        refused = await _refusal(gw, chat, key)  # 26 tokens, 0.021 USD: over
        assert refused.status_code == 429 and name in refused.json()["error"]["message"]
        assert int(refused.headers["Retry-After"]) > 0


async def _refusal(
    gw: RunningGateway, endpoint: str, key: str, rid: int | str = "req-1"
) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.post(gw.jsonrpc_url(endpoint), json=send_body(rid=rid),
                               headers={**V10, "X-API-Key": key})


async def _try(gw: RunningGateway, endpoint: str, key: str) -> bool:
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(gw.jsonrpc_url(endpoint), json=send_body(),
                                 headers={**V10, "X-API-Key": key})
    return answer.status_code == 200 and "result" in answer.json()


@pytest.fixture(params=["sqlite"])  # the store side of limits is the contract suite's
async def admin_gw(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RunningGateway]:
    async with fresh_store_url(request.param, tmp_path, monkeypatch) as url:
        async with running_gateway(
            url, operator_keys=[OPERATOR_KEY], allow_unauthenticated_endpoints=False,
            api_key_cache_seconds=0, grpc=True,
        ) as running:
            yield running


async def test_the_admin_api_sets_limits_and_refuses_bad_ones_writing_nothing(admin_gw):
    gw = admin_gw
    gw.gateway.quotas.clock = Clock(MINUTE_START + 10)
    endpoint = await gw.add_endpoint(settings={"delay": 0})
    made = await admin(gw, "POST", f"/endpoints/{endpoint}/keys",
                       json={"name": "ci", "limits": {"tasks_per_minute": 1}})
    assert made.status_code == 201 and made.json()["limits"] == {"tasks_per_minute": 1}
    key_id, key = made.json()["id"], made.json()["key"]
    assert (await gw.store.get_api_key(key_id)).limits == {"tasks_per_minute": 1}
    await _send(gw, endpoint, key)
    assert (await _refusal(gw, endpoint, key)).status_code == 429

    # raising the limit takes effect at once (no key cache here), clearing it too
    path = f"/endpoints/{endpoint}/keys/{key_id}/limits"
    raised = await admin(gw, "PUT", path, json={"limits": {"tasks_per_minute": 2,
                                                           "cost_per_month": 12.5}})
    assert raised.status_code == 200
    assert raised.json()["limits"] == {"tasks_per_minute": 2, "cost_per_month": 12.5}
    await _send(gw, endpoint, key)
    assert (await _refusal(gw, endpoint, key)).status_code == 429
    assert (await admin(gw, "PUT", path, json={"limits": {}})).json()["limits"] == {}
    await _send(gw, endpoint, key)

    bad = [
        ({"limits": {"tasks_per_mnute": 1}}, "limits.tasks_per_mnute: unknown limit"),
        ({"limits": {"concurrent_tasks": 0}}, "limits.concurrent_tasks: input should be greater"),
        ({"limits": {"tasks_per_day": -1}}, "limits.tasks_per_day: input should be greater"),
        ({"limits": {"tasks_per_day": True}}, "limits.tasks_per_day: input should be a valid"),
        ({"limits": {"tasks_per_day": "5"}}, "limits.tasks_per_day: input should be a valid"),
        ({"limits": {"tokens_per_day": 10**16}}, "limits.tokens_per_day: input should be less"),
        ({"limits": [1, 2]}, "limits: must be an object"),
        ({}, "limits: required"),
    ]
    before = await gw.store.list_api_keys(endpoint)
    for body, expected in bad:
        answer = await admin(gw, "PUT", path, json=body)
        assert answer.status_code == 400 and expected in answer.text, (body, answer.text)
        if "limits" in body:  # the same limits are refused for a new key
            created = await admin(gw, "POST", f"/endpoints/{endpoint}/keys", json=body)
            assert created.status_code == 400 and expected in created.text, (body, created.text)
    assert await gw.store.list_api_keys(endpoint) == before
    other = await gw.add_endpoint()
    assert (await admin(gw, "PUT", f"/endpoints/{other}/keys/{key_id}/limits",
                        json={"limits": {}})).status_code == 404
    assert (await admin(gw, "PUT", path, json={"limits": {}}, headers={})).status_code == 401

    # each change is in the audit log, before and after
    audit = (await admin(gw, "GET", f"/audit?action=key.limited&target={key_id}")).json()
    changes = [(e["before"]["limits"], e["after"]["limits"]) for e in audit["entries"]]
    assert changes == [({"tasks_per_minute": 2, "cost_per_month": 12.5}, {}),
                       ({"tasks_per_minute": 1}, {"tasks_per_minute": 2, "cost_per_month": 12.5})]

    # an endpoint's limits through the admin API: checked as its other settings are
    made = await admin(gw, "POST", "/endpoints", json={
        "name": "limited", "handler": "handlers.echo:EchoHandler", "public": True,
        "limits": {"concurrent_tasks": 0}})
    assert made.status_code == 400 and "limits.concurrent_tasks" in made.text, made.text
    made = await admin(gw, "POST", "/endpoints", json={
        "name": "limited", "handler": "handlers.echo:EchoHandler", "public": True,
        "settings": {"delay": 0}, "limits": {"tasks_per_hour": 1}})
    assert made.status_code == 201, made.text
    limited = made.json()["endpoint"]["id"]
    assert (await gw.store.get_endpoint(limited)).metadata["limits"] == {"tasks_per_hour": 1}
    async with httpx.AsyncClient(timeout=10) as http:
        answers = [await http.post(gw.jsonrpc_url(limited), json=send_body(), headers=V10)
                   for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 429]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.gateway.grpc_port}") as channel:
        request = send_request("over gRPC")
        request.tenant = limited
        with pytest.raises(grpc.aio.AioRpcError) as refused_grpc:
            await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(
                request, metadata=(("a2a-version", "1.0"),))
    assert refused_grpc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "tasks_per_hour of 1" in refused_grpc.value.details()
