"""The AG-UI ADK test app served by .ci/services/47-ag-ui-adk.sh (uvicorn).

A Google ADK ``LlmAgent`` on the scripted LLM (``AGUI_TEST_LLM_URL``, through LiteLLM) with one
tool, ``bash(command)``, that needs a human's confirmation (``require_confirmation=True``). The
tool runs nothing: it returns ``ran: <command>``; a denial makes ADK hand the LLM its own
rejection error instead, and the LLM answers ``TOOL_RESULT_SEEN: <result>``.

``POST /agent`` emits the AG-UI 1.0 interrupt outcome (``emit_interrupt_outcome=True``); the
session (one per AG-UI threadId) lives in memory. Only one ADK agent per app: a second one
would collide on the global ``POST /agents/state`` route the adapter adds.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from ag_ui_adk import ADKAgent, add_adk_fastapi_endpoint  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models.lite_llm import LiteLlm  # noqa: E402
from google.adk.tools import FunctionTool  # noqa: E402


def bash(command: str) -> str:
    """Run a shell command (needs a human's confirmation)."""
    return f"ran: {command}"


model = LiteLlm(
    model="openai/fake-model", api_base=os.environ["AGUI_TEST_LLM_URL"], api_key="fake-key",
    num_retries=0,
)
llm_agent = LlmAgent(
    name="agent", model=model, instruction="You are a test agent.",
    tools=[FunctionTool(bash, require_confirmation=True)],
)

app = FastAPI()
add_adk_fastapi_endpoint(
    app,
    ADKAgent(adk_agent=llm_agent, app_name="agui_test", user_id="test-user",
             emit_interrupt_outcome=True),
    "/agent",
)
