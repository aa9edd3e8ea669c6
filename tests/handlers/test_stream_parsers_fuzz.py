"""Every streaming bridge's parser, fed any sequence of frames (JSON objects of its protocol's
event types and fields, with values of any JSON shape, and frames that are not JSON): each
frame gives events or fails the run with ``UnexpectedFrame``, never another error, and the
stream's end gives exactly one closing event, whose data the store can keep as JSON."""

from __future__ import annotations

import json
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers.ag_ui import AgUiHandler
from handlers.agentcore import AgentCoreHandler
from handlers.base import AuthRequired, Canceled, Completed, Failed, InputRequired, Rejected
from handlers.bridge import StreamingBridge
from handlers.n8n import N8nHandler
from handlers.openai_chat import OpenAIChatHandler
from handlers.openclaw import OpenClawHandler
from handlers.responses import ResponsesHandler
from handlers.upstream import SSEFrame, UnexpectedFrame
from tests.support.examples import examples
from tests.support.messages import handler_request

BRIDGES: dict[str, tuple[type[StreamingBridge], dict[str, Any]]] = {
    "ag-ui": (AgUiHandler, {"ag_ui_adapter": "agent-framework"}),
    "agentcore": (AgentCoreHandler, {"agentcore_url": "http://agentcore.test"}),
    "n8n": (N8nHandler, {"n8n_chat_url": "http://n8n.test/webhook/x/chat"}),
    "openai-chat": (OpenAIChatHandler, {}),
    "openclaw": (OpenClawHandler, {}),
    "responses": (ResponsesHandler, {}),
}
TYPES = [
    # AG-UI
    "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CHUNK",
    "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "STATE_SNAPSHOT",
    "MESSAGES_SNAPSHOT", "CUSTOM", "RUN_ERROR", "RUN_FINISHED",
    # Responses
    "response.created", "response.in_progress", "response.output_text.delta",
    "response.completed", "response.failed", "response.incomplete", "response.cancelled",
    "response.function_approval.requested", "error",
    # n8n
    "begin", "item", "end",
]
FIELDS = ["delta", "messageId", "role", "toolCallId", "toolCallName", "content", "messages",
          "snapshot", "name", "value", "message", "code", "outcome", "response", "response_id",
          "request_id", "function_call", "choices", "usage", "data", "text", "error",
          "metadata", "status", "id", "output"]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), inner, max_size=4),
    max_leaves=10)
EVENT = st.builds(lambda kind, fields: {**fields, "type": kind} if kind is not None else fields,
                  st.sampled_from(TYPES) | st.none(),
                  st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=5))
FRAME = (EVENT.map(json.dumps) | JSON.map(json.dumps) | st.sampled_from(["[DONE]", "", "{"])
         ).map(lambda data: SSEFrame("", data))
CLOSING = (Completed, Failed, Canceled, Rejected, InputRequired, AuthRequired)


@settings(max_examples=examples(150), deadline=None)
@given(st.sampled_from(sorted(BRIDGES)), st.lists(FRAME, max_size=10))
def test_any_frames_give_events_or_an_unexpected_frame_and_one_closing_event(
        bridge: str, frames: list[SSEFrame]) -> None:
    handler_class, fields = BRIDGES[bridge]
    handler = handler_class(handler_class.Settings(**fields), httpx.AsyncClient())
    parser = handler.stream_parser(handler.build_body(handler_request("hi"), stream=True))
    try:
        for frame in frames:
            parser.feed(frame)
            if parser.ended:
                break
        closing = parser.finish()
    except UnexpectedFrame:
        return
    ends = [e for e in closing if isinstance(e, CLOSING)]
    assert len(ends) == 1, closing
    json.dumps(getattr(ends[0], "data", None))
