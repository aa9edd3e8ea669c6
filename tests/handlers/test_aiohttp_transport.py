"""The bridges' shared client sends through aiohttp (``handlers.upstream.AiohttpTransport``):
the same answers, frames and errors as httpx's own transport, keep-alive kept, many events
of one socket read handed over as one chunk; with a proxy in the environment, httpx's own
transports (which apply it).

The backend is a real aiohttp app on a loopback port (the transport is what is tested)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from aiohttp import web

from handlers.upstream import SSEReader, backend_client
from handlers.upstream.aiohttp_transport import AiohttpTransport
from tests.support.local_server import serve_locally

pytestmark = pytest.mark.timeout(20)

EVENTS = 200


@pytest.fixture(autouse=True)
def _no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared client takes this transport only when no proxy is configured."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _backend(peers: list[Any]) -> web.Application:
    """``/sse``: EVENTS events, one write (one HTTP chunk) each, then ``[DONE]``; ``/gzip``: a
    gzip-encoded JSON body; ``/silent``: headers, then nothing; ``/cut``: a chunked body
    that stops mid-way; ``/auth``: the Authorization and Cookie headers it got (and a cookie
    to send back). The peer (address, port) of every ``/sse`` and ``/gzip`` request goes
    into ``peers``."""
    async def sse(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        body = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for n in range(EVENTS):
            await response.write(f'data: {{"n": {n}, "echo": "{body["say"]}"}}\n\n'.encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    async def gzipped(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        return web.Response(body=gzip.compress(b'{"ok": true}'), content_type="application/json",
                            headers={"Content-Encoding": "gzip"})

    async def silent(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(1)
        return response

    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: 1\n\n")
        request.transport.close()  # type: ignore[union-attr]
        return response

    async def auth(request: web.Request) -> web.Response:
        response = web.json_response({"authorization": request.headers.get("Authorization"),
                                      "cookie": request.headers.get("Cookie")})
        response.set_cookie("session", "s1")
        return response

    async def path(request: web.Request) -> web.Response:
        return web.json_response({"raw_path": request.raw_path})

    app = web.Application()
    app.router.add_get("/path/{tail:.*}", path)
    app.router.add_get("/auth", auth)
    app.router.add_post("/sse", sse)
    app.router.add_get("/gzip", gzipped)
    app.router.add_get("/silent", silent)
    app.router.add_get("/cut", cut)
    return app


@asynccontextmanager
async def _clients() -> AsyncIterator[tuple[str, list[Any], httpx.AsyncClient, httpx.AsyncClient]]:
    """The backend's URL and peers, the shared client as the gateway builds it, and a plain
    httpx client (httpcore) to compare with."""
    peers: list[Any] = []
    async with serve_locally(_backend(peers)) as base:
        async with backend_client(10, 10, 5.0) as ours, httpx.AsyncClient() as plain:
            yield base, peers, ours, plain


async def _frames(client: httpx.AsyncClient, url: str) -> tuple[list[Any], int]:
    reader, frames, reads = SSEReader(), [], 0
    async with client.stream("POST", url, json={"say": "hé"}) as response:
        assert response.status_code == 200
        async for chunk in response.aiter_bytes():
            reads += 1
            frames += reader.feed(chunk)
    return frames, reads


async def test_the_shared_client_reads_the_same_frames_in_fewer_reads() -> None:
    async with _clients() as (base, _peers, ours, plain):
        assert isinstance(ours._transport, AiohttpTransport)
        expected, plain_reads = await _frames(plain, f"{base}/sse")
        got, our_reads = await _frames(ours, f"{base}/sse")
    assert got == expected
    assert len(got) == EVENTS + 1 and got[0].data == '{"n": 0, "echo": "hé"}'
    assert plain_reads >= EVENTS  # httpcore: one chunk per HTTP chunk
    assert our_reads < EVENTS / 4  # what a socket read holds, at once


async def test_a_connection_read_to_its_end_is_kept_and_one_closed_early_is_not() -> None:
    async with _clients() as (base, peers, ours, _plain):
        await _frames(ours, f"{base}/sse")
        await _frames(ours, f"{base}/sse")
        assert peers[0] == peers[1]  # the same connection, kept alive
        async with ours.stream("POST", f"{base}/sse", json={"say": "x"}) as response:
            await anext(response.aiter_bytes())  # left before the end
        await _frames(ours, f"{base}/sse")
        assert peers[3] != peers[2]  # that connection was closed, not reused half read


async def test_an_encoded_body_is_decoded_once() -> None:
    async with _clients() as (base, _peers, ours, _plain):
        response = await ours.get(f"{base}/gzip")
    assert response.json() == {"ok": True}


async def test_cookies_are_httpxs_alone() -> None:
    async with _clients() as (base, _peers, ours, plain):
        url = base.replace("127.0.0.1", "localhost") + "/auth"  # a host cookies are kept for
        for client in (ours, plain):
            await client.get(url)  # sets a cookie
        kept = (await ours.get(url)).json()["cookie"], (await plain.get(url)).json()["cookie"]
        ours.cookies.clear()
        plain.cookies.clear()
        cleared = (await ours.get(url)).json()["cookie"], (await plain.get(url)).json()["cookie"]
    assert kept == ("session=s1", "session=s1")
    assert cleared == (None, None)  # no second cookie jar under httpx's


async def test_credentials_in_the_url_go_as_basic_auth() -> None:
    async with _clients() as (base, _peers, ours, plain):
        url = base.replace("http://", "http://user:s%40cret@") + "/auth"
        ours_said = (await ours.get(url)).json()
        plain_said = (await plain.get(url)).json()
    assert ours_said["authorization"] == plain_said["authorization"] == "Basic dXNlcjpzQGNyZXQ="


async def test_the_path_goes_out_as_httpx_encoded_it() -> None:
    """A signed request (AWS SigV4 signs the encoded path) must reach the backend with the
    path it was signed with: "%3A" and "%2F" in an ARN stay encoded."""
    tail = "runtimes/arn%3Aaws%3Abedrock-agentcore%3Aus-east-1%3A1%3Aruntime%2Fx/invocations"
    async with _clients() as (base, _peers, ours, plain):
        ours_said = (await ours.get(f"{base}/path/{tail}?q=a%3Ab")).json()
        plain_said = (await plain.get(f"{base}/path/{tail}?q=a%3Ab")).json()
    assert ours_said["raw_path"] == plain_said["raw_path"] == f"/path/{tail}?q=a%3Ab"


async def test_errors_are_httpx_errors() -> None:
    async with _clients() as (base, _peers, ours, _plain):
        quick = httpx.Timeout(5, read=0.2)
        with pytest.raises(httpx.ReadTimeout):
            async with ours.stream("GET", f"{base}/silent", timeout=quick) as r:
                await anext(r.aiter_bytes())
        with pytest.raises(httpx.RemoteProtocolError):
            async with ours.stream("GET", f"{base}/cut") as r:
                async for _ in r.aiter_bytes():
                    pass
        closed = f"http://127.0.0.1:{_free_port()}/x"
        with pytest.raises(httpx.ConnectError):
            await ours.get(closed)


async def test_a_proxy_from_the_environment_is_still_used(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    async def proxy(request: web.Request) -> web.Response:
        seen.append(str(request.url))
        return web.json_response({"via": "proxy"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy)
    async with serve_locally(app) as proxy_url:
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with backend_client(10, 10, 5.0) as client:
            assert not isinstance(client._transport, AiohttpTransport)
            response = await client.get("http://backend.invalid/v1/models")
    assert response.json() == {"via": "proxy"}
    assert seen == ["http://backend.invalid/v1/models"]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_the_tls_context_is_made_at_the_first_request_not_with_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Loading the CA bundle costs 20–40 ms of CPU: a gateway that never calls a backend
    (it builds the shared client at start-up) does not pay it."""
    made: list[object] = []
    make_context = httpx.create_ssl_context

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(args)
        return make_context(*args, **kwargs)

    monkeypatch.setattr(httpx, "create_ssl_context", counted)
    async with serve_locally(_backend([])) as base, backend_client(10, 10, 5.0) as client:
        assert made == []
        assert (await client.get(f"{base}/gzip")).json() == {"ok": True}
        assert (await client.get(f"{base}/gzip")).json() == {"ok": True}
    assert len(made) == 1
