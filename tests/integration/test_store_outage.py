"""A store that fails mid-request: a clear retriable error, never a 500 or a made-up result."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from a2a.types import TaskState

from a2a_gateway.stores.base import Scope, StoreUnavailableError, TaskQuery
from a2a_gateway.stores.memory import MemoryStore
from a2a_gateway.tasks import request_handler
from handlers.base import Handler, HandlerEvent, HandlerRequest
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.harness import running_gateway
from tests.support.messages import send_body

V10 = {"A2A-Version": "1.0"}


class FlakyStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail_creates = False
        self.fail_updates = False

    async def create_task(self, *args, **kwargs):
        if self.fail_creates:
            raise StoreUnavailableError("database is restarting")
        return await super().create_task(*args, **kwargs)

    async def update_task(self, *args, **kwargs):
        if self.fail_updates:
            raise StoreUnavailableError("database is restarting")
        return await super().update_task(*args, **kwargs)


async def test_store_down_at_creation_or_completion_is_a_503_json_error():
    store = FlakyStore()
    async with running_gateway(store=store) as gw, httpx.AsyncClient(timeout=10) as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        # a blocking send's task is written once, created at its end; one that asks a
        # question is created WORKING, then updated
        for flag, text in (("fail_creates", "a b c"), ("fail_updates", "a b c ?input")):
            setattr(store, flag, True)
            r = await http.post(gw.jsonrpc_url(ep), json=send_body(text), headers=V10)
            assert r.status_code == 503, (flag, r.text)
            assert "unavailable" in r.json()["error"]["message"] and r.headers["Retry-After"]
            setattr(store, flag, False)
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("a b c"), headers=V10)
        assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert not gw.gateway.engine.runs


async def test_stream_ends_when_the_store_goes_away_mid_run():
    store = FlakyStore()
    async with running_gateway(store=store) as gw, httpx.AsyncClient(timeout=10) as http:
        ep = await gw.add_endpoint(settings={"delay": 0.05})
        store.fail_updates = True
        streamed = send_body("a b c", method="SendStreamingMessage")
        async with http.stream("POST", gw.jsonrpc_url(ep), json=streamed, headers=V10) as r:
            body = (await r.aread()).decode()
        assert r.status_code == 200 and '"task"' in body and "TASK_STATE_COMPLETED" not in body
        task_id = json.loads(body.split("data: ", 2)[1].split("\n")[0])["result"]["task"]["id"]
        stored = await store.get_task(Scope("default", ep, "anonymous"), task_id)
        # the task keeps its owner and lease: when the lease runs out a replica takes it over
        assert stored.task.status.state == TaskState.TASK_STATE_WORKING
        assert stored.owner == gw.gateway.settings.replica_id and stored.lease_until
        assert task_id not in gw.gateway.engine.runs


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_task_write_the_store_refuses_is_a_503_not_an_answer_get_task_cannot_find(
    store_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any error of a task write (here one that is no outage: a value the database refuses)
    answers the blocking caller with the store error, never with the task as it stands in memory."""
    async with (
        fresh_store_url(store_kind, tmp_path, monkeypatch) as url,
        running_gateway(url) as gw,
        httpx.AsyncClient(timeout=30) as http,
    ):
        ep = await gw.add_endpoint(settings={"delay": 0})
        store = gw.store

        async def refused(*args, **kwargs):
            raise ValueError("the database cannot hold this value")

        # a blocking send's task is written once, created at its end; one that asks a
        # question is created WORKING, then updated
        for method, text in (("create_task", "a b c"), ("update_task", "a b c ?input")):
            with monkeypatch.context() as patch:
                patch.setattr(store, method, refused)
                r = await http.post(
                    gw.jsonrpc_url(ep), json=send_body(text, rid=method), headers=V10
                )
            assert r.status_code == 503, (method, r.text)
            assert r.json()["id"] == method and r.json()["error"]["code"] == -32603, r.text
            assert "unavailable" in r.json()["error"]["message"] and r.headers["Retry-After"]
        listed = await store.list_tasks(Scope("default", ep, "anonymous"), TaskQuery(page_size=10))
        # the refused creation left nothing; the refused update left the task WORKING, leased
        assert [t.status.state for t in listed.tasks] == [TaskState.TASK_STATE_WORKING], (
            listed.tasks
        )
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("a b c"), headers=V10)
        assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_nul_context_id_unchecked_on_postgres_is_a_503_not_a_lost_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real write failure behind the NUL id check: PostgreSQL text cannot hold NUL."""
    monkeypatch.setattr(request_handler, "check_ids", lambda request: None)
    async with (
        fresh_store_url("postgres", tmp_path, monkeypatch) as url,
        running_gateway(url) as gw,
        httpx.AsyncClient(timeout=30) as http,
    ):
        ep = await gw.add_endpoint(settings={"delay": 0})
        r = await http.post(
            gw.jsonrpc_url(ep), json=send_body("hi", contextId="ctx\u0000x"), headers=V10
        )
        assert r.status_code == 503 and r.json()["error"]["code"] == -32603, r.text
        listed = await gw.store.list_tasks(
            Scope("default", ep, "anonymous"), TaskQuery(page_size=10)
        )
        assert list(listed.tasks) == []


class RaisingHandler(Handler):
    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        raise RuntimeError("the backend library broke")
        yield  # an async generator


async def test_a_handler_error_whose_failed_task_cannot_be_written_is_a_503(
    monkeypatch: pytest.MonkeyPatch,
):
    async with running_gateway(handler_allowlist=["handlers.", __name__]) as gw, \
            httpx.AsyncClient(timeout=30) as http:
        ep = await gw.add_endpoint(f"{__name__}:RaisingHandler")

        async def refused(*args, **kwargs):
            raise ValueError("the database cannot hold this value")

        monkeypatch.setattr(gw.store, "create_task", refused)
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("hi"), headers=V10)
        assert r.status_code == 503 and r.json()["error"]["code"] == -32603, r.text
