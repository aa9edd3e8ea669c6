"""Raw HTTP: version and extension headers, error codes, routing, limits, card caching."""

from __future__ import annotations

import uuid

from tests.support.harness import RunningGateway, running_gateway
from tests.support.messages import rpc, send_params

V10 = {"A2A-Version": "1.0"}


async def test_send_over_1_0_and_0_3_on_the_same_url(gw: RunningGateway, echo_id, http):
    url = gw.jsonrpc_url(echo_id)
    r10 = await http.post(url, json=rpc("SendMessage", send_params()), headers=V10)
    assert r10.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    import re

    stamp = r10.json()["result"]["task"]["status"]["timestamp"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z", stamp), stamp
    r03 = await http.post(
        url,
        json=rpc(
            "message/send",
            {
                "message": {
                    "messageId": "m",
                    "kind": "message",
                    "role": "user",
                    "parts": [{"kind": "text", "text": "hi"}],
                }
            },
        ),
    )
    assert (
        r03.json()["result"]["kind"] == "task"
        and r03.json()["result"]["status"]["state"] == "completed"
    )
    assert r10.headers["Vary"] == "A2A-Version"


async def test_trailing_slash_is_served_without_redirect(gw, echo_id, http):
    r = await http.post(
        gw.jsonrpc_url(echo_id) + "/", json=rpc("GetTask", {"id": "nope"}), headers=V10
    )
    assert r.status_code == 200 and r.json()["error"]["code"] == -32001


async def test_version_query_parameter_and_patch_levels(gw, echo_id, http):
    url = gw.jsonrpc_url(echo_id)
    r = await http.post(url + "?A2A-Version=1.0", json=rpc("GetTask", {"id": "x"}))
    assert r.json()["error"]["code"] == -32001
    r = await http.post(url, json=rpc("GetTask", {"id": "x"}), headers={"A2A-Version": "1.0.1"})
    assert r.json()["error"]["code"] == -32001


async def test_unsupported_version_is_32009(gw, echo_id, http):
    r = await http.post(
        gw.jsonrpc_url(echo_id), json=rpc("GetTask", {"id": "x"}), headers={"A2A-Version": "99.0"}
    )
    err = r.json()["error"]
    assert err["code"] == -32009 and err["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"


async def test_1_0_method_without_version_header_is_a_clear_error(gw, echo_id, http):
    r = await http.post(gw.jsonrpc_url(echo_id), json=rpc("SendMessage", send_params()))
    err = r.json()["error"]
    assert err["code"] == -32009 and "A2A-Version: 1.0" in err["message"]


async def test_error_codes_carry_error_info(gw, echo_id, http):
    url = gw.jsonrpc_url(echo_id)
    cases = [
        (b"{not json", {"Content-Type": "application/json"}, -32700),
        (
            b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask"}',
            {"Content-Type": "application/json"},
            -32600,
        ),
        (b'[{"jsonrpc": "2.0"}]', {"Content-Type": "application/json"}, -32600),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod"}',
            {"Content-Type": "application/json", **V10},
            -32601,
        ),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage",'
            b' "params": {"message": {"parts": "x"}}}',
            {"Content-Type": "application/json", **V10},
            -32602,
        ),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":'
            b' {"messageId": "m", "role": "ROLE_USER", "parts": []}}}',
            {"Content-Type": "application/json", **V10},
            -32602,
        ),
        (b"hello", {"Content-Type": "text/plain"}, -32005),
    ]
    for body, headers, code in cases:
        r = await http.post(url, content=body, headers=headers)
        assert r.status_code == 200, body
        assert r.json()["error"]["code"] == code, (body, r.json())


async def test_error_codes_of_operations(gw, echo_id, http):
    url = gw.jsonrpc_url(echo_id)
    done = (await http.post(url, json=rpc("SendMessage", send_params()), headers=V10)).json()[
        "result"
    ]["task"]
    r = await http.post(url, json=rpc("CancelTask", {"id": done["id"]}), headers=V10)
    assert r.json()["error"]["code"] == -32002
    follow = send_params()
    follow["message"]["taskId"] = done["id"]
    r = await http.post(url, json=rpc("SendMessage", follow), headers=V10)
    assert r.json()["error"]["code"] == -32004
    follow["message"]["taskId"] = str(uuid.uuid4())
    r = await http.post(url, json=rpc("SendMessage", follow), headers=V10)
    assert r.json()["error"]["code"] == -32001
    r = await http.post(url, json=rpc("ListTasks", {"pageSize": 150}), headers=V10)
    assert r.json()["error"]["code"] == -32602
    r = await http.post(url, json=rpc("ListTasks", {"pageToken": "forged"}), headers=V10)
    assert r.json()["error"]["code"] == -32602
    r = await http.post(url, json=rpc("GetExtendedAgentCard"), headers=V10)
    assert r.json()["error"]["code"] == -32004


async def test_capabilities_switched_off_give_their_errors(gw, http):
    ep = await gw.add_endpoint(
        card={"capabilities": {"streaming": False, "pushNotifications": False}}
    )
    url = gw.jsonrpc_url(ep)
    r = await http.post(url, json=rpc("SendStreamingMessage", send_params()), headers=V10)
    assert r.json()["error"]["code"] == -32004
    r = await http.post(
        url,
        json=rpc("CreateTaskPushNotificationConfig", {"taskId": "t", "url": "http://x"}),
        headers=V10,
    )
    assert r.json()["error"]["code"] == -32003


async def test_list_tasks_always_carries_required_fields(gw, echo_id, http):
    r = await http.post(gw.jsonrpc_url(echo_id), json=rpc("ListTasks"), headers=V10)
    assert r.json()["result"] == {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}


async def test_unknown_or_disabled_endpoint_is_404_json(gw, http):
    for path in (f"/{uuid.uuid4()}/a2a", "/not-a-uuid/a2a"):
        r = await http.post(gw.base_url + path, json=rpc("GetTask", {"id": "x"}), headers=V10)
        assert r.status_code == 404 and r.headers["Content-Type"].startswith("application/json")
        assert "error" in r.json()
    off = await gw.add_endpoint(enabled=False)
    r = await http.get(f"{gw.endpoint_url(off)}/.well-known/agent-card.json")
    assert r.status_code == 404


async def test_misconfigured_endpoint_is_a_clear_error_not_a_crash(gw, http):
    ep = await gw.add_endpoint("os:system")
    r = await http.post(gw.jsonrpc_url(ep), json=rpc("SendMessage", send_params()), headers=V10)
    assert r.status_code == 503
    assert "not in the allowlist" in r.json()["error"]["message"]
    ep2 = await gw.add_endpoint("handlers.echo:NoSuchClass")
    r = await http.post(gw.jsonrpc_url(ep2), json=rpc("SendMessage", send_params()), headers=V10)
    assert "is not a handler class" in r.json()["error"]["message"]


async def test_body_over_limit_is_413_json(http):
    async with running_gateway(max_body_bytes=2048) as gw:
        ep = await gw.add_endpoint(settings={"delay": 0})
        r = await http.post(
            gw.jsonrpc_url(ep), json=rpc("SendMessage", send_params("x" * 5000)), headers=V10
        )
        assert r.status_code == 413 and "too large" in r.json()["error"]["message"]
        r = await http.post(
            gw.jsonrpc_url(ep), json=rpc("SendMessage", send_params("ok")), headers=V10
        )
        assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_extensions_echo_and_required_extension(gw, http):
    ext = "urn:a2a:tck:required-extension"
    optional = "https://example.com/ext/optional"
    ep = await gw.add_endpoint(
        settings={"delay": 0},
        card={"capabilities": {"extensions": [{"uri": ext, "required": True}, {"uri": optional}]}},
    )
    url = gw.jsonrpc_url(ep)
    r = await http.post(url, json=rpc("SendMessage", send_params()), headers=V10)
    assert r.json()["error"]["code"] == -32008
    r = await http.post(
        url,
        json=rpc("SendMessage", send_params()),
        headers={**V10, "A2A-Extensions": f"{ext}, https://unknown.example/x, {optional}"},
    )
    assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert r.headers["A2A-Extensions"] == f"{ext}, {optional}"


async def test_rest_routes_status_codes_and_content_type(gw, echo_id, http):
    base = gw.rest_url(echo_id)
    r = await http.post(f"{base}/message:send", json=send_params(), headers=V10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    task = r.json()["task"]
    r = await http.get(f"{base}/tasks/{task['id']}?historyLength=0", headers=V10)
    assert r.json()["id"] == task["id"] and "history" not in r.json()
    r = await http.get(f"{base}/tasks?pageSize=1&includeArtifacts=true", headers=V10)
    assert r.json()["tasks"][0]["artifacts"] and r.json()["totalSize"] == 1
    r = await http.get(f"{base}/tasks/{uuid.uuid4()}", headers=V10)
    assert r.status_code == 404 and r.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
    r = await http.post(f"{base}/tasks/{task['id']}:cancel", headers=V10)
    assert r.status_code == 400 and r.json()["error"]["status"] == "FAILED_PRECONDITION"
    r = await http.post(
        f"{base}/message:send", content=b"hi", headers={**V10, "Content-Type": "text/plain"}
    )
    assert r.status_code == 415
    r = await http.post(f"{base}/message:send", json=send_params(), headers={"A2A-Version": "99.0"})
    assert (
        r.status_code == 400
        and r.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    )


async def test_rest_stream_is_sse_of_stream_responses(gw, echo_id, http):
    async with http.stream(
        "POST", f"{gw.rest_url(echo_id)}/message:stream", json=send_params("a b"), headers=V10
    ) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        body = (await r.aread()).decode()
    frames = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
    assert '"task"' in frames[0] and '"TASK_STATE_COMPLETED"' in frames[-1]


async def test_card_caching_headers_and_304(gw, echo_id, http):
    url = f"{gw.endpoint_url(echo_id)}/.well-known/agent-card.json"
    r = await http.get(url)
    assert r.status_code == 200
    assert (
        "max-age=" in r.headers["Cache-Control"]
        and r.headers["ETag"]
        and r.headers["Last-Modified"]
    )
    card = r.json()
    assert card["protocolVersion"] == "0.3" and card["url"] == gw.jsonrpc_url(echo_id)
    again = await http.get(url, headers={"If-None-Match": r.headers["ETag"]})
    assert again.status_code == 304 and again.content == b""


async def test_strict_card_and_public_base_url(http):
    async with running_gateway(public_base_url="https://agents.example.com") as gw:
        ep = await gw.add_endpoint(settings={"strict_v1_card": True})
        card = (await http.get(f"{gw.endpoint_url(ep)}/.well-known/agent-card.json")).json()
    assert "url" not in card and "protocolVersion" not in card and "preferredTransport" not in card
    assert card["supportedInterfaces"][0]["url"] == f"https://agents.example.com/{ep}/a2a"


async def test_health_and_readiness(gw, http):
    assert (await http.get(f"{gw.base_url}/healthz")).json() == {"status": "ok"}
    r = await http.get(f"{gw.base_url}/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"


async def test_0_3_stream_marks_input_required_as_final(gw, echo_id, http):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {
            "message": {
                "messageId": "m",
                "kind": "message",
                "role": "user",
                "parts": [{"kind": "text", "text": "hi ?input"}],
            }
        },
    }
    async with http.stream("POST", gw.jsonrpc_url(echo_id), json=body) as r:
        text = (await r.aread()).decode()
    import json

    events = [
        json.loads(line[6:])["result"] for line in text.splitlines() if line.startswith("data: ")
    ]
    assert events[0]["kind"] == "task"
    assert events[-1]["status"]["state"] == "input-required" and events[-1]["final"] is True
    assert all(not e.get("final") for e in events[:-1])


async def test_rest_statuses_follow_the_configured_spec_version(http):
    async with running_gateway(rest_error_statuses="1.0.0") as gw:
        ep = await gw.add_endpoint(
            settings={"delay": 0}, card={"capabilities": {"pushNotifications": False}}
        )
        base = gw.rest_url(ep)
        task = (await http.post(f"{base}/message:send", json=send_params(), headers=V10)).json()[
            "task"
        ]
        r = await http.post(f"{base}/tasks/{task['id']}:cancel", headers=V10)
        assert r.status_code == 409 and r.json()["error"]["code"] == 409
        r = await http.post(
            f"{base}/tasks/{task['id']}/pushNotificationConfigs",
            json={"url": "https://x"},
            headers=V10,
        )
        assert r.status_code == 400 and r.json()["error"]["status"] == "UNIMPLEMENTED"
