"""CPU per blocking SendMessage below the HTTP layer, and where it goes.

Builds the gateway on ``memory://`` (and a fresh SQLite file) with an echo agent and calls
the endpoint's request handler (``GatewayRequestHandler.on_message_send``) directly, the
way the JSON-RPC and REST bindings do once the params are parsed: the engine, the run,
the handler, the store write. HTTP, params parsing and the reply's JSON are not in it
(``core_send.py`` measures the whole request). Each run is a fresh process: a warm-up, then
the CPU (``time.process_time``) of ``--sends`` sends; ``--ref`` measures other commits
(``git archive`` snapshots) in runs interleaved with the working tree's, and the table
gives medians. ``--profile`` prints a cProfile of the working tree's sends instead.

    python bench/send_path.py [--runs 5] [--sends 2000] [--stores memory,sqlite] [--ref HEAD]
    python bench/send_path.py --profile modules --stores memory --http   # by package
    python bench/send_path.py --profile tottime --stores memory [--lines 30]
    python bench/send_path.py --instructions --runs 1 --ref HEAD   # counted by callgrind
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import json
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path and not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT))

from a2a.auth.user import UnauthenticatedUser  # noqa: E402
from a2a.server.context import ServerCallContext  # noqa: E402
from a2a.types import Message, Part, SendMessageRequest, Task  # noqa: E402
from a2a.types.a2a_pb2 import ROLE_USER, TASK_STATE_COMPLETED  # noqa: E402
from core_send import describe_tree, snapshot  # noqa: E402
from servers.in_process import echo_gateway  # noqa: E402

from a2a_gateway.state import GATEWAY  # noqa: E402


def _request() -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=ROLE_USER, parts=[Part(text="hello")])
    return SendMessageRequest(message=message)


def _context() -> ServerCallContext:
    return ServerCallContext.model_construct(
        state={"headers": {}, "base_url": "http://bench", "grpc_url": None, "request_id": "r"},
        user=UnauthenticatedUser(),
        tenant="default",
        requested_extensions=set(),
    )


async def _sends(handler: Any, count: int) -> float:
    context = _context()
    started = time.process_time()
    for _ in range(count):
        task = await handler.on_message_send(_request(), context)
        assert isinstance(task, Task) and task.status.state == TASK_STATE_COMPLETED
    return (time.process_time() - started) / count * 1e6


class _RawClient:
    """A keep-alive HTTP/1.1 client that costs next to nothing in this process: it writes a
    request built once (a fresh messageId each time) and reads the reply by its length."""

    def __init__(self, port: int, path: str, streaming: bool = False) -> None:
        self.port, self.path, self.streaming = port, path, streaming

    async def __aenter__(self) -> _RawClient:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()

    async def send(self) -> bytes:
        method = "SendStreamingMessage" if self.streaming else "SendMessage"
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {
            "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                        "parts": [{"text": "hello"}]}}}).encode()
        self.writer.write(
            f"POST {self.path} HTTP/1.1\r\nHost: bench\r\nA2A-Version: 1.0\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        if self.streaming:  # chunked SSE, read to its last chunk
            reply = await self.reader.readuntil(b"\r\n0\r\n\r\n")
            assert b"TASK_STATE_COMPLETED" in reply, reply[:300]
            return reply
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        reply = await self.reader.readexactly(length)
        assert b"TASK_STATE_COMPLETED" in reply, reply[:200]
        return reply


@contextlib.contextmanager
def _instructions_counted() -> Iterator[None]:
    """Under ``valgrind --tool=callgrind --instr-atstart=no`` (``--instructions``): count
    the instructions of this block alone."""
    if not os.environ.get("SEND_PATH_CALLGRIND"):
        yield
        return
    control = ["callgrind_control", "--instr"]
    subprocess.run([*control, "on", str(os.getpid())], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run([*control, "off", str(os.getpid())], check=True, capture_output=True)


async def _http_sends(client: _RawClient, count: int) -> float:
    started = time.process_time()
    for _ in range(count):
        await client.send()
    return (time.process_time() - started) / count * 1e6


async def measure(
    store: str, sends: int, profile: str | None, lines: int, http: bool = False,
    stream: bool = False,
) -> dict[str, float]:
    """CPU µs per send over ``sends`` sends, after a warm-up, and the function calls per send;
    ``profile``: also print a cProfile of them sorted by that key."""
    async with echo_gateway(store) as served, \
            _RawClient(served.port, served.jsonrpc_path, stream) as client:
        if http or stream:
            sends_of = functools.partial(_http_sends, client)
        else:
            gateway = served.app[GATEWAY]
            runtime = await gateway.registry.get(served.endpoint_id)
            sends_of = functools.partial(_sends, gateway.request_handlers(runtime)[0])
        await sends_of(300)  # warm: caches, first-use imports
        with _instructions_counted():
            cpu = await sends_of(sends)
        profiler = cProfile.Profile()
        profiler.enable()
        await sends_of(sends)
        profiler.disable()
    stats = pstats.Stats(profiler)
    if profile == "modules":
        print(f"\n--- {store}: a blocking send's own CPU time by module, and its calls ---")
        print_by_module(stats, sends, lines)
    elif profile:
        print(f"\n--- {store}: where a blocking send's CPU goes ({profile}) ---")
        stats.sort_stats(profile).print_stats(lines)
    return {"cpu_us": cpu, "calls": stats.total_calls / sends}  # type: ignore[attr-defined]


def _module_of(filename: str) -> str:
    """The package (a library, a project folder, a stdlib module) a profiled function is in."""
    if filename == "~":
        return "(built-in functions and methods)"
    path = Path(filename)
    if "site-packages" in path.parts:
        return path.parts[path.parts.index("site-packages") + 1]
    if ROOT in path.parents:
        parts = path.relative_to(ROOT).parts
        return "/".join(parts[:2]) if len(parts) > 2 else "/".join(parts)
    return f"stdlib {path.name}"


def print_by_module(stats: pstats.Stats, sends: int, lines: int) -> None:
    own: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for (filename, _line, _name), (_, count, own_time, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        own[_module_of(filename)] += own_time
        calls[_module_of(filename)] += count
    total = sum(own.values())
    print("| own time | calls per send | where |")
    print("|---:|---:|---|")
    for module, seconds in own.most_common(lines):
        print(f"| {seconds / total:.1%} | {calls[module] / sends:.0f} | {module} |")


def _child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = "memory://" if args.store == "memory" else f"sqlite:///{directory}/bench.db"
        figure = asyncio.run(
            measure(store, args.sends, args.profile, args.lines, args.http, args.stream))
    print(json.dumps(figure))


def _run_child(
    source: Path | None, store: str, sends: int, http: bool, instructions: bool = False,
    stream: bool = False,
) -> dict[str, float]:
    env = dict(os.environ)
    if source is not None:  # the packages of another commit come first on the path
        env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")])
    argv = [sys.executable, __file__, "--child", "--store", store, "--sends", str(sends),
            *(["--http"] if http else []), *(["--stream"] if stream else [])]
    if instructions:
        env["SEND_PATH_CALLGRIND"] = "1"
        argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                "--callgrind-out-file=/dev/null", *argv]
    done = subprocess.run(
        argv, env=env, cwd=source or ROOT, capture_output=True, text=True, check=True
    )
    figure = json.loads(done.stdout.strip().splitlines()[-1])
    if instructions:
        collected = re.search(r"Collected : (\d+)", done.stderr)
        assert collected, done.stderr[-500:]
        figure["instructions"] = int(collected.group(1)) / sends
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sends", type=int, default=2000, help="sends measured per run")
    parser.add_argument("--runs", type=int, default=5, help="runs per source and store")
    parser.add_argument("--stores", default="memory,sqlite")
    parser.add_argument("--ref", action="append", default=[],
                        help="also measure the gateway at this commit, side by side")
    parser.add_argument("--profile", choices=["modules", "tottime", "cumulative", "ncalls"],
                        help="print a cProfile of the working tree's sends, sorted by this")
    parser.add_argument("--lines", type=int, default=30, help="profile lines")
    parser.add_argument("--http", action="store_true",
                        help="send over HTTP (JSON-RPC) from this process, not to the handler")
    parser.add_argument("--stream", action="store_true",
                        help="SendStreamingMessage over HTTP (a one-word echo, read to the "
                             "stream's end): what starting a stream costs")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per send under valgrind's callgrind "
                             "(the same on a busy machine; a run takes about 30 s)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store", default="memory", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    if args.profile:
        for store in args.stores.split(","):
            args.store = store
            _child(args)
        return
    with tempfile.TemporaryDirectory() as workdir:
        sources: list[tuple[str, Path | None]] = [("working tree", None)]
        sources += [(f"@{ref}", snapshot(ref, Path(workdir))[0]) for ref in args.ref]
        figures: dict[tuple[str, str], list[dict[str, float]]] = {}
        for run in range(args.runs):  # interleaved, so the machine's load spreads over all
            for store in args.stores.split(","):
                for name, source in sources:
                    figure = _run_child(source, store, args.sends, args.http,
                                        args.instructions, args.stream)
                    figures.setdefault((store, name), []).append(figure)
                    print(f"run {run + 1}/{args.runs} {store:7s} {name:14s} "
                          f"{figure['cpu_us']:7.1f} µs/send", flush=True)
    where = "over HTTP, client in process" if args.http or args.stream else "below HTTP"
    what = "SendStreamingMessage" if args.stream else "blocking SendMessage"
    print(f"\n{what} {where} (echo, delay 0), {args.sends} sends a run, "
          f"medians of {args.runs} runs; {describe_tree()}")
    counted = args.instructions
    print("| store | source | CPU µs per send | runs | calls per send |"
          + (" instructions per send |" if counted else ""))
    print("|---|---|---:|---|---:|" + ("---:|" if counted else ""))
    for (store, name), runs in figures.items():
        cpu = [r["cpu_us"] for r in runs]
        instructions = (
            f" {statistics.median(r['instructions'] for r in runs) / 1000:.0f}k |"
            if counted else ""
        )
        print(f"| {store} | {name} | {statistics.median(cpu):.1f} | "
              f"{' '.join(f'{c:.0f}' for c in cpu)} | {runs[0]['calls']:.0f} |{instructions}")


if __name__ == "__main__":
    main()
