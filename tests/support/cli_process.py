"""The ``a2a-gateway`` command as an operator runs it: a child process, stdout and stderr kept.

``run_cli`` runs a command to its end, ``serving`` runs one for the length of a block:

    done = run_cli("endpoints", "add", ..., cwd=tmp_path)          # finished command
    async with serving("demo", "--store", "memory://") as base:   # a running gateway
        httpx.get(f"{base}/.well-known/...")
"""

from __future__ import annotations

import asyncio
import codecs
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from a2a_gateway.stores import open_store
from a2a_gateway.stores.base import Endpoint

ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"listening on (http://\S+) \(store (\S+), (\d+) endpoints?\)")


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a gateway command: no A2A_GATEWAY_* setting of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_GATEWAY_")}
    env["PYTHONPATH"] = str(ROOT)
    env["A2A_GATEWAY_LOG_LEVEL"] = "warning"
    return {**env, **extra}


def run_cli(
    *args: str, cwd: Path | None = None, check: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "a2a_gateway", *args], capture_output=True, text=True, timeout=60,
        cwd=cwd or ROOT, env=cli_env(**env), check=check,
    )


def stored_endpoints(store_url: str) -> list[Endpoint]:
    """The endpoint rows of a store, read in this process: what ``endpoints list`` prints,
    without the second its process takes to start (to show a refused command wrote nothing)."""

    async def rows() -> list[Endpoint]:
        store = await open_store(store_url)
        try:
            return await store.list_endpoints()
        finally:
            await store.aclose()

    return asyncio.run(rows())


@asynccontextmanager
async def serving(*args: str, cwd: Path | None = None, output: list[str] | None = None,
                  process: list[asyncio.subprocess.Process] | None = None,
                  **env: str) -> AsyncIterator[re.Match[str]]:
    """Run ``a2a-gateway ARGS --port 0`` until its listening line; yield that line's match
    (groups: base URL, store, endpoint count); SIGTERM it afterwards. With ``output``, all
    the process writes (stdout and stderr, to its exit) is appended there; with ``process``,
    the child process (to signal it and wait for its exit)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "a2a_gateway", *args, "--port", "0",
        cwd=cwd or ROOT, env=cli_env(**env),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    readers: list[asyncio.Task[None]] = []
    if process is not None:
        process.append(proc)
    try:
        assert proc.stdout is not None
        match = None
        async with asyncio.timeout(30):
            while match is None:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    err = (await proc.stderr.read()).decode() if proc.stderr else ""
                    raise AssertionError(f"gateway exited before listening: {err}")
                if output is not None:
                    output.append(line)
                match = LISTENING.search(line)
        if output is not None:
            readers.extend(asyncio.create_task(_keep_rest(stream, output))
                           for stream in (proc.stdout, proc.stderr) if stream is not None)
        yield match
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(20):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await asyncio.gather(*readers)


async def _keep_rest(stream: asyncio.StreamReader, output: list[str]) -> None:
    """Append what ``stream`` gives as it comes (a test may wait for a log line), to EOF."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while chunk := await stream.read(65536):
        output.append(decoder.decode(chunk))
