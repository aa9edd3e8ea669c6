"""The Agno AgentOS test app served by ``uvicorn app:app`` (.ci/services/60-agno.sh): one
agent, ``assistant``, on the scripted LLM (streamed tokens, the conversation's earlier runs
in its context, sessions in SQLite) with a ``shell`` tool that needs the user's confirmation.

The scripted LLM answers ``FAKE_TOOL_DANGER`` with a ``shell`` tool call; Agno pauses the run
(``RunPaused``) until the client confirms or rejects the tool through ``/continue``. The tool
runs nothing: its result says what it would run, and the LLM answers ``TOOL_RESULT_SEEN:
<result>``.
"""

from __future__ import annotations

import os

from agno.agent import Agent
from agno.db.sqlite import SqliteDb
from agno.models.openai.like import OpenAILike
from agno.os import AgentOS
from agno.tools import tool


@tool(requires_confirmation=True)
def shell(command: str) -> str:
    """Run a shell command (the user confirms it first)."""
    return f"would run {command}"


db = SqliteDb(db_file=os.environ["AGNO_TEST_DB_FILE"])

assistant = Agent(
    id="assistant",
    name="assistant",
    model=OpenAILike(id="fake-model", base_url=os.environ["AGNO_TEST_LLM_URL"],
                     api_key="fake-key", max_retries=0),
    tools=[shell],
    db=db,
    add_history_to_context=True,
    telemetry=False,
)

agent_os = AgentOS(id="a2a-gateway-ci", agents=[assistant], db=db, telemetry=False)
app = agent_os.get_app()
