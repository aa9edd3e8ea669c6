"""A bridge driven through the whole gateway against ``httpx.MockTransport``: ``build_app``
takes the HTTP client its handlers use, so no backend process is needed for such a test."""

from __future__ import annotations

from a2a.types import TaskState

from tests.handlers.openai_mock import Backend, fixture, sse_response
from tests.support.harness import collect, reconstruct, running_gateway
from tests.support.messages import send_request

RECORDED_TEXT = "Hello from fakellm. You said: ping oc chat stream"


async def test_the_chat_bridge_streams_through_the_gateway_over_a_mock_transport():
    backend = Backend(lambda request: sse_response(fixture("oc_chat_stream.txt")))
    async with backend.client() as http, running_gateway(http=http) as gw:
        endpoint = await gw.add_endpoint("handlers.openai_chat:OpenAIChatHandler", settings={
            "base_url": "http://chat.test/v1", "model": "m1", "api_key": "mock-key"})
        async with gw.client(endpoint) as client:
            events = await collect(client.send_message(send_request("ping oc chat stream")))
        assert not http.is_closed  # the gateway closes only a client it opened
    assert list(reconstruct(events).values()) == [RECORDED_TEXT]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    [sent] = backend.requests
    assert sent.url == "http://chat.test/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer mock-key"
    body = backend.bodies[0]
    assert body["messages"][-1] == {"role": "user", "content": "ping oc chat stream"}
    assert body["user"].startswith("a2a-")  # the caller, as the backend's end user
