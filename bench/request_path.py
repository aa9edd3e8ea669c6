"""The path of one streaming SendMessage through the gateway, module by module.

Serves the gateway on ``memory://`` with an echo agent, sends one SendStreamingMessage
(JSON-RPC, A2A 1.0) and profiles every call between the project's own modules
(``a2a_gateway.*`` and ``handlers.*``) while the request is served. It prints:

* the modules in the order the request first reaches them;
* hops: calls from one project module into another (a call within a module is not a hop);
* calls back up: a hop into a module that is already on the call stack below the caller
  (a module calling back into one that called it);
* distinct module-to-module edges, and the pairs called in both directions.

    python bench/request_path.py [--words 20]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from servers.in_process import echo_gateway  # noqa: E402

PROJECT = ("a2a_gateway", "handlers")


def _module(frame: FrameType | None) -> str | None:
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.split(".")[0] in PROJECT:
            return name
        return None
    return None


class PathRecorder:
    def __init__(self) -> None:
        self.order: list[str] = []
        self.hops = 0
        self.back_up = 0
        self.back_up_edges: Counter[tuple[str, str]] = Counter()
        self.edges: Counter[tuple[str, str]] = Counter()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = _module(frame)
        if callee is None:
            return
        if callee not in self.order:
            self.order.append(callee)
        caller = _module(frame.f_back)
        if caller is None or caller == callee:
            return
        self.hops += 1
        self.edges[(caller, callee)] += 1
        below = frame.f_back.f_back if frame.f_back is not None else None
        while below is not None:
            if _module(below) == callee:
                self.back_up += 1
                self.back_up_edges[(caller, callee)] += 1
                break
            below = below.f_back


async def measure(words: int) -> PathRecorder:
    text = " ".join(f"w{i}" for i in range(words))

    def body() -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": {
            "messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}}}

    headers = {"A2A-Version": "1.0", "Accept": "text/event-stream"}
    recorder = PathRecorder()
    card = {"capabilities": {"streaming": True}}
    async with echo_gateway("memory://", card) as served, httpx.AsyncClient(timeout=30) as http:
        url = f"http://127.0.0.1:{served.port}{served.jsonrpc_path}"
        await http.post(url, json=body(), headers=headers)  # warm: endpoint cache, imports
        sys.setprofile(recorder)
        try:
            response = await http.post(url, json=body(), headers=headers)
        finally:
            sys.setprofile(None)
        assert response.status_code == 200 and "TASK_STATE_COMPLETED" in response.text, (
            response.text[:300]
        )
    return recorder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--words", type=int, default=20, help="words the echo streams back")
    args = parser.parse_args()
    recorder = asyncio.run(measure(args.words))
    both = sorted({tuple(sorted(e)) for e in recorder.edges if (e[1], e[0]) in recorder.edges})
    print(f"modules reached ({len(recorder.order)}):")
    for name in recorder.order:
        print(f"  {name}")
    print(f"hops between modules: {recorder.hops}")
    print(f"distinct module-to-module edges: {len(recorder.edges)}")
    print(f"calls back up into a module on the stack: {recorder.back_up}")
    for (caller, callee), n in recorder.back_up_edges.most_common():
        print(f"  {n:4d}  {caller} -> {callee}")
    print(f"module pairs calling each other both ways ({len(both)}):")
    for a, b in both:
        print(f"  {a} <-> {b}")


if __name__ == "__main__":
    main()
