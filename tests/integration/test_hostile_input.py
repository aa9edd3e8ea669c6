"""Hostile input gets a clear 4xx with the request's id, never a 500: integers out of range,
deep nesting, bad content encodings, bad base64, unknown enum values, bodies that never end."""

from __future__ import annotations

import asyncio
import gzip
import uuid
import zlib

import httpx
import pytest

from tests.harness import RunningGateway, running_gateway

V10 = {"A2A-Version": "1.0"}
JSON = {"Content-Type": "application/json"}


def rpc(method: str, params: dict, rid: int | str = "hostile-1") -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def message_1_0(**extra: object) -> dict:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hi"}], **extra}


def message_0_3(*parts: dict) -> dict:
    return {"message": {"kind": "message", "messageId": str(uuid.uuid4()), "role": "user", "parts": list(parts)}}


@pytest.fixture
async def http():
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


async def rpc_error(http: httpx.AsyncClient, url: str, body: dict, headers: dict) -> dict:
    """The JSON-RPC error of a request that must fail as invalid params (never a 500)."""
    r = await http.post(url, json=body, headers=headers)
    assert r.status_code < 500, r.text
    reply = r.json()
    assert reply["id"] == body["id"], reply
    assert reply["error"]["code"] == -32602, reply
    return reply["error"]


async def test_integers_out_of_their_field_range_are_invalid_params(gw: RunningGateway, echo_id, http):
    url = gw.jsonrpc_url(echo_id)
    cases = [
        ("GetTask", {"id": "t", "historyLength": 2147483648}, "historyLength"),
        ("ListTasks", {"pageSize": 99999999999}, "pageSize"),
        ("ListTasks", {"historyLength": -2147483649}, "historyLength"),
        ("SendMessage", {"message": message_1_0(), "configuration": {"historyLength": 2**40}}, "historyLength"),
    ]
    for method, params, field in cases:
        error = await rpc_error(http, url, rpc(method, params), V10)
        assert field in error["message"] and "between" in error["message"], error


async def test_integers_out_of_range_on_0_3_are_invalid_params(gw: RunningGateway, echo_id, http):
    url = gw.jsonrpc_url(echo_id)
    for length in (-1, 2147483648):
        error = await rpc_error(http, url, rpc("tasks/get", {"id": "t", "historyLength": length}), {})
        assert "historyLength" in error["message"]
        params = {**message_0_3({"kind": "text", "text": "hi"}), "configuration": {"historyLength": length}}
        error = await rpc_error(http, url, rpc("message/send", params), {})
        assert "configuration.historyLength" in error["message"]


async def test_integers_out_of_range_in_rest_query_strings_are_400(gw: RunningGateway, echo_id, http):
    base = gw.rest_url(echo_id)
    for path in ("/tasks?pageSize=99999999999", "/tasks?historyLength=-99999999999",
                 "/tasks/t?historyLength=2147483648"):
        r = await http.get(base + path, headers=V10)
        assert r.status_code == 400, (path, r.text)
        assert r.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_nesting_deeper_than_the_limit_is_invalid_params(gw: RunningGateway, echo_id, http):
    url = gw.jsonrpc_url(echo_id)
    for levels in (34, 600):
        body = rpc("SendMessage", {"message": message_1_0(metadata=nested(levels))})
        error = await rpc_error(http, url, body, V10)
        assert "max_json_depth (32" in error["message"]
    for levels in (60, 600):
        body = rpc("message/send", message_0_3({"kind": "data", "data": nested(levels)}))
        error = await rpc_error(http, url, body, {})
        assert "max_json_depth" in error["message"]
    r = await http.post(gw.rest_url(echo_id) + "/message:send", headers=V10,
                        json={"message": message_1_0(metadata=nested(40))})
    assert r.status_code == 400 and "max_json_depth" in r.json()["error"]["message"]


async def test_nesting_within_the_limit_is_served(gw: RunningGateway, echo_id, http):
    """Deep but allowed metadata and data parts reach the agent and come back intact."""
    url = gw.jsonrpc_url(echo_id)
    deep = nested(26)
    r = await http.post(url, json=rpc("SendMessage", {"message": message_1_0(metadata=deep)}), headers=V10)
    assert "result" in r.json(), r.text
    body = rpc("message/send", message_0_3({"kind": "data", "data": nested(24)}))
    r = await http.post(url, json=body)
    assert "result" in r.json(), r.text


async def test_the_depth_limit_is_a_setting(http):
    async with running_gateway(max_json_depth=8) as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0})
        body = rpc("SendMessage", {"message": message_1_0(metadata=nested(6))})
        error = await rpc_error(http, gw.jsonrpc_url(endpoint_id), body, V10)
        assert "max_json_depth (8 levels)" in error["message"]


async def test_invalid_base64_in_a_0_3_file_part_is_invalid_params(gw: RunningGateway, echo_id, http):
    part = {"kind": "file", "file": {"bytes": "!!!not base64", "mimeType": "text/plain"}}
    error = await rpc_error(http, gw.jsonrpc_url(echo_id), rpc("message/send", message_0_3(part)), {})
    assert "parts.0.file.bytes" in error["message"]


async def test_unknown_list_tasks_status_is_invalid_params(gw: RunningGateway, echo_id, http):
    for status in ("TASK_STATE_BOGUS", 99):
        error = await rpc_error(http, gw.jsonrpc_url(echo_id), rpc("ListTasks", {"status": status}), V10)
        assert "expected one of" in error["message"]
    r = await http.get(gw.rest_url(echo_id) + "/tasks?status=BOGUS", headers=V10)
    assert r.status_code == 400


async def test_content_encodings(gw: RunningGateway, echo_id, http):
    """gzip and deflate are decoded; a body that is not what it says is 400; any other
    encoding is 415 naming the accepted ones."""
    url = gw.jsonrpc_url(echo_id)
    raw = httpx.Request("POST", url, json=rpc("GetTask", {"id": "missing"})).content
    for encoding, data in (("gzip", gzip.compress(raw)), ("deflate", zlib.compress(raw))):
        r = await http.post(url, content=data, headers={**JSON, **V10, "Content-Encoding": encoding})
        assert r.status_code == 200 and r.json()["error"]["code"] == -32001, r.text  # task not found
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
