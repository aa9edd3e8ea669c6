"""A backend whose runs outlive the gateway, and the handler that drives it.

``FakeBackend`` is a tiny aiohttp server the test starts on 127.0.0.1: ``POST /runs``
starts a run that writes ``"backend: <text>"`` word by word (``delay`` seconds
apart) in the test process, whatever happens to the gateways; ``GET /runs/{id}``
shows its output so far and status; ``POST /runs/{id}/cancel`` stops it.

``FakeBackendHandler`` (allowlist ``tests.``) starts a run, yields
``RunStarted(run_id)``, then polls the run and yields the new text as deltas until
it completes. ``reattach`` follows an existing run the same way, so a replica that
takes over a task after its owner was killed completes it with the full output.

``BigTextHandler`` streams deltas and a final answer of configurable sizes (for
payloads above PostgreSQL's NOTIFY limit).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import ClassVar

from aiohttp import web

from handlers.base import (
    Canceled,
    Completed,
    Failed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    RunStarted,
    TextDelta,
)


@dataclass
class BackendRun:
    words: list[str]
    delay: float
    produced: list[str] = field(default_factory=list)
    status: str = "running"
    task: asyncio.Task[None] | None = None

    @property
    def output(self) -> str:
        return " ".join(self.produced)



class FakeBackend:
    """The backend server; ``async with FakeBackend() as backend: backend.url``."""

    def __init__(self, delay: float = 0.1) -> None:
        self.delay = delay
        self.runs: dict[str, BackendRun] = {}
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> FakeBackend:
        app = web.Application()
        app.router.add_post("/runs", self._start)
        app.router.add_get("/runs/{id}", self._get)
        app.router.add_post("/runs/{id}/cancel", self._cancel)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for run in self.runs.values():
            if run.task is not None:
                run.task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _produce(self, run: BackendRun) -> None:
        for word in run.words:
            if run.status != "running":
                return
            run.produced.append(word)
            await asyncio.sleep(run.delay)
        run.status = "completed"

    async def _start(self, request: web.Request) -> web.Response:
        body = await request.json()
        run_id = f"run-{next(self._ids)}"
        run = BackendRun(
            f"backend: {body.get('text', '')}".split(" "), float(body.get("delay", self.delay))
        )
        run.task = asyncio.create_task(self._produce(run))
        self.runs[run_id] = run
        return web.json_response({"id": run_id})

    async def _get(self, request: web.Request) -> web.Response:
        run = self.runs.get(request.match_info["id"])
        if run is None:
            return web.json_response({"error": "no such run"}, status=404)
        return web.json_response({"status": run.status, "output": run.output})

    async def _cancel(self, request: web.Request) -> web.Response:
        run = self.runs.get(request.match_info["id"])
        if run is None:
            return web.json_response({"error": "no such run"}, status=404)
        if run.status == "running":
            run.status = "canceled"
        return web.json_response({"status": run.status})


class FakeBackendSettings(HandlerSettings):
    backend_url: str
    delay: float = 0.1
    poll_seconds: float = 0.05
    max_seconds: float = 120.0


class FakeBackendHandler(Handler):
    Settings = FakeBackendSettings
    uses_context: ClassVar[bool] = False
    supports_reattach: ClassVar[bool] = True
    settings: FakeBackendSettings

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        response = await self.http.post(
            f"{self.settings.backend_url}/runs",
            json={"text": request.text, "delay": self.settings.delay},
        )
        response.raise_for_status()
        run_id = response.json()["id"]
        yield RunStarted(run_id)
        async for event in self._follow(run_id):
            yield event

    def reattach(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        return self._follow(request.run_ref or "")

    async def cancel(self, request: HandlerRequest) -> bool:
        if request.run_ref:
            await self.http.post(f"{self.settings.backend_url}/runs/{request.run_ref}/cancel")
        return False

    async def _follow(self, run_id: str) -> AsyncIterator[HandlerEvent]:
        sent = 0
        deadline = time.monotonic() + self.settings.max_seconds
        while time.monotonic() < deadline:
            response = await self.http.get(f"{self.settings.backend_url}/runs/{run_id}")
            if response.status_code == 404:
                yield Failed(f"backend run {run_id} not found")
                return
            state = response.json()
            output = state["output"]
            if len(output) > sent:
                yield TextDelta(output[sent:])
                sent = len(output)
            if state["status"] == "completed":
                yield Completed(text=output)
                return
            if state["status"] == "canceled":
                yield Canceled("canceled by the backend")
                return
            await asyncio.sleep(self.settings.poll_seconds)
        yield Failed("backend run did not finish in time")


class BigTextSettings(HandlerSettings):
    delta_bytes: int = 20_000
    final_bytes: int = 20_000
    deltas: int = 3
    delay: float = 0.2


class BigTextHandler(Handler):
    """``deltas`` deltas of ``delta_bytes`` each (mixed 1- to 4-byte characters), then a
    final answer of ``final_bytes``; the texts are a function of the sizes, so a test
    can rebuild them with ``big_text``."""

    Settings = BigTextSettings
    uses_context: ClassVar[bool] = False
    settings: BigTextSettings

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        for i in range(self.settings.deltas):
            await asyncio.sleep(self.settings.delay)
            yield TextDelta(big_text(self.settings.delta_bytes, seed=i))
        await asyncio.sleep(self.settings.delay)
        yield Completed(text=big_text(self.settings.final_bytes, seed=99))


def big_text(size: int, seed: int = 0) -> str:
    """About ``size`` UTF-8 bytes of text with 1-, 2-, 3- and 4-byte characters."""
    unit = f"[{seed}] abc é€ 😀 \"quoted\" \\ line\n"
    count = max(1, size // len(unit.encode()))
    return unit * count
