"""What a client that ignores ``append`` shows (issue 22, item 2).

A client that read a stream from its start and adds up the text of every artifact update,
whatever its ``append`` flag, must end with the stored artifact (GetTask), as a client that
applies ``append`` (true: add, false: replace) does. A final chunk that repeats the whole
text with ``append: false`` is valid A2A but shows the answer twice in such clients (an
AI-SDK provider's streamText, a CLI's streamed follow-up).

Read with the deployed clients (@a2a-js/sdk 0.3.1, a2a-sdk 0.3.22: the events they hand
to their caller) and with httpx-sse on JSON-RPC 1.0 and 0.3 and HTTP+JSON.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.interop.legacy import JS, SDK03, Client, installed, run_client
from tests.interop.wire import (
    BINDINGS,
    Binding,
    applied_texts,
    artifact_updates,
    decoded,
    get_task,
    kind,
    message_0_3,
    naive_texts,
    read_sse,
    stored_texts,
)
from tests.support.harness import RunningGateway, running_gateway

CASES = [
    pytest.param("one two three four five six", 0.02, id="echo"),
    # named artifacts first: "notes" in two chunks (the second appended, last_chunk), a file, data
    pytest.param("?artifacts one two three", 0.02, id="artifacts"),
    # deltas faster than the stream takes them: the gateway merges waiting chunks
    pytest.param(" ".join(f"w{i}" for i in range(200)), 0.0, id="merged-chunks"),
]
"""(the message's text, the echo's seconds per word)"""


async def echo(gw: RunningGateway, word_delay: float) -> str:
    return await gw.add_endpoint("handlers.echo:EchoHandler", settings={"delay": word_delay})


async def assert_concatenation_is_the_stored_artifact(
    gw: RunningGateway, endpoint_id: str, events: list[dict[str, Any]]
) -> None:
    assert kind(events[0]) == "task", events[0]
    async with httpx.AsyncClient(timeout=30) as http:
        task = await get_task(http, gw, endpoint_id, events[0]["task"]["id"])
    stored = stored_texts(task)
    assert len(artifact_updates(events)) > len(stored), "the answer came in chunks"
    assert applied_texts(events) == stored, artifact_updates(events)
    assert naive_texts(events) == stored, artifact_updates(events)
    last = [e["artifactUpdate"] for e in events if kind(e) == "artifactUpdate"][-1]
    assert last.get("lastChunk"), last  # the stream says where the answer ends


@pytest.mark.parametrize(("text", "word_delay"), CASES)
@pytest.mark.parametrize("binding", BINDINGS, ids=lambda b: b.name)
async def test_httpx_sse_concatenation_of_every_chunk_is_the_stored_artifact(
    binding: Binding, text: str, word_delay: float
) -> None:
    async with running_gateway() as gw, httpx.AsyncClient(timeout=30) as http:
        endpoint_id = await echo(gw, word_delay)
        read = await read_sse(http, binding.stream(gw, endpoint_id, binding.message(text)))
        await assert_concatenation_is_the_stored_artifact(gw, endpoint_id, decoded(read, binding))


@pytest.mark.parametrize(("text", "word_delay"), CASES)
@pytest.mark.parametrize("client", [pytest.param(SDK03, id="a2a-sdk-0.3.22"),
                                    pytest.param(JS, id="a2a-js-sdk-0.3.1")])
async def test_a_deployed_clients_concatenation_of_every_chunk_is_the_stored_artifact(
    client: Client, text: str, word_delay: float
) -> None:
    installed(client)
    async with running_gateway() as gw:
        endpoint_id = await echo(gw, word_delay)
        run = await run_client(
            client,
            {
                "action": "stream",
                "base_url": gw.endpoint_url(endpoint_id),
                "card_path": ".well-known/agent-card.json",
                "message": message_0_3(text),
            },
        )
        run.assert_ended()
        await assert_concatenation_is_the_stored_artifact(gw, endpoint_id, run.events)
