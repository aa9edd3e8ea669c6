"""Endpoint rows refresh the cached handler; SSE keepalives; logs carry ids but no secrets."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import structlog

from tests.support.harness import running_gateway
from tests.support.messages import rpc, send_body
from tests.support.waiting import eventually

V10 = {"A2A-Version": "1.0"}


async def test_changed_row_rebuilds_the_handler_and_disabled_row_disappears():
    async with running_gateway(endpoint_cache_seconds=0.0) as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0, "response_mode": "task"})
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("a"), headers=V10)
        assert "task" in r.json()["result"]
        row = await gw.store.get_endpoint(ep)
        row.metadata["response_mode"] = "message"
        row.updated_at = datetime.now(UTC)
        await gw.store.update_endpoint(row)
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("a"), headers=V10)
        assert "message" in r.json()["result"]
        row.enabled = False
        row.updated_at = datetime.now(UTC)
        await gw.store.update_endpoint(row)
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("a"), headers=V10)
        assert r.status_code == 404


async def test_sse_keepalive_comments_keep_idle_streams_alive():
    async with (
        running_gateway(sse_keepalive_seconds=0.1) as gw,
        httpx.AsyncClient(timeout=10) as http,
    ):
        ep = await gw.add_endpoint(settings={"delay": 0.35})
        async with http.stream(
            "POST",
            gw.jsonrpc_url(ep),
            json=send_body("one two three", method="SendStreamingMessage"),
            headers=V10,
        ) as r:
            body = (await r.aread()).decode()
    assert body.count(": ping") >= 2
    assert "TASK_STATE_COMPLETED" in body


async def test_logs_bind_ids_and_drop_secret_values(monkeypatch):
    from a2a_gateway.observability.logs import drop_secrets

    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        async with running_gateway() as gw, httpx.AsyncClient() as http:
            ep = await gw.add_endpoint(settings={"delay": 0})
            await http.post(
                gw.jsonrpc_url(ep), json=send_body("a"), headers={**V10, "X-Request-Id": "req-42"}
            )

            def request_line() -> dict | None:
                return next((entry for entry in logs if entry["event"] == "request"
                             and entry.get("a2a_method") == "SendMessage"), None)

            line = await eventually(request_line, what="the request is logged")
    assert line["request_id"] == "req-42" and line["endpoint_id"] == ep and line["status"] == 200
    cleaned = drop_secrets(
        None, "info", {"event": "x", "api_key": "k", "Authorization": "Bearer t", "ok": 1}
    )
    assert cleaned == {"event": "x", "api_key": "***", "Authorization": "***", "ok": 1}


async def _open_idle_subscription(gw, http, ep):
    r = await http.post(gw.jsonrpc_url(ep), json=send_body("wait ?input"), headers=V10)
    task_id = r.json()["result"]["task"]["id"]
    body = rpc("SubscribeToTask", {"id": task_id})
    return http.stream("POST", gw.jsonrpc_url(ep), json=body, headers=V10)


async def test_a_vanished_subscriber_of_an_idle_task_is_let_go():
    from a2a_gateway.transport.sse import OPEN_STREAMS

    async with (
        running_gateway(sse_keepalive_seconds=0.1) as gw,
        httpx.AsyncClient(timeout=10) as http,
    ):
        ep = await gw.add_endpoint(settings={"delay": 0})
        async with await _open_idle_subscription(gw, http, ep) as r:
            first = await anext(line async for line in r.aiter_lines() if line.startswith("data: "))
            assert "TASK_STATE_INPUT_REQUIRED" in first
            assert len(gw.app[OPEN_STREAMS]) == 1
        await eventually(lambda: not gw.app[OPEN_STREAMS], timeout=10,
                         what="the next keepalive notices that the client left")


async def test_shutdown_ends_open_streams_promptly():
    import time

    async with httpx.AsyncClient(timeout=10) as http:
        gateway_cm = running_gateway()
        gw = await gateway_cm.__aenter__()
        ep = await gw.add_endpoint(settings={"delay": 0})
        async with await _open_idle_subscription(gw, http, ep) as r:
            lines = r.aiter_lines()
            while not (await anext(lines)).startswith("data: "):  # after the event's id: line
                pass
            started = time.monotonic()
            await gateway_cm.__aexit__(None, None, None)
            assert time.monotonic() - started < 5
            rest = [line async for line in lines]
        assert all(not line.startswith("data: ") for line in rest)


async def test_client_request_ids_are_echoed_only_when_plain():
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        ok = await http.get(f"{gw.base_url}/healthz", headers={"X-Request-Id": "abc-123.x:y"})
        assert ok.headers["X-Request-Id"] == "abc-123.x:y"
        for odd_id in ("x" * 100, "has spaces", '{"json": 1}'):
            odd = await http.get(f"{gw.base_url}/healthz", headers={"X-Request-Id": odd_id})
            assert odd.headers["X-Request-Id"] != odd_id and len(odd.headers["X-Request-Id"]) == 16


def _metric(text: str, series: str) -> float:
    """The value of one series (``name{labels}``) in a Prometheus text page; 0 if absent."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_metrics_count_requests_and_task_outcomes():
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        before = (await http.get(f"{gw.base_url}/metrics")).text
        await http.post(gw.jsonrpc_url(ep), json=send_body("a"), headers=V10)
        await http.post(
            gw.jsonrpc_url(ep), json={"jsonrpc": "2.0", "id": 1, "method": "x" * 40}, headers=V10
        )
        after = (await http.get(f"{gw.base_url}/metrics")).text
    done = f'a2a_gateway_tasks_ended_total{{endpoint="{ep}",state="completed"}}'
    sent = 'a2a_gateway_requests_total{a2a_method="SendMessage",status="200"}'
    assert _metric(after, done) == _metric(before, done) + 1
    assert _metric(after, sent) == _metric(before, sent) + 1
    assert "x" * 40 not in after and 'a2a_method="unknown"' in after  # client-chosen names stay out
    assert "a2a_gateway_running_tasks 0.0" in after
