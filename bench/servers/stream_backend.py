"""A scripted streaming backend for the benchmarks: text deltas at a set pace, in two shapes.

    python bench/servers/stream_backend.py --port 8801 [--deltas 1000] [--pace-ms 0]

* OpenAI-compatible: ``POST /v1/chat/completions`` with ``"stream": true`` answers SSE
  ``data: {"choices":[{"delta":{"content": …}}]}`` frames, then ``data: [DONE]``.
* Hermes runs: ``POST /v1/runs`` → ``{"run_id"}``; ``GET /v1/runs/{id}/events`` streams
  ``message.delta`` events, then ``run.completed`` with the whole output.

A request may choose its own shape: ``deltas=N`` and ``pace_ms=M`` anywhere in the last
user message override the defaults. Every delta is `` <n>:<t>``: its number and the
``time.monotonic_ns()`` at which it was written (one clock for every process on the
machine), so a client measures each delta's delivery latency, direct or through the gateway.
Nothing here depends on the gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import sys
import time
from typing import Any

from aiohttp import web

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.servers.common import announce, new_loop  # noqa: E402

OPTION = re.compile(r"\b(deltas|pace_ms)=(\d+(?:\.\d+)?)")


class Script:
    """How many deltas a stream sends, how far apart."""

    def __init__(self, deltas: int, pace_ms: float) -> None:
        self.deltas = deltas
        self.pace_ms = pace_ms

    def for_text(self, text: str) -> Script:
        chosen = {k: float(v) for k, v in OPTION.findall(text)}
        return Script(int(chosen.get("deltas", self.deltas)), chosen.get("pace_ms", self.pace_ms))

    async def deltas_of(self) -> Any:
        """Yield each delta's text when it is due (the pace counts from the stream's start)."""
        start = time.monotonic()
        for n in range(self.deltas):
            if self.pace_ms:
                wait = start + n * self.pace_ms / 1000 - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            yield f" {n}:{time.monotonic_ns()}"


def _last_user_text(messages: Any) -> str:
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


async def _sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    return response


def make_app(script: Script) -> web.Application:
    runs: dict[str, Script] = {}
    ids = itertools.count(1)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        chosen = script.for_text(_last_user_text(body.get("messages")))
        if not body.get("stream"):
            text = "".join([d async for d in chosen.deltas_of()])
            return web.json_response(
                {
                    "id": "c",
                    "object": "chat.completion",
                    "model": "bench",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                }
            )
        response = await _sse(request)
        async for delta in chosen.deltas_of():
            frame = {"id": "c", "object": "chat.completion.chunk", "model": "bench",
                     "choices": [{"index": 0, "delta": {"content": delta}}]}
            await response.write(b"data: " + json.dumps(frame).encode() + b"\n\n")
        done = {"id": "c", "object": "chat.completion.chunk", "model": "bench",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        await response.write(b"data: " + json.dumps(done).encode() + b"\n\ndata: [DONE]\n\n")
        return response

    async def start_run(request: web.Request) -> web.Response:
        body = await request.json()
        given = body.get("input")
        text = given if isinstance(given, str) else _last_user_text(given)
        run_id = f"run_{next(ids)}"
        runs[run_id] = script.for_text(text)
        return web.json_response({"run_id": run_id, "status": "started"}, status=202)

    async def run_events(request: web.Request) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        chosen = runs.pop(run_id, None)
        if chosen is None:
            raise web.HTTPNotFound()
        response = await _sse(request)
        output = []
        async for delta in chosen.deltas_of():
            output.append(delta)
            event = {
                "event": "message.delta",
                "run_id": run_id,
                "timestamp": time.time(),
                "delta": delta,
            }
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        end = {
            "event": "run.completed",
            "run_id": run_id,
            "timestamp": time.time(),
            "output": "".join(output),
        }
        await response.write(b"data: " + json.dumps(end).encode() + b"\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/runs", start_run)
    app.router.add_get("/v1/runs/{run_id}/events", run_events)
    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8801)
    p.add_argument("--deltas", type=int, default=1000)
    p.add_argument("--pace-ms", type=float, default=0.0)
    args = p.parse_args()
    loop, uvloop_used = new_loop()
    announce("stream-backend", args.port, uvloop_used)
    web.run_app(make_app(Script(args.deltas, args.pace_ms)), host=args.host, port=args.port,
                access_log=None, print=None, loop=loop)


if __name__ == "__main__":
    main()
