"""Endpoints a gateway cannot serve answer a clear error on every route; endpoints that are not
public need credentials; the default endpoint is also served at the root."""

from __future__ import annotations

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.types import TaskState

from tests.support.harness import collect, running_gateway
from tests.support.messages import send_request

SEND = {
    "jsonrpc": "2.0", "id": "req-7", "method": "SendMessage",
    "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
}
V10 = {"A2A-Version": "1.0"}


async def answers(base: str) -> dict[str, httpx.Response]:
    """The endpoint's card, a JSON-RPC call and a REST call."""
    async with httpx.AsyncClient(timeout=10) as http:
        return {
            "card": await http.get(f"{base}/.well-known/agent-card.json"),
            "jsonrpc": await http.post(f"{base}/a2a", json=SEND, headers=V10),
            "rest": await http.get(f"{base}/a2a/rest/tasks", headers=V10),
        }


@pytest.mark.parametrize(
    ("card", "settings", "problem"),
    [
        ({"skills": [{"id": "s"}]}, {}, "invalid card: skills[0] needs name, description, tags"),
        ({"skills": "everything"}, {}, "invalid card: skills must be a list"),
        ({"capabilities": []}, {}, "invalid card: capabilities must be an object"),
        ({}, {"delay": "fast"}, "invalid handler settings: delay"),
    ],
)
async def test_an_endpoint_that_fails_to_load_answers_its_problem_on_every_route(
    card, settings, problem
):
    async with running_gateway() as gw:
        endpoint_id = await gw.add_endpoint(card=card, settings=settings)
        got = await answers(gw.endpoint_url(endpoint_id))
    for route, response in got.items():
        assert response.status_code == 503, (route, response.text)
        assert problem in response.text, (route, response.text)
        assert "Traceback" not in response.text
    assert got["jsonrpc"].json()["id"] == "req-7"


async def test_an_endpoint_created_without_public_needs_credentials_unless_allowed():
    async with running_gateway(allow_unauthenticated_endpoints=False) as gw:
        private = await gw.add_endpoint(settings={"delay": 0})
        public = await gw.add_endpoint(settings={"delay": 0, "public": True})
        refused = await answers(gw.endpoint_url(private))
        served = await answers(gw.endpoint_url(public))
    assert refused.pop("card").status_code == 200  # the card says how to authenticate
    for response in refused.values():
        assert response.status_code == 401 and "needs an API key" in response.text
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert refused["jsonrpc"].json()["id"] == "req-7"
    assert served["card"].status_code == 200
    assert served["jsonrpc"].json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    async with running_gateway(allow_unauthenticated_endpoints=True) as gw:
        private = await gw.add_endpoint(settings={"delay": 0})
        allowed = await answers(gw.endpoint_url(private))
    assert all(r.status_code == 200 for r in allowed.values())


async def test_the_default_endpoint_is_served_at_the_root():
    endpoint_id = "0f0f0f0f-0000-4000-8000-000000000001"
    async with running_gateway(default_endpoint=endpoint_id) as gw:
        await gw.add_endpoint(settings={"delay": 0}, name="root agent", endpoint_id=endpoint_id)
        at_root = await answers(gw.base_url)
        async with httpx.AsyncClient(timeout=10) as http:
            # what a client given "http://host/<id>" (no trailing slash) resolves the card to
            card = await A2ACardResolver(http, gw.base_url).get_agent_card()
            task_id = at_root["jsonrpc"].json()["result"]["task"]["id"]
            got = await http.get(f"{gw.base_url}/a2a/rest/tasks/{task_id}", headers=V10)
        async with gw.client(endpoint_id) as client:
            request = send_request("a b")
            events = await collect(client.send_message(request))
    assert at_root["card"].status_code == 200 and at_root["card"].json()["name"] == "root agent"
    assert card.name == "root agent"
    assert at_root["jsonrpc"].json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got.status_code == 200 and got.json()["id"] == task_id
    assert at_root["rest"].json()["tasks"][0]["id"] == task_id
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_without_a_default_endpoint_the_root_has_no_agent():
    async with running_gateway() as gw:
        async with httpx.AsyncClient(timeout=10) as http:
            card = await http.get(f"{gw.base_url}/.well-known/agent-card.json")
            call = await http.post(f"{gw.base_url}/a2a", json=SEND, headers=V10)
    assert card.status_code == 404 and call.status_code == 404


async def test_the_card_is_also_at_the_path_clients_before_a2a_0_3_read():
    """a2a-sdk 0.2 and @a2a-js/sdk 0.3.0-0.3.1 discover ``.well-known/agent.json``."""
    endpoint_id = "0f0f0f0f-0000-4000-8000-000000000002"
    async with running_gateway(default_endpoint=endpoint_id) as gw:
        await gw.add_endpoint(settings={"delay": 0}, name="old path agent", endpoint_id=endpoint_id)
        async with httpx.AsyncClient(timeout=10) as http:
            cards = {
                url: await http.get(url) for url in (
                    f"{gw.endpoint_url(endpoint_id)}/.well-known/agent-card.json",
                    f"{gw.endpoint_url(endpoint_id)}/.well-known/agent.json",
                    f"{gw.base_url}/.well-known/agent.json",
                )
            }
    assert [r.status_code for r in cards.values()] == [200, 200, 200]
    assert len({r.content for r in cards.values()}) == 1  # the same card, the same ETag
    assert len({r.headers["ETag"] for r in cards.values()}) == 1
    assert next(iter(cards.values())).json()["name"] == "old path agent"
