"""The AG-UI LangGraph test app served by .ci/services/45-ag-ui-langgraph.sh (uvicorn).

A graph on the scripted LLM (``AGUI_TEST_LLM_URL``): a ``chat`` node that may call the tool
``bash(command)``, and an ``approve`` node that asks a human with ``interrupt()`` before the
tool "runs". The tool runs nothing: its result is ``ran: <command>`` when approved and
``denied: <command>`` otherwise, and the LLM answers ``TOOL_RESULT_SEEN: <result>``.

An answer approves when it is ``{"approved": true}`` (or ``true``, or the text ``approve`` /
``yes``); anything else denies, among them ``{"approved": false}`` and the
``{"__agui_cancelled__": true}`` that a ``resume`` with ``status: "cancelled"`` delivers.

Routes (one graph, one in-memory checkpointer; the AG-UI threadId is the checkpoint thread):
``POST /agent`` emits the AG-UI 1.0 interrupt outcome (``RUN_FINISHED.outcome``) and
``POST /agent-legacy`` only the older ``CUSTOM on_interrupt`` event. When ``AGUI_TEST_TOKEN``
is set, every request needs ``Authorization: Bearer <that token>`` (else 401).
"""

from __future__ import annotations

import hmac
import os
from typing import Any

from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import MemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

APPROVALS = {"approve", "approved", "yes", "y"}


@tool
def bash(command: str) -> str:
    """Run a shell command (asks a human first)."""
    return f"ran: {command}"


model = ChatOpenAI(
    base_url=os.environ["AGUI_TEST_LLM_URL"], api_key="fake-key", model="fake-model",
    streaming=True, max_retries=0,
).bind_tools([bash])


async def chat(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await model.ainvoke(state["messages"])]}


def approved(answer: Any) -> bool:
    if isinstance(answer, dict):
        return answer.get("approved") is True
    if isinstance(answer, bool):
        return answer
    return str(answer).strip().lower() in APPROVALS


def approve(state: MessagesState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]
    command = call["args"].get("command", "")
    answer = interrupt({
        "reason": "tool_approval", "message": f"Run `{command}`?", "toolCallId": call["id"],
        "command": command,
    })
    result = bash.invoke({"command": command}) if approved(answer) else f"denied: {command}"
    return {"messages": [ToolMessage(result, tool_call_id=call["id"], name="bash")]}


def after_chat(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "approve" if isinstance(last, AIMessage) and last.tool_calls else END


builder = StateGraph(MessagesState)
builder.add_node("chat", chat)
builder.add_node("approve", approve)
builder.add_edge(START, "chat")
builder.add_conditional_edges("chat", after_chat, ["approve", END])
builder.add_edge("approve", "chat")
graph = builder.compile(checkpointer=MemorySaver())

app = FastAPI()
TOKEN = os.environ.get("AGUI_TEST_TOKEN", "")


@app.middleware("http")
async def require_token(request: Request, call_next):
    """Refuse a request without the bearer token, when the app has one."""
    if TOKEN:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {TOKEN}".encode()):
            return JSONResponse({"detail": "missing or wrong bearer token"}, status_code=401)
    return await call_next(request)


add_langgraph_fastapi_endpoint(
    app, LangGraphAgent(name="agent", graph=graph, emit_interrupt_outcome=True), "/agent")
add_langgraph_fastapi_endpoint(
    app, LangGraphAgent(name="agent_legacy", graph=graph), "/agent-legacy")
