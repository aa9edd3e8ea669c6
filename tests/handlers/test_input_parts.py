"""Inbound file and data parts, as the bridges send them upstream: OpenClaw
``input_image``/``input_file`` items (OpenResponses), the chat handler's ``image_url``
content parts (OpenAI chat); the exact JSON, against ``httpx.MockTransport``."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from handlers.base import Completed, FileInput, Handler, HandlerRequest, Rejected, Reply, Turn
from handlers.echo import EchoHandler, EchoSettings
from handlers.hermes import HermesAgentHandler, HermesSettings
from handlers.openai_chat import OpenAIChatHandler, OpenAIChatSettings
from handlers.openclaw import OpenClawHandler, OpenClawSettings
from tests.handlers.openai_mock import Backend, collect, fixture, sse_response
from tests.handlers.test_hermes_parser import FakeHermes
from tests.support.messages import handler_request

PNG = b"\x89PNG\r\n\x1a\n-not-really-an-image"
PNG_B64 = base64.b64encode(PNG).decode()
NOTES = b"line one\nline two\n"
OPENCLAW_KEYS = {"model", "input", "instructions", "tools", "tool_choice", "stream",
                 "max_output_tokens", "max_tool_calls", "user", "temperature", "top_p",
                 "metadata", "store", "previous_response_id", "reasoning", "truncation"}


def with_files(text: str, *files: FileInput,
               data: list[dict[str, Any]] | None = None) -> HandlerRequest:
    return handler_request(text, data=data or [], files=list(files))


async def sent_body(make: type[Handler], settings: Any, recording: str,
                    request: HandlerRequest) -> tuple[list, dict[str, Any]]:
    backend = Backend(lambda r: sse_response(fixture(recording)))
    async with backend.client() as http:
        events = await collect(make(settings, http).run(request))
    [body] = backend.bodies
    return events, body


def openclaw_settings() -> OpenClawSettings:
    return OpenClawSettings(openclaw_api_url="http://openclaw.test", openclaw_api_key="t" * 16)


def chat_settings() -> OpenAIChatSettings:
    return OpenAIChatSettings(base_url="http://chat.test/v1", model="m1")


# -- OpenClaw ----------------------------------------------------------------------------


async def test_openclaw_sends_images_and_documents_as_input_items() -> None:
    request = with_files(
        "what is in these?",
        FileInput("image/png", "dot.png", data=PNG),
        FileInput("image/jpeg", "cat.jpg", uri="https://example.com/cat.jpg"),
        FileInput("text/plain; charset=utf-8", "notes.txt", data=NOTES),
        FileInput("application/pdf", "paper.pdf", uri="https://example.com/paper.pdf"),
        data=[{"k": 1}])
    events, body = await sent_body(OpenClawHandler, openclaw_settings(),
                                   "oc_responses_stream.txt", request)
    assert isinstance(events[-1], Completed)
    assert set(body) <= OPENCLAW_KEYS
    assert body["input"] == [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": 'what is in these?\n{"k": 1}'},
        {"type": "input_image", "source": {"type": "base64", "media_type": "image/png",
                                           "data": PNG_B64}},
        {"type": "input_image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "input_file", "source": {
            "type": "base64", "media_type": "text/plain; charset=utf-8",
            "data": base64.b64encode(NOTES).decode(), "filename": "notes.txt"}},
        {"type": "input_file", "source": {"type": "url", "url": "https://example.com/paper.pdf"}},
    ]}]


async def test_openclaw_without_files_sends_the_text_as_before() -> None:
    _, body = await sent_body(OpenClawHandler, openclaw_settings(), "oc_responses_stream.txt",
                              handler_request("just text"))
    assert body["input"] == "just text"


async def test_a_file_alone_is_a_message_to_send() -> None:
    request = with_files("", FileInput("image/png", data=PNG))
    events, body = await sent_body(OpenClawHandler, openclaw_settings(),
                                   "oc_responses_stream.txt", request)
    assert isinstance(events[-1], Completed)
    assert body["input"][0]["content"] == [
        {"type": "input_image", "source": {"type": "base64", "media_type": "image/png",
                                           "data": PNG_B64}}]


# -- the chat handler --------------------------------------------------------------------


async def test_chat_sends_images_as_image_url_content_parts() -> None:
    request = with_files("describe", FileInput("image/png", "dot.png", data=PNG),
                         FileInput("image/webp", uri="https://example.com/a.webp"))
    events, body = await sent_body(OpenAIChatHandler, chat_settings(), "oc_chat_stream.txt",
                                   request)
    assert isinstance(events[-1], Completed)
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "describe"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.webp"}},
    ]}]


async def test_chat_with_an_image_alone_sends_only_the_image() -> None:
    request = with_files("", FileInput("image/gif", data=b"GIF89a"))
    _, body = await sent_body(OpenAIChatHandler, chat_settings(), "oc_chat_stream.txt", request)
    assert body["messages"][-1]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lGODlh"}}]


async def test_a_message_with_nothing_to_send_is_still_rejected() -> None:
    backend = Backend(lambda r: sse_response(fixture("oc_chat_stream.txt")))
    async with backend.client() as http:
        events = await collect(OpenAIChatHandler(chat_settings(), http).run(handler_request("")))
    assert events == [Rejected("the message has no text, data or file for the chat backend")]
    assert not backend.requests


# -- Hermes -------------------------------------------------------------------------------


async def test_hermes_runs_take_images_as_content_parts_of_the_input() -> None:
    fake = FakeHermes()
    request = with_files("look", FileInput("image/png", data=PNG),
                         FileInput("image/jpeg", uri="https://example.com/cat.jpg"))
    request.history = [Turn("user", "before")]
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
        handler = HermesAgentHandler(HermesSettings(hermes_api_key="k" * 16), http)
        events = await collect(handler.run(request))
    assert isinstance(events[-1], Completed)
    [body] = fake.bodies("/v1/runs")
    assert body["input"] == [{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}]}]
    assert body["conversation_history"] == [{"role": "user", "content": "before"}]


async def test_hermes_message_mode_sends_images_as_content_parts() -> None:
    fake = FakeHermes(None)
    fake.queue("POST", "/v1/chat/completions", httpx.Response(200, json={"choices": [
        {"index": 0, "message": {"role": "assistant", "content": "a dot"}}]}))
    request = with_files("look", FileInput("image/png", data=PNG))
    async with httpx.AsyncClient(transport=httpx.MockTransport(fake)) as http:
        handler = HermesAgentHandler(HermesSettings(response_mode="message"), http)
        events = await collect(handler.run(request))
    assert events == [Reply(text="a dot")]
    [body] = fake.bodies("/v1/chat/completions")
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}}]}]


# -- what each handler declares it takes ----------------------------------------------------


@pytest.mark.parametrize(("handler", "settings", "accepted", "refused"), [
    (OpenClawHandler, openclaw_settings(),
     ["image/png", "IMAGE/JPEG", "image/webp", "text/plain; charset=utf-8", "application/pdf",
      "text/csv", "application/json"],
     ["image/svg+xml", "audio/wav", "application/zip", "video/mp4"]),
    (OpenAIChatHandler, chat_settings(), ["image/png", "image/jpeg", "image/gif"],
     ["application/pdf", "text/plain", "audio/wav"]),
    (HermesAgentHandler, HermesSettings(), ["image/png", "image/jpeg"],
     ["text/plain", "application/pdf"]),
    (EchoHandler, EchoSettings(), [], ["image/png"]),
])
async def test_accepted_file_types(handler: type[Handler], settings: Any, accepted: list[str],
                                   refused: list[str]) -> None:
    async with httpx.AsyncClient() as http:
        instance = handler(settings, http)
    assert [t for t in accepted if not instance.accepts_file(t)] == []
    assert [t for t in refused if instance.accepts_file(t)] == []
