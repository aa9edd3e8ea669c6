"""Backend health and numbers at a glance in the admin API, with plain HTTP through a running
gateway on memory, SQLite and PostgreSQL: a backend that cannot be reached makes its endpoint
``failing`` with the reason, a success afterwards ``ok``; health is told once per task, not
per chunk; ``/admin/api/stats`` counts the requests sent, their errors, the tasks' outcomes,
their latency and the open streams; both need an operator (401 without, 403 for a caller's
key)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import orjson
import pytest
from a2a.types import TaskState
from httpx_sse import aconnect_sse
from pydantic import SecretStr

from handlers.base import Handler, HandlerEvent, HandlerRequest, HandlerSettings
from tests.backends.scripted_llm import ScriptedLLM
from tests.stores.pg_support import fresh_database
from tests.support.admin_support import (
    AS_OPERATOR,
    OPERATOR_KEY,
    admin,
    assert_needs_an_operator,
    new_caller_key,
)
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import rpc, send_request
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)



@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def gw(request, tmp_path):
    async with contextlib.AsyncExitStack() as stack:
        store = {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path}/gw.db"}.get(
            request.param
        ) or await stack.enter_async_context(fresh_database())
        yield await stack.enter_async_context(
            running_gateway(
                store,
                operator_keys=[OPERATOR_KEY],
                endpoint_cache_seconds=0.2,
                stats_interval_seconds=0.2,
            )
        )


async def admin_get(gw: RunningGateway, path: str) -> httpx.Response:
    return await admin(gw, "GET", path)


async def health_of(gw: RunningGateway, endpoint_id: str) -> dict:
    answer = await admin_get(gw, f"/endpoints/{endpoint_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()["health"]


async def send(gw: RunningGateway, endpoint_id: str, text: str, *, streaming: bool = False) -> list:
    async with gw.client(endpoint_id, streaming=streaming) as client:
        return [event async for event in client.send_message(send_request(text))]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_an_unreachable_backend_is_failing_with_its_reason_then_ok_after_a_success(gw):
    llm = require_env("A2A_TEST_LLM_URL").rstrip("/").removesuffix("/v1") + "/v1"
    down = f"http://ops:pw-in-url@127.0.0.1:{closed_port()}/v1"
    endpoint_id = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler",
                                        settings={"base_url": down, "model": "m"}, name="llm")
    assert (await health_of(gw, endpoint_id))["status"] == "unknown"

    (failed,) = await send(gw, endpoint_id, "hello")
    assert failed.task.status.state == TaskState.TASK_STATE_FAILED
    health = await health_of(gw, endpoint_id)
    assert health["status"] == "failing" and health["last_success"] is None
    assert health["last_error"]["message"].startswith("cannot reach the chat backend at http://127.0.0.1:")
    assert "pw-in-url" not in str(health) and (health["successes"], health["errors"]) == (0, 1)
    failed_at = datetime.fromisoformat(health["last_error"]["at"])
    assert abs((datetime.now(UTC) - failed_at).total_seconds()) < 60
    listed = (await admin_get(gw, "/endpoints")).json()["endpoints"]
    assert [e["health"]["status"] for e in listed if e["id"] == endpoint_id] == ["failing"]

    row = await gw.store.get_endpoint(endpoint_id)
    row.metadata["base_url"] = llm
    row.updated_at = datetime.now(UTC)
    await gw.store.update_endpoint(row)
    await asyncio.sleep(0.3)  # past endpoint_cache_seconds: the next request reads the row
    (done,) = await send(gw, endpoint_id, "hello again")
    assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
    health = await health_of(gw, endpoint_id)
    assert health["status"] == "ok" and (health["successes"], health["errors"]) == (1, 1)
    assert datetime.fromisoformat(health["last_success"]) >= failed_at
    assert health["last_error"]["at"] == failed_at.isoformat()  # when it last failed stays shown


async def test_health_is_told_once_per_task_not_per_chunk(gw):
    endpoint_id = await gw.add_endpoint(settings={"delay": 0.01})
    events = await send(gw, endpoint_id, " ".join(f"w{i}" for i in range(50)), streaming=True)
    assert len(events) > 10  # many text chunks (one a word, unless the client lags)
    health = await health_of(gw, endpoint_id)
    assert health["status"] == "ok" and (health["successes"], health["errors"]) == (1, 0)


async def test_stats_count_the_requests_sent_their_errors_outcomes_latency_and_open_streams(gw):
    endpoint_id = await gw.add_endpoint(settings={"delay": 0})
    for n in range(3):
        await send(gw, endpoint_id, f"message {n}")
    async with httpx.AsyncClient(timeout=30) as http:
        wrong = await http.post(gw.jsonrpc_url(endpoint_id), json=rpc("NoSuchMethod", {}),
                                headers={"A2A-Version": "1.0"})
        assert "error" in wrong.json()

    def counted(series: dict) -> bool:
        shown = series["endpoints"].get(endpoint_id)
        return (
            bool(shown)
            and shown["total"]["requests"] >= 4
            and shown["total"]["tasks"].get("completed") == 3
        )

    stats = await eventually(lambda: admin_get(gw, "/stats"), until=lambda r: counted(r.json()),
                             what="the requests in /admin/api/stats")
    series = stats.json()
    assert stats.headers["Cache-Control"] == "no-store"
    shown = series["endpoints"][endpoint_id]
    # the client fetched the card (not an A2A call, not counted) and sent 3 messages; one wrong call
    assert shown["total"] == {"requests": 4, "errors": 1, "tasks": {"completed": 3}}
    assert (
        len(shown["requests"])
        == len(series["at"])
        == len(series["openStreams"])
        == len(series["seconds"])
    )
    assert series["intervalSeconds"] == 0.2 and series["windowSeconds"] == 3600
    assert series["replica"] == gw.gateway.settings.replica_id
    latency = series["latencySeconds"]
    assert (
        latency["window"]["requests"] >= 4
        and 0 < latency["window"]["p50"] <= latency["window"]["p99"]
    )

    # a stream held open shows in the open streams
    slow = await gw.add_endpoint(settings={"delay": 0.05})
    async with gw.client(slow) as client:
        stream = client.send_message(send_request(" ".join(f"w{i}" for i in range(200))))
        await anext(stream)
        await eventually(
            lambda: admin_get(gw, "/stats"),
            until=lambda r: r.json()["openStreams"][-1] >= 1,
            what="the open stream in /admin/api/stats",
        )
        await stream.aclose()


async def test_stats_and_health_need_an_operator(gw):
    endpoint_id = await gw.add_endpoint()
    key = await new_caller_key(gw, endpoint_id)
    for path in ("/stats", f"/endpoints/{endpoint_id}", "/endpoints"):
        for refused in await assert_needs_an_operator(gw, "GET", path, key):
            assert "health" not in refused.text and "latencySeconds" not in refused.text


class LeakySettings(HandlerSettings):
    api_key: SecretStr


class LeakyHandler(Handler):
    """Raises an exception whose message holds its own api_key, as a careless client library may."""

    Settings = LeakySettings
    settings: LeakySettings

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        raise RuntimeError(
            f"backend refused the key {self.settings.api_key.get_secret_value()} (401)"
        )
        yield  # an async generator


async def test_a_handler_exception_holding_its_secret_setting_is_health_without_it(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-live-4f9c2e7a1b8d"
    monkeypatch.setenv("LEAKY_TEST_API_KEY", secret)
    async with running_gateway(
        f"sqlite:///{tmp_path}/gw.db",
        operator_keys=[OPERATOR_KEY],
        handler_allowlist=["handlers.", "tests.integration.test_admin_numbers"],
    ) as gw:
        endpoint_id = await gw.add_endpoint(
            f"{__name__}:LeakyHandler", settings={"api_key": "env:LEAKY_TEST_API_KEY"}
        )
        events = await send(gw, endpoint_id, "hi")
        assert events[-1].task.status.state == TaskState.TASK_STATE_FAILED
        health = await health_of(gw, endpoint_id)
        message = health["last_error"]["message"]
        assert health["status"] == "failing" and message.startswith(
            "RuntimeError: backend refused the key"
        ), health
        assert secret not in str(health) and "***" in message, health


def counts(
    stats: dict, endpoints: list[dict], task: dict, frames: list[dict]
) -> list[tuple[str, object]]:
    """Every number the admin API shows that counts something, with where it was."""
    found: list[tuple[str, object]] = []
    for endpoint_id, shown in stats["endpoints"].items():
        for name in ("requests", "errors"):
            found += [(f"stats {endpoint_id} {name}", v) for v in shown[name]]
            found.append((f"stats {endpoint_id} total {name}", shown["total"][name]))
        for state, series in shown["tasks"].items():
            found += [(f"stats {endpoint_id} tasks {state}", v) for v in series]
            found.append(
                (f"stats {endpoint_id} total tasks {state}", shown["total"]["tasks"][state])
            )
    latency = stats["latencySeconds"]
    found += [("stats latency requests", v) for v in latency["requests"]]
    found += [("stats latency window requests", latency["window"]["requests"]),
              *(("stats openStreams", v) for v in stats["openStreams"])]
    for endpoint in endpoints:
        found += [(f"health {endpoint['name']} {name}", endpoint["health"][name])
                  for name in ("successes", "errors")]
    usages = [("task", a["metadata"]["usage"]) for a in task["artifacts"]]
    usages += [("task stream", f["artifactUpdate"]["artifact"]["metadata"]["usage"]) for f in frames
               if "usage" in f.get("artifactUpdate", {}).get("artifact", {}).get("metadata", {})]
    assert {where for where, _ in usages} == {"task", "task stream"}
    found += [
        (f"{where} usage {name}", value) for where, usage in usages for name, value in usage.items()
    ]
    return found


async def test_every_count_the_admin_api_shows_is_a_json_integer(gw):
    async with ScriptedLLM() as llm:
        chat = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler", name="chat",
                                     settings={"base_url": llm.url, "model": "m"})
        down = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler", name="down",
                                     settings={"base_url": f"http://127.0.0.1:{closed_port()}/v1",
                                               "model": "m"})
        (done,) = await send(gw, chat, "hello there")
        (failed,) = await send(gw, down, "hello")
        async with gw.client(chat) as client:  # the operator follows a running task's stream
            caller = client.send_message(send_request("FAKE_SLOW words=6 delay=0.2"))
            running = (await anext(caller)).task.id
            url = (
                f"{gw.base_url}/admin/api/endpoints/{chat}/tasks/{running}"
                "/stream?principal=anonymous"
            )
            async with httpx.AsyncClient(timeout=60) as http:
                async with aconnect_sse(http, "GET", url, headers=AS_OPERATOR) as source:
                    frames = [
                        orjson.loads(sse.data) async for sse in source.aiter_sse() if sse.data
                    ]
            [event async for event in caller]
    assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert failed.task.status.state == TaskState.TASK_STATE_FAILED

    def all_counted(answer: httpx.Response) -> bool:
        totals = {e: shown["total"]["tasks"] for e, shown in answer.json()["endpoints"].items()}
        return (
            totals.get(chat, {}).get("completed") == 2 and totals.get(down, {}).get("failed") == 1
        )

    stats = (await eventually(lambda: admin_get(gw, "/stats"), until=all_counted,
                              what="both endpoints' tasks in /admin/api/stats")).json()
    endpoints = (await admin_get(gw, "/endpoints")).json()["endpoints"]
    endpoints.append((await admin_get(gw, f"/endpoints/{chat}")).json())
    task = (
        await admin_get(gw, f"/endpoints/{chat}/tasks/{done.task.id}?principal=anonymous")
    ).json()
    found = counts(stats, endpoints, task["task"], frames)
    assert [(where, value) for where, value in found if type(value) is not int] == []
    # the counts are the right ones, not only integers
    (usage,) = [a["metadata"]["usage"] for a in task["task"]["artifacts"]]
    assert usage == {
        "prompt_tokens": 10,
        "completion_tokens": 7,
        "total_tokens": 17,
    }  # 7 words answered
    health = {e["name"]: (e["health"]["successes"], e["health"]["errors"]) for e in endpoints}
    assert health == {"chat": (2, 0), "down": (0, 1)}
    assert stats["endpoints"][chat]["total"] == {
        "requests": 2,
        "errors": 0,
        "tasks": {"completed": 2},
    }
