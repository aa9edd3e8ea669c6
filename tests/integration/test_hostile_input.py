"""Hostile input gets a clear 4xx with the request's id, never a 500: integers out of range,
deep nesting, bad content encodings, bad base64, unknown enum values, bodies that never end."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import signal
import socket
import sys
import zlib

import httpx
from aiohttp import web

from a2a_gateway.app import build_app
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.transport.body import BODY_BUDGET
from tests.support.cli_process import LISTENING, ROOT, cli_env
from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import params_0_3, rpc, wire_message

V10 = {"A2A-Version": "1.0"}
JSON = {"Content-Type": "application/json"}


def nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


async def rpc_error(http: httpx.AsyncClient, url: str, body: dict, headers: dict) -> dict:
    """The JSON-RPC error of a request that must fail as invalid params (never a 500)."""
    r = await http.post(url, json=body, headers=headers)
    assert r.status_code < 500, r.text
    reply = r.json()
    assert reply["id"] == body["id"], reply
    assert reply["error"]["code"] == -32602, reply
    return reply["error"]


async def test_integers_out_of_their_field_range_are_invalid_params(
    gw: RunningGateway, echo_id, http
):
    url = gw.jsonrpc_url(echo_id)
    cases = [
        ("GetTask", {"id": "t", "historyLength": 2147483648}, "historyLength"),
        ("ListTasks", {"pageSize": 99999999999}, "pageSize"),
        ("ListTasks", {"historyLength": -2147483649}, "historyLength"),
        (
            "SendMessage",
            {"message": wire_message(), "configuration": {"historyLength": 2**40}},
            "historyLength",
        ),
    ]
    for method, params, field in cases:
        error = await rpc_error(http, url, rpc(method, params), V10)
        assert field in error["message"] and "between" in error["message"], error


async def test_integers_out_of_range_on_0_3_are_invalid_params(gw: RunningGateway, echo_id, http):
    url = gw.jsonrpc_url(echo_id)
    for length in (-1, 2147483648):
        error = await rpc_error(
            http, url, rpc("tasks/get", {"id": "t", "historyLength": length}), {}
        )
        assert "historyLength" in error["message"]
        params = {
            **params_0_3({"kind": "text", "text": "hi"}),
            "configuration": {"historyLength": length},
        }
        error = await rpc_error(http, url, rpc("message/send", params), {})
        assert "configuration.historyLength" in error["message"]


async def test_integers_out_of_range_in_rest_query_strings_are_400(
    gw: RunningGateway, echo_id, http
):
    base = gw.rest_url(echo_id)
    for path in ("/tasks?pageSize=99999999999", "/tasks?historyLength=-99999999999",
                 "/tasks/t?historyLength=2147483648"):
        r = await http.get(base + path, headers=V10)
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_nesting_deeper_than_the_limit_is_invalid_params(gw: RunningGateway, echo_id, http):
    url = gw.jsonrpc_url(echo_id)
    for levels in (34, 600):
        body = rpc("SendMessage", {"message": wire_message(metadata=nested(levels))})
        error = await rpc_error(http, url, body, V10)
        assert "max_json_depth (32" in error["message"]
    for levels in (60, 600):
        body = rpc("message/send", params_0_3({"kind": "data", "data": nested(levels)}))
        error = await rpc_error(http, url, body, {})
        assert "max_json_depth" in error["message"]
    r = await http.post(gw.rest_url(echo_id) + "/message:send", headers=V10,
                        json={"message": wire_message(metadata=nested(40))})
    assert r.status_code == 400 and "max_json_depth" in r.json()["error"]["message"]


async def test_nesting_within_the_limit_is_served(gw: RunningGateway, echo_id, http):
    """Deep but allowed metadata and data parts reach the agent and come back intact."""
    url = gw.jsonrpc_url(echo_id)
    deep = nested(26)
    r = await http.post(
        url, json=rpc("SendMessage", {"message": wire_message(metadata=deep)}), headers=V10
    )
    assert "result" in r.json(), r.text
    body = rpc("message/send", params_0_3({"kind": "data", "data": nested(24)}))
    r = await http.post(url, json=body)
    assert "result" in r.json(), r.text


async def test_the_depth_limit_is_a_setting(http):
    async with running_gateway(max_json_depth=8) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        body = rpc("SendMessage", {"message": wire_message(metadata=nested(6))})
        error = await rpc_error(http, gw.jsonrpc_url(endpoint_id), body, V10)
        assert "max_json_depth (8 levels)" in error["message"]


async def test_invalid_base64_in_a_0_3_file_part_is_invalid_params(
    gw: RunningGateway, echo_id, http
):
    part = {"kind": "file", "file": {"bytes": "!!!not base64", "mimeType": "text/plain"}}
    error = await rpc_error(
        http, gw.jsonrpc_url(echo_id), rpc("message/send", params_0_3(part)), {}
    )
    assert "parts.0.file.bytes" in error["message"]


async def test_unknown_list_tasks_status_is_invalid_params(gw: RunningGateway, echo_id, http):
    for status in ("TASK_STATE_BOGUS", 99):
        error = await rpc_error(
            http, gw.jsonrpc_url(echo_id), rpc("ListTasks", {"status": status}), V10
        )
        assert "expected one of" in error["message"]
    r = await http.get(gw.rest_url(echo_id) + "/tasks?status=BOGUS", headers=V10)
    assert r.status_code == 400


async def test_content_encodings(gw: RunningGateway, echo_id, http):
    """Bodies in gzip and deflate are decoded; a body that is not what it says is 400; any
    other encoding is 415 naming the accepted ones."""
    url = gw.jsonrpc_url(echo_id)
    raw = httpx.Request("POST", url, json=rpc("GetTask", {"id": "missing"})).content
    for encoding, data in (("gzip", gzip.compress(raw)), ("deflate", zlib.compress(raw))):
        r = await http.post(
            url, content=data, headers={**JSON, **V10, "Content-Encoding": encoding}
        )
        assert r.status_code == 200 and r.json()["error"]["code"] == -32001, (
            r.text
        )  # task not found
        r = await http.post(url, content=raw, headers={**JSON, **V10, "Content-Encoding": encoding})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"] == f"request body is not valid {encoding} data"
    for encoding in ("br", "zstd", "compress", "gzip, gzip", "bogus"):
        r = await http.post(url, content=raw, headers={**JSON, **V10, "Content-Encoding": encoding})
        assert r.status_code == 415, r.text
        assert r.headers["Accept-Encoding"] == "gzip, deflate"
        assert r.json()["error"]["code"] == -32005
    r = await http.post(gw.rest_url(echo_id) + "/message:send", content=raw,
                        headers={**JSON, **V10, "Content-Encoding": "gzip"})
    assert r.status_code == 400 and r.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_a_compressed_bomb_meets_the_body_limit(http):
    async with running_gateway(max_body_bytes=64 * 1024) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        bomb = gzip.compress(b" " * (20 * 1024 * 1024))
        assert len(bomb) < 64 * 1024
        r = await http.post(gw.jsonrpc_url(endpoint_id), content=bomb,
                            headers={**JSON, **V10, "Content-Encoding": "gzip"})
        assert r.status_code == 413
        assert "max_body_bytes (65536 bytes)" in r.json()["error"]["message"]


# --- slow, stalled and never-ending uploads; idle and slow connections ------------------


def _address(gw: RunningGateway) -> tuple[str, int]:
    host, port = gw.base_url.removeprefix("http://").split(":")
    return host, int(port)


async def _open(gw: RunningGateway) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*_address(gw))


def _head(path: str, **headers: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        "A2A-Version: 1.0",
    ]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _answer(reader: asyncio.StreamReader) -> tuple[int | None, bytes]:
    """(HTTP status, rest) of what the server sent until it closed (None: closed silently)."""
    data = await asyncio.wait_for(reader.read(), timeout=60)  # until the server closes
    if not data:
        return None, b""
    return int(data.split(b" ", 2)[1]), data


async def _answer_before_reset(sock: socket.socket) -> tuple[int | None, bytes]:
    """``_answer`` read from the socket itself. A server closing with part of the body unread
    resets the connection; what it sent before stays readable (the kernel keeps it), which a
    StreamReader would drop (it raises the reset instead of the data it holds)."""
    loop, data = asyncio.get_running_loop(), b""
    async with asyncio.timeout(60):
        with contextlib.suppress(ConnectionResetError):
            while chunk := await loop.sock_recv(sock, 65536):
                data += chunk
    return (int(data.split(b" ", 2)[1]), data) if data else (None, b"")


async def test_a_stalled_upload_is_answered_408_and_closed(http):
    # the close comes after aiohttp's lingering time (below): it drops what more arrives
    async with running_gateway(body_read_timeout_seconds=1, lingering_seconds=0.5) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        for framing in ({"Content_Length": "5000"}, {"Transfer_Encoding": "chunked"}):
            reader, writer = await _open(gw)
            first = (
                b'{"jsonrpc": "2.0", "id": 1'
                if "Content_Length" in framing
                else b'a\r\n{"jsonrpc"\r\n'
            )
            writer.write(_head(f"/{endpoint_id}/a2a", **framing) + first)
            status, data = await _answer(reader)  # the client sends nothing more
            assert status == 408, data
            assert b"body_read_timeout_seconds (1 s)" in data and b"Connection: close" in data
            writer.close()
        assert gw.app[BODY_BUDGET].held == 0


async def test_many_stalled_uploads_stay_within_the_in_flight_budget(http):
    """Stalled uploads hold at most max_inflight_body_bytes in all: past it they are answered
    503 with Retry-After at once, the rest 408 when their time is up; then every buffer is
    given back and the gateway serves as before."""
    budget_bytes = 256 * 1024
    async with running_gateway(max_body_bytes=128 * 1024, max_inflight_body_bytes=budget_bytes,
                               body_read_timeout_seconds=3, lingering_seconds=0.5) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        budget = gw.app[BODY_BUDGET]
        peak = 0

        async def stalled() -> tuple[int | None, bytes]:
            nonlocal peak
            loop = asyncio.get_running_loop()
            with (
                socket.socket() as sock
            ):  # closed however the test ends: no socket is left to the GC
                sock.setblocking(False)
                await loop.sock_connect(sock, _address(gw))
                with contextlib.suppress(
                    ConnectionError
                ):  # answered 503 and closed before all was sent
                    await loop.sock_sendall(
                        sock, _head(f"/{endpoint_id}/a2a", Content_Length="120000") + b" " * 100_000
                    )
                peak = max(peak, budget.held)
                return await _answer_before_reset(sock)

        async with asyncio.TaskGroup() as uploads:  # one failing cancels (and closes) the others
            running = [uploads.create_task(stalled()) for _ in range(30)]
        answers = [upload.result() for upload in running]
        statuses = [status for status, _ in answers]
        assert set(statuses) <= {408, 503, None}, statuses
        assert statuses.count(503) >= 20 and statuses.count(408) >= 1, statuses
        assert all(
            b"Retry-After: 1" in data and b"max_inflight_body_bytes" in data and b"-32603" in data
            for status, data in answers
            if status == 503
        )
        assert peak <= budget_bytes and budget.held == 0
        r = await http.post(gw.jsonrpc_url(endpoint_id), headers=V10,
                            json=rpc("SendMessage", {"message": wire_message()}))
        assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_never_ending_chunked_upload_is_413(http):
    async with running_gateway(max_body_bytes=64 * 1024, lingering_seconds=0.5) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        reader, writer = await _open(gw)
        writer.write(_head(f"/{endpoint_id}/a2a", Transfer_Encoding="chunked"))
        chunk = b"4000\r\n" + b" " * 0x4000 + b"\r\n"
        with contextlib.suppress(ConnectionError):
            for _ in range(64):  # 1 MiB, or until the server has answered and closed
                writer.write(chunk)
                await writer.drain()
        status, data = await _answer(reader)
        writer.close()
        assert status == 413 and b"max_body_bytes (65536 bytes)" in data
        assert gw.app[BODY_BUDGET].held == 0


async def test_idle_and_slow_header_connections_are_closed_after_the_keepalive_timeout():
    async with running_gateway(keepalive_timeout_seconds=1) as gw:
        idle_reader, idle_writer = await _open(gw)  # sends nothing at all
        slow_reader, slow_writer = await _open(gw)  # sends its headers a byte at a time

        async def trickle() -> None:
            with contextlib.suppress(ConnectionError):
                for byte in b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000:
                    slow_writer.write(bytes([byte]))
                    await slow_writer.drain()
                    await asyncio.sleep(0.2)

        trickling = asyncio.create_task(trickle())
        assert await asyncio.wait_for(idle_reader.read(), timeout=60) == b""
        assert await asyncio.wait_for(slow_reader.read(), timeout=60) == b""
        assert not trickling.done()  # closed long before its 200 s of headers were sent
        trickling.cancel()
        for writer in (idle_writer, slow_writer):
            writer.close()


# --- what such requests leave in the log ------------------------------------------------

MALFORMED = {
    "folded header": (
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-A: SECRETBYTES\r\n SECRETBYTES\r\n\r\n"
    ),
    "duplicate Host": b"GET /healthz HTTP/1.1\r\nHost: SECRETBYTES\r\nHost: b\r\n\r\n",
    "oversized line": b"GET /SECRETBYTES" + b"a" * 9000 + b" HTTP/1.1\r\nHost: a\r\n\r\n",
    "bad chunk size": (
        b"POST /x/a2a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\nSECRETBYTES\r\n"
    ),
    "Expect: bogus": (
        b"POST /healthz HTTP/1.1\r\nHost: a\r\nExpect: SECRETBYTES\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    ),
}


async def test_parser_rejections_are_one_info_line_each_without_the_bytes():
    """``a2a-gateway serve`` as an operator runs it: requests aiohttp's parser rejects are
    answered 4xx and logged once each at INFO, with no traceback and none of their bytes."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "a2a_gateway", "serve", "--store", "memory://", "--port", "0",
        env=cli_env(A2A_GATEWAY_LOG_LEVEL="info"), cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(60):
            while (listening := LISTENING.search((await proc.stdout.readline()).decode())) is None:
                pass
        host, port = listening[1].removeprefix("http://").split(":")
        for name, raw in MALFORMED.items():
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(raw)
            answer = await asyncio.wait_for(reader.read(200), timeout=30)
            writer.close()
            assert answer.split(b" ")[1] in (b"400", b"417"), (name, answer)
    finally:
        proc.send_signal(signal.SIGTERM)
        log = (await asyncio.wait_for(proc.stdout.read(), timeout=60)).decode()
        await proc.wait()
    rejected = [line for line in log.splitlines() if "http_request_rejected" in line]
    assert len(rejected) == 4, log  # Expect is answered 417 by aiohttp without a log line
    assert all('"level": "info"' in line for line in rejected), rejected
    assert "SECRETBYTES" not in log and "Traceback" not in log and "traceback object" not in log
    assert '"level": "error"' not in log


async def test_parts_text_and_metadata_limits_are_settings_named_in_the_error(http):
    async with running_gateway(
        max_message_parts=3, max_text_chars=50, max_metadata_bytes=100
    ) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        url = gw.jsonrpc_url(endpoint_id)
        cases = [
            ({"parts": [{"text": "a"}] * 4}, "max_message_parts is 3"),
            ({"parts": [{"text": "a" * 51}]}, "max_text_chars is 50"),
            ({"metadata": {"k": "v" * 100}}, "max_metadata_bytes is 100"),
            ({"parts": [{"text": "a", "metadata": {"k": "v" * 100}}]}, "parts[0].metadata"),
        ]
        for change, named in cases:
            message = {**wire_message(), **change}
            error = await rpc_error(http, url, rpc("SendMessage", {"message": message}), V10)
            assert named in error["message"], error
            r = await http.post(
                gw.rest_url(endpoint_id) + "/message:send", headers=V10, json={"message": message}
            )
            assert r.status_code == 400 and named in r.json()["error"]["message"]
        params = params_0_3(*[{"kind": "text", "text": "a"}] * 4)
        error = await rpc_error(http, url, rpc("message/send", params), {})
        assert "max_message_parts is 3" in error["message"]
        at_limit = {
            **wire_message(),
            "parts": [{"text": "a" * 50}] * 3,
            "metadata": {"k": "v" * 80},
        }
        r = await http.post(url, json=rpc("SendMessage", {"message": at_limit}), headers=V10)
        assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_bodies_aiohttp_decodes_itself_meet_the_same_limits(http):
    """Served without ``server_options`` (aiohttp decoding gzip itself), a compressed body
    is read the same, a false one is 400 and a bomb is 413."""
    settings = GatewaySettings(
        store="memory://", max_body_bytes=64 * 1024, allow_unauthenticated_endpoints=True
    )
    runner = web.AppRunner(build_app(settings), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        gw = RunningGateway(f"http://127.0.0.1:{port}", runner.app)
        url = gw.jsonrpc_url(await gw.add_endpoint(settings={"delay": 0}))
        raw = httpx.Request("POST", url, json=rpc("GetTask", {"id": "missing"})).content
        gzipped = {**JSON, **V10, "Content-Encoding": "gzip"}
        r = await http.post(url, content=gzip.compress(raw), headers=gzipped)
        assert r.json()["error"]["code"] == -32001, r.text
        r = await http.post(url, content=raw, headers=gzipped)
        assert (
            r.status_code == 400
            and r.json()["error"]["message"] == "request body is not valid gzip data"
        )
        r = await http.post(url, content=gzip.compress(b" " * (20 * 1024 * 1024)), headers=gzipped)
        assert r.status_code == 413
    finally:
        await runner.cleanup()
