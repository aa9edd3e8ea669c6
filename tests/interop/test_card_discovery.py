"""Deployed clients that look for the card at the path before A2A 0.3, ``.well-known/agent.json``
(issue 22, items 4 and 5), find it below an endpoint and, for the default endpoint, at the
gateway's root, and then talk to the endpoint it names.

a2a-sdk 0.2.16's A2ACardResolver and @a2a-js/sdk 0.3.1's A2AClient, each given a base URL as
its users do, stream a message after discovery. The JS SDK 0.3.1 joins its base URL and the
card's path with one '/' (a trailing '/' of the base is dropped); it has no way to take a
card's full URL (``A2AClient.fromCardUrl`` came in later 0.3 releases), so the base URL is
the only input to check there, with and without the trailing '/'.
"""

from __future__ import annotations

import uuid

import pytest

from tests.interop.legacy import JS, SDK02, Client, installed, run_client
from tests.interop.wire import applied_texts, completed, message_0_3
from tests.support.harness import RunningGateway, running_gateway

DEFAULT_ENDPOINT = str(uuid.uuid4())


async def assert_discovers_and_streams(client: Client, base_url: str, **args: str) -> None:
    run = await run_client(client, {"action": "stream", "base_url": base_url,
                                    "message": message_0_3("found"), **args})
    run.assert_ended()
    assert completed(run.events), run.events
    assert list(applied_texts(run.events).values()) == ["echo: found"]


def below_endpoint(gw: RunningGateway) -> str:
    return gw.endpoint_url(DEFAULT_ENDPOINT)


def at_root(gw: RunningGateway) -> str:
    return gw.base_url


BASES = [
    pytest.param(SDK02, below_endpoint, "", id="a2a-sdk-0.2.16-endpoint"),
    pytest.param(SDK02, at_root, "", id="a2a-sdk-0.2.16-root"),
    pytest.param(JS, below_endpoint, "", id="a2a-js-sdk-0.3.1-endpoint"),
    pytest.param(JS, below_endpoint, "/", id="a2a-js-sdk-0.3.1-endpoint-slash"),
    pytest.param(JS, at_root, "", id="a2a-js-sdk-0.3.1-root"),
    pytest.param(JS, at_root, "/", id="a2a-js-sdk-0.3.1-root-slash"),
]
"""(client, its base URL, what follows that URL)"""


@pytest.mark.parametrize(("client", "base", "tail"), BASES)
async def test_a_pre_0_3_client_finds_the_card_at_agent_json(
    client: Client, base, tail: str
) -> None:
    installed(client)
    async with running_gateway(default_endpoint=DEFAULT_ENDPOINT) as gw:
        await gw.add_endpoint(settings={"delay": 0.0}, endpoint_id=DEFAULT_ENDPOINT)
        await assert_discovers_and_streams(client, base(gw) + tail)


async def test_the_js_client_finds_an_endpoints_card_given_its_path_from_the_root() -> None:
    installed(JS)
    async with running_gateway() as gw:
        endpoint_id = await gw.add_endpoint(settings={"delay": 0.0})
        await assert_discovers_and_streams(JS, gw.base_url,
                                           card_path=f"{endpoint_id}/.well-known/agent-card.json")
