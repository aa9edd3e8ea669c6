"""A bare aiohttp handler: reads the body and returns a fixed JSON-RPC reply.

The reply has the shape of a completed echo task so the bytes on the wire are
comparable with the gateway's; no parsing, no task, no store.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import orjson  # noqa: E402
from aiohttp import web  # noqa: E402

from bench.servers.common import announce, new_loop  # noqa: E402

REPLY = orjson.dumps({
    "jsonrpc": "2.0",
    "id": 1,
    "result": {"task": {
        "id": "4d7d1c4e-0000-4000-8000-000000000001",
        "contextId": "4d7d1c4e-0000-4000-8000-000000000002",
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:00.000Z"},
        "artifacts": [{"artifactId": "4d7d1c4e-0000-4000-8000-000000000003",
                       "parts": [{"text": "echo: hello gateway"}]}],
        "history": [{"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello gateway"}]}],
    }},
})


async def handle(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=REPLY, content_type="application/json")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8703)
    p.add_argument("--no-uvloop", action="store_true")
    args = p.parse_args()
    app = web.Application()
    app.router.add_post("/{endpoint_id}/a2a", handle)
    loop, uvloop_used = new_loop(not args.no_uvloop)
    announce("bare-aiohttp", args.port, uvloop_used)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None, loop=loop)


if __name__ == "__main__":
    main()
