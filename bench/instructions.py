"""Instructions per blocking SendMessage of each server, counted by valgrind's callgrind.

CPU time per request moves with whatever else the machine runs (a shared CI machine doubles
it); the instructions a request executes do not. Each server of ``core_send.py`` (the same
launchers, the same echo agent) runs under ``valgrind --tool=callgrind --instr-atstart=no``;
after a warm-up, counting is switched on (``callgrind_control``) for ``--requests``
sequential keep-alive requests, then off, and the server is stopped. The table gives the
instructions per request and the ratios of the performance targets (memory:// against the
a2a-sdk server and against bare aiohttp, by instructions: a proxy for CPU that ignores cache
misses and the like). ``--ref`` counts the gateway of another commit beside the working tree.

    python bench/instructions.py [--requests 300] [--servers gateway-memory,a2a-sdk,bare-aiohttp]
                                 [--ref c8d1370]

A run takes about a minute per server (the warm-up runs under valgrind too).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.core_send import (  # noqa: E402
    CONFIGS,
    ENDPOINT_ID,
    ROOT,
    SERVERS,
    describe_tree,
    free_port,
    probe,
    snapshot,
)


def _send(connection: http.client.HTTPConnection) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                    "parts": [{"text": "hello"}]}}})
    connection.request("POST", f"/{ENDPOINT_ID}/a2a", body, {
        "Content-Type": "application/json", "A2A-Version": "1.0"})
    reply = connection.getresponse().read()
    assert reply, "an empty reply"


def _control(pid: int, *argv: str) -> None:
    subprocess.run(["callgrind_control", *argv, str(pid)], check=True, capture_output=True)


def count(name: str, source: Path | None, requests: int, workdir: Path) -> float:
    """Instructions per request of server ``name`` (``source``: the gateway of a snapshot)."""
    config = CONFIGS[name]
    port = free_port()
    argv = [sys.executable, str(SERVERS / config.script), "--port", str(port), *config.args]
    if config.sqlite:
        argv += ["--store", f"sqlite:///{workdir / f'{name}-{uuid.uuid4().hex[:6]}.db'}"]
    env = {**os.environ, **({"A2A_BENCH_SOURCE": str(source)} if source else {})}
    log = workdir / f"{name}-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--trace-children=yes",
             "--callgrind-out-file=/dev/null", *argv],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
        )
    try:
        probe(f"http://127.0.0.1:{port}/{ENDPOINT_ID}/a2a", time.monotonic() + 300,
              config.checks_echo)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for _ in range(100):  # warm: caches, first-use imports
            _send(connection)
        _control(proc.pid, "--instr", "on")
        for _ in range(requests):
            _send(connection)
        _control(proc.pid, "--instr", "off")
        connection.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    collected = re.findall(r"Collected : (\d+)", log.read_text(errors="replace"))
    assert collected, log.read_text(errors="replace")[-2000:]
    return max(int(c) for c in collected) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--servers", default="gateway-memory,gateway-sqlite,a2a-sdk,bare-aiohttp")
    parser.add_argument("--ref", action="append", default=[],
                        help="also the gateway at this commit (its gateway servers only)")
    args = parser.parse_args()
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        sources = {ref: snapshot(ref, workdir)[0] for ref in args.ref}
        for name in args.servers.split(","):
            rows.append((name, count(name, None, args.requests, workdir)))
            print(f"{name}: {rows[-1][1] / 1000:.0f}k instructions per request", flush=True)
            if CONFIGS[name].gateway:
                for ref, source in sources.items():
                    rows.append((f"{name} @{ref}", count(name, source, args.requests, workdir)))
                    print(f"{rows[-1][0]}: {rows[-1][1] / 1000:.0f}k", flush=True)
    figures = dict(rows)
    print(f"\nblocking SendMessage (JSON-RPC, echo), {args.requests} requests counted per server;"
          f" {describe_tree()}")
    print("| server | instructions per request |")
    print("|---|---:|")
    for name, value in rows:
        print(f"| {name} | {value / 1000:,.0f}k |")
    for gateway in [n for n, _ in rows if n.startswith("gateway-")]:
        for other, target in (("a2a-sdk", "≥ 15× (memory), ≥ 10× (SQLite)"),
                              ("bare-aiohttp", "≥ 0.3× (memory)")):
            if other in figures:
                print(f"{gateway} / {other}: {figures[other] / figures[gateway]:.2f}× "
                      f"fewer instructions  (target by CPU: {target})")


if __name__ == "__main__":
    main()
