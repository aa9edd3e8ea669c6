"""``/metrics`` series a scraper reads (requests by method, endpoint and outcome; running tasks
and open SSE streams; push deliveries) and the trace id of ``traceparent`` in the request's logs."""

from __future__ import annotations

import asyncio
import os
import uuid

import httpx
import pytest
import structlog
from aiohttp import web

from tests.support.harness import require_env, running_gateway
from tests.support.held import add_held_echo
from tests.support.local_server import serve_locally
from tests.support.messages import rpc, send_body
from tests.support.waiting import eventually

V10 = {"A2A-Version": "1.0"}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def metric(text: str, series: str) -> float:
    """The value of one series (``name{labels}``) in a Prometheus text page; 0 if absent."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def scrape(gw, http: httpx.AsyncClient) -> str:
    return (await http.get(f"{gw.base_url}/metrics")).text


async def test_requests_are_counted_by_method_endpoint_and_outcome():
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        before = await scrape(gw, http)
        await http.post(gw.jsonrpc_url(ep), json=send_body("a"), headers=V10)
        await http.post(
            gw.jsonrpc_url(ep), json=rpc("GetTask", {"id": "no-such-task"}), headers=V10
        )
        await http.post(gw.jsonrpc_url("guessed-endpoint"), json=send_body("a"), headers=V10)
        after = await scrape(gw, http)
    ok = (f'a2a_gateway_request_outcomes_total{{a2a_method="SendMessage",endpoint="{ep}",'
          'outcome="ok"}')
    missing = (f'a2a_gateway_request_outcomes_total{{a2a_method="GetTask",endpoint="{ep}",'
               'outcome="TaskNotFoundError"}')
    unknown = ('a2a_gateway_request_outcomes_total{a2a_method="other",endpoint="unknown",'
               'outcome="EndpointNotFoundError"}')
    for series in (ok, missing, unknown):
        assert metric(after, series) == metric(before, series) + 1, series
    assert "guessed-endpoint" not in after  # ids from URLs stay out unless the store has them


async def test_open_sse_streams_and_running_tasks_are_gauges(monkeypatch):
    async with running_gateway() as gw, httpx.AsyncClient(timeout=30) as http:
        # the run waits after its first word until the scrape is done (a 1.4 s run could end
        # before the scrape on a loaded machine)
        ep, release = await add_held_echo(gw, monkeypatch, settings={"delay": 0})
        body = send_body("one two three four five six", method="SendStreamingMessage")
        async with http.stream("POST", gw.jsonrpc_url(ep), json=body, headers=V10) as stream:
            try:
                assert stream.status_code == 200
                during = await scrape(gw, http)
            finally:
                release.set()
            await stream.aclose()
        await eventually(lambda: scrape(gw, http),
                         until=lambda text: metric(text, "a2a_gateway_open_sse_streams") == 0
                         and metric(text, "a2a_gateway_running_tasks") == 0,
                         what="the stream and the run are no longer counted")
    assert metric(during, "a2a_gateway_open_sse_streams") == 1
    assert metric(during, "a2a_gateway_running_tasks") == 1


async def test_push_deliveries_are_counted_by_outcome():
    arrived = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        arrived.set()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/webhook", hook)
    delivered = 'a2a_gateway_push_deliveries_total{outcome="delivered"}'
    async with serve_locally(app) as base_url, running_gateway() as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0})
        before = metric(await scrape(gw, http), delivered)
        push = {"id": "cfg", "url": f"{base_url}/webhook"}
        await http.post(gw.jsonrpc_url(ep), json=send_body("notify me", push=push), headers=V10)
        await asyncio.wait_for(arrived.wait(), 10)
        await eventually(
            lambda: scrape(gw, http),
            until=lambda text: metric(text, delivered) > before,
            what="the delivery is counted",
        )


async def test_log_lines_of_a_request_carry_its_trace_id():
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        async with running_gateway() as gw, httpx.AsyncClient() as http:
            ep = await gw.add_endpoint(settings={"delay": 0})
            await http.post(gw.jsonrpc_url(ep), json=send_body("a"),
                            headers={**V10, "traceparent": TRACEPARENT, "X-Request-Id": "traced"})
            await http.post(
                gw.jsonrpc_url(ep),
                json=send_body("a"),
                headers={**V10, "traceparent": "not-a-trace", "X-Request-Id": "untraced"},
            )

            def request_lines() -> list[dict]:
                return [
                    e
                    for e in logs
                    if e["event"] == "request" and e.get("a2a_method") == "SendMessage"
                ]

            lines = await eventually(request_lines, until=lambda found: len(found) == 2,
                                     what="both requests are logged")
    by_id = {line["request_id"]: line for line in lines}
    assert by_id["traced"]["trace_id"] == TRACE_ID
    fresh = by_id["untraced"]["trace_id"]  # an invalid traceparent starts a new trace
    assert len(fresh) == 32 and int(fresh, 16) and fresh != TRACE_ID


async def test_store_calls_are_timed_by_operation():
    created = 'a2a_gateway_store_call_seconds_count{operation="create_task"}'
    async with running_gateway() as gw, httpx.AsyncClient() as http:
        ep = await gw.add_endpoint(settings={"delay": 0, "response_mode": "task"})
        before = metric(await scrape(gw, http), created)
        r = await http.post(gw.jsonrpc_url(ep), json=send_body("a"), headers=V10)
        assert "task" in r.json()["result"]
        after = await scrape(gw, http)
    assert metric(after, created) == before + 1


@pytest.mark.openclaw
async def test_backend_calls_are_timed_through_a_running_gateway():
    url = require_env("A2A_TEST_OPENCLAW_URL", "A2A_TEST_OPENCLAW_TOKEN", "A2A_TEST_LLM_URL")
    answered = 'a2a_gateway_backend_call_seconds_count{backend="the chat backend",outcome="ok"}'
    async with running_gateway() as gw, httpx.AsyncClient(timeout=90) as http:
        ep = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler", settings={
            "base_url": url.rstrip("/") + "/v1", "api_key": os.environ["A2A_TEST_OPENCLAW_TOKEN"],
            "model": "openclaw/main"})
        before = metric(await scrape(gw, http), answered)
        r = await http.post(gw.jsonrpc_url(ep), json=send_body(f"hello {uuid.uuid4().hex[:10]}"),
                            headers=V10)
        assert "error" not in r.json()
        await eventually(
            lambda: scrape(gw, http),
            until=lambda text: metric(text, answered) == before + 1,
            timeout=60,
            what="the backend call is timed",
        )
