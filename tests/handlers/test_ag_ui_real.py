"""The AG-UI handler against three real AG-UI servers (ag-ui-langgraph, agent-framework-ag-ui,
ag-ui-adk, each serving its app of tests/backends/ag_ui on the scripted LLM), through the
gateway, with the real a2a-sdk client as the caller.

Needs the services of ``.ci/services`` (10-llm.sh, 45-ag-ui-langgraph.sh, 46-ag-ui-maf.sh,
47-ag-ui-adk.sh): ``A2A_TEST_AGUI_LANGGRAPH_URL`` (and the bearer token that app demands,
``A2A_TEST_AGUI_TOKEN``), ``A2A_TEST_AGUI_MAF_URL``, ``A2A_TEST_AGUI_ADK_URL`` and
``A2A_TEST_LLM_URL``. Skipped without them, except in CI. Every test marks its message with a
fresh token, so tests can share the servers and the LLM.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog
from a2a.types import GetTaskRequest, Role, TaskState
from google.protobuf.json_format import MessageToDict

from a2a_gateway.stores.base import Scope, UsageQuery
from a2a_gateway.stores.memory import MemoryStore
from handlers.approvals import HITL_URI
from tests.handlers.real_streams import (
    cancel_mid_stream,
    llm_requests,
    six_streamed_tokens,
    state_of,
    streamed_answer,
    token,
)
from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.harness import RunningGateway, require_env, running_gateway
from tests.support.messages import send_request
from tests.support.waiting import eventually

pytestmark = pytest.mark.ag_ui

HANDLER = "handlers.ag_ui:AgUiHandler"
COMPLETED = TaskState.TASK_STATE_COMPLETED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
TOKEN_VAR = "A2A_TEST_AGUI_TOKEN"


@dataclass(frozen=True)
class Server:
    """One AG-UI server of the matrix: where it is, and what its app answers."""

    adapter: str
    url_var: str
    route: str = "/agent"
    needs_token: bool = False
    reports_usage: bool = False
    """Whether the server sends the run's token counts (a ``CUSTOM usage`` event)."""
    ran: str = "ran: {command}"
    """The tool result the LLM quotes after an approval."""
    denied: str = "denied: {command}"
    """... and after a denial (the framework's own rejection, where it makes one)."""


LANGGRAPH = Server("langgraph", "A2A_TEST_AGUI_LANGGRAPH_URL", needs_token=True)
SERVERS = {
    "langgraph": LANGGRAPH,
    "agent-framework": Server(
        "agent-framework", "A2A_TEST_AGUI_MAF_URL", reports_usage=True,
        denied="Error: Tool call invocation was rejected by user."),
    "adk": Server(
        "adk", "A2A_TEST_AGUI_ADK_URL", ran='{{"result": "ran: {command}"}}',
        denied='{{"error": "This tool call is rejected."}}'),
}
LEGACY = Server("langgraph", "A2A_TEST_AGUI_LANGGRAPH_URL", route="/agent-legacy",
                needs_token=True)
"""LangGraph without the AG-UI 1.0 outcome: only ``CUSTOM on_interrupt``, answered through
``forwardedProps.command.resume``."""


@pytest.fixture
async def gw() -> AsyncIterator[RunningGateway]:
    require_env("A2A_TEST_LLM_URL")
    async with running_gateway(cancel_wait_seconds=15.0) as running:
        yield running


async def ag_ui_endpoint(gw: RunningGateway, server: Server, **settings: Any) -> str:
    url = require_env(server.url_var)
    if server.needs_token:
        require_env(TOKEN_VAR)
        settings = {"ag_ui_api_key": f"env:{TOKEN_VAR}", **settings}
    return await gw.add_endpoint(HANDLER, name=f"ag-ui {server.adapter}", settings={
        "ag_ui_url": f"{url}{server.route}", "ag_ui_adapter": server.adapter, **settings})


def final_text(task: Any) -> str:
    return "".join(p.text for p in task.artifacts[-1].parts)


def failure_reason(task: Any) -> str:
    return task.status.message.parts[0].text



def chat_of(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The user and assistant texts of an LLM request (no system prompt, no tool calls)."""
    return [(m["role"], m["content"]) for m in request["messages"]
            if m["role"] in ("user", "assistant") and isinstance(m.get("content"), str)
            and m["content"]]


@pytest.mark.parametrize("server", SERVERS.values(), ids=SERVERS.keys())
async def test_streamed_then_blocking_turns_of_one_context(gw, server):
    endpoint = await ag_ui_endpoint(gw, server)
    async with gw.client(endpoint) as client:
        first = await six_streamed_tokens(client)
    usage = MessageToDict(first.artifact.metadata).get("usage")
    assert (usage is not None) == server.reports_usage
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(
            send_request(f"second {mark}", context_id=first.context_id))]
    assert event.task.status.state == COMPLETED
    assert event.task.context_id == first.context_id
    assert final_text(event.task) == f"Hello from fakellm. You said: second {mark}"
    (second,) = await llm_requests(mark)
    # the server (its thread or session) or the bridge (the history it sends) kept turn one
    convo = chat_of(second)
    assert convo[-1] == ("user", f"second {mark}")
    assert convo[-2] == ("assistant", "slow0 slow1 slow2 slow3 slow4 slow5")
    assert convo[-3][0] == "user" and convo[-3][1].startswith("FAKE_SLOW words=6 delay=0.25 ")
    # the server's token counts, where it sends them, reach the usage ledger
    (ledger,) = await eventually(
        lambda: gw.store.usage_summary(UsageQuery(endpoint_id=endpoint)),
        until=lambda totals: totals and totals[0].tasks == 3, what="three tasks in the ledger")
    assert (ledger.input_tokens > 0 and ledger.output_tokens > 0) == server.reports_usage


async def ask_for_approval(gw: RunningGateway, endpoint: str, mark: str, server: Server) -> Any:
    """Send the message that makes the LLM call ``bash``; the task waits for an answer, and
    its question carries the interrupt (with the server's id for it, but LangGraph's older
    signal has none)."""
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(
            send_request(f"FAKE_TOOL_DANGER path=scratch/{mark}"))]
    assert state_of(events[-1]) == INPUT_REQUIRED
    async with gw.client(endpoint, streaming=False) as client:
        task = await client.get_task(GetTaskRequest(id=events[0].task.id))
    assert task.status.state == INPUT_REQUIRED
    (data,) = [MessageToDict(p.data) for p in task.status.message.parts if p.HasField("data")]
    assert data["choices"] == ["approve", "deny"]
    (interrupt,) = data["ag_ui_interrupts"]
    assert interrupt["toolCallId"].startswith("call_")
    assert bool(interrupt["id"]) == (server is not LEGACY)
    question = "".join(p.text for p in task.status.message.parts)
    assert "approve or deny" in question
    return task


APPROVALS = {**SERVERS, "langgraph-legacy": LEGACY}


@pytest.mark.parametrize("server", APPROVALS.values(), ids=APPROVALS.keys())
async def test_approve_runs_the_tool(gw, server):
    endpoint = await ag_ui_endpoint(gw, server)
    mark = token()
    task = await ask_for_approval(gw, endpoint, mark, server)
    async with gw.client(endpoint, streaming=False) as client:
        (done,) = [e async for e in client.send_message(
            send_request("approve", task_id=task.id, context_id=task.context_id))]
    assert done.task.status.state == COMPLETED
    ran = server.ran.format(command=f"rm -rf scratch/{mark}")
    assert final_text(done.task) == f"TOOL_RESULT_SEEN: {ran}"


DENIALS = [*(pytest.param(s, id=name) for name, s in SERVERS.items()),
           pytest.param(LEGACY, id="langgraph-legacy")]


@pytest.mark.parametrize("server", DENIALS)
async def test_deny_with_a_structured_answer_does_not_run_the_tool(gw, server):
    endpoint = await ag_ui_endpoint(gw, server)
    mark = token()
    task = await ask_for_approval(gw, endpoint, mark, server)
    (data,) = [MessageToDict(p.data) for p in task.status.message.parts if p.HasField("data")]
    (tool,) = data[HITL_URI]["tools"]
    assert tool["args"] == {"command": f"rm -rf scratch/{mark}"} and not tool["editable"]
    async with gw.client(endpoint) as client:
        events = [e async for e in client.send_message(send_request(
            "", data={"type": "tool_approval_response", "approvals": [
                {"id": tool["id"], "approved": False}]},
            task_id=task.id, context_id=task.context_id))]
    assert state_of(events[-1]) == COMPLETED
    denied = server.denied.format(command=f"rm -rf scratch/{mark}")
    assert streamed_answer(events) == f"TOOL_RESULT_SEEN: {denied}"


WORDS = " ".join(f"slow{i}" for i in range(20))
AFTER_CANCEL = {
    # closing the stream aborts the model call at once; the canceled turn is forgotten
    "agent-framework": ("client_disconnected", []),
    # the model call is not aborted, it streams to its end (ag-ui-langgraph 0.0.47), but the
    # thread keeps only the canceled question
    "langgraph": ("completed", ["user"]),
    # the run goes on to its end on the server (ADK does not stop when the stream closes):
    # the session keeps the whole answer the client never got
    "adk": ("completed", ["user", "assistant"]),
}
"""Per server: the outcome of the canceled run's LLM call, and the roles of the canceled turn
in the context's next LLM request."""


@pytest.mark.parametrize("server", SERVERS.values(), ids=SERVERS.keys())
async def test_cancel_mid_stream_cancels_the_task_and_the_context_goes_on(gw, server):
    endpoint = await ag_ui_endpoint(gw, server)
    mark = token()
    context_id = f"ctx-{mark}"
    slow = f"FAKE_SLOW words=20 delay=0.1 {mark}"
    async with gw.client(endpoint) as client:
        again = await cancel_mid_stream(client, send_request(slow, context_id=context_id))
    assert again.status.state == TaskState.TASK_STATE_CANCELED
    (llm,) = await eventually(lambda: llm_requests(mark),
                              until=lambda rs: len(rs) == 1 and rs[0]["outcome"] != "in_progress",
                              timeout=15, what="the LLM call of the canceled run ends")
    outcome, kept = AFTER_CANCEL[server.adapter]
    assert llm["outcome"] == outcome
    assert (len(llm["chunks"]) < 20) == (outcome == "client_disconnected")

    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(
            send_request(f"after {mark}", context_id=context_id))]
    assert event.task.status.state == COMPLETED
    assert final_text(event.task) == f"Hello from fakellm. You said: after {mark}"
    (_, after) = await llm_requests(mark)
    turn = {"user": ("user", slow), "assistant": ("assistant", WORDS)}
    assert chat_of(after) == [turn[role] for role in kept] + [("user", f"after {mark}")]


LLM_FAILURE = {
    "langgraph": "Error code: 500 - fakellm scripted HTTP 500",
    # the framework hides the cause (its server log has it)
    "agent-framework": "An internal error has occurred while streaming events. "
                       "(ChatClientException)",
    "adk": "litellm.InternalServerError: InternalServerError: OpenAIException - "
           "fakellm scripted HTTP 500 (BACKGROUND_EXECUTION_ERROR)",
}
"""The RUN_ERROR each server sends when the LLM answers HTTP 500 (message, then code)."""


@pytest.mark.parametrize("server", SERVERS.values(), ids=SERVERS.keys())
async def test_llm_error_fails_the_task_without_the_credential(gw, server, monkeypatch):
    secret = "agui-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("A2A_TEST_AGUI_OTHER_KEY", secret)
    # the LangGraph app checks its token; the others take any bearer key and ignore it
    key_var = TOKEN_VAR if server.needs_token else "A2A_TEST_AGUI_OTHER_KEY"
    endpoint = await ag_ui_endpoint(gw, server, ag_ui_api_key=f"env:{key_var}")
    with structlog.testing.capture_logs() as logs:
        async with gw.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(
                send_request(f"FAKE_HTTP_500 {token()}"))]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    reason = failure_reason(event.task)
    assert reason == f"the AG-UI agent's run failed: {LLM_FAILURE[server.adapter]}"
    stored = await gw.store.get_task(Scope("default", endpoint, "anonymous"), event.task.id)
    credential = require_env(key_var)
    for where in (str(event), str(stored.task), repr(logs)):
        assert credential not in where and "fake-key" not in where


async def test_without_the_token_the_langgraph_app_refuses_and_the_task_fails(gw):
    endpoint = await ag_ui_endpoint(gw, LANGGRAPH, ag_ui_api_key=None)
    async with gw.client(endpoint, streaming=False) as client:
        (event,) = [e async for e in client.send_message(send_request(f"hello {token()}"))]
    assert event.task.status.state == TaskState.TASK_STATE_FAILED
    assert failure_reason(event.task) == (
        "the AG-UI agent rejected the API key (HTTP 401); check the endpoint's API key setting")


async def test_message_mode_answers_with_a_message_and_cannot_ask(gw):
    endpoint = await ag_ui_endpoint(gw, SERVERS["agent-framework"], response_mode="message")
    mark = token()
    async with gw.client(endpoint, streaming=False) as client:
        (answer,) = [e async for e in client.send_message(send_request(f"ping {mark}"))]
        (asked,) = [e async for e in client.send_message(
            send_request(f"FAKE_TOOL_DANGER path=scratch/{mark}"))]
    assert answer.HasField("message") and answer.message.role == Role.ROLE_AGENT
    assert answer.message.parts[0].text == f"Hello from fakellm. You said: ping {mark}"
    # a question needs a task to wait in: message mode fails it with the reason
    assert asked.task.status.state == TaskState.TASK_STATE_FAILED
    assert "response_mode: message cannot carry" in failure_reason(asked.task)


async def test_a_gateway_restart_fails_the_run_it_cannot_follow_again():
    # AG-UI has no re-join: the run is tied to the stream the lost gateway held
    store = MemoryStore()
    mark = token()
    async with running_gateway(store=store, lease_seconds=120, replica_id="replica-a") as a:
        endpoint = await ag_ui_endpoint(a, SERVERS["agent-framework"])
        async with a.client(endpoint, streaming=False) as client:
            (event,) = [e async for e in client.send_message(
                send_request(f"FAKE_SLOW words=12 delay=0.25 {mark}", immediately=True))]
        await eventually(lambda: llm_requests(mark), what="the run reached the LLM")
    scope = Scope("default", endpoint, "anonymous")
    async with running_gateway(store=store, lease_seconds=120, replica_id="replica-b"):
        stored = await eventually(
            lambda: store.get_task(scope, event.task.id),
            until=lambda s: s.task.status.state in (COMPLETED, TaskState.TASK_STATE_FAILED),
            timeout=15, what="replica B takes the task over")
    assert stored.task.status.state == TaskState.TASK_STATE_FAILED
    assert failure_reason(stored.task) == "gateway instance lost"
    assert len(await llm_requests(mark)) == 1  # nothing was started again


@pytest.fixture(params=STORE_KINDS)
async def gw_on_every_store(request: pytest.FixtureRequest, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[RunningGateway]:
    require_env("A2A_TEST_LLM_URL")
    async with fresh_store_url(request.param, tmp_path, monkeypatch) as url:
        async with running_gateway(url) as running:
            yield running


async def test_a_stateless_server_gets_the_kept_conversation_on_every_store(
        gw_on_every_store: RunningGateway) -> None:
    """Agent Framework's endpoint keeps nothing: the gateway keeps the server's own messages
    (its tool call and the approval's result among them) in the context's memory, in the
    store, and sends them with the next turn."""
    gw = gw_on_every_store
    endpoint = await ag_ui_endpoint(gw, SERVERS["agent-framework"])
    mark = token()
    task = await ask_for_approval(gw, endpoint, mark, SERVERS["agent-framework"])
    async with gw.client(endpoint, streaming=False) as client:
        (done,) = [e async for e in client.send_message(
            send_request("approve", task_id=task.id, context_id=task.context_id))]
        assert done.task.status.state == COMPLETED
        (after,) = [e async for e in client.send_message(
            send_request(f"after {mark}", context_id=task.context_id))]
    assert final_text(after.task) == f"Hello from fakellm. You said: after {mark}"
    (sent,) = [r for r in await llm_requests(mark) if r["last_text"] == f"after {mark}"]
    roles = [m["role"] for m in sent["messages"] if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    (asked,) = [m for m in sent["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert f"scratch/{mark}" in str(asked["tool_calls"])
