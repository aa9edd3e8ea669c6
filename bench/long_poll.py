"""Long-poll GetTask (A2A 1.1 ``currentGeneration``): memory and CPU of waiting calls, and how
fast a change wakes them.

    python bench/long_poll.py                          # 10,000 waiting calls, 4 clients
    python bench/long_poll.py --waiters 1000 --clients 1

Starts ``a2a-gateway serve`` (SQLite store, an echo endpoint, ``LONG_POLL_SECONDS`` far above
the run) pinned to ``--server-cpu``; client processes on ``--client-cpu`` each create their
share of tasks waiting for input (``?input``), then hold ``--per-task`` long-polls on each
at its generation. Figures: the gateway's RSS before and with every call waiting (per
call: the growth divided by the calls), its CPU seconds over ``--idle`` seconds of waiting
once the calls have all arrived,
then the wake-up of every call when each task is answered (from the answer's reply to the
long-poll's, p50/p99, and calls answered with a higher generation), and, alone on a quiet
gateway, the wake-up of one call ``--single`` times (p50/p99).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT))

from bench.idle_streams import raise_fd_limit, rss_kb, serve_echo  # noqa: E402

ECHO = "00000000-0000-4000-8000-0000000001e1"
HEADERS = {"A2A-Version": "1.1", "Content-Type": "application/json"}


def rpc(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}


def message(text: str, **fields: str) -> dict:
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}],
            **fields}


async def post(http: aiohttp.ClientSession, url: str, body: dict) -> dict:
    async with http.post(url, json=body, headers=HEADERS) as response:
        return await response.json()


async def ask(http: aiohttp.ClientSession, url: str) -> dict:
    answer = await post(http, url, rpc("SendMessage", {"message": message("?input")}))
    return answer["result"]["task"]


async def poll(http: aiohttp.ClientSession, url: str, task: dict) -> tuple[float, int]:
    answer = await post(http, url, rpc("GetTask", {"id": task["id"],
                                                   "currentGeneration": task["generation"]}))
    return time.monotonic(), answer.get("result", {}).get("generation", 0)


async def answer_task(http: aiohttp.ClientSession, url: str, task: dict) -> float:
    await post(http, url, rpc("SendMessage", {
        "message": message("go on", taskId=task["id"]),
        "configuration": {"returnImmediately": True}}))
    return time.monotonic()


# the client side: one process holds its share of the calls ------------------------------------


async def client(base: str, tasks: int, per_task: int) -> None:
    url = f"{base}/{ECHO}/a2a"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=None)) as http:
        gate = asyncio.Semaphore(100)

        async def asked() -> dict:
            async with gate:
                return await ask(http, url)

        made = await asyncio.gather(*(asked() for _ in range(tasks)))
        polls = [[asyncio.create_task(poll(http, url, t)) for _ in range(per_task)] for t in made]
        await asyncio.sleep(2.0)
        waiting = sum(not p.done() for ps in polls for p in ps)
        print(json.dumps({"waiting": waiting}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        answered = await asyncio.gather(*(answer_task(http, url, t) for t in made))
        lags, higher = [], 0
        for task, at, ps in zip(made, answered, polls, strict=True):
            for woke_at, generation in await asyncio.gather(*ps):
                lags.append(woke_at - at)
                higher += generation > task["generation"]
        print(json.dumps({"lags": lags, "higher": higher}), flush=True)


async def single(base: str, times: int) -> list[float]:
    url = f"{base}/{ECHO}/a2a"
    lags = []
    async with aiohttp.ClientSession() as http:
        for _ in range(times):
            task = await ask(http, url)
            waiting = asyncio.create_task(poll(http, url, task))
            await asyncio.sleep(0.05)
            at = await answer_task(http, url, task)
            woke_at, _ = await waiting
            lags.append(woke_at - at)
    return lags


# the run --------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def until_idle(pid: int, seconds: float) -> float:
    """Wait (at most ``seconds``) until the process used under 2 % of a CPU for a second:
    every call has arrived and is waiting. The seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        before = cpu_seconds(pid)
        time.sleep(1.0)
        if cpu_seconds(pid) - before < 0.02:
            break
    return time.monotonic() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(args: argparse.Namespace) -> dict[str, float]:
    from bench.core_send import pinned
    from bench.streaming import stop

    per_client = args.waiters // args.clients
    tasks = max(per_client // args.per_task, 1)
    with tempfile.TemporaryDirectory(prefix="a2a-long-poll-bench-") as tmp:
        gateway, base = serve_echo(Path(tmp), args.server_cpu, Path(args.source).resolve(),
                                   ECHO, 0, {"LONG_POLL_SECONDS": "3600"})
        try:
            alone = asyncio.run(single(base, args.single))
            time.sleep(1.0)
            before = rss_kb(gateway.pid)
            procs = [subprocess.Popen(
                pinned(args.client_cpu, [sys.executable, __file__, "client", "--url", base,
                                         "--tasks", str(tasks), "--per-task", str(args.per_task)]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for _ in range(args.clients)]
            waiting = sum(json.loads(p.stdout.readline())["waiting"] for p in procs)
            settled = until_idle(gateway.pid, 60)
            held = rss_kb(gateway.pid)
            cpu_start = cpu_seconds(gateway.pid)
            time.sleep(args.idle)
            idle_cpu = cpu_seconds(gateway.pid) - cpu_start
            lags: list[float] = []
            higher = 0
            for p in procs:
                p.stdin.write("go\n")  # type: ignore[union-attr]
                p.stdin.flush()  # type: ignore[union-attr]
            for p in procs:
                report = json.loads(p.stdout.readline())
                lags += report["lags"]
                higher += report["higher"]
                p.wait(timeout=120)
        finally:
            stop(gateway)
    return {
        "waiting calls": waiting,
        "s until every call waits quietly": settled,
        "RSS before MB": before / 1024,
        "RSS waiting MB": held / 1024,
        "KB per waiting call": (held - before) / max(waiting, 1),
        f"gateway CPU s over {args.idle:g} s waiting": idle_cpu,
        "woken with a higher generation": higher,
        "wake-up of all after each answer, p50 ms": percentile(lags, 0.5) * 1000,
        "wake-up of all after each answer, p99 ms": percentile(lags, 0.99) * 1000,
        "wake-up of one call alone, p50 ms": percentile(alone, 0.5) * 1000,
        "wake-up of one call alone, p99 ms": percentile(alone, 0.99) * 1000,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command")
    c = sub.add_parser("client", help="(internal) hold long-polls")
    c.add_argument("--url", required=True)
    c.add_argument("--tasks", type=int, required=True)
    c.add_argument("--per-task", type=int, required=True)
    p.add_argument("--waiters", type=int, default=10_000)
    p.add_argument("--per-task", type=int, default=10, help="long-polls on each task")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--idle", type=float, default=5.0)
    p.add_argument("--single", type=int, default=50)
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--source", default=str(ROOT), help="the checkout whose gateway runs")
    args = p.parse_args()
    limit = raise_fd_limit()
    if args.command == "client":
        asyncio.run(client(args.url, args.tasks, args.per_task))
        return
    figures = run(args)
    print(f"\nLong-poll GetTask through `a2a-gateway serve` (SQLite), fd limit {limit}")
    print("| figure | value |\n|---|---:|")
    for key, value in figures.items():
        print(f"| {key} | {value:,.2f} |" if isinstance(value, float) else f"| {key} | {value:,} |")


if __name__ == "__main__":
    main()
