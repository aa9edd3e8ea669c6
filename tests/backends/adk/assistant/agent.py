"""The ADK test agent served by ``adk api_server`` (.ci/services/50-adk.sh): an LLM agent on
the scripted LLM (through LiteLLM's OpenAI provider) with one tool, ``run_command``, that asks
a human first (ADK's tool confirmation) unless the command is an ``echo``.

The scripted LLM answers ``FAKE_TOOL_DANGER`` with a ``run_command`` call (``rm -rf <path>``,
confirmation asked) and ``FAKE_TOOL_SAFE`` with ``echo fake-safe-ok`` (no confirmation). The
tool runs nothing: it returns what it would run, and the LLM answers
``TOOL_RESULT_SEEN: <the tool's result>`` (a denied call's result is ADK's own
``{"error": "This tool call is rejected."}``).
"""

from __future__ import annotations

import os

from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.tools import FunctionTool


def run_command(command: str) -> dict[str, str]:
    """Run a shell command (asks a human first, unless it is an echo)."""
    return {"result": f"would run {command}"}


def needs_approval(command: str) -> bool:
    return not command.startswith("echo ")


root_agent = LlmAgent(
    name="assistant",
    model=LiteLlm(model="openai/fake-model", api_base=os.environ["ADK_TEST_LLM_URL"],
                  api_key=os.environ.get("ADK_TEST_LLM_KEY", "fake-key"), num_retries=0),
    instruction="You are a test assistant. Use run_command when asked to run something.",
    tools=[FunctionTool(run_command, require_confirmation=needs_approval)],
)
