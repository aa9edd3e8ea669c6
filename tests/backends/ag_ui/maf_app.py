"""The AG-UI Agent Framework test app served by .ci/services/46-ag-ui-maf.sh (uvicorn).

A Microsoft Agent Framework ``Agent`` on the scripted LLM (``AGUI_TEST_LLM_URL``) with one tool,
``bash(command)``, that needs a human's approval (``approval_mode="always_require"``). The tool
runs nothing: it returns ``ran: <command>``; a denial makes the framework hand the LLM its own
rejection text instead, and the LLM answers ``TOOL_RESULT_SEEN: <result>``.

``POST /agent`` is the adapter's default endpoint (``single_user=True``, no snapshot store):
stateless, the client sends the whole history; closing the stream stops the run.
``GET /ready`` answers 200 once the app is up (the adapter has no health route of its own).
"""

from __future__ import annotations

import os

from agent_framework import Agent, tool
from agent_framework.openai import OpenAIChatCompletionClient
from agent_framework_ag_ui import add_agent_framework_fastapi_endpoint
from fastapi import FastAPI
from openai import AsyncOpenAI


@tool(approval_mode="always_require")
def bash(command: str) -> str:
    """Run a shell command (needs a human's approval)."""
    return f"ran: {command}"


# No retries: an LLM error reaches the client at once, not after three tries.
llm = AsyncOpenAI(base_url=os.environ["AGUI_TEST_LLM_URL"], api_key="fake-key", max_retries=0)
agent = Agent(
    client=OpenAIChatCompletionClient(model="fake-model", async_client=llm),
    name="agent", instructions="You are a test agent.", tools=[bash],
)

app = FastAPI()
add_agent_framework_fastapi_endpoint(app, agent, "/agent", single_user=True)


@app.get("/ready")
def ready() -> dict[str, str]:
    """Readiness for the service script."""
    return {"status": "ok"}
