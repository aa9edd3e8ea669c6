"""The docs never show an agent that can run commands on its host as ``--public``.

Hermes and OpenClaw run shell commands for whoever calls them; an example that registers
one without keys would be copied into deployments. Every ``endpoints add`` in README.md,
HERMES_INTEGRATION.md, docs/*.md and deploy/ (code blocks and inline code alike), and every
endpoints file under deploy/, keeps such agents keyed.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RUNS_COMMANDS = ("handlers.hermes", "handlers.openclaw", "handlers.responses")
CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`]+)`", re.DOTALL)
ADD = re.compile(r"endpoints\s+add\b[^\n]*")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "HERMES_INTEGRATION.md",
            *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "deploy").rglob("*.md"))]


def add_commands(markdown: str) -> list[str]:
    """Each ``endpoints add`` command in the code of ``markdown``, continuation lines joined."""
    commands = []
    for block, inline in CODE.findall(markdown):
        code = block.replace("\\\n", " ") if block else inline.replace("\n", " ")
        commands += ADD.findall(code)
    return commands


def public_agents_that_run_commands(markdown: str) -> list[str]:
    return [c for c in add_commands(markdown)
            if "--public" in c.split() and any(h in c for h in RUNS_COMMANDS)]


def test_no_example_adds_an_agent_that_runs_commands_as_public() -> None:
    found = [f"{path.relative_to(ROOT)}: {command}" for path in markdown_files()
             for command in public_agents_that_run_commands(path.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_no_endpoints_file_makes_such_an_agent_public() -> None:
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        if "templates" in path.relative_to(ROOT).parts:
            continue  # a Helm chart's Go templates: tests/deploy/test_helm_chart.py renders them
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict) or not isinstance(document.get("endpoints"), list):
            continue
        for endpoint in document["endpoints"]:
            if str(endpoint.get("handler", "")).startswith(RUNS_COMMANDS):
                assert not endpoint.get("public"), f"{path.relative_to(ROOT)}: {endpoint['name']}"


def test_the_check_finds_a_public_hermes_in_a_block_and_in_inline_code() -> None:
    block = ("```bash\nID=$(a2a-gateway endpoints add --name Ops \\\n"
             "  --handler handlers.hermes:HermesAgentHandler --public | tail -1)\n```\n")
    inline = ("with `docker run --rm a2a-gateway endpoints\nadd --name … --public "
              "--handler handlers.hermes:HermesAgentHandler --set …`, or")
    keyed = "`a2a-gateway endpoints add --handler handlers.hermes:HermesAgentHandler`"
    echo = "`a2a-gateway endpoints add --handler handlers.echo:EchoHandler --public`"
    assert len(public_agents_that_run_commands(block)) == 1
    assert len(public_agents_that_run_commands(inline)) == 1
    assert public_agents_that_run_commands(keyed + echo) == []
