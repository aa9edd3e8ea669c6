"""AgUiHandler on frames recorded from the three AG-UI adapters (ag-ui-langgraph 0.0.47,
agent-framework-ag-ui 1.7.0, ag-ui-adk 0.11.0, against a scripted LLM), through the handler's
real HTTP path (``httpx.MockTransport``); no server needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.ag_ui import ADAPTERS, INTERRUPTS_KEY, MESSAGES_KEY, AgUiHandler, AgUiSettings
from handlers.approvals import HITL_URI
from handlers.base import (
    ArtifactDelta,
    Canceled,
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    InputRejectedError,
    InputRequired,
    Progress,
    Reply,
    SessionUpdate,
    TextDelta,
    Turn,
)
from handlers.upstream import SSEFrame, UnexpectedFrame
from tests.handlers.openai_mock import Backend, collect, json_response, sse_response
from tests.support.examples import examples
from tests.support.messages import handler_request

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ag_ui"
API_KEY = "agui-secret-key-0123456789abcdef"
ANSWER = "Hello from fakellm. You said: hello there"
DANGER = "rm -rf /tmp/fakellm-danger-target"


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.txt").read_bytes()


def stream(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


def handler(backend: Backend, adapter: str = "generic", **settings: Any) -> AgUiHandler:
    return AgUiHandler(AgUiSettings(ag_ui_url="http://agui.test/agent", ag_ui_adapter=adapter,
                                    **settings), backend.client())


def replaying(*names_or_bodies: str | bytes) -> Backend:
    """A server answering each POST with the next recording (a name) or raw stream."""
    bodies = [fixture(n) if isinstance(n, str) else n for n in names_or_bodies]
    return Backend(lambda request: sse_response(bodies.pop(0)))


async def run(h: AgUiHandler, request: HandlerRequest) -> list[HandlerEvent]:
    return await collect(h.run(request))


def the(kind: type, events: list[HandlerEvent]) -> Any:
    (found,) = [e for e in events if isinstance(e, kind)]
    return found


def answer_to(asked: InputRequired, text: str = "", **fields: Any) -> HandlerRequest:
    """The request that carries the client's answer to ``asked``."""
    return handler_request(text, pending_input=asked.data, task_id="task-1", **fields)


# -- plain runs -------------------------------------------------------------------------


@pytest.mark.parametrize(("adapter", "name"), [
    ("langgraph", "langgraph_plain"), ("agent-framework", "maf_plain"), ("adk", "adk_plain")])
async def test_a_run_streams_its_text_and_completes_with_it(adapter: str, name: str) -> None:
    backend = replaying(name)
    events = await run(handler(backend, adapter), handler_request("hello there"))
    assert isinstance(events[0], Progress) and events[0].kind == "working"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == ANSWER
    assert the(Completed, events).text == ANSWER
    (body,) = backend.bodies
    assert body["runId"] == "task-1"
    assert body["threadId"].startswith("a2a-")
    assert body["messages"][-1]["role"] == "user"
    assert body["messages"][-1]["content"] == "hello there"


async def test_agent_framework_usage_goes_on_the_answer_for_the_ledger() -> None:
    events = await run(handler(replaying("maf_plain"), "agent-framework"),
                       handler_request("hello there"))
    assert the(Completed, events).metadata["usage"] == {"input_tokens": 10, "output_tokens": 5}


async def test_the_thread_is_the_callers_context_and_the_key_goes_as_bearer() -> None:
    backend = replaying("adk_plain", "adk_plain", "adk_plain")
    h = handler(backend, "adk", ag_ui_api_key=API_KEY)
    await run(h, handler_request("hi", context_id="c1", principal="alice"))
    await run(h, handler_request("hi", context_id="c1", principal="alice", task_id="task-2"))
    await run(h, handler_request("hi", context_id="c1", principal="bob", task_id="task-3"))
    threads = [b["threadId"] for b in backend.bodies]
    assert threads[0] == threads[1] != threads[2]
    assert {r.headers["authorization"] for r in backend.requests} == {f"Bearer {API_KEY}"}


async def test_two_messages_in_one_run_stream_with_the_break_the_answer_keeps() -> None:
    body = stream({"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
                  {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
                  {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Looking."},
                  {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
                  {"type": "REASONING_START", "messageId": "x"},  # unknown here: skipped
                  {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "delta": "Found it."},
                  {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"})
    events = await run(handler(replaying(body)), handler_request("q"))
    live = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert live == "Looking.\n\nFound it." == the(Completed, events).text


# -- failures ---------------------------------------------------------------------------


@pytest.mark.parametrize(("adapter", "name", "reason"), [
    ("langgraph", "langgraph_llm_error", "Error code: 500 - fakellm scripted server error"),
    ("agent-framework", "maf_llm_error", "(ChatClientException)"),
    ("adk", "adk_llm_error", "fakellm scripted server error (BACKGROUND_EXECUTION_ERROR)")])
async def test_a_run_error_fails_the_task_with_its_reason(adapter: str, name: str,
                                                          reason: str) -> None:
    events = await run(handler(replaying(name), adapter), handler_request("FAKE_HTTP_500"))
    failed = the(Failed, events)
    assert failed.reason.startswith("the AG-UI agent's run failed: ")
    assert reason in failed.reason


async def test_a_reason_never_shows_the_key() -> None:
    body = stream({"type": "RUN_STARTED"},
                  {"type": "RUN_ERROR", "message": f"bad token {API_KEY}"})
    events = await run(handler(replaying(body), ag_ui_api_key=API_KEY), handler_request("x"))
    assert API_KEY not in the(Failed, events).reason


async def test_a_refused_call_fails_without_the_key() -> None:
    backend = Backend(lambda r: json_response({"detail": f"no {API_KEY}"}, 401))
    events = await run(handler(backend, ag_ui_api_key=API_KEY), handler_request("x"))
    reason = the(Failed, events).reason
    assert "401" in reason and API_KEY not in reason


async def test_a_stream_cut_before_the_run_finished_fails() -> None:
    events = await run(handler(replaying("langgraph_cut"), "langgraph"),
                       handler_request("FAKE_SLOW"))
    assert any(isinstance(e, TextDelta) for e in events)
    assert the(Failed, events).reason == (
        "the AG-UI agent closed the stream before the run finished")


@pytest.mark.parametrize(("body", "detail"), [
    (b"data: not json\n\n", "data that is not JSON"),
    (b'data: {"delta": "x"}\n\n', "an event without a type"),
    (stream({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": 3}),
     "a text message event without a 'delta' string"),
    (stream({"type": "TOOL_CALL_START", "toolCallId": "c"}),
     "a tool call start without a 'toolCallName' string"),
    (stream({"type": "RUN_FINISHED", "outcome": {"type": "interrupt", "interrupts": [{}]}}),
     "an interrupt outcome without interrupt ids"),
])
async def test_a_bad_frame_fails_the_task_naming_what_was_wrong(body: bytes,
                                                                detail: str) -> None:
    events = await run(handler(replaying(body)), handler_request("x"))
    assert the(Failed, events).reason == f"the AG-UI agent sent an unexpected frame ({detail})"


async def test_an_outcome_cancelled_cancels_the_task() -> None:
    body = stream({"type": "RUN_STARTED"}, {"type": "RUN_FINISHED",
                                           "outcome": {"type": "cancelled"}})
    events = await run(handler(replaying(body)), handler_request("x"))
    assert isinstance(events[-1], Canceled)


# -- interrupts -------------------------------------------------------------------------


@pytest.mark.parametrize(("adapter", "name", "interrupt_id", "via"), [
    ("langgraph", "langgraph_interrupt_outcome", "0506ec9daca48b4fbfb30827f87f9dce", "resume"),
    ("langgraph", "langgraph_interrupt_custom", "", "command"),
    ("agent-framework", "maf_interrupt", "af-call-c67a2520214a4e80bc0fce1c6a36e28a", "resume"),
    ("adk", "adk_interrupt_outcome", "adk-bc4f034c-13de-4e3c-9646-86a67fb8dcc3", "resume"),
    ("adk", "adk_interrupt_tool_call", "adk-2cf795e1-2ff8-49c8-9800-2a14492bc9ca",
     "tool_message"),
])
async def test_an_interrupt_asks_the_client_about_the_tool_call(
        adapter: str, name: str, interrupt_id: str, via: str) -> None:
    events = await run(handler(replaying(name), adapter),
                       handler_request("please FAKE_TOOL_DANGER now"))
    asked = the(InputRequired, events)
    assert not any(isinstance(e, (Completed, Failed)) for e in events)
    (interrupt,) = asked.data[INTERRUPTS_KEY]
    assert (interrupt["id"], interrupt["via"]) == (interrupt_id, via)
    assert asked.data["choices"] == ["approve", "deny"]
    assert asked.prompt.endswith("Answer approve or deny.")
    assert DANGER in asked.prompt or "bash" in asked.prompt
    started = [e.data["tool"] for e in events if isinstance(e, Progress)
               and e.kind == "tool_started"]
    assert started == ["bash"]  # the adapters' made-up confirmation calls are not tools
    (tool,) = asked.data[HITL_URI]["tools"]
    assert tool["id"] == interrupt_id and tool["editable"] is False


@pytest.mark.parametrize(("adapter", "name", "answer", "expected"), [
    ("langgraph", "langgraph_interrupt_outcome", "approve",
     {"resume": [{"interruptId": "0506ec9daca48b4fbfb30827f87f9dce", "status": "resolved",
                  "payload": {"approved": True}}]}),
    ("langgraph", "langgraph_interrupt_outcome", "deny",
     {"resume": [{"interruptId": "0506ec9daca48b4fbfb30827f87f9dce", "status": "cancelled"}]}),
    ("langgraph", "langgraph_interrupt_custom", "yes",
     {"forwardedProps": {"command": {"resume": {"approved": True}}}}),
    ("langgraph", "langgraph_interrupt_custom", "no",
     {"forwardedProps": {"command": {"resume": {"approved": False}}}}),
    ("agent-framework", "maf_interrupt", "no",
     {"resume": [{"interruptId": "af-call-c67a2520214a4e80bc0fce1c6a36e28a",
                  "status": "resolved", "payload": {"approved": False}}]}),
    ("adk", "adk_interrupt_outcome", "approve",
     {"resume": [{"interruptId": "adk-bc4f034c-13de-4e3c-9646-86a67fb8dcc3",
                  "status": "resolved", "payload": {"confirmed": True}}]}),
])
async def test_the_answer_resumes_the_run_as_the_adapter_expects(
        adapter: str, name: str, answer: str, expected: dict[str, Any]) -> None:
    backend = replaying(name, f"{adapter.split('-')[0].replace('agent', 'maf')}_plain")
    h = handler(backend, adapter)
    asked = the(InputRequired, await run(h, handler_request("please FAKE_TOOL_DANGER now")))
    request = answer_to(asked, answer)
    assert await h.resume(request) is False  # a fresh run carries the answer
    events = await run(h, request)
    assert the(Completed, events).text == ANSWER
    resumed = backend.bodies[1]
    assert {k: resumed[k] for k in expected} == expected
    assert resumed["runId"].startswith("task-1-") and resumed["runId"] != "task-1"
    assert not [m for m in resumed["messages"] if m["role"] == "user"
                and m["content"] == answer]  # the answer is not a new user turn


async def test_adk_without_an_outcome_is_answered_with_a_confirmation_tool_message() -> None:
    backend = replaying("adk_interrupt_tool_call", "adk_resume_approved")
    h = handler(backend, "adk")
    asked = the(InputRequired, await run(h, handler_request("please FAKE_TOOL_DANGER now")))
    events = await run(h, answer_to(asked, data=[{"approved": False}]))
    assert the(Completed, events).text.startswith("TOOL_RESULT_SEEN:")
    (message,) = backend.bodies[1]["messages"]
    assert message["role"] == "tool"
    assert message["toolCallId"] == "adk-2cf795e1-2ff8-49c8-9800-2a14492bc9ca"
    assert json.loads(message["content"]) == {"confirmed": False}
    assert [e.kind for e in events if isinstance(e, Progress)] == ["working", "tool_completed"]


async def test_a_structured_answer_decides_by_interrupt_id_and_a_mismatch_is_refused() -> None:
    backend = replaying("adk_interrupt_tool_call", "adk_resume_approved")
    h = handler(backend, "adk")
    asked = the(InputRequired, await run(h, handler_request("please FAKE_TOOL_DANGER now")))
    (tool,) = asked.data[HITL_URI]["tools"]
    wrong = answer_to(asked, data=[{"type": "tool_approval_response",
                                    "approvals": [{"id": "other", "approved": True}]}])
    with pytest.raises(InputRejectedError, match="'other' is not a pending approval"):
        await h.resume(wrong)
    denied = answer_to(asked, "yes", data=[{"type": "tool_approval_response",
                                            "approvals": [{"id": tool["id"], "approved": False}]}])
    assert await h.resume(denied) is False
    await run(h, denied)
    (message,) = backend.bodies[1]["messages"]
    assert json.loads(message["content"]) == {"confirmed": False}  # not the "yes" beside it


async def test_a_payload_of_the_clients_own_goes_to_the_agent_as_it_is() -> None:
    backend = replaying("maf_interrupt", "maf_resume_approved")
    h = handler(backend, "agent-framework")
    asked = the(InputRequired, await run(h, handler_request("please FAKE_TOOL_DANGER now")))
    edited = {"approved": True, "editedArgs": {"command": "ls"}}
    request = answer_to(asked, data=[{"payload": edited}])
    assert await h.resume(request) is False
    await run(h, request)
    (entry,) = backend.bodies[1]["resume"]
    assert entry["payload"] == edited and entry["status"] == "resolved"


async def test_an_answer_that_is_neither_approve_nor_deny_is_refused() -> None:
    h = handler(replaying("maf_interrupt"), "agent-framework")
    asked = the(InputRequired, await run(h, handler_request("please FAKE_TOOL_DANGER now")))
    with pytest.raises(InputRejectedError) as refused:
        await h.resume(answer_to(asked, "maybe later"))
    assert "approve or deny" in refused.value.prompt
    assert refused.value.data == asked.data


# -- history ----------------------------------------------------------------------------


async def test_full_history_sends_the_servers_own_messages_with_the_next_turn() -> None:
    backend = replaying("maf_interrupt", "maf_resume_approved", "maf_plain")
    h = handler(backend, "agent-framework")
    first = handler_request("please FAKE_TOOL_DANGER now")
    first.message.message_id = "u1"
    events = await run(h, first)
    kept = the(SessionUpdate, events).values[MESSAGES_KEY]
    assert [m["role"] for m in kept] == ["user", "assistant"]
    assert kept[1]["toolCalls"][0]["function"]["name"] == "bash"

    resume = answer_to(the(InputRequired, events), "approve", session={MESSAGES_KEY: kept})
    events = await run(h, resume)
    assert backend.bodies[1]["messages"] == kept  # what an orphan tool result needs
    kept = the(SessionUpdate, events).values[MESSAGES_KEY]
    assert [m["role"] for m in kept] == ["user", "assistant", "tool", "assistant"]

    await run(h, handler_request("hello there", task_id="task-2",
                                 session={MESSAGES_KEY: kept}))
    sent = backend.bodies[2]["messages"]
    assert sent[:-1] == kept and sent[-1]["content"] == "hello there"


async def test_full_history_without_kept_messages_sends_the_contexts_turns() -> None:
    backend = replaying("maf_plain")
    history = [Turn("user", "first"), Turn("agent", "answer one")]
    await run(handler(backend, "agent-framework"), handler_request("second", history=history))
    sent = backend.bodies[0]["messages"]
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "first"), ("assistant", "answer one"), ("user", "second")]


async def test_new_history_sends_only_the_new_message() -> None:
    backend = replaying("langgraph_plain")
    events = await run(handler(backend, "langgraph"), handler_request(
        "hello there", history=[Turn("user", "first"), Turn("agent", "answer")]))
    assert len(backend.bodies[0]["messages"]) == 1
    assert not any(isinstance(e, SessionUpdate) for e in events)


async def test_kept_history_drops_the_oldest_turns_beyond_its_bound() -> None:
    backend = replaying("adk_plain")
    old = [{"id": f"m{n}", "role": "user" if n % 2 == 0 else "assistant",
            "content": "x" * 400} for n in range(20)]
    events = await run(handler(backend, "adk", ag_ui_history="full",
                               ag_ui_max_history_bytes=3000),
                       handler_request("hello there", session={MESSAGES_KEY: old}))
    kept = the(SessionUpdate, events).values[MESSAGES_KEY]
    assert len(json.dumps(kept)) <= 3000
    assert kept[0]["role"] == "user"
    assert kept[-1] == {"id": kept[-1]["id"], "role": "assistant", "content": ANSWER}


# -- settings ---------------------------------------------------------------------------


async def test_the_state_snapshot_can_be_kept_as_a_data_artifact() -> None:
    events = await run(handler(replaying("adk_plain"), "adk", ag_ui_state_artifact=True),
                       handler_request("hello there"))
    artifact = the(ArtifactDelta, events)
    assert artifact.name == "state" and artifact.last_chunk
    assert artifact.parts[0].data.struct_value["_ag_ui_thread_id"] == "t-adk-1"


async def test_message_mode_reads_the_stream_and_replies_once() -> None:
    events = await run(handler(replaying("maf_plain"), "agent-framework",
                               response_mode="message"), handler_request("hello there"))
    assert [type(e) for e in events] == [Reply]
    assert events[0].text == ANSWER


async def test_message_mode_cannot_carry_a_question() -> None:
    events = await run(handler(replaying("maf_interrupt"), "agent-framework",
                               response_mode="message"), handler_request("FAKE_TOOL_DANGER"))
    assert [type(e) for e in events] == [Failed]
    assert "response_mode: task" in events[0].reason


async def test_an_unknown_adapter_is_refused() -> None:
    with pytest.raises(ValueError, match="ag_ui_adapter"):
        AgUiSettings(ag_ui_adapter="crewai")


async def test_the_url_is_posted_to_as_given() -> None:
    backend = replaying("adk_plain")
    await run(handler(backend, "adk"), handler_request("x"))
    assert str(backend.requests[0].url) == "http://agui.test/agent"
    assert backend.requests[0].headers["accept"] == "text/event-stream"
    assert isinstance(backend.requests[0], httpx.Request)


# -- any event ----------------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
EVENT_TYPES = ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CHUNK",
               "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
               "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "CUSTOM", "RUN_ERROR", "RUN_FINISHED",
               "STEP_STARTED", "RAW"]
FIELDS = ["messageId", "role", "delta", "toolCallId", "toolCallName", "content", "snapshot",
          "messages", "name", "value", "message", "code", "outcome", "threadId", "runId"]
MESSAGE = st.fixed_dictionaries({"id": JSON, "role": st.sampled_from(["user", "assistant"]) | JSON,
                                 "content": JSON})
INTERRUPT = st.fixed_dictionaries({"id": st.text(max_size=4) | JSON}, optional={
    "toolCallId": JSON, "message": JSON, "reason": JSON})
SHAPED = {"messages": st.lists(MESSAGE, max_size=3),
          "outcome": st.fixed_dictionaries({"type": st.sampled_from(
              ["success", "interrupt", "cancelled"]) | JSON}, optional={
              "interrupts": st.lists(INTERRUPT, max_size=2) | JSON}),
          "value": JSON | st.fixed_dictionaries({"id": JSON, "function_call": JSON})}
FIELD_VALUES = st.sampled_from(FIELDS).flatmap(
    lambda name: st.tuples(st.just(name), SHAPED.get(name, JSON) | JSON))
EVENT = st.builds(lambda kind, fields: {**fields, "type": kind},
                  st.sampled_from(EVENT_TYPES) | JSON,
                  st.lists(FIELD_VALUES, max_size=5).map(dict))


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(EVENT, max_size=12), st.sampled_from(sorted(ADAPTERS)))
def test_any_events_end_in_events_or_an_unexpected_frame_never_another_error(
        events: list[dict[str, Any]], adapter: str) -> None:
    parser = AgUiHandler(AgUiSettings(ag_ui_adapter=adapter), httpx.AsyncClient()
                         ).stream_parser({"messages": []})
    try:
        for event in [*events, {"type": "RUN_FINISHED"}]:
            parser.feed(SSEFrame("", json.dumps(event)))
        closing = parser.finish()
    except UnexpectedFrame:
        return
    assert len([e for e in closing if isinstance(e, (Completed, Failed, Canceled,
                                                     InputRequired))]) == 1
    for event in closing:
        if isinstance(event, InputRequired):
            json.dumps(event.data)  # the question's data goes into the store as JSON


async def test_a_snapshot_with_odd_message_ids_is_kept_as_sent() -> None:
    odd = [{"id": ["not", "a", "string"], "role": "assistant", "content": "a"},
           {"role": "assistant", "content": "b"}]
    body = stream({"type": "RUN_STARTED"}, {"type": "MESSAGES_SNAPSHOT", "messages": odd},
                  {"type": "RUN_FINISHED"})
    events = await run(handler(replaying(body), "agent-framework"), handler_request("q"))
    kept = the(SessionUpdate, events).values[MESSAGES_KEY]
    assert kept[1:] == odd
