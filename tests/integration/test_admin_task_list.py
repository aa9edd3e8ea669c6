"""The admin API's task list, ``GET /admin/api/tasks``, with plain HTTP through a running
gateway: finished tasks too, of every caller, filtered by endpoint, state and context, in pages
that neither skip nor repeat a task across endpoints; a bad filter is 400 with what is wrong;
401/403 without an operator's credential."""

from __future__ import annotations

import uuid

import httpx
import pytest
from a2a.types import TaskState

from a2a_gateway.auth.api_keys import make_key
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.admin_support import API_KEY_SECRET as SECRET
from tests.support.admin_support import (
    OPERATOR_KEY,
    admin,
    assert_needs_an_operator,
    new_caller_key,
)
from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import send_request


@pytest.fixture
async def gw():
    async with running_gateway(
        operator_keys=[OPERATOR_KEY], admin_tasks_max_page_size=20
    ) as running:
        yield running


@pytest.fixture(params=STORE_KINDS)
async def gw_on_each_store(request, tmp_path, monkeypatch):
    async with (
        fresh_store_url(request.param, tmp_path, monkeypatch) as url,
        running_gateway(url, operator_keys=[OPERATOR_KEY], admin_tasks_max_page_size=20) as running,
    ):
        yield running


async def tasks(gw: RunningGateway, query: str = "") -> httpx.Response:
    return await admin(gw, "GET", f"/tasks{query}")


async def send(gw: RunningGateway, endpoint_id: str, text: str, **client) -> object:
    async with gw.client(endpoint_id, streaming=False, **client) as caller:
        return [e async for e in caller.send_message(send_request(text))][-1].task


async def test_finished_tasks_of_every_caller_are_listed_and_filtered(gw_on_each_store):
    gw = gw_on_each_store
    first, second = (
        await gw.add_endpoint(settings={"delay": 0}),
        await gw.add_endpoint(settings={"delay": 0}),
    )
    done = await send(gw, first, "finished")
    waiting = await send(gw, first, "waiting ?input")
    other = await send(gw, second, "elsewhere")
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

    listed = (await tasks(gw)).json()
    assert [t["taskId"] for t in listed["tasks"]] == [other.id, waiting.id, done.id]
    assert listed["nextPageToken"] == ""
    (entry,) = [t for t in listed["tasks"] if t["taskId"] == done.id]
    assert entry == {
        "endpointId": first,
        "tenant": "default",
        "principal": "anonymous",
        "taskId": done.id,
        "contextId": done.context_id,
        "state": "TASK_STATE_COMPLETED",
        "timestamp": done.status.timestamp.ToJsonString(),
    }

    def ids(answer: httpx.Response) -> list[str]:
        assert answer.status_code == 200, answer.text
        return [t["taskId"] for t in answer.json()["tasks"]]

    assert ids(await tasks(gw, f"?endpoint={first}")) == [waiting.id, done.id]
    assert ids(await tasks(gw, f"?endpointId={second}")) == [other.id]
    assert ids(await tasks(gw, f"?endpoint={first},{second}&state=completed")) == [
        other.id,
        done.id,
    ]
    assert ids(await tasks(gw, "?state=completed&state=input-required")) == [
        other.id,
        waiting.id,
        done.id,
    ]
    assert ids(await tasks(gw, "?state=TASK_STATE_INPUT_REQUIRED")) == [waiting.id]
    assert ids(await tasks(gw, f"?context={done.context_id}")) == [done.id]
    assert ids(await tasks(gw, f"?contextId={done.context_id}&state=failed")) == []


async def test_pages_across_endpoints_and_callers_show_every_task_once(gw_on_each_store):
    gw = gw_on_each_store
    endpoints = [await gw.add_endpoint(settings={"delay": 0}) for _ in range(3)]
    sent = []
    async with running_gateway(store=gw.store, allow_unauthenticated_endpoints=False) as strict:
        for i in range(11):
            endpoint_id = endpoints[i % 3]
            row, key = make_key(
                SECRET, endpoint_id=endpoint_id, tenant="default", principal=f"caller-{i % 2}"
            )
            await gw.store.create_api_key(row)
            sent.append((await send(strict, endpoint_id, f"task {i}", api_key=key)).id)
    seen, token, pages = [], "", 0
    while True:
        page = (await tasks(gw, f"?page_size=3&page_token={token}")).json()
        assert len(page["tasks"]) <= 3
        seen += [t["taskId"] for t in page["tasks"]]
        pages, token = pages + 1, page["nextPageToken"]
        if not token:
            break
    assert sorted(seen) == sorted(sent) and len(seen) == len(set(seen)) and pages >= 4
    newest_first = [t["taskId"] for t in (await tasks(gw, "?page_size=20")).json()["tasks"]]
    assert seen == newest_first and set(newest_first) == set(sent)
    only_alice = [
        t
        for t in (await tasks(gw, "?page_size=20")).json()["tasks"]
        if t["principal"] == "caller-0"
    ]
    assert len(only_alice) == 6


async def test_a_bad_filter_is_400_with_what_is_wrong(gw):
    endpoint_id = await gw.add_endpoint()
    await send(gw, endpoint_id, "one")
    await send(gw, endpoint_id, "two")
    token = (await tasks(gw, "?page_size=1")).json()["nextPageToken"]
    assert token
    bad = {
        "?state=bogus": "unknown state 'bogus'",
        "?page_size=0": "page_size must be a whole number from 1 to 20",
        "?page_size=21": "page_size must be a whole number from 1 to 20",
        "?page_size=ten": "page_size must be a whole number from 1 to 20",
        "?page_size=-1": "page_size must be a whole number from 1 to 20",
        f"?page_token={token[:-2]}xx": "page_token is not a nextPageToken of this gateway",
        "?page_token=made-up": "page_token is not a nextPageToken of this gateway",
        f"?endpoint={uuid.uuid4()}": "endpoint: no endpoint",
        "?endpoint=not-an-id": "endpoint: no endpoint not-an-id",
        f"?context={'c' * 257}": "context is longer than 256 characters",
        # more digits than int() reads
        f"?page_size={'9' * 5000}": "page_size must be a whole number from 1 to 20",
        # a reason holds no line break
        "?endpoint=not%0Aan-id": "endpoint: no endpoint 'not\\nan-id'",
    }
    for query, message in bad.items():
        answer = await tasks(gw, query)
        assert answer.status_code == 400, (query, answer.text)
        assert message in answer.json()["error"]["message"], (query, answer.text)
        assert "Traceback" not in answer.text
    assert (await tasks(gw, f"?page_size=1&page_token={token}")).status_code == 200


async def test_the_list_needs_an_operator(gw):
    endpoint_id = await gw.add_endpoint()
    await send(gw, endpoint_id, "not for callers")
    key = await new_caller_key(gw, endpoint_id)
    for refused in await assert_needs_an_operator(gw, "GET", "/tasks?state=completed", key):
        assert "taskId" not in refused.text
