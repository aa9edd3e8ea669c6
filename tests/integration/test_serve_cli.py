"""``serve`` and ``demo`` as processes: one default store, the listening line, one-line errors."""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import socket
import subprocess
import sys
import time

import httpx
import pytest

from a2a_gateway.cli import DEMO_ENDPOINT_ID
from tests.stores import pg_support
from tests.support.cli_process import LISTENING, ROOT, cli_env, run_cli, serving
from tests.support.harness import require_env

SEND = {
    "jsonrpc": "2.0",
    "id": "first-call",
    "method": "SendMessage",
    "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello gateway"}]}
    },
}


async def test_readme_adding_an_agent_works_against_a_running_demo(tmp_path):
    async with serving("demo", cwd=tmp_path) as listening:
        base = listening[1]
        assert listening[2] == "sqlite:///./a2a-gateway.db" and listening[3] == "1"
        done = run_cli(
            "endpoints",
            "add",
            "--name",
            "second",
            "--handler",
            "handlers.echo:EchoHandler",
            "--set",
            "delay=0",
            "--public",
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        added = done.stdout.strip().splitlines()[-1]
        async with httpx.AsyncClient(timeout=10) as http:
            card = await http.get(f"{base}/{added}/.well-known/agent-card.json")
            answer = await http.post(
                f"{base}/{added}/a2a", json=SEND, headers={"A2A-Version": "1.0"}
            )
    assert card.status_code == 200 and card.json()["name"] == "second"
    assert answer.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_demo_on_the_memory_store_serves_the_endpoint_it_printed():
    async with serving("demo", "--store", "memory://") as listening:
        async with httpx.AsyncClient(timeout=10) as http:
            card = await http.get(f"{listening[1]}/{DEMO_ENDPOINT_ID}/.well-known/agent-card.json")
            answer = await http.post(f"{listening[1]}/{DEMO_ENDPOINT_ID}/a2a", json=SEND,
                                     headers={"A2A-Version": "1.0"})
    assert card.status_code == 200 and card.json()["name"] == "Echo demo"
    artifact = answer.json()["result"]["task"]["artifacts"][0]
    assert artifact["parts"][0]["text"] == "echo: hello gateway"


async def test_serve_prints_where_it_listens_without_store_credentials():
    require_env(pg_support.ENV_VAR)
    async with pg_support.fresh_database() as url:
        with_password = url.replace("postgresql://postgres@", "postgresql://postgres:hunter2-secret@")
        assert with_password != url  # the test cluster trusts loopback: any password is accepted
        async with serving("serve", "--store", with_password) as listening:
            line = listening[0]
            async with httpx.AsyncClient(timeout=10) as http:
                assert (await http.get(f"{listening[1]}/healthz")).status_code == 200
    assert "hunter2" not in line
    assert listening[2].startswith("postgresql://postgres:***@127.0.0.1:") and listening[3] == "0"


def test_a_busy_port_is_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("serve", "--store", "memory://", "--port", str(port))
    assert done.returncode != 0 and "Traceback" not in done.stderr + done.stdout
    assert (
        done.stderr.strip()
        == f"a2a-gateway: cannot listen on 127.0.0.1:{port}: address already in use"
    )


def test_demo_on_a_busy_port_fails_before_it_prints_an_operator_key(tmp_path):
    store = f"sqlite:///{tmp_path}/demo.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("demo", "--store", store, "--port", str(port))
    assert done.returncode == 1
    assert done.stdout == ""  # before: the console's URL, a fresh operator key, the card, a curl
    assert (
        done.stderr == f"a2a-gateway: cannot listen on 127.0.0.1:{port}: address already in use\n"
    )
    assert run_cli("keys", "list", "--store", store, check=True).stdout == ""


async def test_demo_on_port_0_prints_every_url_with_its_port_and_the_printed_curl_works():
    output: list[str] = []
    async with serving("demo", "--store", "memory://", output=output) as listening:
        banner = "".join(output)  # stdout up to the listening line
        curl = next(line for line in banner.splitlines() if line.startswith("  curl "))
        pasted = await asyncio.create_subprocess_exec("bash", "-c", curl, stdout=subprocess.PIPE)
        answer, _ = await pasted.communicate()
    base = listening[1]
    assert re.fullmatch(r"http://127\.0\.0\.1:[1-9]\d*", base)
    assert (
        re.findall(r"http://[^/\s]+", banner) == [base] * 4
    )  # console, card, curl, listening line
    assert banner.startswith(f"Console: {base}/console\n")
    assert f"Agent card: {base}/{DEMO_ENDPOINT_ID}/.well-known/agent-card.json\n" in banner
    assert pasted.returncode == 0
    assert (
        json.loads(answer)["result"]["task"]["artifacts"][0]["parts"][0]["text"]
        == "echo: hello gateway"
    )


async def test_the_demo_operator_key_outlives_a_restart_once_set_as_operator_keys():
    first: list[str] = []
    async with serving("demo", "--store", "memory://", output=first):
        key = first[1].strip()  # the line after the console's URL
    told = "".join(first)
    assert "set A2A_GATEWAY_OPERATOR_KEYS to it" in told and told.count(key) == 1
    again: list[str] = []
    async with serving(
        "demo", "--store", "memory://", output=again, A2A_GATEWAY_OPERATOR_KEYS=key
    ) as listening:
        async with httpx.AsyncClient(timeout=10) as http:
            admin = await http.get(
                f"{listening[1]}/admin/api/endpoints", headers={"Authorization": f"Bearer {key}"}
            )
    assert admin.status_code == 200
    assert [line for line in "".join(again).splitlines() if "operator" in line.lower()] == [
        "sign in with one of A2A_GATEWAY_OPERATOR_KEYS"]  # and no new key


async def test_a_slow_demo_task_can_be_followed_and_canceled_while_it_runs():
    """The README's cancel and subscribe examples, typed by a person: ?slow answers a word a
    second."""
    async with serving("demo", "--store", "memory://") as listening:
        a2a, version = f"{listening[1]}/{DEMO_ENDPOINT_ID}/a2a", {"A2A-Version": "1.0"}
        start = {**SEND, "params": {"configuration": {"returnImmediately": True}, "message": {
            "messageId": "slow", "role": "ROLE_USER", "parts": [{"text": "count slowly ?slow"}]}}}
        async with httpx.AsyncClient(timeout=10) as http:
            started = (await http.post(a2a, json=start, headers=version)).json()["result"]["task"]
            began = time.monotonic()
            events = []
            async with http.stream(
                "GET", f"{a2a}/rest/tasks/{started['id']}:subscribe", headers=version
            ) as stream:
                lines = stream.aiter_lines()
                async for line in lines:
                    if line.startswith("data:"):
                        events.append(json.loads(line.removeprefix("data:")))
                    if sum("artifactUpdate" in e for e in events) == 4:
                        break
                followed = time.monotonic() - began
                get = {
                    "jsonrpc": "2.0",
                    "id": "get",
                    "method": "GetTask",
                    "params": {"id": started["id"]},
                }
                running = (await http.post(a2a, json=get, headers=version)).json()["result"]
                cancel = {
                    "jsonrpc": "2.0",
                    "id": "cancel",
                    "method": "CancelTask",
                    "params": {"id": started["id"]},
                }
                canceled = (await http.post(a2a, json=cancel, headers=version)).json()["result"]
                async for line in lines:
                    if line.startswith("data:"):
                        events.append(json.loads(line.removeprefix("data:")))
    assert started["status"]["state"] == "TASK_STATE_WORKING"
    assert events[0]["task"]["id"] == started["id"]
    assert followed >= 2.5 and running["status"]["state"] == "TASK_STATE_WORKING"  # a word a second
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"


def _read_until(
    fd: int, pattern: re.Pattern[str], seen: list[str], seconds: float = 20
) -> re.Match[str]:
    """Read ``fd`` (a terminal's side) into ``seen`` until ``pattern`` matches what was read,
    its colors left out."""
    deadline = time.monotonic() + seconds
    while (found := pattern.search(re.sub(r"\x1b\[[0-9;]*m", "", "".join(seen)))) is None:
        assert time.monotonic() < deadline, f"{pattern.pattern!r} not in {''.join(seen)!r}"
        if select.select([fd], [], [], 0.2)[0]:
            seen.append(os.read(fd, 65536).decode(errors="replace"))
    return found


@pytest.mark.parametrize(
    ("environment", "lines_for_people"), [({}, True), ({"A2A_GATEWAY_LOG_FORMAT": "json"}, False)]
)
def test_the_demo_in_a_terminal_logs_lines_for_people_unless_json_is_asked(
    environment, lines_for_people
):
    terminal, demo_side = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "a2a_gateway", "demo", "--store", "memory://", "--port", "0"],
        cwd=ROOT,
        env=cli_env(A2A_GATEWAY_LOG_LEVEL="info", **environment),
        stdin=subprocess.DEVNULL,
        stdout=demo_side,
        stderr=demo_side,
    )
    os.close(demo_side)
    seen: list[str] = []
    try:
        base = _read_until(terminal, LISTENING, seen)[1]
        httpx.post(
            f"{base}/{DEMO_ENDPOINT_ID}/a2a", json=SEND, headers={"A2A-Version": "1.0"}, timeout=10
        )
        logged = _read_until(
            terminal, re.compile(r"^.*\ba2a_method\W+SendMessage\b.*$", re.M), seen
        )[0].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        os.close(terminal)
    if lines_for_people:
        assert re.match(r"\S+Z \[info\s*\] request\s+.*a2a_method=SendMessage", logged), logged
    else:
        assert json.loads(logged)["a2a_method"] == "SendMessage"


async def test_the_demo_logs_json_lines_through_a_pipe():
    output: list[str] = []
    async with serving(
        "demo", "--store", "memory://", output=output, A2A_GATEWAY_LOG_LEVEL="info"
    ) as listening:
        async with httpx.AsyncClient(timeout=10) as http:
            await http.post(
                f"{listening[1]}/{DEMO_ENDPOINT_ID}/a2a", json=SEND, headers={"A2A-Version": "1.0"}
            )
    logged = [json.loads(line) for line in "".join(output).splitlines() if line.startswith("{")]
    assert any(
        entry["event"] == "request" and entry["a2a_method"] == "SendMessage" for entry in logged
    )


@pytest.mark.parametrize("value", ["nope", "123"])
def test_an_invalid_default_endpoint_setting_is_one_line(value):
    done = run_cli("serve", "--store", "memory://", A2A_GATEWAY_DEFAULT_ENDPOINT=value)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert (
        done.stderr.startswith("a2a-gateway: default_endpoint:")
        and len(done.stderr.strip().splitlines()) == 1
    )


async def test_keys_through_the_cli_against_a_running_gateway(tmp_path):
    add = run_cli("endpoints", "add", "--name", "private", "--handler", "handlers.echo:EchoHandler",
                  "--set", "delay=0", cwd=tmp_path)
    assert "callers need an API key" in add.stderr
    endpoint = add.stdout.strip().splitlines()[-1]
    created = run_cli(
        "keys", "create", "--endpoint", endpoint, "--name", "ci", "--expires", "30", cwd=tmp_path
    )
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip().splitlines()[-1]
    key_id = key.split("_")[1]
    listed = run_cli("keys", "list", "--endpoint", endpoint, cwd=tmp_path, check=True).stdout
    assert key_id in listed and "active" in listed and key not in listed
    assert key not in run_cli("endpoints", "show", endpoint, cwd=tmp_path).stdout
    async with serving("serve", cwd=tmp_path, A2A_GATEWAY_API_KEY_CACHE_SECONDS="0") as listening:
        url = f"{listening[1]}/{endpoint}/a2a"
        async with httpx.AsyncClient(timeout=10) as http:
            anonymous = await http.post(url, json=SEND, headers={"A2A-Version": "1.0"})
            with_key = await http.post(
                url, json=SEND, headers={"A2A-Version": "1.0", "X-API-Key": key}
            )
            revoked = run_cli("keys", "revoke", key_id, cwd=tmp_path)
            after = await http.post(
                url, json=SEND, headers={"A2A-Version": "1.0", "Authorization": f"Bearer {key}"}
            )
    assert anonymous.status_code == 401
    assert with_key.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert revoked.returncode == 0 and after.status_code == 401
    assert "revoked" in run_cli("keys", "list", cwd=tmp_path, check=True).stdout
    unknown = run_cli(
        "keys", "create", "--endpoint", "22222222-2222-4222-8222-222222222222", cwd=tmp_path
    )
    assert unknown.returncode != 0 and unknown.stderr.strip() == \
        "a2a-gateway: no endpoint 22222222-2222-4222-8222-222222222222"
    assert run_cli("keys", "revoke", "0123456789abcdef", cwd=tmp_path).returncode != 0


async def test_serve_applies_the_connection_limits():
    async with serving(
        "demo", "--store", "memory://", A2A_GATEWAY_KEEPALIVE_TIMEOUT_SECONDS="1"
    ) as listening:
        url = f"{listening[1]}/{DEMO_ENDPOINT_ID}/a2a"
        async with httpx.AsyncClient(timeout=10) as http:
            # decoding is the gateway's (aiohttp's own would answer an unknown encoding in plain
            # text)
            brotli = await http.post(url, content=b"\x0b\x02\x80{}\x03", headers={
                "Content-Type": "application/json", "Content-Encoding": "br", "A2A-Version": "1.0"})
        host, port = listening[1].removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            async with asyncio.timeout(10):
                closed = await reader.read()  # an idle connection is closed by the server
        finally:
            writer.close()
    assert brotli.status_code == 415 and brotli.headers["Content-Type"].startswith(
        "application/json"
    )
    assert closed == b""
