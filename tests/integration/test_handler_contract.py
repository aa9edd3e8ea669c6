"""Handler contract v2 through a running gateway, on every store, with the real a2a-sdk
client: named artifacts with file and data parts, AUTH_REQUIRED and its answer, inbound
file parts refused when the agent does not take them, and a new handler of a few lines
loaded from outside ``handlers/`` through the allowlist."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.types import (
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import ContentTypeNotSupportedError
from google.protobuf.json_format import MessageToDict

from tests.support.harness import RunningGateway, collect, running_gateway

COMPLETED = TaskState.TASK_STATE_COMPLETED
AUTH_REQUIRED = TaskState.TASK_STATE_AUTH_REQUIRED


@pytest.fixture
def gw(every_store: RunningGateway) -> RunningGateway:
    """The gateway, on each store in turn (tests/integration/conftest.py)."""
    return every_store


def send(text: str, *parts: Part, **fields: str) -> SendMessageRequest:
    message = Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text), *parts], **fields
    )
    return SendMessageRequest(message=message)


async def test_named_artifacts_stream_and_are_stored_with_their_file_and_data_parts(
    gw: RunningGateway,
):
    echo = await gw.add_endpoint(settings={"delay": 0.0})
    async with gw.client(echo) as client:
        events = await collect(client.send_message(send("show ?artifacts")))
        updates = [e.artifact_update for e in events if e.HasField("artifact_update")]
        named = [
            (
                u.artifact.artifact_id,
                u.append,
                u.last_chunk,
                [p.text for p in u.artifact.parts if p.text],
            )
            for u in updates
            if u.artifact.artifact_id in ("notes", "file", "data")
        ]
        # published faster than the client reads (delay 0): the two notes chunks wait, and
        # come, as one chunk of both their parts
        assert named == [("notes", False, True, ["first ", "second"]), ("file", False, True, []),
                         ("data", False, True, [])]
        task_id = events[0].task.id
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == COMPLETED
    by_id = {a.artifact_id: a for a in task.artifacts}
    assert [p.text for p in by_id["notes"].parts] == ["first ", "second"]
    [file] = by_id["file"].parts
    assert (file.filename, file.media_type, file.raw) == (
        "echo.txt",
        "text/plain",
        b"show ?artifacts",
    )
    assert MessageToDict(by_id["data"].parts[0].data) == {"echo": "show ?artifacts", "words": 2}
    response = [a for a in task.artifacts if a.name == "response"]
    assert response[0].parts[0].text == "echo: show ?artifacts"


async def test_auth_required_waits_with_its_prompt_and_the_answer_completes_the_task(
    gw: RunningGateway,
):
    echo = await gw.add_endpoint(settings={"delay": 0.0})
    async with gw.client(echo, streaming=False) as client:
        [first] = await collect(client.send_message(send("book ?auth")))
        task = first.task
        assert task.status.state == AUTH_REQUIRED
        status = task.status.message
        assert "authorize" in status.parts[0].text.lower()
        assert MessageToDict(status.parts[1].data) == {"auth_url": "https://example.com/echo/authorize"}
        [second] = await collect(
            client.send_message(send("granted", task_id=task.id, context_id=task.context_id))
        )
    assert second.task.id == task.id
    assert second.task.status.state == COMPLETED
    assert second.task.artifacts[0].parts[0].text == "echo: granted"


async def test_a_file_part_the_agent_does_not_take_is_refused_before_any_task_exists(
    gw: RunningGateway,
):
    echo = await gw.add_endpoint(settings={"delay": 0.0})
    pdf = Part(raw=b"%PDF-1.7", media_type="application/pdf", filename="a.pdf")
    async with gw.client(echo, streaming=False) as client:
        with pytest.raises(ContentTypeNotSupportedError, match="application/pdf"):
            await collect(client.send_message(send("read this", pdf)))
        listed = await client.list_tasks(ListTasksRequest())
    assert list(listed.tasks) == []
    # the JSON-RPC error code and the request id, as a raw client sees them
    body = {"jsonrpc": "2.0", "id": "req-7", "method": "SendMessage", "params": {"message": {
        "messageId": "m1", "role": "ROLE_USER",
        "parts": [{"text": "x"}, {"raw": "JVBERg==", "mediaType": "application/pdf"}]}}}
    async with httpx.AsyncClient() as http:
        answer = (
            await http.post(gw.jsonrpc_url(echo), json=body, headers={"A2A-Version": "1.0"})
        ).json()
    assert answer["id"] == "req-7"
    assert answer["error"]["code"] == -32005


SHOUT = '''
    """A handler of a few lines: answers in capitals."""
    from handlers.base import Completed, Handler

    class Shout(Handler):
        uses_context = False

        async def run(self, request):
            yield Completed(text=request.text.upper())
'''


@pytest.fixture
def outside_module(tmp_path: Path) -> Iterator[str]:
    """A handler module in a directory of its own, importable as ``acme_agents.shout``."""
    package = tmp_path / "plugins" / "acme_agents"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "shout.py").write_text(textwrap.dedent(SHOUT))
    sys.path.insert(0, str(tmp_path / "plugins"))
    try:
        yield "acme_agents.shout:Shout"
    finally:
        sys.path.remove(str(tmp_path / "plugins"))
        for name in [m for m in sys.modules if m.startswith("acme_agents")]:
            del sys.modules[name]


async def test_a_new_handler_of_a_few_lines_works_end_to_end_through_the_allowlist(
    outside_module: str, tmp_path: Path
):
    async with running_gateway(f"sqlite:///{tmp_path / 'a.db'}",
                               handler_allowlist=["handlers.", "acme_agents."]) as gw:
        shout = await gw.add_endpoint(outside_module)
        async with gw.client(shout) as client:
            events = await collect(client.send_message(send("hello there")))
            task = await client.get_task(GetTaskRequest(id=events[0].task.id))
    assert task.status.state == COMPLETED
    assert task.artifacts[0].parts[0].text == "HELLO THERE"


async def test_a_handler_outside_the_allowlist_is_not_loaded(outside_module: str):
    async with running_gateway() as gw:
        shout = await gw.add_endpoint(outside_module)
        async with httpx.AsyncClient() as http:
            response = await http.get(f"{gw.endpoint_url(shout)}/.well-known/agent-card.json")
    assert response.status_code == 503
    assert "not in the allowlist" in response.text
    assert "acme_agents" not in sys.modules
