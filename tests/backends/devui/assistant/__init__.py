"""The DevUI test entity ``assistant`` served by ``devui`` (.ci/services/48-devui.sh): an
Agent Framework agent on the scripted LLM (its chat completions API) with one tool, ``bash``,
that always needs a human's approval (``approval_mode="always_require"``).

The scripted LLM answers ``FAKE_TOOL_DANGER`` with a ``bash`` call (``rm -rf <path>``); DevUI
then streams ``response.function_approval.requested``. The tool runs nothing: it returns what
it would run, and the LLM answers ``TOOL_RESULT_SEEN: <the tool's result>`` (a denied call's
result is Agent Framework's "Error: Tool call invocation was rejected by user.").
"""

from __future__ import annotations

import os

from agent_framework import Agent, tool
from agent_framework.openai import OpenAIChatCompletionClient


@tool(approval_mode="always_require")
def bash(command: str) -> str:
    """Run a shell command (needs a human's approval)."""
    return f"would run {command}"


agent = Agent(
    client=OpenAIChatCompletionClient(
        model="fake-model", api_key=os.environ.get("DEVUI_TEST_LLM_KEY", "fake-key"),
        base_url=os.environ["DEVUI_TEST_LLM_URL"]),
    name="assistant",
    instructions="You are a test assistant. Use bash when asked to run something.",
    tools=[bash],
)
