"""Keepalives that deployed clients survive (issue 22, item 1).

A stream that stays silent for longer than the SSE keepalive interval carries keepalive
comments. httpx-sse 0.4 (the decoder a2a-sdk 0.2 and 0.3 clients resolve to) dispatches an
event with empty data for a blank line once an ``id:`` was seen, although the SSE rules drop
such an event; those SDKs then fail the whole stream with ``JSON Error: Expecting value``.
Here each deployed client reads a stream with such silences to its end, and the raw decoder
reads every binding and version: each event it dispatches must hold one event's JSON.

The echo agent pauses WORD_DELAY seconds after each word: keepalives fall in every pause.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from a2a_gateway.transport.sse import OPEN_STREAMS
from tests.interop.legacy import JS, SDK02, SDK03, Client, installed, run_client
from tests.interop.wire import (
    BINDINGS,
    JSONRPC_0_3,
    Binding,
    completed,
    decoded,
    kind,
    message_0_3,
    read_sse,
)
from tests.support.harness import RunningGateway, running_gateway
from tests.support.held import add_held_echo
from tests.support.messages import rpc
from tests.support.waiting import eventually

KEEPALIVE_SECONDS = 0.25
WORD_DELAY = 0.6
"""Seconds of silence after each echoed word: more than two keepalive intervals."""
RESUBSCRIBED_TEXT = "one two three four five six seven eight nine"
"""Six seconds of echo: time for a client process to start and resubscribe while it runs."""
MODERN_CARD_PATH = ".well-known/agent-card.json"
"""Given to the pre-0.3 clients here so that these tests need no pre-0.3 card path (item 4
is tested on its own in test_card_discovery)."""


async def slow_echo(gw: RunningGateway) -> str:
    return await gw.add_endpoint("handlers.echo:EchoHandler", settings={"delay": WORD_DELAY})


async def started_task(gw: RunningGateway, endpoint_id: str, text: str) -> str:
    """A task of the slow echo, under way (0.3 message/send, not blocking): its id."""
    params = {"message": message_0_3(text), "configuration": {"blocking": False}}
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(gw.jsonrpc_url(endpoint_id), json=rpc("message/send", params))
    task = response.json()["result"]
    assert task["status"]["state"] in ("submitted", "working"), task
    return task["id"]


STREAMING_CLIENTS = [
    pytest.param(SDK03, {}, id="a2a-sdk-0.3.22"),
    pytest.param(SDK02, {"card_path": "/" + MODERN_CARD_PATH}, id="a2a-sdk-0.2.16"),
    pytest.param(JS, {"card_path": MODERN_CARD_PATH}, id="a2a-js-sdk-0.3.1"),
]


@pytest.mark.parametrize(("client", "card_args"), STREAMING_CLIENTS)
async def test_a_deployed_client_reads_a_silent_stream_to_its_end(
    client: Client, card_args: dict
) -> None:
    installed(client)
    async with running_gateway(sse_keepalive_seconds=KEEPALIVE_SECONDS) as gw:
        endpoint_id = await slow_echo(gw)
        run = await run_client(
            client,
            {
                "action": "stream",
                "base_url": gw.endpoint_url(endpoint_id),
                "message": message_0_3("hi"),
                **card_args,
            },
        )
    run.assert_ended()
    assert completed(run.events), run.events
    assert run.elapsed > 2 * WORD_DELAY  # the stream had its silences


@pytest.mark.parametrize("client", [pytest.param(SDK03, id="a2a-sdk-0.3.22"),
                                    pytest.param(JS, id="a2a-js-sdk-0.3.1")])
async def test_a_deployed_client_resubscribes_and_reads_a_silent_stream_to_its_end(
    client: Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed(client)
    async with running_gateway(sse_keepalive_seconds=KEEPALIVE_SECONDS) as gw:
        # the run waits after its first word until the client process has resubscribed (the
        # six seconds of echo a process had to start in could be used up on a loaded machine,
        # and an ended task refuses the resubscribe)
        endpoint_id, release = await add_held_echo(gw, monkeypatch,
                                                   settings={"delay": WORD_DELAY})
        task_id = await started_task(gw, endpoint_id, RESUBSCRIBED_TEXT)
        running = asyncio.create_task(run_client(
            client,
            {
                "action": "resubscribe",
                "base_url": gw.endpoint_url(endpoint_id),
                "task_id": task_id,
                "card_path": MODERN_CARD_PATH,
            },
        ))
        try:
            await eventually(lambda: gw.app[OPEN_STREAMS] or running.done(), timeout=60,
                             what="the client's subscription")
        finally:
            release.set()
        run = await running
    run.assert_ended()
    assert kind(run.events[0]) == "task", run.events[0]
    assert completed(run.events), run.events


@pytest.mark.parametrize("binding", BINDINGS, ids=lambda b: b.name)
async def test_httpx_sse_dispatches_no_empty_event_on_a_silent_stream(binding: Binding) -> None:
    async with running_gateway(sse_keepalive_seconds=KEEPALIVE_SECONDS) as gw, \
            httpx.AsyncClient(timeout=30) as http:
        endpoint_id = await slow_echo(gw)
        read = await read_sse(http, binding.stream(gw, endpoint_id, binding.message("hi")))
    assert read.comment_lines() >= 2, read.raw  # the silences carried keepalives
    events = decoded(read, binding)
    assert completed(events), events
    if binding is not JSONRPC_0_3:  # a 1.0 client can still resume with Last-Event-ID
        assert all(sse.id for sse in read.events), [sse.id for sse in read.events]


@pytest.mark.parametrize("binding", BINDINGS, ids=lambda b: b.name)
async def test_httpx_sse_dispatches_no_empty_event_on_a_silent_subscription(
    binding: Binding,
) -> None:
    async with running_gateway(sse_keepalive_seconds=KEEPALIVE_SECONDS) as gw, \
            httpx.AsyncClient(timeout=30) as http:
        endpoint_id = await slow_echo(gw)
        task_id = await started_task(gw, endpoint_id, "one two")
        read = await read_sse(http, binding.subscribe(gw, endpoint_id, task_id))
    assert read.comment_lines() >= 2, read.raw
    events = decoded(read, binding)
    assert kind(events[0]) == "task", events[0]
    assert completed(events), events
