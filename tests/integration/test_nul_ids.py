"""An id holding a NUL character (which PostgreSQL text cannot keep) is invalid params on
every store and binding, and stores nothing."""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx
import pytest
from a2a.types import GetTaskRequest, a2a_pb2_grpc

from tests.stores.store_urls import STORE_KINDS, fresh_store_url
from tests.support.harness import running_gateway
from tests.support.messages import params_0_3, rpc, send_params, send_request, wire_message

V10 = {"A2A-Version": "1.0"}
NUL = "ctx\u0000x"


def _jsonrpc_cases() -> list[tuple[str, dict, str]]:
    return [
        ("SendMessage", send_params(contextId=NUL), "message.contextId"),
        ("SendMessage", send_params(messageId=NUL), "message.messageId"),
        ("SendMessage", send_params(taskId=NUL), "message.taskId"),
        ("SendMessage", send_params(referenceTaskIds=["t", NUL]), "message.referenceTaskIds"),
        ("SendMessage", {**send_params(), "tenant": NUL}, "tenant"),
        ("SendStreamingMessage", send_params(contextId=NUL), "message.contextId"),
        (
            "SendMessage",
            send_params(push={"id": NUL, "url": "http://127.0.0.1:9/hook"}),
            "configuration.taskPushNotificationConfig.id",
        ),
        ("GetTask", {"id": NUL}, "id"),
        ("CancelTask", {"id": NUL}, "id"),
        ("SubscribeToTask", {"id": NUL}, "id"),
        ("ListTasks", {"contextId": NUL}, "contextId"),
        (
            "CreateTaskPushNotificationConfig",
            {"taskId": NUL, "url": "http://127.0.0.1:9/hook"},
            "taskId",
        ),
        ("GetTaskPushNotificationConfig", {"taskId": "t", "id": NUL}, "id"),
    ]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_an_id_holding_a_nul_is_invalid_params_on_every_binding(
    store_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        fresh_store_url(store_kind, tmp_path, monkeypatch) as url,
        running_gateway(url, grpc=True) as gw,
    ):
        ep = await gw.add_endpoint(
            "handlers.echo:EchoHandler",
            settings={"delay": 0.0},
            name="echo",
            card={"capabilities": {"streaming": True, "pushNotifications": True}},
        )
        async with httpx.AsyncClient(timeout=30) as http:
            for i, (method, params, field) in enumerate(_jsonrpc_cases()):
                r = await http.post(
                    gw.jsonrpc_url(ep), json=rpc(method, params, rid=i), headers=V10
                )
                assert r.status_code == 200, (method, r.text)
                reply = r.json()
                assert reply["id"] == i and reply["error"]["code"] == -32602, (method, reply)
                assert f"{field} must not contain a NUL" in reply["error"]["message"], (
                    method,
                    reply,
                )

            old = await http.post(gw.jsonrpc_url(ep), json=rpc("message/send", params_0_3(
                {"kind": "text", "text": "hi"}, contextId=NUL)))
            assert (
                old.json()["error"]["code"] == -32602 and "NUL" in old.json()["error"]["message"]
            ), old.text

            rest = gw.rest_url(ep)
            refused = [
                await http.post(
                    f"{rest}/message:send", json=send_params(contextId=NUL), headers=V10
                ),
                await http.get(f"{rest}/tasks/ctx%00x", headers=V10),
                await http.post(f"{rest}/tasks/ctx%00x:cancel", headers=V10),
                await http.get(f"{rest}/tasks", params={"contextId": NUL}, headers=V10),
            ]
            for r in refused:
                assert r.status_code == 400, (r.request.url, r.text)
                assert r.json()["error"]["status"] == "INVALID_ARGUMENT", r.text
                assert "NUL" in r.json()["error"]["message"]

            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.gateway.grpc_port}") as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)
                request = send_request("hi")
                request.tenant = ep
                request.message.context_id = NUL
                for call in (
                    stub.SendMessage(request, metadata=(("a2a-version", "1.0"),)),
                    stub.GetTask(
                        GetTaskRequest(tenant=ep, id=NUL), metadata=(("a2a-version", "1.0"),)
                    ),
                ):
                    with pytest.raises(grpc.aio.AioRpcError) as raised:
                        await call
                    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, raised.value
                    assert "NUL" in (raised.value.details() or "")

            listed = (
                await http.post(gw.jsonrpc_url(ep), json=rpc("ListTasks", {}), headers=V10)
            ).json()
            assert listed["result"].get("tasks", []) == [], listed  # nothing was stored

            # an id with other characters is kept as it is
            ok = wire_message(contextId="ctx\u0001 é x")
            sent = (
                await http.post(
                    gw.jsonrpc_url(ep), json=rpc("SendMessage", {"message": ok}), headers=V10
                )
            ).json()
            task = sent["result"]["task"]
            assert (
                task["status"]["state"] == "TASK_STATE_COMPLETED"
                and task["contextId"] == "ctx\u0001 é x"
            )
            got = (
                await http.post(
                    gw.jsonrpc_url(ep), json=rpc("GetTask", {"id": task["id"]}), headers=V10
                )
            ).json()
            assert got["result"]["contextId"] == "ctx\u0001 é x", got
