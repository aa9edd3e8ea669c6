"""``a2a-gateway serve`` runs on uvloop when it is installed (the ``speed`` extra), on the
standard loop when ``A2A_GATEWAY_EVENT_LOOP=asyncio``; its listening line says which."""

from __future__ import annotations

import importlib.util
import re

import httpx
import pytest

from tests.support.cli_process import run_cli, serving

LOOP = re.compile(r", event loop (\w+)$")

needs_uvloop = pytest.mark.skipif(importlib.util.find_spec("uvloop") is None,
                                  reason="uvloop is not installed (the speed extra)")


async def _loop_of(**env: str) -> str:
    """The loop a served gateway names, after it answered a request on it."""
    output: list[str] = []
    async with serving("serve", "--store", "memory://", output=output, **env) as listening:
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(f"{listening[1]}/healthz")).status_code == 200
    (line,) = [line for line in output if "listening on" in line]
    found = LOOP.search(line.rstrip("\n"))
    assert found, line
    return found[1]


@needs_uvloop
async def test_serve_runs_on_uvloop_when_it_is_installed():
    assert await _loop_of() == "uvloop"
    assert await _loop_of(A2A_GATEWAY_EVENT_LOOP="uvloop") == "uvloop"


async def test_the_standard_loop_on_request():
    assert await _loop_of(A2A_GATEWAY_EVENT_LOOP="asyncio") == "asyncio"


def test_an_unknown_loop_is_one_line():
    done = run_cli("serve", "--store", "memory://", "--port", "0", A2A_GATEWAY_EVENT_LOOP="tokio")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "event_loop" in done.stderr, done.stderr
