"""The gateway as an AWS Lambda handler, without the Lambda Web Adapter:
``python -m awslambdaric a2a_gateway.lambda_handler.handler`` (a zip package, or the Lambda
path run locally against a Runtime API).

The first invocation starts the gateway app once, on a unix socket, in an event loop of its
own thread; every invocation is then forwarded to it as one HTTP request:

* a Function URL or API Gateway HTTP API event (payload format 2.0) is that request, and the
  answer is returned in the Lambda proxy response shape;
* any other event (an asynchronous invoke, a schedule) is POSTed as JSON to
  ``worker_events_path`` (``/events``), as the adapter's pass-through path does. An answer
  outside 2xx fails the invocation, so Lambda retries it and then hands it to the on-failure
  destination (the adapter does the same with ``AWS_LWA_ERROR_STATUS_CODES``).

This path is **buffered**: a response is returned once it is complete (at most 6 MB), so SSE
streams arrive only as a whole. Streaming needs the container image with the adapter and a
Function URL in ``RESPONSE_STREAM`` mode (deploy/lambda/template.yaml).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import gc
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Lambda's init phase is this module's import; what it builds (modules, classes, the SDK's
# descriptors and schemas) lives as long as the process. The collector stays off until the end
# of the module, which freezes it all: no collection traverses it, during the imports or after.
gc.disable()

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402
from multidict import CIMultiDict  # noqa: E402

from a2a_gateway.app import build_app, server_options  # noqa: E402
from a2a_gateway.observability.logs import configure_logging  # noqa: E402
from a2a_gateway.settings import GatewaySettings, load_settings  # noqa: E402

_HOP_BY_HOP = frozenset({"connection", "content-length", "transfer-encoding", "keep-alive"})


class InvocationFailedError(RuntimeError):
    """The gateway refused an event (its answer is in the message): the invocation fails."""


@dataclass(frozen=True, slots=True)
class _Gateway:
    loop: asyncio.AbstractEventLoop
    session: aiohttp.ClientSession
    settings: GatewaySettings


@contextlib.contextmanager
def _kept_for_good() -> Iterator[None]:
    """No garbage collection while the block runs, and what exists after it is frozen: left out
    of every later collection. For objects that live as long as the process (start-up's); the
    few cycles that are garbage by then (≈ 2,400 objects after imports and start-up) stay."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


@functools.cache
def _gateway() -> _Gateway:
    """Start the gateway once per execution environment (a failed start is tried again)."""
    with _kept_for_good():  # no collection in the first invoke (see bench/README.md)
        settings = load_settings()
        configure_logging(settings.log_level, settings.log_format)
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name="a2a-gateway", daemon=True).start()
        socket_path = str(Path(tempfile.mkdtemp(prefix="a2a-gateway-")) / "gateway.sock")
        try:
            session = asyncio.run_coroutine_threadsafe(
                _serve(settings, socket_path), loop).result()
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            raise
    return _Gateway(loop, session, settings)


async def _serve(settings: GatewaySettings, socket_path: str) -> aiohttp.ClientSession:
    runner = web.AppRunner(build_app(settings), access_log=None, **server_options(settings))
    await runner.setup()
    await web.UnixSite(runner, socket_path).start()
    connector = aiohttp.UnixConnector(path=socket_path)
    return aiohttp.ClientSession(connector=connector, auto_decompress=False)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    gateway = _gateway()
    seconds = context.get_remaining_time_in_millis() / 1000 if context else None
    forward = _http(gateway, event) if _is_http(event) else _event(gateway, event)
    done = asyncio.run_coroutine_threadsafe(_within(forward, seconds), gateway.loop)
    return done.result()


async def _within(forward: Any, seconds: float | None) -> dict[str, Any]:
    async with asyncio.timeout(seconds):
        return await forward


def _is_http(event: dict[str, Any]) -> bool:
    return event.get("version") == "2.0" and "http" in event.get("requestContext", {})


async def _http(gateway: _Gateway, event: dict[str, Any]) -> dict[str, Any]:
    headers = CIMultiDict(event.get("headers") or {})
    if event.get("cookies"):
        headers["cookie"] = "; ".join(event["cookies"])
    body = (event.get("body") or "").encode()
    if event.get("isBase64Encoded"):
        body = base64.b64decode(body)
    query = event.get("rawQueryString")
    url = f"http://gateway{event['rawPath']}" + (f"?{query}" if query else "")
    method = event["requestContext"]["http"]["method"]
    async with gateway.session.request(method, url, headers=headers, data=body) as answer:
        content = await answer.read()
        out: dict[str, list[str]] = {}
        for name, value in answer.headers.items():
            if name.lower() not in _HOP_BY_HOP:
                out.setdefault(name.lower(), []).append(value)
        cookies = out.pop("set-cookie", [])
        return {
            "statusCode": answer.status,
            "headers": {name: ", ".join(values) for name, values in out.items()},
            "cookies": cookies,
            "body": base64.b64encode(content).decode(),
            "isBase64Encoded": True,
        }


async def _event(gateway: _Gateway, event: dict[str, Any]) -> Any:
    path = gateway.settings.worker_events_path
    async with gateway.session.post(f"http://gateway{path}", json=event) as answer:
        if not 200 <= answer.status < 300:
            reason = (await answer.text())[:500]
            raise InvocationFailedError(f"{path} answered {answer.status}: {reason}")
        return await answer.json(content_type=None)


gc.freeze()  # the end of the init phase (the top of the module says why)
gc.enable()
