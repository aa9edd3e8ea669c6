"""The deployed clients of .ci/services/15-legacy-clients.sh, each run as a subprocess of a
script in ``clients/`` that prints what the client saw as JSON lines.

    run = await run_client(SDK03, {"action": "stream", "base_url": ..., "message": {...}})
    run.assert_ended()          # read to the end without an error
    run.events                  # each event as the client gave it, in the common shape

A test whose client is not installed skips (``require_env``); in CI that is a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.interop.wire import from_0_3
from tests.support.harness import require_env

CLIENTS = Path(__file__).parent / "clients"


@dataclass(frozen=True)
class Client:
    name: str
    env: str
    """The variable the service script sets: a venv's python, or the JS SDK's dir."""
    script: str


SDK03 = Client("a2a-sdk 0.3.22", "A2A_TEST_LEGACY_SDK03_PYTHON", "sdk03.py")
SDK02 = Client("a2a-sdk 0.2.16", "A2A_TEST_LEGACY_SDK02_PYTHON", "sdk02.py")
JS = Client("@a2a-js/sdk 0.3.1", "A2A_TEST_LEGACY_JS_SDK_DIR", "js_sdk.mjs")


@dataclass
class ClientRun:
    client: Client
    lines: list[dict[str, Any]]
    stderr: str
    elapsed: float
    """Seconds from start to exit."""

    @property
    def error(self) -> str | None:
        return next((line["error"] for line in self.lines if "error" in line), None)

    @property
    def ended(self) -> bool:
        return any(line.get("end") for line in self.lines)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The events in the common shape (the clients speak 0.3)."""
        return [from_0_3(line["event"]) for line in self.lines if "event" in line]

    def assert_ended(self) -> None:
        assert self.error is None and self.ended, (
            f"{self.client.name} failed: {self.error or 'no end'}; "
            f"it saw {len(self.lines)} lines; stderr: {self.stderr[-2000:]}")


def installed(client: Client) -> str:
    """Where ``client`` is (skips the test when the service script did not set it up)."""
    return require_env(client.env)


async def run_client(client: Client, args: dict[str, Any], *, timeout: float = 60.0) -> ClientRun:
    """Run ``client``'s script with ``args`` (as JSON) until it exits; killed after
    ``timeout`` s."""
    where = installed(client)
    script = str(CLIENTS / client.script)
    if client is JS:
        command = ["node", script, json.dumps({"sdk_dir": where, **args})]
    else:
        command = [where, script, json.dumps(args)]
    loop = asyncio.get_running_loop()
    started = loop.time()
    # the client's own venv alone: no PYTHONPATH or PYTHONHOME of the test run
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        stdout, stderr = await process.communicate()
        pytest.fail(
            f"{client.name} did not finish within {timeout} s; it printed {stdout.decode()!r}; "
            f"stderr: {stderr.decode()[-2000:]}"
        )
    lines = [json.loads(line) for line in stdout.decode().splitlines() if line.startswith("{")]
    if process.returncode != 0 and not any("error" in line for line in lines):
        lines.append({"error": f"exit status {process.returncode}"})
    return ClientRun(client, lines, stderr.decode(), loop.time() - started)
