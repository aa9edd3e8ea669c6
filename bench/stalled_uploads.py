"""Gateway memory under many stalled uploads: RSS before, during and after.

Starts the gateway in a child process (one public echo endpoint on ``memory://``), opens
``--uploads`` loopback connections that each send a chunked JSON-RPC request body as fast
as the gateway takes it, up to ``--bytes`` (just under ``max_body_bytes`` by default),
and then stall without ending it. The child's RSS is sampled for ``--hold`` seconds; then
every connection is closed and RSS is read again.

    python bench/stalled_uploads.py --uploads 300
    python bench/stalled_uploads.py --uploads 300 --source /path/to/older/checkout

``--source`` serves the gateway from another checkout (an older commit, to compare).
Prints the RSS figures and how the uploads were answered (status, or none).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENDPOINT_ID = "5b0e1f4c-0000-4000-8000-00000000b0d7"
CHUNK = 64 * 1024


def serve(port: int) -> None:
    """The child: the gateway with its connection limits, as ``a2a-gateway serve`` runs it."""
    from aiohttp import web

    from a2a_gateway import app as gateway_app
    from a2a_gateway.observability.logs import configure_logging
    from a2a_gateway.settings import GatewaySettings
    from a2a_gateway.state import GATEWAY
    from a2a_gateway.stores.base import Endpoint

    settings = GatewaySettings(store="memory://", port=port, log_level="critical")
    configure_logging(settings.log_level)
    app = gateway_app.build_app(settings)

    async def add_endpoint(app: web.Application) -> None:
        await app[GATEWAY].store.create_endpoint(
            Endpoint(
                id=ENDPOINT_ID,
                name="echo",
                metadata={
                    "module_name": "handlers.echo",
                    "class_name": "EchoHandler",
                    "delay": 0,
                    "public": True,
                },
            )
        )

    app.on_startup.append(add_endpoint)
    options = getattr(gateway_app, "server_options", lambda _: {})(
        settings
    )  # older checkouts lack it
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, **options)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def upload(port: int, size: int, hold: float) -> str:
    """Send ``size`` body bytes (as far as the gateway reads them), then stall; the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /{ENDPOINT_ID}/a2a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "A2A-Version: 1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    writer.write(head.encode())
    chunk = f"{CHUNK:x}\r\n".encode() + b" " * CHUNK + b"\r\n"
    deadline = time.monotonic() + hold
    sent = 0
    try:
        while sent < size and time.monotonic() < deadline:
            writer.write(chunk)
            await asyncio.wait_for(writer.drain(), max(deadline - time.monotonic(), 0.01))
            sent += CHUNK
    except (TimeoutError, ConnectionError):
        pass  # the gateway stopped reading, or answered and closed
    try:
        data = await asyncio.wait_for(reader.read(200), max(deadline - time.monotonic(), 0.5))
        return data.split(b" ", 2)[1].decode() if data else "closed"
    except TimeoutError:
        return "no answer"
    except ConnectionError:
        return "closed"
    finally:
        writer.close()


async def measure(args: argparse.Namespace, port: int, pid: int) -> None:
    idle = rss_mb(pid)
    peak = idle
    uploads = [
        asyncio.create_task(upload(port, args.bytes, args.hold)) for _ in range(args.uploads)
    ]
    while not all(u.done() for u in uploads):
        peak = max(peak, rss_mb(pid))
        await asyncio.sleep(0.5)
    answers = Counter(u.result() for u in uploads)
    await asyncio.sleep(3)
    after = rss_mb(pid)
    print(
        f"uploads          {args.uploads} x up to {args.bytes / 2**20:.1f} MiB,"
        f" held {args.hold:g} s"
    )
    print(f"rss idle         {idle:.0f} MB")
    print(f"rss peak         {peak:.0f} MB")
    print(f"rss after close  {after:.0f} MB")
    print("answers          " + ", ".join(f"{k}: {v}" for k, v in sorted(answers.items())))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uploads", type=int, default=300)
    parser.add_argument(
        "--bytes", type=int, default=4 * 2**20 - 2 * CHUNK, help="body bytes per upload"
    )
    parser.add_argument("--hold", type=float, default=40.0, help="seconds the uploads stay open")
    parser.add_argument(
        "--source", type=Path, default=ROOT, help="checkout to serve the gateway from"
    )
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the child's port
    args = parser.parse_args()
    if args.serve:
        sys.path.insert(0, str(args.source))
        serve(args.serve)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), "--source", str(args.source.resolve())],
        cwd=args.source, env={**os.environ, "PYTHONPATH": str(args.source.resolve())},
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        asyncio.run(measure(args, port, child.pid))
    finally:
        child.terminate()
        child.wait(30)


if __name__ == "__main__":
    main()
