"""The LangGraph test graph served by ``langgraph dev`` (.ci/services/40-langgraph.sh):
a chat node on the scripted LLM (streamed tokens) that may call a ``shell`` tool, and an
``approve`` node that asks a human with ``interrupt()`` before the tool "runs".

The scripted LLM answers ``FAKE_TOOL_DANGER`` with a ``shell`` tool call; the interrupt's
value has the shape of LangChain's ``HumanInTheLoopMiddleware`` request (``action_requests``,
``review_configs`` allowing approve, edit and reject); a resume value of that middleware's
``{"decisions": [...]}`` approves, edits (the command becomes the edited one) or rejects, and
``yes``/``approve`` (or a JSON object with ``"approved": true``) approves too; anything else
denies. The tool runs nothing: its result says whether (and what) it approved, and the LLM
answers ``TOOL_RESULT_SEEN: <result>``.
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

APPROVALS = {"yes", "y", "approve", "approved", "ok"}


@tool
def shell(command: str) -> str:
    """Run a shell command (asks a human first)."""
    return f"would run {command}"


model = ChatOpenAI(
    base_url=os.environ["LANGGRAPH_TEST_LLM_URL"], api_key="fake-key", model="fake-model",
    streaming=True, stream_usage=True, max_retries=0,
).bind_tools([shell])


async def chat(state: MessagesState) -> dict[str, Any]:
    # async: a canceled run stops its LLM call (a sync node's thread would run on)
    return {"messages": [await model.ainvoke(state["messages"])]}


def decided(answer: Any, command: str) -> str:
    """The tool's result for the human's answer."""
    if isinstance(answer, dict) and isinstance(answer.get("decisions"), list):
        (decision,) = answer["decisions"]
        if decision.get("type") == "edit":
            return f"approved: {decision['edited_action']['args']['command']}"
        if decision.get("type") == "approve":
            return f"approved: {command}"
        reason = decision.get("message")
        return f"denied by the user: {command}" + (f" ({reason})" if reason else "")
    if isinstance(answer, dict):
        ok = answer.get("approved") is True
    else:
        ok = str(answer).strip().lower() in APPROVALS
    return f"approved: {command}" if ok else f"denied by the user: {command}"


def approve(state: MessagesState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]
    command = call["args"].get("command", "")
    answer = interrupt({
        "action_requests": [{"name": "shell", "args": {"command": command},
                             "description": f"Run `{command}`?"}],
        "review_configs": [{"action_name": "shell",
                            "allowed_decisions": ["approve", "edit", "reject"]}],
    })
    return {"messages": [ToolMessage(decided(answer, command), tool_call_id=call["id"],
                                     name="shell")]}


def after_chat(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "approve" if isinstance(last, AIMessage) and last.tool_calls else END


builder = StateGraph(MessagesState)
builder.add_node("chat", chat)
builder.add_node("approve", approve)
builder.add_edge(START, "chat")
builder.add_conditional_edges("chat", after_chat, ["approve", END])
builder.add_edge("approve", "chat")
graph = builder.compile()
