"""The handlers' response modes: ``response_mode`` in the base class
(``ResponseModeSettings``, ``Handler.answer``) and the echo handler's triggers that
produce ``ArtifactDelta`` and ``AuthRequired`` for gateway-level tests."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.types import Part
from google.protobuf.json_format import MessageToDict

from handlers.base import (
    ArtifactDelta,
    AuthRequired,
    Completed,
    Failed,
    HandlerRequest,
    InputRequired,
    Reply,
    ResponseModeSettings,
    TextDelta,
)
from handlers.echo import AUTH_URL, EchoHandler, EchoSettings
from handlers.hermes import HermesSettings
from handlers.openai_chat import OpenAIChatSettings
from handlers.openclaw import OpenClawSettings
from handlers.responses import ResponsesSettings
from tests.support.messages import handler_request


async def echo(text: str, *, pending: dict[str, Any] | None = None, **settings: Any) -> list:
    request: HandlerRequest = handler_request(text)
    request.pending_input = pending
    async with httpx.AsyncClient() as http:
        handler = EchoHandler(EchoSettings(delay=0, **settings), http)
        return [event async for event in handler.run(request)]


def as_dict(part: Part) -> dict[str, Any]:
    return MessageToDict(part)


# -- response_mode in the base class ----------------------------------------------------


@pytest.mark.parametrize("settings", [EchoSettings, HermesSettings, OpenAIChatSettings,
                                      OpenClawSettings, ResponsesSettings])
def test_every_handler_with_a_response_mode_takes_it_from_the_base(settings: type) -> None:
    assert issubclass(settings, ResponseModeSettings)
    assert "response_mode" not in vars(settings).get("__annotations__", {})
    assert settings(response_mode="message").response_mode == "message"
    with pytest.raises(ValueError):
        settings(response_mode="stream")


async def test_answer_turns_a_completed_into_a_reply_in_message_mode_only() -> None:
    completed = Completed(text="hi", metadata={"usage": {"total_tokens": 3}})
    async with httpx.AsyncClient() as http:
        task_mode = EchoHandler(EchoSettings(), http)
        message_mode = EchoHandler(EchoSettings(response_mode="message"), http)
        assert task_mode.answer(completed) is completed
        assert message_mode.answer(completed) == Reply(text="hi", metadata=completed.metadata)
        assert message_mode.answer(Failed("no")) == Failed("no")


async def test_echo_in_message_mode_replies_once() -> None:
    assert await echo("hello ?input", response_mode="message") == [
        Reply(text="echo: hello ?input")]


# -- the echo triggers --------------------------------------------------------------------


async def test_artifacts_trigger_streams_three_named_artifacts_then_the_echo() -> None:
    events = await echo("show ?artifacts")
    artifacts = [e for e in events if isinstance(e, ArtifactDelta)]
    assert [(a.artifact_id, a.name, a.append, a.last_chunk) for a in artifacts] == [
        ("notes", "notes", False, False), ("notes", "notes", True, True),
        ("file", "file", False, True), ("data", "data", False, True)]
    assert [as_dict(p) for a in artifacts[:2] for p in a.parts] == [
        {"text": "first "}, {"text": "second"}]
    [file] = artifacts[2].parts
    assert (file.raw, file.filename, file.media_type) == (b"show ?artifacts", "echo.txt",
                                                          "text/plain")
    [data] = artifacts[3].parts
    assert as_dict(data)["data"] == {"echo": "show ?artifacts", "words": 2}
    assert events[-1] == Completed(text="echo: show ?artifacts")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == events[-1].text


async def test_auth_trigger_asks_for_authorization_then_echoes_the_answer() -> None:
    [event] = await echo("do it ?auth")
    assert isinstance(event, AuthRequired)
    assert event.data == {"auth_url": AUTH_URL} and AUTH_URL in event.prompt
    answered = await echo("done ?auth", pending=event.data)
    assert answered[-1] == Completed(text="echo: done ?auth")


async def test_input_trigger_still_asks_for_input() -> None:
    [event] = await echo("?input please")
    assert event == InputRequired("What should I echo? Reply with any text.",
                                  {"choices": ["any text"]})
