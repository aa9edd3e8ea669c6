"""The usage ledger through a running gateway on every store, with the real a2a-sdk client:
tasks of two API keys through the chat bridge against the scripted LLM and through real
Hermes, summed by ``GET /admin/api/usage`` (JSON and CSV), priced by the endpoint's ``cost``."""

from __future__ import annotations

import csv
import io
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState

from a2a_gateway.auth.api_keys import make_key
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.harness import RunningGateway, require_env, running_gateway

pytestmark = pytest.mark.timeout(120)
OPERATOR_KEY = "usage-operator-" + uuid.uuid4().hex
OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}
PRICE = {"currency": "USD", "per_task": 0.001, "per_1k_input_tokens": 0.5,
         "per_1k_output_tokens": 1.5}
PROMPT = "FAKE_SLOW words=3 delay=0.05"
"""The scripted LLM answers three words (3 completion tokens) to a 10-token prompt."""


@pytest.fixture(params=STORE_KINDS)
async def gw(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RunningGateway]:
    require_env("A2A_TEST_LLM_URL", "A2A_TEST_HERMES_URL", "A2A_TEST_HERMES_KEY")
    async with fresh_store_url(request.param, tmp_path, monkeypatch) as url:
        async with running_gateway(url, operator_keys=[OPERATOR_KEY],
                                   allow_unauthenticated_endpoints=False) as running:
            yield running


async def _key(gw: RunningGateway, endpoint_id: str, principal: str, name: str) -> str:
    secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
    row, key = make_key(secret, endpoint_id=endpoint_id, tenant="default", principal=principal,
                        name=name)
    await gw.store.create_api_key(row)
    return key


def _key_id(key: str) -> str:
    return key.split("_")[1]


async def _send(gw: RunningGateway, endpoint_id: str, key: str, text: str, *,
                streaming: bool) -> None:
    async with gw.client(endpoint_id, api_key=key, streaming=streaming) as client:
        request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))
        last = None
        async for last in client.send_message(request):
            pass
    task = last.task if last.HasField("task") else None
    if task is None:  # a stream ends with a status update
        assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED, last
    else:
        assert task.status.state == TaskState.TASK_STATE_COMPLETED, task


async def test_usage_of_two_keys_through_the_chat_bridge_and_hermes(gw):
    llm = os.environ["A2A_TEST_LLM_URL"].rstrip("/")
    chat = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler", settings={
        "base_url": f"{llm}/v1", "api_key": "sk-scripted", "model": "scripted",
        "cost": PRICE,
    })
    hermes = await gw.add_endpoint("handlers.hermes:HermesAgentHandler", settings={
        "hermes_api_url": os.environ["A2A_TEST_HERMES_URL"],
        "hermes_api_key": "env:A2A_TEST_HERMES_KEY", "poll_interval_seconds": 0.2,
    })
    alice = await _key(gw, chat, "alice", "alice-ci")
    bob = await _key(gw, chat, "bob", "bob-laptop")
    alice_hermes = await _key(gw, hermes, "alice", "alice-hermes")
    await _send(gw, chat, alice, PROMPT, streaming=False)
    await _send(gw, chat, alice, PROMPT, streaming=True)
    await _send(gw, chat, bob, PROMPT, streaming=False)
    await _send(gw, hermes, alice_hermes, PROMPT, streaming=False)

    async with httpx.AsyncClient(base_url=gw.base_url, headers=OPERATOR, timeout=30) as http:
        answer = await http.get("/admin/api/usage", params={"group_by": "endpoint,principal"})
        assert answer.status_code == 200, answer.text
        rows = {(r["endpoint"], r["principal"]): r for r in answer.json()["totals"]}
        assert set(rows) == {(chat, "alice"), (chat, "bob"), (hermes, "alice")}

        a = rows[(chat, "alice")]
        assert (a["tasks"], a["outcomes"], a["requests"]) == (2, {"completed": 2}, 2)
        assert (a["inputTokens"], a["outputTokens"]) == (20, 6)
        # 2 × (0.001 + 10 × 0.5/1000 + 3 × 1.5/1000) USD = 2 × 0.0105
        assert a["cost"] == [{"currency": "USD", "micros": 21_000, "amount": "0.021000"}]
        assert a["durationSeconds"] >= 2 * 0.1  # three words 50 ms apart, twice
        assert a["bytesIn"] > 0 and a["bytesOut"] > a["bytesIn"]
        b = rows[(chat, "bob")]
        assert (b["tasks"], b["inputTokens"], b["outputTokens"]) == (1, 10, 3)
        h = rows[(hermes, "alice")]
        assert h["tasks"] == 1 and h["outputTokens"] > 0 and h["inputTokens"] > 0
        assert h["cost"] == []  # no price on that endpoint

        # one principal across endpoints (a quota's question), then one day's view
        mine = await http.get("/admin/api/usage", params={"principal": "alice"})
        [total] = mine.json()["totals"]
        assert total["tasks"] == 3 and "endpoint" not in total
        [bobs] = (await http.get("/admin/api/usage", params={"key": _key_id(bob)})).json()["totals"]
        assert (bobs["tasks"], bobs["inputTokens"]) == (1, 10)
        by_day = await http.get("/admin/api/usage", params={"group_by": "day",
                                                            "endpoint": chat})
        [today] = by_day.json()["totals"]
        assert today["tasks"] == 3 and len(today["day"]) == 10

        as_csv = await http.get("/admin/api/usage", params={"group_by": "principal",
                                                            "endpoint": chat},
                                headers={"Accept": "text/csv"})
        assert as_csv.headers["Content-Type"].startswith("text/csv")
        table = list(csv.DictReader(io.StringIO(as_csv.text)))
        assert [(r["principal"], r["tasks"], r["completed"], r["input_tokens"], r["cost"])
                for r in table] == [("alice", "2", "2", "20", "0.021000 USD"),
                                    ("bob", "1", "1", "10", "0.010500 USD")]

        for params, named in (
            ({"from": "yesterday"}, "from"), ({"to": "2026-13-01"}, "to"),
            ({"from": "2026-12-03", "to": "2026-12-01"}, "from"),
            ({"from": "2020-01-01", "to": "2026-01-01"}, "days"),
            ({"group_by": "endpoint,tenant"}, "group_by"), ({"principal": "a\x00b"}, "principal"),
            ({"limit": "5"}, "limit"),
        ):
            refused = await http.get("/admin/api/usage", params=params)
            assert refused.status_code == 400, (params, refused.text)
            assert named in refused.text
        assert (await http.get("/admin/api/usage")).status_code == 200
        for cost, named in (({"currency": "usd"}, "cost.currency"),
                            ({"currency": "USD", "per_task": -1}, "cost.per_task"),
                            ({"currency": "USD", "per_call": 1}, "cost.per_call")):
            refused = await http.post("/admin/api/endpoints", json={
                "name": "badly priced", "handler": "handlers.echo:EchoHandler", "cost": cost})
            assert refused.status_code == 400 and named in refused.text, refused.text
        assert len(await gw.store.list_endpoints()) == 2
        anonymous = await http.get("/admin/api/usage", headers={"Authorization": ""})
        assert anonymous.status_code == 401
        as_caller = await http.get("/admin/api/usage", headers={"X-API-Key": alice,
                                                                "Authorization": ""})
        assert as_caller.status_code == 403

        metrics = (await http.get("/metrics")).text
    labels = f'direction="output",endpoint="{chat}",state="completed"'
    tokens = f"a2a_gateway_task_tokens_total{{{labels}}}"
    assert f"{tokens} " in metrics
