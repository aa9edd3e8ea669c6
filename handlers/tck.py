"""Acts out the A2A TCK scenarios keyed by ``messageId`` prefix, so the official
conformance kit can run against any gateway endpoint.

Settings: ``stream_delay`` (seconds of WORKING for the resubscribe and delayed
scenarios; the TCK's streaming timeout is 2 s, so the default is 4 s);
``keep_unmatched_open``: a message whose ``messageId`` matches no scenario leaves its
task waiting for input instead of completing it. The 0.3 TCK (ids ``test-…``) cancels
such tasks and sends them follow-ups, so its endpoint sets it; the 1.0 TCK expects
them completed (the default).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import ClassVar

from a2a.types import Part

from handlers.base import (
    Completed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRequired,
    Progress,
    Rejected,
    Reply,
    TextDelta,
    data_part,
)


class TckSettings(HandlerSettings):
    stream_delay: float = 4.0
    """Seconds of WORKING for the resubscribe and delayed scenarios."""
    delayed_complete_delay: float = 2.0
    """Seconds before the delayed-complete scenario completes."""
    keep_unmatched_open: bool = False
    """A message that matches no scenario leaves its task waiting for input."""


class TckHandler(Handler):
    """Acts out the A2A TCK scenarios keyed by ``messageId`` prefix."""

    Settings = TckSettings
    uses_context: ClassVar[bool] = False
    accepted_file_types: ClassVar[tuple[str, ...]] = ("*/*",)
    """Every file part: the TCK (357c4a8) sends an unsupported media type in CORE-SEND-003
    and, binding no expected error there, counts the spec's ContentTypeNotSupportedError as
    a failure; the gateway's refusal is tested in tests/integration/test_handler_contract.py."""
    settings: TckSettings

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        message_id = request.message.message_id
        for prefix, scenario in SCENARIOS:
            if message_id.startswith(prefix):
                # follow-ups reuse their prefix and act the same scenario again, as the
                # TCK's reference agent does (an input-required task stays waiting)
                async for event in scenario(self, request):
                    yield event
                return
        if self.settings.keep_unmatched_open:
            yield InputRequired(
                f"Unhandled messageId prefix: {message_id}; send more input or cancel"
            )
        elif request.pending_input is not None:
            yield Completed(text=f"Input received: {request.text}")
        else:
            yield Completed(text=f"Unhandled messageId prefix: {message_id}")

    async def _complete(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Completed(text="Hello from TCK")

    async def _artifact_text(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Completed(text="Generated text content")

    async def _artifact_file(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Completed(parts=[Part(raw=b"tck", filename="output.txt", media_type="text/plain")])

    async def _artifact_file_url(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Completed(
            parts=[
                Part(
                    url="https://example.com/output.txt",
                    filename="output.txt",
                    media_type="text/plain",
                )
            ]
        )

    async def _artifact_data(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Completed(parts=[data_part({"key": "value", "count": 42})])

    async def _message(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Reply(text="Direct message response")

    async def _input_required(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield InputRequired("Please provide more input")

    async def _reject(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Rejected("rejected")

    async def _stream_completed_only(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Completed(text="Stream completed")

    async def _stream_file(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Progress("working")
        yield Completed(
            parts=[Part(raw=b"streamed file", filename="output.txt", media_type="text/plain")]
        )

    async def _stream_chunked(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Progress("working")
        yield TextDelta("chunk-1 ")
        yield TextDelta("chunk-2")
        yield Completed(text="chunk-1 chunk-2")

    async def _resubscribe(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Progress("working")
        await asyncio.sleep(self.settings.stream_delay)
        yield Completed(text="Resubscribe test complete")

    async def _delayed(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Progress("working")
        await asyncio.sleep(self.settings.delayed_complete_delay)
        yield Completed(text="Done after delay")


def _streamed(text: str):  # type: ignore[no-untyped-def]
    async def scenario(self: TckHandler, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        yield Progress("working")
        yield TextDelta(text)
        yield Completed(text=text)

    return scenario


# most specific prefix first
SCENARIOS = [
    ("tck-complete-task", TckHandler._complete),
    ("tck-artifact-text", TckHandler._artifact_text),
    ("tck-artifact-file-url", TckHandler._artifact_file_url),
    ("tck-artifact-file", TckHandler._artifact_file),
    ("tck-artifact-data", TckHandler._artifact_data),
    ("tck-message-response", TckHandler._message),
    ("tck-input-required", TckHandler._input_required),
    ("tck-reject-task", TckHandler._reject),
    ("tck-stream-artifact-text", _streamed("Streamed text content")),
    ("tck-stream-artifact-file", TckHandler._stream_file),
    ("tck-stream-artifact-chunked", TckHandler._stream_chunked),
    ("tck-stream-ordering-001", _streamed("Ordered output")),
    ("tck-stream-001", _streamed("Stream hello from TCK")),
    ("tck-stream-002", TckHandler._stream_completed_only),
    ("tck-stream-003", _streamed("Stream task lifecycle")),
    ("test-resubscribe-message-id", TckHandler._resubscribe),
    ("tck-delayed-complete", TckHandler._delayed),
]
