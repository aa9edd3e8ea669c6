"""Demo agent: echoes the message back word by word.

Settings: ``delay`` (seconds per word; 0 for benchmarks), ``response_mode``
(``task`` or ``message``). A message containing ``?input`` makes it ask for more
input first; the answer is then echoed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import ClassVar, Literal

from handlers.base import (
    Completed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRequired,
    Reply,
    TextDelta,
)


class EchoSettings(HandlerSettings):
    delay: float = 0.05
    response_mode: Literal["task", "message"] = "task"


class EchoHandler(Handler):
    Settings = EchoSettings
    uses_context: ClassVar[bool] = False
    settings: EchoSettings

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        text = request.text or "(no text)"
        if self.settings.response_mode == "message":
            yield Reply(text=f"echo: {text}")
            return
        if "?input" in text and request.pending_input is None:
            yield InputRequired("What should I echo? Reply with any text.", {"choices": ["any text"]})
            return
        answer = f"echo: {text}"
        for i, word in enumerate(answer.split(" ")):
            yield TextDelta(word if i == 0 else f" {word}")
            if self.settings.delay:
                await asyncio.sleep(self.settings.delay)
        yield Completed(text=answer)
