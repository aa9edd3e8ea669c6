"""Structured approvals (handlers/approvals.py): the request built from a paused call, the
client's answer read from each place a client may put it and checked against the request,
LangGraph's HITL-middleware interrupts, and the card's declaration. Fakes only; the round trips
against real Hermes and LangGraph are in test_hermes_real.py and test_langgraph_real.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from a2a.types import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from a2a_gateway.endpoints.card import with_handler_fields
from a2a_gateway.stores.base import Endpoint
from handlers.approvals import (
    HITL_URI,
    ApprovalAnswerError,
    AskedCall,
    Decision,
    approval_request,
    card_extension,
    decisions,
)
from handlers.langgraph_approvals import approval_of, decisions_value
from tests.support.examples import examples
from tests.support.messages import handler_request

CALLS = [AskedCall("a-1", "delete_file", {"path": "/x"}, call_id="c-1"),
         AskedCall("a-2", "write_file", {"path": "/y"}, editable=True)]
PENDING = {"choices": ["approve", "deny"], HITL_URI: approval_request(CALLS, hint="two calls")}


def answer(*approvals: dict[str, Any], text: str = "", **extra: Any) -> Any:
    data = {"type": "tool_approval_response", "approvals": list(approvals), **extra}
    return handler_request(text, data=[data], pending_input=PENDING)


def test_the_request_has_kagents_shape_and_this_gateways_fields():
    assert PENDING[HITL_URI] == {
        "type": "tool_approval_request", "hint": "two calls",
        "tools": [{"id": "a-1", "call_id": "c-1", "name": "delete_file", "args": {"path": "/x"},
                   "editable": False},
                  {"id": "a-2", "call_id": "a-2", "name": "write_file", "args": {"path": "/y"},
                   "editable": True}],
        "answers": ["approve", "deny"]}


def test_a_data_part_answer_decides_each_call():
    decided = decisions(answer({"id": "a-1", "approved": False, "rejection_reason": "no"},
                               {"id": "a-2", "approved": True, "args": {"path": "/z"}}))
    assert decided == {"a-1": Decision(False, "no"), "a-2": Decision(True, "", {"path": "/z"})}


def test_the_answer_in_message_metadata_as_kagent_sends_it_wins_over_the_text():
    message = Message()
    message.metadata.update({HITL_URI: {"type": "tool_approval_response", "approvals": [
        {"id": "a-1", "approved": False}, {"id": "a-2", "approved": False}]}})
    request = handler_request("Approved", message=message, pending_input=PENDING)
    assert decisions(request) == {"a-1": Decision(False), "a-2": Decision(False)}


def test_a_data_part_keyed_by_the_uri_is_read_too():
    payload = {"type": "tool_approval_response", "approvals": [
        {"id": "a-1", "approved": True}, {"id": "a-2", "approved": True}]}
    request = handler_request("", data=[{HITL_URI: payload}], pending_input=PENDING)
    assert decisions(request) == {"a-1": Decision(True), "a-2": Decision(True)}


@pytest.mark.parametrize(("text", "expected"), [("yes", True), ("Deny.", False), ("later", None)])
def test_a_plain_text_answer_decides_every_call_alike(text, expected):
    decided = decisions(handler_request(text, pending_input=PENDING))
    assert decided == (None if expected is None else {
        "a-1": Decision(expected), "a-2": Decision(expected)})


@pytest.mark.parametrize(("approvals", "reason"), [
    ([{"id": "zz", "approved": True}], "'zz' is not a pending approval; pending: a-1, a-2"),
    ([{"id": "a-1", "approved": True}], "no answer for the pending approval(s) a-2"),
    ([{"id": "a-1", "approved": True}, {"id": "a-1", "approved": False}], "answered twice"),
    ([{"id": "a-1", "approved": "yes"}, {"id": "a-2", "approved": True}],
     "approvals[0].approved must be true or false"),
    ([{"id": "a-1", "approved": True, "args": {"path": "/"}}, {"id": "a-2", "approved": True}],
     "cannot run delete_file with edited arguments"),
    ([{"id": "a-1", "approved": True}, {"id": "a-2", "approved": False, "args": {}}],
     "approvals[1].args comes only with approved: true"),
    ([{"id": "a-1", "approved": True}, {"id": "a-2", "approved": True, "args": [1]}],
     "approvals[1].args must be an object"),
    ([{"id": "a-1", "approved": True, "why": 1}, {"id": "a-2", "approved": True}],
     "approvals[0] has unknown field(s) why"),
    ([{"id": "a-1", "approved": False, "rejection_reason": 3}, {"id": "a-2", "approved": True}],
     "approvals[0].rejection_reason must be a string"),
    (["a-1"], "approvals[0] must be an object"),
    ([], "approvals must be a non-empty list"),
])
def test_an_answer_that_does_not_fit_the_request_is_refused_with_the_reason(approvals, reason):
    with pytest.raises(ApprovalAnswerError, match=re.escape(reason)):
        decisions(answer(*approvals))


def test_a_structured_answer_of_another_type_or_without_a_pending_approval_is_refused():
    with pytest.raises(ApprovalAnswerError, match="type must be 'tool_approval_response'"):
        decisions(handler_request("", data=[{HITL_URI: {"type": "ask_user_response"}}],
                                  pending_input=PENDING))
    with pytest.raises(ApprovalAnswerError, match="no tool approval is pending"):
        decisions(handler_request("", data=[{"type": "tool_approval_response"}],
                                  pending_input={"interrupts": []}))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["id", "approved", "args", "rejection_reason", "x"]), inner, max_size=4),
    max_leaves=12)
APPROVAL = st.fixed_dictionaries(
    {"id": st.sampled_from(["a-1", "a-2", "zz"]) | JSON, "approved": st.booleans() | JSON},
    optional={"args": JSON, "rejection_reason": st.text(max_size=5) | JSON, "x": JSON})


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(APPROVAL | JSON, max_size=3), st.sampled_from(["tool_approval_response", "x"]))
def test_any_answer_is_decided_for_every_pending_call_or_refused(approvals, kind):
    request = handler_request("", data=[{"type": kind, "approvals": approvals}],
                              pending_input=PENDING)
    try:
        decided = decisions(request)
    except ApprovalAnswerError as refused:
        assert str(refused) and kind == "tool_approval_response"
        return
    if kind != "tool_approval_response":
        assert decided is None  # a data part of another type is no answer
        return
    assert decided is not None and set(decided) == {"a-1", "a-2"}
    assert decided["a-1"].args is None  # a-1 is not editable


HITL_INTERRUPT = {"id": "int-1", "value": {
    "action_requests": [{"name": "shell", "args": {"command": "rm x"}},
                        {"name": "mail", "args": {"to": "a"}, "description": "Send it?"}],
    "review_configs": [{"action_name": "shell", "allowed_decisions": ["approve", "reject"]},
                       {"action_name": "mail",
                        "allowed_decisions": ["approve", "edit", "reject"]}]}}


def test_a_langgraph_hitl_middleware_interrupt_becomes_an_approval_request():
    prompt, asked = approval_of([HITL_INTERRUPT, {"id": "int-2", "value": "free question"}])
    assert prompt == 'Approve the tool call shell(command="rm x")?\nSend it?'
    assert [(t["id"], t["name"], t["editable"]) for t in asked["tools"]] == [
        ("int-1/0", "shell", False), ("int-1/1", "mail", True)]
    assert approval_of([{"id": "int-2", "value": {"question": "why?"}}]) is None


def test_langgraph_decisions_follow_the_middlewares_answer_shape():
    value = decisions_value(HITL_INTERRUPT, {
        "int-1/0": Decision(False, "too risky"), "int-1/1": Decision(True, "", {"to": "b"})})
    assert value == {"decisions": [
        {"type": "reject", "message": "too risky"},
        {"type": "edit", "edited_action": {"name": "mail", "args": {"to": "b"}}}]}
    assert decisions_value(HITL_INTERRUPT, {"int-1/0": Decision(True), "int-1/1": Decision(
        False)}) == {"decisions": [{"type": "approve"}, {"type": "reject"}]}


def test_the_card_declares_the_extension_unless_the_row_declares_it_itself():
    plain = Endpoint(id="ep", name="ep", card={})
    fields = {"extensions": [card_extension(editable=True)]}
    card = with_handler_fields(plain, fields).card
    assert card["capabilities"]["extensions"] == [card_extension(editable=True)]
    own = {"uri": HITL_URI, "required": True}
    row = Endpoint(id="ep", name="ep", card={"capabilities": {"extensions": [own]}})
    assert with_handler_fields(row, fields).card["capabilities"]["extensions"] == [own]
