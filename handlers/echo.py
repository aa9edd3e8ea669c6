"""Demo agent: echoes the message back word by word.

Settings: ``delay`` (seconds per word; 0 for benchmarks), ``response_mode``
(``task`` or ``message``). Trigger words in the message's text (task mode):

* ``?input``: asks for more input first (``InputRequired`` with the data
  ``{"choices": ["any text"]}``); the answer is then echoed.
* ``?auth``: asks the caller to authorize first (``AuthRequired`` with the data
  ``{"auth_url": "https://example.com/echo/authorize"}``); the answer is then echoed.
* ``?artifacts``: streams three named artifacts before the echo: ``notes`` (text, in
  two chunks: ``"first "``, then ``"second"`` appended with ``last_chunk``),
  ``file`` (one file part ``echo.txt``, ``text/plain``, holding the message's text)
  and ``data`` (one data part ``{"echo": <text>, "words": <count>}``).
* ``?slow``: answers one word a second, the echo then a count to 55 (about a minute), so that a
  person has the time to paste the task's id into a cancel or subscribe call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import ClassVar

from handlers.base import (
    ArtifactDelta,
    AuthRequired,
    Completed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    InputRequired,
    ResponseModeSettings,
    TextDelta,
    data_part,
    file_part,
    text_part,
)

AUTH_URL = "https://example.com/echo/authorize"
SLOW_SECONDS_PER_WORD = 1.0
SLOW_COUNT = 55


class EchoSettings(ResponseModeSettings):
    delay: float = 0.05
    """Seconds between two words of the answer (0 for benchmarks)."""


class EchoHandler(Handler):
    """Demo agent: echoes the message back word by word."""

    Settings = EchoSettings
    uses_context: ClassVar[bool] = False
    settings: EchoSettings

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        text = request.text or "(no text)"
        answer = f"echo: {text}"
        if self.message_mode:
            yield self.answer(Completed(text=answer))
            return
        if request.pending_input is None:
            if "?input" in text:
                yield InputRequired("What should I echo? Reply with any text.",
                                    {"choices": ["any text"]})
                return
            if "?auth" in text:
                yield AuthRequired(f"Authorize the echo agent at {AUTH_URL}, then reply with "
                                   "any text.", {"auth_url": AUTH_URL})
                return
        if "?artifacts" in text:
            for artifact in artifacts(text):
                yield artifact
        words, delay = answer.split(" "), self.settings.delay
        if "?slow" in text:
            words += [str(n) for n in range(1, SLOW_COUNT + 1)]
            delay = SLOW_SECONDS_PER_WORD
        for i, word in enumerate(words):
            yield TextDelta(word if i == 0 else f" {word}")
            if delay:
                await asyncio.sleep(delay)
        yield Completed(text=" ".join(words))


def artifacts(text: str) -> list[ArtifactDelta]:
    """The ``?artifacts`` demo: named artifacts with text, file and data parts."""
    return [
        ArtifactDelta("notes", [text_part("first ")], name="notes"),
        ArtifactDelta("notes", [text_part("second")], name="notes", append=True,
                      last_chunk=True),
        ArtifactDelta("file", [file_part("text/plain", data=text.encode(), name="echo.txt")],
                      name="file", last_chunk=True),
        ArtifactDelta("data", [data_part({"echo": text, "words": len(text.split())})],
                      name="data", last_chunk=True),
    ]
