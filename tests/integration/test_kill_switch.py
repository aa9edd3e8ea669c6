"""The kill switch across replicas: two gateways on one PostgreSQL, a real backend run (the
chat bridge streaming from the scripted LLM) on replica A. Disabling its endpoint with
``cancelRunning`` on replica B — or revoking its caller's key with ``--cancel-running`` from the
CLI, which has no engine — ends the task CANCELED with the operator's reason on both replicas,
the caller's stream on A ends with it, the backend run stops (the LLM sees its client go) and the
task's webhook is told.
Without NOTIFY (DynamoDB), the CLI's kill reaches the replicas over their Redis at once."""

from __future__ import annotations

import asyncio
import getpass
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from a2a.types import TaskPushNotificationConfig, TaskState

from a2a_gateway.auth.api_keys import make_key
from a2a_gateway.cli import main as cli_main
from a2a_gateway.stores.base import Scope
from tests.stores.pg_support import admin_dsn, fresh_database
from tests.stores.store_urls import fresh_store_url
from tests.support.admin_support import API_KEY_SECRET, OPERATOR_KEY, admin
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import send_request
from tests.support.redis_support import redis_url
from tests.support.waiting import eventually
from tests.support.webhooks import webhook_receiver

WORDS = 300  # 0.1 s apart: 30 s unless the run is stopped


@asynccontextmanager
async def two_replicas(
    **settings: object,
) -> AsyncIterator[tuple[str, RunningGateway, RunningGateway, str]]:
    admin_dsn()  # skips without PostgreSQL (fails under CI)
    llm = require_env("A2A_TEST_LLM_URL").rstrip("/").removesuffix("/v1")
    async with fresh_database() as url, \
            running_gateway(url, replica_id="a", operator_keys=[OPERATOR_KEY], **settings) as a, \
            running_gateway(url, replica_id="b", operator_keys=[OPERATOR_KEY], **settings) as b:
        yield url, a, b, llm


async def _first_chunk(events) -> str:
    """Read the caller's stream until the run's first text chunk: the task id."""
    task_id = ""
    async for event in events:
        task_id = task_id or event.task.id or event.status_update.task_id
        if event.HasField("artifact_update"):
            return task_id
    raise AssertionError("the run ended before its first chunk")


async def _llm_request(llm: str, marker: str) -> dict:
    async with httpx.AsyncClient(timeout=10) as http:
        entries = (await http.get(f"{llm}/_requests")).json()
    return [e for e in entries if marker in (e.get("text") or "")][-1]


async def _stopped(llm: str, marker: str) -> dict:
    return await eventually(lambda: _llm_request(llm, marker),
                            until=lambda e: e["outcome"] != "in_progress", timeout=20,
                            what="the backend run stopped")


async def _assert_canceled_everywhere(gws, endpoint_id: str, task_id: str, principal: str,
                                      reason: str) -> None:
    for gw in gws:
        read = await admin(gw, "GET", f"/endpoints/{endpoint_id}/tasks/{task_id}"
                           f"?principal={principal}")
        task = read.json()["task"]
        assert task["status"]["state"] == "TASK_STATE_CANCELED", task["status"]
        assert task["status"]["message"]["parts"][0]["text"] == reason


def _slow(marker: str) -> str:
    return f"FAKE_SLOW words={WORDS} delay=0.1 {marker}"


def _chat_settings(llm: str) -> dict:
    return {"base_url": f"{llm}/v1", "model": "fake-model", "api_key": "sk-scripted"}


async def test_disabling_with_cancel_running_on_b_stops_the_run_on_a():
    async with two_replicas() as (_, a, b, llm):
        endpoint_id = await a.add_endpoint("handlers.openai_chat:OpenAIChatHandler",
                                           settings=_chat_settings(llm))
        marker = uuid.uuid4().hex[:10]
        async with a.client(endpoint_id, timeout=60) as client:
            events = client.send_message(send_request(_slow(marker)))
            task_id = await _first_chunk(events)
            started = time.monotonic()
            killed = await admin(b, "POST", f"/endpoints/{endpoint_id}/disable",
                                 json={"cancelRunning": True})
            assert killed.status_code == 200, killed.text
            assert killed.json()["canceledTasks"] == [task_id]
            rest = [e async for e in events]
            stopped = await _stopped(llm, marker)
            elapsed = time.monotonic() - started
        final = rest[-1].status_update.status
        assert final.state == TaskState.TASK_STATE_CANCELED
        entry = (await admin(b, "GET", "/audit?action=endpoint.disabled")).json()["entries"][0]
        reason = f"canceled by operator {entry['actor']}: endpoint disabled"
        assert final.message.parts[0].text == reason
        assert entry["details"] == {"canceledTasks": [task_id]}
        await _assert_canceled_everywhere((a, b), endpoint_id, task_id, "anonymous", reason)
        assert stopped["outcome"] == "client_disconnected" and len(stopped["chunks"]) < WORDS
        print(f"kill switch (admin API on another replica): backend run stopped in {elapsed:.2f} s")


async def test_revoking_a_key_from_the_cli_stops_its_principals_run_on_a():
    async with webhook_receiver() as hooks, two_replicas(
        allow_unauthenticated_endpoints=False, push_poll_seconds=0.2
    ) as (url, a, b, llm):
        endpoint_id = await a.add_endpoint("handlers.openai_chat:OpenAIChatHandler",
                                           settings=_chat_settings(llm))
        row, key = make_key(API_KEY_SECRET, endpoint_id=endpoint_id, tenant="default",
                            principal="carol")
        await a.store.create_api_key(row)
        marker = uuid.uuid4().hex[:10]
        async with a.client(endpoint_id, timeout=60, api_key=key) as client:
            events = client.send_message(send_request(_slow(marker)))
            task_id = await _first_chunk(events)
            await a.store.put_push_config(  # a webhook of the task: told of its end too
                Scope("default", endpoint_id, "carol"),
                TaskPushNotificationConfig(id="c1", task_id=task_id, url=hooks.url("/hook")),
            )
            started = time.monotonic()
            await asyncio.to_thread(cli_main, ["keys", "revoke", row.id, "--cancel-running",
                                               "--store", url])
            rest = [e async for e in events]
            stopped = await _stopped(llm, marker)
            elapsed = time.monotonic() - started
        reason = f"canceled by operator os:{getpass.getuser()}: API key revoked"
        assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
        assert rest[-1].status_update.status.message.parts[0].text == reason
        await _assert_canceled_everywhere((a, b), endpoint_id, task_id, "carol", reason)
        assert stopped["outcome"] == "client_disconnected" and len(stopped["chunks"]) < WORDS
        print(f"kill switch (CLI, PostgreSQL NOTIFY): backend run stopped in {elapsed:.2f} s")
        usage = (await admin(b, "GET", f"/usage?endpoint={endpoint_id}")).json()["totals"]
        assert [(t["tasks"], t["outcomes"]) for t in usage] == [
            (1, {"canceled": 1})
        ], usage  # the CLI wrote the task's usage record with its end
        await hooks.wait_for("/hook", timeout=10)  # sent from the outbox by a replica
    [(_, pushed)] = hooks.posts_to("/hook")
    assert pushed["statusUpdate"]["taskId"] == task_id
    assert pushed["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_the_clis_disable_reaches_replicas_over_redis_on_dynamodb_at_once(
    tmp_path, monkeypatch
):
    """No NOTIFY here: the CLI announces the endpoint change over the replicas' Redis after
    ending the tasks, and the owner stops its run then — not at its lease check (20 s here)."""
    llm = require_env("A2A_TEST_LLM_URL").rstrip("/").removesuffix("/v1")
    prefix = f"kill-{uuid.uuid4().hex[:8]}:"
    shared = {"redis_url": redis_url(), "redis_prefix": prefix, "lease_seconds": 60.0}
    async with fresh_store_url("dynamodb", tmp_path, monkeypatch) as url, \
            running_gateway(url, replica_id="a", **shared) as a:
        endpoint_id = await a.add_endpoint("handlers.openai_chat:OpenAIChatHandler",
                                           settings=_chat_settings(llm))
        marker = uuid.uuid4().hex[:10]
        async with a.client(endpoint_id, timeout=60) as client:
            events = client.send_message(send_request(_slow(marker)))
            await _first_chunk(events)
            monkeypatch.setenv("A2A_GATEWAY_REDIS_URL", redis_url())
            monkeypatch.setenv("A2A_GATEWAY_REDIS_PREFIX", prefix)
            started = time.monotonic()
            await asyncio.to_thread(cli_main, ["endpoints", "disable", endpoint_id,
                                               "--cancel-running", "--store", url])
            rest = [e async for e in events]
            stopped = await _stopped(llm, marker)
            elapsed = time.monotonic() - started
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    assert stopped["outcome"] == "client_disconnected"
    assert elapsed < 5, elapsed  # the lease check would come after 20 s
    print(f"kill switch (CLI, Redis on DynamoDB): backend run stopped in {elapsed:.2f} s")
