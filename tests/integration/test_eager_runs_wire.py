"""The same requests, on the wire, to a gateway that starts blocking runs eagerly and to one
that does not (``eager_blocking_runs``): the answers are the same, ids and times aside, on
every store. Every TCK scenario is sent as a blocking SendMessage (answers, questions,
refusals, messages, runs that wait), over JSON-RPC 1.0 and 0.3 and HTTP+JSON, followed by
an answer to a question, a return_immediately send, GetTask, ListTasks and bad params.

On Python 3.12+ the eager gateway starts its blocking runs eagerly (checked below: the test
fails if it does not); on 3.11 neither does, and the suite checks that the setting changes
nothing there."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from a2a_gateway.tasks.run import EAGER_TASKS, TaskRun
from handlers.tck import SCENARIOS
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import params_0_3, rpc

V10 = {"A2A-Version": "1.0"}
V03 = {"A2A-Version": "0.3"}
ENDPOINT_ID = "5d3c8f0e-7a51-4b7e-9a0c-2f1e6b9d4c21"
"""The same endpoint id on both gateways, so it is not among the ids told apart."""


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return request.param



@pytest.fixture
async def gateway_with(
    store_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    """Opens a gateway on a fresh store of ``store_kind``, blocking runs eager or not."""
    async with AsyncExitStack() as stack:
        async def open_one(eager: bool) -> RunningGateway:
            directory = tmp_path / ("eager" if eager else "later")
            directory.mkdir()
            url = await stack.enter_async_context(
                fresh_store_url(store_kind, directory, monkeypatch))
            gw = await stack.enter_async_context(
                running_gateway(url, eager_blocking_runs=eager, unseen_task_seconds=30.0))
            await gw.add_endpoint("handlers.tck:TckHandler", endpoint_id=ENDPOINT_ID, settings={
                "stream_delay": 0.05, "delayed_complete_delay": 0.05})
            return gw
        yield open_one


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


def normalized(answers: list[Any]) -> str:
    """``answers`` with each id named by its order of appearance and every time alike."""
    names: dict[str, str] = {}

    def name(match: re.Match[str]) -> str:
        found = match.group(0)
        if found == ENDPOINT_ID:
            return found
        return names.setdefault(found, f"<id{len(names)}>")

    return _TIME.sub("<time>", _UUID.sub(name, repr(answers)))


async def conversation(gw: RunningGateway) -> list[Any]:
    """Every request of the suite, in order; what came back: status, body."""
    rpc_url, rest_url = gw.jsonrpc_url(ENDPOINT_ID), gw.rest_url(ENDPOINT_ID)
    answers: list[Any] = []
    counter = iter(range(10_000))

    def message(prefix: str, **fields: Any) -> dict[str, Any]:
        return {"messageId": f"{prefix}-{next(counter)}", "role": "ROLE_USER",
                "parts": [{"text": "hello"}], **fields}

    async def call(http: httpx.AsyncClient, method: str, params: Any, headers: Any = V10) -> Any:
        reply = await http.post(rpc_url, json=rpc(method, params, rid=next(counter)),
                                headers=headers)
        answers.append((method, reply.status_code, reply.json()))
        return reply.json()

    async with httpx.AsyncClient(timeout=30) as http:
        for prefix, _ in SCENARIOS:  # blocking sends: answers, questions, refusals, waits
            await call(http, "SendMessage", {"message": message(prefix)})
        asked = await call(http, "SendMessage", {"message": message("tck-input-required")})
        task_id = asked["result"]["task"]["id"]
        await call(http, "SendMessage", {"message": message("an-answer", taskId=task_id)})
        await call(http, "GetTask", {"id": task_id})
        await call(http, "SendMessage", {"message": message("tck-complete-task"),
                                         "configuration": {"historyLength": 0}})
        await call(http, "SendMessage", {"message": {"role": "ROLE_USER"}})  # bad params
        await call(http, "message/send", params_0_3({"kind": "text", "text": "hello"},
                                                    messageId="tck-complete-task-03"), V03)
        rest = await http.post(f"{rest_url}/message:send", headers=V10,
                               json={"message": message("tck-artifact-data")})
        answers.append(("REST message:send", rest.status_code, rest.json()))
        listed = await http.get(f"{rest_url}/tasks", headers=V10, params={"pageSize": 100})
        tasks = sorted(listed.json()["tasks"], key=lambda t: t["history"][0]["messageId"])
        answers.append(("REST tasks", listed.status_code, [t["status"]["state"] for t in tasks]))
        await call(http, "SendMessage", {"message": message("tck-delayed-complete"),
                                         "configuration": {"returnImmediately": True}})
    return answers


async def test_eager_and_later_blocking_runs_give_the_same_answers_on_the_wire(
    gateway_with: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    eager_starts: list[bool] = []
    start = TaskRun.start

    def noting(run: TaskRun, events: Any, *, eager: bool = False) -> None:
        eager_starts.append(eager and EAGER_TASKS)
        start(run, events, eager=eager)

    monkeypatch.setattr(TaskRun, "start", noting)
    later = await conversation(await gateway_with(False))
    assert not any(eager_starts)
    eager_starts.clear()
    eager = await conversation(await gateway_with(True))
    assert any(eager_starts) is EAGER_TASKS  # on 3.12+ the eager path was taken
    assert len(later) == len(eager) > len(SCENARIOS)
    assert normalized(eager) == normalized(later)
    states = [a[2].get("result", {}).get("task", {}).get("status", {}).get("state")
              for a in later[: len(SCENARIOS)]]
    assert {"TASK_STATE_COMPLETED", "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_REJECTED"} <= set(states)  # the suite covers each kind of ending
