"""The LangGraph test graph served by ``langgraph dev`` (.ci/services/40-langgraph.sh):
a chat node on the scripted LLM (streamed tokens) that may call a ``shell`` tool, and an
``approve`` node that asks a human with ``interrupt()`` before the tool "runs".

The scripted LLM answers ``FAKE_TOOL_DANGER`` with a ``shell`` tool call; the interrupt's
value is ``{"question", "command"}``; a resume value of ``yes``/``approve`` (or a JSON object
with ``"approved": true``) approves, anything else denies. The tool runs nothing: its result
says whether it was approved, and the LLM answers ``TOOL_RESULT_SEEN: <result>``.
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


def approved(answer: Any) -> bool:
    if isinstance(answer, dict):
        return answer.get("approved") is True
    return str(answer).strip().lower() in APPROVALS


def approve(state: MessagesState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]
    command = call["args"].get("command", "")
    answer = interrupt({"question": f"Run `{command}`?", "command": command})
    result = f"approved: {command}" if approved(answer) else f"denied by the user: {command}"
    return {"messages": [ToolMessage(result, tool_call_id=call["id"], name="shell")]}


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
