"""An echo agent whose runs wait, part way, until the test lets them go on: a test that
checks something while a run is going sees the run in progress however slow the machine,
instead of betting on a time margin (a word delay) that a loaded CI machine can eat up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest

from handlers.base import HandlerEvent, HandlerRequest, TextDelta
from handlers.echo import EchoHandler
from tests.support.harness import RunningGateway

HELD_ECHO = f"{__name__}:HeldEcho"


class HeldEcho(EchoHandler):
    """The echo agent; while ``gate`` is set, each run waits for it after its first ``words``
    words (the rest then follows at the endpoint's ``delay``)."""

    gate: ClassVar[asyncio.Event | None] = None
    words: ClassVar[int] = 1

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        said = 0
        async for event in super().run(request):
            yield event
            if isinstance(event, TextDelta):
                said += 1
                if said == HeldEcho.words and HeldEcho.gate is not None:
                    await HeldEcho.gate.wait()


async def add_held_echo(
    gw: RunningGateway, monkeypatch: pytest.MonkeyPatch, *, words: int = 1,
    settings: dict[str, Any] | None = None, replicas: tuple[RunningGateway, ...] = (),
) -> tuple[str, asyncio.Event]:
    """Add a ``HeldEcho`` endpoint to ``gw`` (the allowlists of ``gw`` and of the other
    ``replicas`` admit this module for the test) and return its id and the gate: the test sets
    the gate once it has seen what it checks while the run goes on (in a ``finally``, so that
    a failing check ends the run)."""
    gate = asyncio.Event()
    monkeypatch.setattr(HeldEcho, "gate", gate)
    monkeypatch.setattr(HeldEcho, "words", words)
    for running in (gw, *replicas):
        allowlist = running.gateway.settings.handler_allowlist
        if __name__ not in allowlist:
            monkeypatch.setattr(running.gateway.settings, "handler_allowlist",
                                [*allowlist, __name__])
    return await gw.add_endpoint(HELD_ECHO, settings=settings), gate
