"""Tracing through a running gateway: every request has a trace (the caller's or a new one),
backends receive its ``traceparent``, and with OTLP configured by OpenTelemetry's standard
variables the gateway exports a server span per request with store and backend spans as its
children, to an OTLP/HTTP receiver.

The backend is the scripted LLM behind the chat bridge, reached through a proxy that records
the headers each call arrives with (the LLM itself does not keep them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import httpx
import pytest
import structlog
from a2a.types import a2a_pb2_grpc
from aiohttp import web

from a2a_gateway.observability import tracing
from a2a_gateway.observability.tracing import TraceParent
from handlers.upstream import NO_RETRY, Upstream, trace_calls
from tests.support.cli_process import ROOT, cli_env, run_cli, serving
from tests.support.harness import require_env, running_gateway
from tests.support.local_server import serve_locally
from tests.support.messages import handler_request, rpc, send_body, send_request
from tests.support.otlp_receiver import CLIENT, SERVER, OTLPReceiver
from tests.support.waiting import eventually

V10 = {"A2A-Version": "1.0"}
CALLER = TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "01", "caller=1")
BACKEND_KEY = "sk-backend-secret-7f3a9c"
EXPORT_ENV = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_SERVICE_NAME": "gateway-under-test"}


class RecordingProxy:
    """Forwards every request to the scripted LLM and keeps the headers it came with."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.calls: list[tuple[str, dict[str, str]]] = []
        """(path, headers) of every call."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        return app

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        self.calls.append((request.path, {k.lower(): v for k, v in request.headers.items()}))
        sent = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        async with (
            httpx.AsyncClient(timeout=60) as http,
            http.stream(
                request.method,
                self.target + request.path_qs,
                headers=sent,
                content=await request.read(),
            ) as answer,
        ):
            response = web.StreamResponse(status=answer.status_code, headers={
                "Content-Type": answer.headers.get("content-type", "application/json")})
            await response.prepare(request)
            async for chunk in answer.aiter_raw():
                await response.write(chunk)
            await response.write_eof()
            return response

    def traceparents(self, calls: str = "/chat/completions") -> list[TraceParent | None]:
        """The trace context of each call whose path ends with ``calls``."""
        return [TraceParent.of(headers) for path, headers in self.calls if path.endswith(calls)]


@asynccontextmanager
async def backend_and_receiver(
    backend: str = "A2A_TEST_LLM_URL",
) -> AsyncIterator[tuple[RecordingProxy, str, OTLPReceiver, str]]:
    proxy, receiver = RecordingProxy(require_env(backend)), OTLPReceiver()
    async with (
        serve_locally(proxy.app()) as proxy_url,
        serve_locally(receiver.app()) as receiver_url,
    ):
        yield proxy, proxy_url, receiver, receiver_url


def chat_endpoint(cwd: Path, proxy_url: str, *settings: str) -> tuple[str, str]:
    """A chat-bridge endpoint in the SQLite store of ``cwd`` (more ``settings`` as KEY=VALUE)
    and a caller's API key for it."""
    values = [f"base_url={proxy_url}/v1", f"api_key={BACKEND_KEY}", "model=fake-model", *settings]
    added = run_cli("endpoints", "add", "--name", "traced chat", "--handler",
                    "handlers.openai_chat:OpenAIChatHandler",
                    *[arg for value in values for arg in ("--set", value)], cwd=cwd)
    assert added.returncode == 0, added.stderr
    endpoint = added.stdout.strip().splitlines()[-1]
    created = run_cli("keys", "create", "--endpoint", endpoint, "--name", "tracing", cwd=cwd)
    assert created.returncode == 0, created.stderr
    return endpoint, created.stdout.strip().splitlines()[-1]


def request_log_lines(output: list[str]) -> list[dict]:
    lines = []
    for line in "".join(output).splitlines():
        if line.startswith("{") and '"event":"request"' in line.replace(" ", ""):
            lines.append(json.loads(line))
    return lines


async def test_a_request_is_one_exported_trace_continued_by_the_backend(tmp_path):
    async with backend_and_receiver() as (proxy, proxy_url, receiver, receiver_url):
        endpoint, key = chat_endpoint(tmp_path, proxy_url)
        text = f"trace me {uuid.uuid4().hex}"
        async with serving("serve", cwd=tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver_url,
                           **EXPORT_ENV) as listening, httpx.AsyncClient(timeout=60) as http:
            answer = await http.post(
                f"{listening[1]}/{endpoint}/a2a",
                json=send_body(text),
                headers={**V10, **CALLER.headers(), "Authorization": f"Bearer {key}"},
            )
            spans = await receiver.wait_for(
                CALLER.trace_id, what="the request's server, store and backend spans",
                until=lambda found: {s.name for s in found} >= {"SendMessage", "POST 127.0.0.1"}
                and any(s.name.startswith("store ") for s in found))
    assert answer.status_code == 200 and "error" not in answer.json(), answer.text
    [server] = [s for s in spans if s.kind == SERVER]
    assert server.parent_id == CALLER.span_id  # the caller's span is the parent
    assert server.service == "gateway-under-test"
    assert server.attributes == {
        "http.request.method": "POST",
        "http.route": "/{endpoint_id}/a2a",
        "a2a.method": "SendMessage",
        "a2a.endpoint_id": endpoint,
        "a2a.outcome": "ok",
        "http.response.status_code": 200,
    }
    assert answer.headers["traceresponse"] == f"00-{CALLER.trace_id}-{server.span_id}-01"
    children = [s for s in spans if s is not server]
    assert children and all(s.parent_id == server.span_id and s.kind == CLIENT for s in children)
    stores = [s for s in children if s.name.startswith("store ")]
    assert {s.attributes["a2a_gateway.store"] for s in stores} == {"sqlite"}
    assert all(s.name == f"store {s.attributes['db.operation.name']}" for s in stores)
    [backend] = [s for s in children if s.name == "POST 127.0.0.1"]
    port = int(proxy_url.rsplit(":", 1)[1])
    assert backend.attributes == {
        "http.request.method": "POST", "server.address": "127.0.0.1", "server.port": port,
        "a2a_gateway.backend": "the chat backend", "http.response.status_code": 200}
    assert server.start_ns <= backend.start_ns <= backend.end_ns
    received = proxy.traceparents()
    assert received == [TraceParent(CALLER.trace_id, backend.span_id, "01", "caller=1")]
    shown = repr(spans)
    for secret in (BACKEND_KEY, key, text, "Bearer"):
        assert secret not in shown


async def test_without_a_valid_traceparent_a_new_trace_is_logged_exported_and_sent_on(tmp_path):
    async with backend_and_receiver() as (proxy, proxy_url, receiver, receiver_url):
        endpoint, key = chat_endpoint(tmp_path, proxy_url)
        output: list[str] = []
        async with serving("serve", cwd=tmp_path, output=output, A2A_GATEWAY_LOG_LEVEL="info",
                           OTEL_EXPORTER_OTLP_ENDPOINT=receiver_url, **EXPORT_ENV) as listening, \
                httpx.AsyncClient(timeout=60) as http:
            url, auth = f"{listening[1]}/{endpoint}/a2a", {**V10, "Authorization": f"Bearer {key}"}
            async with http.stream("POST", url, json=send_body("FAKE_SLOW words=4 delay=0.2",
                                                               method="SendStreamingMessage"),
                                   headers=auth) as streamed:
                events = [line async for line in streamed.aiter_lines() if line.startswith("data:")]
            invalid = await http.post(
                url,
                json=send_body("hello"),
                headers={
                    **auth,
                    "traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01",
                    "tracestate": "dropped=1",
                },
            )
            traces = [TraceParent.of({"traceparent": r.headers["traceresponse"]})
                      for r in (streamed, invalid)]
            assert all(traces) and traces[0].trace_id != traces[1].trace_id
            exported = [await receiver.wait_for(
                t.trace_id, what="the server and backend spans of a new trace",
                until=lambda found: {s.kind for s in found} == {SERVER, CLIENT}
                and any(s.name == "POST 127.0.0.1" for s in found)) for t in traces]
            logged = await eventually(
                lambda: request_log_lines(output),
                what="both requests logged",
                until=lambda lines: len(lines) >= 2,
            )
    assert streamed.status_code == 200 and len(events) >= 4
    assert invalid.status_code == 200 and "error" not in invalid.json()
    assert CALLER.trace_id not in {t.trace_id for t in traces}
    assert [line["trace_id"] for line in logged if line.get("a2a_method")] == [
        t.trace_id for t in traces
    ]
    received = proxy.traceparents()
    for trace, spans, sent in zip(traces, exported, received, strict=True):
        [server] = [s for s in spans if s.kind == SERVER]
        [backend] = [s for s in spans if s.name == "POST 127.0.0.1"]
        assert server.parent_id == "" and server.span_id == trace.span_id  # a root span
        assert backend.parent_id == server.span_id and backend.end_ns > 0  # ended and exported
        assert int(trace.flags, 16) & 1  # sampled (the SDK also sets W3C level 2's random flag)
        assert sent == TraceParent(
            trace.trace_id, backend.span_id, trace.flags
        )  # no caller tracestate


async def test_a_run_that_outlives_its_request_ends_its_backend_span_exported_at_shutdown(tmp_path):
    async with backend_and_receiver() as (proxy, proxy_url, receiver, receiver_url):
        endpoint, key = chat_endpoint(tmp_path, proxy_url, "response_mode=task")
        async with serving("serve", cwd=tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver_url,
                           **{**EXPORT_ENV, "OTEL_BSP_SCHEDULE_DELAY": "600000"}) as listening, \
                httpx.AsyncClient(timeout=60) as http:
            url, auth = f"{listening[1]}/{endpoint}/a2a", {**V10, "Authorization": f"Bearer {key}"}
            body = send_body("FAKE_SLOW words=6 delay=0.3")
            body["params"]["configuration"] = {"returnImmediately": True}
            started = (await http.post(url, json=body, headers={**auth, **CALLER.headers()})).json()
            task_id = started["result"]["task"]["id"]
            await eventually(
                lambda: http.post(url, json=rpc("GetTask", {"id": task_id}), headers=auth),
                until=lambda r: r.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED",
                what="the run completed")
            assert receiver.spans == []  # a ten-minute batch delay: nothing exported yet
        spans = receiver.of_trace(CALLER.trace_id)  # the gateway exported them as it stopped
    assert started["result"]["task"]["status"]["state"] != "TASK_STATE_COMPLETED"
    [server] = [s for s in spans if s.kind == SERVER]
    [backend] = [s for s in spans if s.name == "POST 127.0.0.1"]
    assert server.name == "SendMessage" and backend.parent_id == server.span_id
    assert backend.end_ns > server.end_ns  # the backend call went on after the answer
    assert proxy.traceparents() == [TraceParent(CALLER.trace_id, backend.span_id, "01", "caller=1")]
    stores = [s for s in spans if s.name.startswith("store ")]
    assert any(s.start_ns > server.end_ns for s in stores)  # the run's final write, in the trace


@pytest.mark.hermes
async def test_real_hermes_gets_the_span_of_each_call_in_the_callers_trace(tmp_path):
    require_env("A2A_TEST_HERMES_KEY")
    async with backend_and_receiver("A2A_TEST_HERMES_URL") as (
        proxy,
        proxy_url,
        receiver,
        receiver_url,
    ):
        added = run_cli(
            "endpoints",
            "add",
            "--name",
            "traced hermes",
            "--handler",
            "handlers.hermes:HermesAgentHandler",
            "--set",
            f"hermes_api_url={proxy_url}",
            "--set",
            "hermes_api_key=env:A2A_TEST_HERMES_KEY",
            "--public",
            cwd=tmp_path,
        )
        assert added.returncode == 0, added.stderr
        endpoint = added.stdout.strip().splitlines()[-1]
        text = f"hello hermes {uuid.uuid4().hex[:10]}"
        async with serving("serve", cwd=tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver_url,
                           **EXPORT_ENV) as listening, httpx.AsyncClient(timeout=120) as http:
            async with http.stream(
                "POST",
                f"{listening[1]}/{endpoint}/a2a",
                headers={**V10, **CALLER.headers()},
                json=send_body(text, method="SendStreamingMessage"),
            ) as streamed:
                events = [line async for line in streamed.aiter_lines() if line.startswith("data:")]
            called = [TraceParent.of(h) for path, h in proxy.calls if path.startswith("/v1/runs")]
            spans = await receiver.wait_for(
                CALLER.trace_id, what="a backend span per Hermes call and the server span",
                until=lambda found: len([s for s in found if s.name.startswith("POST") or
                                         s.name.startswith("GET")]) == len(called)
                and any(s.kind == SERVER for s in found))
    assert streamed.status_code == 200 and "TASK_STATE_COMPLETED" in events[-1]
    [server] = [s for s in spans if s.kind == SERVER]
    backends = {s.span_id: s for s in spans if s.attributes.get("a2a_gateway.backend") == "Hermes"}
    assert len(called) >= 2  # the run, then its events
    assert all(c is not None and c.trace_id == CALLER.trace_id for c in called)
    assert sorted(c.span_id for c in called) == sorted(backends)  # each call names its own span
    assert all(s.parent_id == server.span_id and s.end_ns > 0 for s in backends.values())
    shown = repr(spans)
    assert os.environ["A2A_TEST_HERMES_KEY"] not in shown and text not in shown


async def test_a_backend_call_outside_an_http_request_continues_the_trace_it_carries(monkeypatch):
    """A call made outside the HTTP bindings' requests (the gRPC binding's, a run re-attached
    by the lease loop) has no current span: its span's parent is the caller's trace context."""
    async with backend_and_receiver() as (proxy, proxy_url, receiver, receiver_url):
        for name, value in {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver_url, **EXPORT_ENV}.items():
            monkeypatch.setenv(name, value)
        trace_calls(tracing.backend_call)  # as build_app wires it
        tracing.configure()
        try:
            async with httpx.AsyncClient(timeout=60) as http:
                chat = Upstream(http, "the chat backend", proxy_url, {}, 60, NO_RETRY)
                await chat.json("POST", "/v1/chat/completions", {
                    "model": "fake-model", "messages": [{"role": "user", "content": "hi"}]},
                    request=handler_request(headers=CALLER.headers()))
        finally:
            await tracing.shutdown()  # exports the span
    [backend] = receiver.of_trace(CALLER.trace_id)
    assert backend.parent_id == CALLER.span_id and backend.kind == CLIENT
    assert proxy.traceparents() == [TraceParent(CALLER.trace_id, backend.span_id, "01", "caller=1")]


@pytest.mark.parametrize("export", [False, True], ids=["no-export", "export"])
async def test_a_grpc_call_has_a_trace_in_its_log_line_and_the_backend_continues_it(
    export, monkeypatch
):
    unknown = TraceParent("5c0ffee5c0ffee5c0ffee5c0ffee5c0f", "1111111111111111")
    async with backend_and_receiver() as (proxy, proxy_url, receiver, receiver_url):
        if export:
            for name, value in {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver_url, **EXPORT_ENV}.items():
                monkeypatch.setenv(name, value)
        with structlog.testing.capture_logs(
            processors=[structlog.contextvars.merge_contextvars]
        ) as logs:
            async with running_gateway(grpc=True) as gw, grpc.aio.insecure_channel(
                    f"127.0.0.1:{gw.gateway.grpc_port}") as channel:
                ep = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler", settings={
                    "base_url": f"{proxy_url}/v1", "api_key": BACKEND_KEY, "model": "fake-model"})
                stub = a2a_pb2_grpc.A2AServiceStub(channel)
                for metadata in ((), tuple(CALLER.headers().items())):
                    request = send_request("over grpc")
                    request.tenant = ep
                    await stub.SendMessage(request, metadata=(("a2a-version", "1.0"), *metadata))
                request.tenant = str(
                    uuid.uuid4()
                )  # no such endpoint: NOT_FOUND, the caller's doing
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.SendMessage(
                        request, metadata=(("a2a-version", "1.0"), *unknown.headers().items())
                    )
                assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        # leaving the gateway exported its spans
    new, passed = proxy.traceparents()
    logged = [e["trace_id"] for e in logs if e["event"] == "grpc_request"]
    assert new is not None and new.trace_id != CALLER.trace_id
    assert logged == [new.trace_id, CALLER.trace_id, unknown.trace_id]
    if not export:
        assert passed == CALLER
        return
    for sent, parent in ((new, ""), (passed, CALLER.span_id)):
        spans = receiver.of_trace(sent.trace_id)
        [server] = [s for s in spans if s.kind == SERVER]
        assert server.name == "lf.a2a.v1.A2AService/SendMessage" and server.parent_id == parent
        assert server.attributes == {
            "rpc.system": "grpc",
            "rpc.service": "lf.a2a.v1.A2AService",
            "rpc.method": "SendMessage",
            "rpc.grpc.status_code": 0,
            "a2a.endpoint_id": ep,
            "a2a.outcome": "ok",
        }
        [backend] = [s for s in spans if s.kind == CLIENT and not s.name.startswith("store ")]
        assert backend.span_id == sent.span_id and backend.parent_id == server.span_id
        assert all(s.parent_id == server.span_id for s in spans if s is not server)
    [refused_span] = [s for s in receiver.of_trace(unknown.trace_id) if s.kind == SERVER]
    assert (
        refused_span.parent_id == unknown.span_id
        and refused_span.attributes["rpc.grpc.status_code"] == 5
    )
    assert refused_span.attributes["a2a.outcome"] == "EndpointNotFoundError"
    assert refused_span.status != 2  # NOT_FOUND is not a server failure (2: STATUS_CODE_ERROR)


async def test_without_export_the_backend_still_gets_the_request_trace():
    async with backend_and_receiver() as (proxy, proxy_url, _, _):
        with structlog.testing.capture_logs(
            processors=[structlog.contextvars.merge_contextvars]
        ) as logs:
            async with running_gateway() as gw, httpx.AsyncClient(timeout=60) as http:
                ep = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler", settings={
                    "base_url": f"{proxy_url}/v1", "api_key": BACKEND_KEY, "model": "fake-model"})
                fresh = await http.post(gw.jsonrpc_url(ep), json=send_body("a"), headers=V10)
                given = await http.post(gw.jsonrpc_url(ep), json=send_body("b"),
                                        headers={**V10, **CALLER.headers()})
                lines = await eventually(
                    lambda: [e for e in logs if e["event"] == "request" and e.get("a2a_method")],
                    until=lambda found: len(found) == 2, what="both requests are logged")
    new, passed = proxy.traceparents()
    assert fresh.status_code == given.status_code == 200
    assert new is not None and new.trace_id != CALLER.trace_id
    assert [line["trace_id"] for line in lines] == [new.trace_id, CALLER.trace_id]
    assert fresh.headers["traceresponse"] == new.traceparent
    assert passed == CALLER  # passed on as it came: the gateway exports no span of its own
    assert given.headers["traceresponse"] == CALLER.traceparent


NO_SDK_SCRIPT = textwrap.dedent("""
    import asyncio, json, sys
    import httpx
    from tests.support.harness import running_gateway

    async def main():
        async with running_gateway() as gw, httpx.AsyncClient(timeout=30) as http:
            ep = await gw.add_endpoint(settings={"delay": 0})
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}
            answer = await http.post(gw.jsonrpc_url(ep), json=body, headers={"A2A-Version": "1.0"})
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        print(json.dumps({"status": answer.status_code,
                          "trace": answer.headers.get("traceresponse"), "loaded": loaded}))

    asyncio.run(main())
""")


@pytest.mark.parametrize("env", [{}, {"OTEL_SDK_DISABLED": "true"}], ids=["unset", "disabled"])
async def test_without_otlp_configuration_nothing_of_the_sdk_is_imported_or_sent(env):
    async with backend_and_receiver() as (_, _, receiver, receiver_url):
        if env:
            env = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver_url}
        child_env = {
            k: v
            for k, v in cli_env(**env, **EXPORT_ENV).items()
            if k not in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or k in env
        }
        done = subprocess.run([sys.executable, "-c", NO_SDK_SCRIPT], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, env=child_env)
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["status"] == 200 and TraceParent.of({"traceparent": seen["trace"]}) is not None
    # the a2a-sdk imports OpenTelemetry's API; the gateway adds nothing of the SDK or exporter
    assert not [
        m
        for m in seen["loaded"]
        if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto"))
    ]
    assert receiver.spans == []


WITHOUT_THE_EXTRA = textwrap.dedent("""
    import sys

    class NotInstalled:  # as if the otel extra were not installed
        def find_spec(self, name, path=None, target=None):
            if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, NotInstalled())
""")


async def test_export_configured_without_the_extra_is_a_warning_and_requests_are_served():
    async with backend_and_receiver() as (_, _, receiver, receiver_url):
        done = subprocess.run([sys.executable, "-c", WITHOUT_THE_EXTRA + NO_SDK_SCRIPT],
                              capture_output=True, text=True, timeout=120, cwd=ROOT,
                              env=cli_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver_url, **EXPORT_ENV))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["status"] == 200 and TraceParent.of({"traceparent": seen["trace"]}) is not None
    [warning] = [line for line in done.stdout.splitlines() if "tracing_unavailable" in line]
    assert "opentelemetry.exporter is not installed" in warning and "a2a-gateway[otel]" in warning
    assert "Traceback" not in done.stdout + done.stderr and receiver.spans == []
