"""Errors on the wire: the JSON-RPC id echoed, codes and statuses a client can act on."""

from __future__ import annotations

import json
import uuid

from a2a_gateway.stores.base import StoreUnavailableError
from a2a_gateway.stores.memory import MemoryStore
from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import params_0_3, rpc

V10 = {"A2A-Version": "1.0"}
SSE = {"Accept": "text/event-stream"}


def sse_events(body: str) -> list[tuple[str, dict]]:
    """(event name, data) of each SSE event."""
    events = []
    for block in body.split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith(":")]
        data = [line[6:] for line in lines if line.startswith("data: ")]
        if data:
            name = next((line[7:] for line in lines if line.startswith("event: ")), "message")
            events.append((name, json.loads("\n".join(data))))
    return events


async def test_envelope_errors_echo_the_id(gw: RunningGateway, echo_id, http):
    url = gw.jsonrpc_url(echo_id)
    cases = [
        ({"jsonrpc": "1.0", "id": "req-7", "method": "GetTask"}, -32600),
        ({"jsonrpc": "2.0", "id": "req-7", "params": {}}, -32600),
        ({"jsonrpc": "2.0", "id": 42, "method": 5}, -32600),
    ]
    for body, code in cases:
        r = await http.post(url, json=body, headers=V10)
        assert r.json()["error"]["code"] == code, body
        assert r.json()["id"] == body["id"], body
    # an id that is not a string or number cannot be echoed
    r = await http.post(
        url, json={"jsonrpc": "2.0", "id": {"x": 1}, "method": "GetTask"}, headers=V10
    )
    assert r.json()["error"]["code"] == -32600 and r.json()["id"] is None
    r = await http.post(url, content=b"{nope", headers={"Content-Type": "application/json"})
    assert r.json()["error"]["code"] == -32700 and r.json()["id"] is None


async def test_unknown_and_disabled_endpoints_are_method_not_found_with_the_id(gw, http):
    disabled = await gw.add_endpoint(enabled=False)
    for endpoint_id in (str(uuid.uuid4()), "not-a-uuid", disabled):
        r = await http.post(
            gw.jsonrpc_url(endpoint_id), json=rpc("GetTask", {"id": "x"}), headers=V10
        )
        assert r.status_code == 404
        body = r.json()
        assert body["id"] == "req-1" and body["jsonrpc"] == "2.0"
        assert body["error"]["code"] == -32601, body
        assert body["error"]["data"][0]["reason"] == "METHOD_NOT_FOUND"
        assert endpoint_id in body["error"]["message"]


async def test_misconfigured_endpoint_is_503_with_its_reason_and_the_id(gw, http):
    ep = await gw.add_endpoint("os:system")
    for method in ("SendMessage", "GetTask"):
        params = {"id": "x"} if method == "GetTask" else {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
        r = await http.post(gw.jsonrpc_url(ep), json=rpc(method, params, rid=9), headers=V10)
        assert r.status_code == 503, method
        body = r.json()
        assert body["id"] == 9 and body["error"]["code"] == -32603
        assert (
            "misconfigured" in body["error"]["message"] and "allowlist" in body["error"]["message"]
        )
    r = await http.get(f"{gw.rest_url(ep)}/tasks/x", headers=V10)
    assert r.status_code == 503
    assert (
        r.json()["error"]["status"] == "UNAVAILABLE" and "allowlist" in r.json()["error"]["message"]
    )


async def test_rest_error_statuses_are_google_rpc_names(gw, http):
    r = await http.get(f"{gw.rest_url(str(uuid.uuid4()))}/tasks/x", headers=V10)
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["status"] == "NOT_FOUND" and error["code"] == 404
    assert error["details"][0]["reason"] == "METHOD_NOT_FOUND"
    r = await http.get(f"{gw.base_url}/no/such/route")
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"


async def test_body_over_limit_is_413_invalid_request(http):
    async with running_gateway(max_body_bytes=2048) as gw:
        ep = await gw.add_endpoint(settings={"delay": 0})
        big = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x" * 5000}]}}
        r = await http.post(gw.jsonrpc_url(ep), json=rpc("SendMessage", big), headers=V10)
        assert r.status_code == 413
        assert (
            r.json()["error"]["code"] == -32600 and r.json()["id"] is None
        )  # the body was not read
        r = await http.post(f"{gw.rest_url(ep)}/message:send", json=big, headers=V10)
        assert r.status_code == 413 and r.json()["error"]["status"] == "INVALID_ARGUMENT"


class DownStore(MemoryStore):
    """A store whose task reads fail as a database outage does."""

    async def get_task(self, *args, **kwargs):
        raise StoreUnavailableError("database is restarting")


async def test_store_outage_echoes_the_id(http):
    async with running_gateway(store=DownStore()) as gw:
        ep = await gw.add_endpoint(settings={"delay": 0})
        r = await http.post(
            gw.jsonrpc_url(ep), json=rpc("GetTask", {"id": "x"}, rid="outage-1"), headers=V10
        )
        assert r.status_code == 503 and r.headers["Retry-After"]
        assert r.json()["id"] == "outage-1" and r.json()["error"]["code"] == -32603
        r = await http.get(f"{gw.rest_url(ep)}/tasks/x", headers=V10)
        assert r.status_code == 503 and r.json()["error"]["status"] == "UNAVAILABLE"


async def test_wrong_enum_value_names_the_valid_values(gw, echo_id, http):
    params = {"message": {"messageId": "m", "role": "user", "parts": [{"text": "hi"}]}}
    r = await http.post(gw.jsonrpc_url(echo_id), json=rpc("SendMessage", params), headers=V10)
    error = r.json()["error"]
    assert error["code"] == -32602
    assert "'user'" in error["message"] and "message.role" in error["message"]
    assert "ROLE_USER" in error["message"] and "ROLE_AGENT" in error["message"]
    assert "missing" not in error["message"]
    r = await http.post(f"{gw.rest_url(echo_id)}/message:send", json=params, headers=V10)
    assert r.status_code == 400 and "ROLE_USER" in r.json()["error"]["message"]
    r = await http.get(f"{gw.rest_url(echo_id)}/tasks?status=done", headers=V10)
    assert r.status_code == 400 and "TASK_STATE_COMPLETED" in r.json()["error"]["message"]


async def test_0_3_resubscribe_to_unknown_task_over_sse_is_an_sse_error(gw, echo_id, http):
    body = rpc("tasks/resubscribe", {"id": str(uuid.uuid4())})
    async with http.stream("POST", gw.jsonrpc_url(echo_id), json=body, headers=SSE) as r:
        text = (await r.aread()).decode()
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    [(name, data)] = sse_events(text)
    # a plain data event, as 0.3 servers sent errors (0.3 clients miss a named one)
    assert name == "message" and data["id"] == "req-1" and data["error"]["code"] == -32001
    # a client that did not ask for SSE still gets the plain JSON-RPC error
    r = await http.post(gw.jsonrpc_url(echo_id), json=body)
    assert (
        r.headers["Content-Type"].startswith("application/json")
        and r.json()["error"]["code"] == -32001
    )


async def test_1_0_subscribe_to_unknown_task_stays_a_plain_error(gw, echo_id, http):
    # the 1.0 TCK (STREAM-SUB-003) takes an SSE stream as success
    body = rpc("SubscribeToTask", {"id": str(uuid.uuid4())})
    r = await http.post(gw.jsonrpc_url(echo_id), json=body, headers={**V10, **SSE})
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json()["error"]["code"] == -32001 and r.json()["id"] == "req-1"


async def test_0_3_part_without_kind_is_invalid_params(gw, echo_id, http):
    for method in ("message/send", "message/stream"):
        body = rpc(method, params_0_3({"kind": "text", "text": "a"}, {"text": "no kind"}))
        r = await http.post(gw.jsonrpc_url(echo_id), json=body)
        error = r.json()["error"]
        assert error["code"] == -32602 and "parts.1.kind" in error["message"], method
    listed = await http.post(gw.jsonrpc_url(echo_id), json=rpc("ListTasks"), headers=V10)
    assert listed.json()["result"]["totalSize"] == 0  # nothing was started
    r = await http.post(
        gw.jsonrpc_url(echo_id),
        json=rpc("message/send", params_0_3({"kind": "text", "text": "ok"})),
    )
    assert r.json()["result"]["status"]["state"] == "completed"


BAD_SEND_PARAMS = [  # (what is wrong, the field the error names)
    ({"messageId": 5}, "messageId"),
    ({"parts": [{"text": "a", "url": "https://x"}]}, "parts[0]"),  # two members of a oneof
    ({"parts": "hi"}, "parts"),
    ({"role": "user"}, "message.role"),
    ({"messageId": None}, "message_id"),  # null is no value: a REQUIRED field missing
]
BAD_CONFIGURATIONS = [
    ({"historyLength": 2**31}, "configuration.historyLength"),
    ({"returnImmediately": "yes"}, "returnImmediately"),
]


async def test_bad_params_of_the_hot_methods_name_the_field_and_echo_the_id(gw, echo_id, http):
    """SendMessage, SendStreamingMessage and GetTask params are read by their own reader
    (``transport/params.py``); whatever it does not take gets the general path's error."""
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    cases = [({"message": {**message, **bad}}, field) for bad, field in BAD_SEND_PARAMS]
    cases += [({"message": message, "configuration": bad}, f) for bad, f in BAD_CONFIGURATIONS]
    for n, (params, field) in enumerate(cases):
        for method in ("SendMessage", "SendStreamingMessage"):
            body = rpc(method, params, rid=f"bad-{n}")
            r = await http.post(gw.jsonrpc_url(echo_id), json=body, headers=V10)
            assert r.status_code == 200 and r.json()["id"] == f"bad-{n}", r.text
            error = r.json()["error"]
            assert error["code"] == -32602 and field in error["message"], (params, error)
        for verb in ("send", "stream"):
            r = await http.post(f"{gw.rest_url(echo_id)}/message:{verb}", json=params, headers=V10)
            error = r.json()["error"]
            assert r.status_code == 400 and field in error["message"], (params, error)
    for n, (params, field) in enumerate([
        ({"id": ["t"]}, "id"), ({"id": "t", "historyLength": "ten"}, "historyLength"),
        ({"id": "t", "historyLength": -(2**31) - 1}, "historyLength"), ({}, "id"),
    ]):
        r = await http.post(
            gw.jsonrpc_url(echo_id), json=rpc("GetTask", params, rid=n), headers=V10
        )
        assert r.json()["id"] == n and r.json()["error"]["code"] == -32602, r.text
        assert field in r.json()["error"]["message"], (params, r.text)
    r = await http.get(f"{gw.rest_url(echo_id)}/tasks/t?historyLength={2**31}", headers=V10)
    assert r.status_code == 400 and "historyLength" in r.json()["error"]["message"], r.text
    listed = await http.post(gw.jsonrpc_url(echo_id), json=rpc("ListTasks"), headers=V10)
    assert listed.json()["result"]["totalSize"] == 0  # no task was started
