"""The TCK handler's messageId scenarios through the whole gateway (mirrors the A2A TCK,
which needs a git checkout CI cannot fetch)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from a2a_gateway.auth.api_keys import make_key
from tests.support.harness import RunningGateway
from tests.support.messages import params_0_3, rpc, send_body

V10 = {"A2A-Version": "1.0"}


@pytest.fixture
async def tck_id(gw: RunningGateway) -> str:
    return await gw.add_endpoint(
        "handlers.tck:TckHandler",
        settings={"stream_delay": 0.3, "delayed_complete_delay": 0.3},
        card={
            "capabilities": {"extendedAgentCard": True},
            "extended": {
                "skills": [
                    {
                        "id": "secret",
                        "name": "Extended skill",
                        "description": "only in the extended card",
                        "tags": ["x"],
                    }
                ]
            },
        },
    )


def send(message_id: str, method: str = "SendMessage", **config) -> dict:
    """A message whose id names the TCK scenario the handler acts out."""
    body = send_body("tck", method=method, messageId=message_id)
    if config:
        body["params"]["configuration"] = config
    return body


async def call(gw, ep, body) -> dict:
    async with httpx.AsyncClient(timeout=10) as http:
        return (await http.post(gw.jsonrpc_url(ep), json=body, headers=V10)).json()


async def test_complete_artifacts_message_reject(gw, tck_id):
    task = (await call(gw, tck_id, send("tck-complete-task-1")))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"] == "Hello from TCK"
    file_task = (await call(gw, tck_id, send("tck-artifact-file-1")))["result"]["task"]
    part = file_task["artifacts"][0]["parts"][0]
    assert part["filename"] == "output.txt" and part["mediaType"] == "text/plain" and part["raw"]
    url_task = (await call(gw, tck_id, send("tck-artifact-file-url-1")))["result"]["task"]
    assert url_task["artifacts"][0]["parts"][0]["url"] == "https://example.com/output.txt"
    data_task = (await call(gw, tck_id, send("tck-artifact-data-1")))["result"]["task"]
    assert data_task["artifacts"][0]["parts"][0]["data"] == {"key": "value", "count": 42}
    message = (await call(gw, tck_id, send("tck-message-response-1")))["result"]
    assert message["message"]["parts"][0]["text"] == "Direct message response"
    rejected = (await call(gw, tck_id, send("tck-reject-task-1")))["result"]["task"]
    assert rejected["status"]["state"] == "TASK_STATE_REJECTED"


async def test_input_required_task_can_be_canceled(gw, tck_id):
    task = (await call(gw, tck_id, send("tck-input-required-1")))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    canceled = await call(gw, tck_id, rpc("CancelTask", {"id": task["id"]}))
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_return_immediately_vs_blocking(gw, tck_id):
    quick = (await call(gw, tck_id, send("tck-delayed-complete-1", returnImmediately=True)))[
        "result"
    ]["task"]
    assert quick["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    done = (await call(gw, tck_id, send("tck-delayed-complete-2")))["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["artifacts"][0]["parts"][0]["text"] == "Done after delay"


async def test_extended_card(gw, tck_id):
    """Only an authenticated caller gets the extended card; an anonymous one (the TCK sends no
    credentials) is told it has none for them (-32007)."""
    request = {"jsonrpc": "2.0", "id": 3, "method": "GetExtendedAgentCard"}
    anonymous = await call(gw, tck_id, request)
    assert anonymous["id"] == 3 and anonymous["error"]["code"] == -32007
    secret = gw.gateway.settings.api_key_secret.get_secret_value().encode()
    row, key = make_key(secret, endpoint_id=tck_id, tenant="default")
    await gw.store.create_api_key(row)
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(
            gw.jsonrpc_url(tck_id), json=request, headers={**V10, "X-API-Key": key}
        )
    card = answer.json()["result"]
    assert "secret" in [s["id"] for s in card["skills"]]
    plain = await gw.card(tck_id)
    assert "secret" not in [s.id for s in plain.skills]
    assert plain.capabilities.extended_agent_card


async def test_chunked_stream_reconstructs(gw, tck_id):
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream(
            "POST",
            gw.jsonrpc_url(tck_id),
            json=send("tck-stream-artifact-chunked-1", "SendStreamingMessage"),
            headers=V10,
        ) as r:
            body = (await r.aread()).decode()
    events = [
        orjson.loads(line[6:])["result"] for line in body.splitlines() if line.startswith("data: ")
    ]
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert len(events) >= 5
    assert "".join(p["text"] for c in chunks for p in c["artifact"]["parts"]) == "chunk-1 chunk-2"
    assert [c.get("lastChunk", False) for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert all(c.get("append") for c in chunks[1:])


async def test_follow_ups_keep_an_input_required_task_waiting_and_are_all_in_history(gw, tck_id):
    task = (await call(gw, tck_id, send("tck-input-required-h1")))["result"]["task"]
    for i in (1, 2):
        body = send(f"tck-input-required-h1-{i}")
        body["params"]["message"].update(
            {"taskId": task["id"], "parts": [{"text": f"TCK history message {i}"}]}
        )
        task = (await call(gw, tck_id, body))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    user_texts = [m["parts"][0]["text"] for m in task["history"] if m["role"] == "ROLE_USER"]
    assert user_texts == ["tck", "TCK history message 1", "TCK history message 2"]


def send_0_3(message_id: str, task_id: str | None = None) -> dict:
    fields = {"taskId": task_id} if task_id else {}
    text = {"kind": "text", "text": "tck"}
    return rpc("message/send", params_0_3(text, messageId=message_id, **fields))


async def call_0_3(gw, ep, body) -> dict:
    async with httpx.AsyncClient(timeout=10) as http:
        return (await http.post(gw.jsonrpc_url(ep), json=body)).json()


async def test_unmatched_prefix_keeps_the_task_open_for_the_0_3_tck(gw):
    ep = await gw.add_endpoint("handlers.tck:TckHandler", settings={"keep_unmatched_open": True})
    task = (await call_0_3(gw, ep, send_0_3("test-cancel-test-1")))["result"]
    assert task["status"]["state"] == "input-required"
    follow_up = (await call_0_3(gw, ep, send_0_3("test-continuation-1", task["id"])))["result"]
    assert follow_up["id"] == task["id"] and follow_up["status"]["state"] == "input-required"
    cancel = rpc("tasks/cancel", {"id": task["id"]})
    assert (await call_0_3(gw, ep, cancel))["result"]["status"]["state"] == "canceled"
    # scenarios still act out their prefix
    done = (await call_0_3(gw, ep, send_0_3("tck-complete-task-1")))["result"]
    assert done["status"]["state"] == "completed"


async def test_unmatched_prefix_completes_by_default_for_the_1_0_tck(gw, tck_id):
    task = (await call(gw, tck_id, send("tck-push-1")))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "Unhandled messageId prefix" in task["artifacts"][0]["parts"][0]["text"]
