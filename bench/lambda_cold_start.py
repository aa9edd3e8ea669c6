"""Lambda cold start: the gateway's handler run by ``awslambdaric`` on DynamoDB (moto).

    python bench/lambda_cold_start.py                    # the working tree
    python bench/lambda_cold_start.py --ref HEAD~2       # a commit beside the working tree
    python bench/lambda_cold_start.py --ref HEAD~2 --source /tmp/other   # two checkouts
    python bench/lambda_cold_start.py --python /srv/venv/bin/python   # e.g. the image's package set

Each run starts ``python -m awslambdaric a2a_gateway.lambda_handler.handler`` afresh against a
local Runtime API (``tests/support/lambda_runtime.FakeLambda``) with a SendMessage to a public
echo endpoint already queued, as a cold start behind a Function URL sees it:

- **init ms** — exec → the runtime's first poll of ``/invocation/next`` (interpreter,
  ``awslambdaric``, the handler module's imports: Lambda's init phase);
- **first invoke ms** — that poll → the answer (the first invocation starts the gateway:
  settings, ``build_app``, the store opened, the request path loaded, then the request);
- **cold total ms** — exec → the answer, what the caller waits; **its CPU ms** the process's,
  split into **init CPU ms** (at the first poll) and **first invoke CPU ms** (the rest): the
  stable figures on a shared machine;
- **steady /healthz ms**, **steady send ms** — medians of ``--steady`` invocations after it.

Processes read compiled modules from a cache filled by a warm-up run per source, as a
package built with bytecode has them. Needs ``A2A_TEST_DYNAMODB_ENDPOINT`` (a moto server),
else moto is started by ``tests/stores/dynamo_support``. CPU share: the machine's, not a
Lambda size; on Lambda the CPU share scales with the memory size (1,769 MB is one vCPU).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.cold_start import describe_source, machine_note, rss_mb  # noqa: E402
from bench.core_send import cpu_seconds, snapshot  # noqa: E402
from tests.stores import dynamo_support  # noqa: E402
from tests.support.lambda_runtime import HANDLER, FakeLambda, function_url_event  # noqa: E402
from tests.support.messages import send_body  # noqa: E402


class TimedLambda(FakeLambda):
    """``FakeLambda`` that notes when the runtime (process ``pid``) first asks for an
    invocation (init done), and the CPU time the runtime had spent by then."""

    first_poll: float | None = None
    pid: int | None = None
    init_cpu: float | None = None

    async def _next(self, request: web.Request) -> web.Response:
        if self.first_poll is None:
            self.first_poll = time.perf_counter()
            if self.pid is not None:
                self.init_cpu = cpu_seconds(self.pid)
        return await super()._next(request)


async def add_echo(store_url: str) -> str:
    from a2a_gateway.stores.base import Endpoint
    from a2a_gateway.stores.dynamodb import DynamoDBStore

    store = await DynamoDBStore.open(store_url, **dynamo_support.CREDENTIALS)
    try:
        endpoint = Endpoint(id=str(uuid.uuid4()), name="Echo", metadata={
            "module_name": "handlers.echo", "class_name": "EchoHandler", "delay": 0,
            "public": True})
        await store.create_endpoint(endpoint)
        return endpoint.id
    finally:
        await store.aclose()


def runtime_env(fake: FakeLambda, source: Path, store_url: str, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "A2A_GATEWAY_", "PYTHONDONTWRITEBYTECODE"))}
    return env | {
        "PYTHONPATH": str(source), "PYTHONPYCACHEPREFIX": str(cache),
        "AWS_LAMBDA_RUNTIME_API": fake.runtime_api, "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": dynamo_support.REGION,
        "A2A_GATEWAY_STORE": store_url, "A2A_GATEWAY_LOG_LEVEL": "warning",
    }


async def answered(fake: FakeLambda, event: dict[str, Any]) -> dict[str, Any]:
    invocation = fake.deliver(json.dumps(event).encode())
    await asyncio.wait_for(invocation.done, 120)
    if invocation.error is not None or invocation.result.get("statusCode") != 200:
        raise RuntimeError(f"invocation failed: {invocation.error or invocation.result}")
    return invocation.result


async def one_run(source: Path, store_url: str, endpoint_id: str, cache: Path,
                  steady: int, python: str = sys.executable) -> dict[str, float]:
    send = function_url_event("POST", f"/{endpoint_id}/a2a", send_body("cold"),
                              headers={"a2a-version": "1.0"})
    healthz = function_url_event("GET", "/healthz")
    async with _serve(TimedLambda()) as fake:
        started = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            python, "-m", "awslambdaric", HANDLER, cwd=source,
            env=runtime_env(fake, source, store_url, cache),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        fake.pid = process.pid
        try:
            await answered(fake, send)
            done = time.perf_counter()
            figures = {
                "init_ms": ((fake.first_poll or done) - started) * 1000,
                "first_invoke_ms": (done - (fake.first_poll or started)) * 1000,
                "cold_total_ms": (done - started) * 1000,
                "cold_cpu_ms": cpu_seconds(process.pid) * 1000,
            }
            if fake.init_cpu is not None:
                figures["init_cpu_ms"] = fake.init_cpu * 1000
                figures["first_invoke_cpu_ms"] = figures["cold_cpu_ms"] - figures["init_cpu_ms"]
            for name, event in (("steady_healthz_ms", healthz), ("steady_send_ms", send)):
                times = []
                for _ in range(steady):
                    t0 = time.perf_counter()
                    await answered(fake, event)
                    times.append((time.perf_counter() - t0) * 1000)
                figures[name] = statistics.median(times)
            figures["rss_mb"] = rss_mb(process.pid)
            return figures
        finally:
            process.kill()
            await process.wait()


class _serve:
    """``fake`` on a free loopback port (as ``lambda_runtime.fake_lambda``, for a subclass)."""

    def __init__(self, fake: TimedLambda) -> None:
        self.fake = fake

    async def __aenter__(self) -> TimedLambda:
        self.runner = web.AppRunner(self.fake.app(), access_log=None, shutdown_timeout=0.1,
                                    handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.fake.runtime_api = f"127.0.0.1:{port}"
        self.fake.endpoint_url = f"http://127.0.0.1:{port}"
        return self.fake

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


COLUMNS = ("init_ms", "first_invoke_ms", "cold_total_ms", "cold_cpu_ms", "init_cpu_ms",
           "first_invoke_cpu_ms", "steady_healthz_ms", "steady_send_ms", "rss_mb")


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steady", type=int, default=20, help="invocations after the first")
    p.add_argument("--ref", action="append", default=[], help="also the gateway at this git ref")
    p.add_argument("--source", type=Path, action="append",
                   help="checkout whose a2a_gateway/ and handlers/ to run; repeat to compare"
                   " (default: this one)")
    p.add_argument("--python", default=sys.executable,
                   help="runtime processes' interpreter (with awslambdaric); default this one")
    p.add_argument("--json", help="also write the raw samples to this file")
    args = p.parse_args()
    samples: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="a2a-lambda-cold-") as tmp:
        sources = {label: path for path, label in (snapshot(ref, Path(tmp)) for ref in args.ref)}
        sources.update({describe_source(path.resolve()): path.resolve()
                        for path in args.source or [ROOT]})
        cache = Path(tmp) / "pycache"
        async with dynamo_support.fresh_tables() as store_url:
            endpoint_id = await add_echo(store_url)
            for source in sources.values():  # warm-up: fills the bytecode cache
                await one_run(source, store_url, endpoint_id, cache, 1, args.python)
            for run in range(args.runs):
                for label, source in sources.items():
                    figures = await one_run(source, store_url, endpoint_id, cache, args.steady,
                                            args.python)
                    for name, value in figures.items():
                        samples.setdefault(label, {}).setdefault(name, []).append(value)
                print(f"run {run + 1}/{args.runs} done", file=sys.stderr, flush=True)
    interpreter = "" if args.python == sys.executable else f"; interpreter {args.python}"
    print(f"\nLambda cold start (awslambdaric, DynamoDB on moto) — {args.runs} runs, medians "
          f"(min–max); {machine_note()}{interpreter}\n")
    print("| source | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---|" * len(COLUMNS))
    for label, values in samples.items():
        cells = [f"{statistics.median(values[c]):.1f} ({min(values[c]):.0f}–{max(values[c]):.0f})"
                 for c in COLUMNS]
        print(f"| {label} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(samples, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
