"""A backend over HTTPS: the bridges' shared client (aiohttp's, under httpx) verifies the
backend's certificate against certifi's roots, or the CA bundle ``SSL_CERT_FILE`` names, as
httpx does; a certificate it cannot verify, or one for another name, fails the task before a
request reaches the backend, and the task's status says why in OpenSSL's words.

The backend is a local OpenAI-compatible chat server with a certificate for ``localhost``,
issued by a CA made for the test; the gateway calls it as ``https://localhost:PORT``.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from a2a.types import TaskState
from aiohttp import web

from handlers.upstream import transport_error_reason
from handlers.upstream.aiohttp_transport import AiohttpTransport
from tests.support.harness import collect, reconstruct, running_gateway
from tests.support.local_server import serve_locally
from tests.support.messages import send_request
from tests.support.tls import server_tls, write_tls_files


def _chat_backend(calls: list[str]) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        calls.append((await request.json())["messages"][-1]["content"])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for text in ("over", " tls"):
            delta = {"choices": [{"index": 0, "delta": {"content": text}}]}
            await response.write(b"data: " + json.dumps(delta).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    return app


async def _stream_through_gateway(cert: Path, key: Path) -> tuple[list, list[str]]:
    """One SendStreamingMessage through the OpenAI-chat bridge to the HTTPS backend: the
    stream's events and the messages the backend received."""
    calls: list[str] = []
    async with serve_locally(_chat_backend(calls), tls=server_tls(cert, key)) as url:
        base_url = url.replace("127.0.0.1", "localhost") + "/v1"
        async with running_gateway() as gw:
            endpoint = await gw.add_endpoint(
                "handlers.openai_chat:OpenAIChatHandler",
                settings={"base_url": base_url, "timeout": 30, "max_retries": 0},
                card={"capabilities": {"streaming": True}},
            )
            async with gw.client(endpoint) as client:
                events = await collect(client.send_message(send_request("hello")))
    return events, calls


def _final_status(events: list):
    last = events[-1]
    return last.status_update.status if last.HasField("status_update") else last.task.status


async def test_a_backend_whose_ca_ssl_cert_file_names_streams_its_answer(tmp_path, monkeypatch):
    ca, cert, key = write_tls_files(tmp_path, "localhost")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    events, calls = await _stream_through_gateway(cert, key)
    assert _final_status(events).state == TaskState.TASK_STATE_COMPLETED
    assert list(reconstruct(events).values()) == ["over tls"]
    assert calls == ["hello"]


REFUSALS = {
    "unknown CA": "unable to get local issuer certificate",
    "another name": "Hostname mismatch, certificate is not valid for 'localhost'.",
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
async def test_a_certificate_that_does_not_verify_fails_the_task_unsent_and_says_why(
    tmp_path, monkeypatch, case
):
    if case == "unknown CA":  # the system's roots do not know the test's CA
        _, cert, key = write_tls_files(tmp_path, "localhost")
    else:  # a trusted CA, but the certificate is for another name than the one called
        ca, cert, key = write_tls_files(tmp_path, "backend.test")
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    events, calls = await _stream_through_gateway(cert, key)
    status = _final_status(events)
    assert status.state == TaskState.TASK_STATE_FAILED
    assert calls == []
    reason = status.message.parts[0].text
    assert reason.startswith("cannot reach the chat backend at https://localhost:")
    assert reason.endswith(f": its TLS certificate was refused ({REFUSALS[case]})")


@pytest.mark.parametrize("proxied", [False, True], ids=["aiohttp", "httpx"])
async def test_both_transports_name_the_refused_certificate(tmp_path, monkeypatch, proxied):
    """The shared client's own transport and httpx's (taken when a proxy is configured) fail
    the same way, with OpenSSL's reason in the error the bridges report."""
    _, cert, key = write_tls_files(tmp_path, "localhost")
    transport = None if proxied else AiohttpTransport(max_connections=4, keepalive_seconds=5)
    async with serve_locally(_chat_backend([]), tls=server_tls(cert, key)) as url:
        url = url.replace("127.0.0.1", "localhost") + "/v1/chat/completions"
        async with httpx.AsyncClient(transport=transport) as http:
            with pytest.raises(httpx.ConnectError) as refused:
                await http.post(url, json={})
    reason = transport_error_reason("the backend", url, refused.value, 30)
    assert reason == (f"cannot reach the backend at {url}: its TLS certificate was refused "
                      f"({REFUSALS['unknown CA']})")
