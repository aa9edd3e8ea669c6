"""A number its field cannot hold is invalid params naming the field, never a 500: a
JSON-RPC error -32602 with the request's id, a 400 on REST; no task is started and
nothing is logged as an error. Before, ``"role": 9007199254740993`` in a SendMessage was a
500 with a logged traceback: protobuf's enum lookup raised ``ValueError`` beyond int32."""

from __future__ import annotations

from typing import Any

import httpx
from structlog.testing import capture_logs

from tests.support.harness import RunningGateway
from tests.support.messages import params_0_3, rpc, wire_message

V10 = {"A2A-Version": "1.0"}
BEYOND_INT32 = 9007199254740993  # 2**53 + 1, the fuzzer's number: no double holds it exactly
NOT_A_ROLE = [BEYOND_INT32, str(BEYOND_INT32), -(2**31) - 1, 2**32, 1.5, 1e300]


def errors_in(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [log for log in logs if log["log_level"] in ("error", "critical") or log.get("exc_info")]


async def task_count(http: httpx.AsyncClient, gw: RunningGateway, endpoint_id: str) -> int:
    r = await http.post(gw.jsonrpc_url(endpoint_id), json=rpc("ListTasks"), headers=V10)
    return r.json()["result"]["totalSize"]


async def invalid_params(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
) -> str:
    """The message of the -32602 error the request must get, its id echoed."""
    r = await http.post(url, json=body, headers=headers)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["id"] == body["id"] and reply["error"]["code"] == -32602, reply
    return reply["error"]["message"]


async def test_a_role_beyond_int32_is_invalid_params_on_json_rpc_and_400_on_rest(gw, echo_id, http):
    with capture_logs() as logs:
        for n, role in enumerate(NOT_A_ROLE):
            params = {"message": {**wire_message(), "role": role}}
            for method in ("SendMessage", "SendStreamingMessage"):
                body = rpc(method, params, rid=f"fuzz-{n}")
                message = await invalid_params(http, gw.jsonrpc_url(echo_id), body, V10)
                assert "message.role" in message and "ROLE_USER" in message, message
            for verb in ("send", "stream"):
                r = await http.post(
                    f"{gw.rest_url(echo_id)}/message:{verb}", json=params, headers=V10
                )
                assert r.status_code == 400, (role, r.text)
                error = r.json()["error"]
                assert (
                    error["status"] == "INVALID_ARGUMENT" and "message.role" in error["message"]
                ), error
        # the same number in the other enum a request carries, and in its int32 fields
        status = await invalid_params(
            http, gw.jsonrpc_url(echo_id), rpc("ListTasks", {"status": BEYOND_INT32}), V10
        )
        assert "status" in status and "TASK_STATE_COMPLETED" in status
        for field in ("pageSize", "historyLength"):
            for number in (BEYOND_INT32, str(BEYOND_INT32), 1e300):
                message = await invalid_params(
                    http, gw.jsonrpc_url(echo_id), rpc("ListTasks", {field: number}), V10)
                assert field in message and "between" in message, message
    assert await task_count(http, gw, echo_id) == 0
    assert errors_in(logs) == []


async def test_numbers_beyond_their_field_on_0_3_are_invalid_params(gw, echo_id, http):
    url = gw.jsonrpc_url(echo_id)  # no A2A-Version header: protocol 0.3, read by the SDK's models
    with capture_logs() as logs:
        for n, length in enumerate((BEYOND_INT32, str(BEYOND_INT32), 1e10, -1, 2**64)):
            message = await invalid_params(
                http, url, rpc("tasks/get", {"id": "t", "historyLength": length}, rid=n), {}
            )
            assert "params.historyLength" in message, message
            params = {
                **params_0_3({"kind": "text", "text": "hi"}),
                "configuration": {"historyLength": length},
            }
            for method in ("message/send", "message/stream"):
                message = await invalid_params(http, url, rpc(method, params, rid=n), {})
                assert "params.configuration.historyLength" in message, message
        role = {
            "message": {
                **params_0_3({"kind": "text", "text": "hi"})["message"],
                "role": BEYOND_INT32,
            }
        }
        message = await invalid_params(http, url, rpc("message/send", role, rid="role"), {})
        assert "params.message.role" in message, message
    assert await task_count(http, gw, echo_id) == 0
    assert errors_in(logs) == []
    # in range, the same spellings are taken
    params = {**params_0_3({"kind": "text", "text": "hi"}), "configuration": {"historyLength": "3"}}
    r = await http.post(url, json=rpc("message/send", params))
    assert r.json()["result"]["status"]["state"] == "completed", r.text
