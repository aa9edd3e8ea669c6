"""``RemoteTaskMapper`` on recorded A2A frames (tests/fixtures/a2a_remote/: SSE bodies of
this gateway's 1.0 binding and of the a2a-sdk's 0.3 server, decoded as the a2a-sdk client
decodes them), and the outbound credentials and error reasons of the remote A2A handler."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from a2a.client.errors import A2AClientError, A2AClientTimeoutError
from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.types import Artifact, Part, StreamResponse, Task, TaskState, TaskStatus
from a2a.utils.errors import TaskNotFoundError
from google.protobuf.json_format import ParseDict

from handlers.a2a_remote import (
    A2ARemoteHandler,
    A2ARemoteSettings,
    OutboundAuth,
    OutboundAuthError,
    RemoteTaskMapper,
    error_reason,
)
from handlers.base import (
    ArtifactDelta,
    AuthRequired,
    Canceled,
    Completed,
    Failed,
    InputRequired,
    Progress,
    Rejected,
    RunStarted,
    SessionUpdate,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "a2a_remote"


def frames(name: str) -> list[StreamResponse]:
    """The stream responses of a recorded SSE body, 1.0 or 0.3 as its name says."""
    results = [json.loads(line[5:])["result"] for line in (FIXTURES / name).read_text().splitlines()
               if line.startswith("data:")]
    if name.startswith("v03"):
        return [conversions.to_core_stream_response(types_v03.SendStreamingMessageSuccessResponse(
            id="r1", result=types_v03.SendStreamingMessageSuccessResponse.model_validate(
                {"id": "r1", "jsonrpc": "2.0", "result": r}).result)) for r in results]
    return [ParseDict(r, StreamResponse()) for r in results]


def mapped(name: str, mapper: RemoteTaskMapper | None = None) -> tuple[list, RemoteTaskMapper]:
    mapper = mapper or RemoteTaskMapper()
    events = []
    for frame in frames(name):
        events += mapper.feed(frame)
        if mapper.ended:
            break
    return events, mapper


def text_of(deltas: list[ArtifactDelta]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for d in deltas:
        text = "".join(p.text for p in d.parts)
        texts[d.artifact_id] = texts.get(d.artifact_id, "") + text if d.append else text
    return texts


@pytest.mark.parametrize("name, answer", [("v10_stream.txt", "echo: one two three"),
                                          ("v03_stream.txt", "said: one two")])
def test_a_streamed_answer_passes_through_and_completes(name, answer):
    events, mapper = mapped(name)
    first = frames(name)[0].task
    assert events[0] == RunStarted(first.id)
    assert events[1] == SessionUpdate({"remote_context_id": first.context_id})
    deltas = [e for e in events if isinstance(e, ArtifactDelta)]
    assert len([d for d in deltas if d.append]) >= 2
    assert list(text_of(deltas).values()) == [answer]
    assert (
        isinstance(events[-1], Completed) and events[-1].parts is None
    )  # the artifacts are the answer
    assert mapper.ended and mapper.task_id == first.id


@pytest.mark.parametrize("name, prompt", [("v10_input_required.txt", "What should I echo?"),
                                          ("v03_input_required.txt", "Say more.")])
def test_input_required_carries_the_remotes_prompt_and_data(name, prompt):
    events, mapper = mapped(name)
    asked = events[-1]
    assert isinstance(asked, InputRequired) and asked.prompt.startswith(prompt)
    if name.startswith("v10"):
        assert asked.data == {"choices": ["any text"]}
    assert mapper.ended


def test_auth_required_carries_the_consent_url():
    events, _ = mapped("v10_auth_required.txt")
    assert isinstance(events[-1], AuthRequired)
    assert events[-1].data == {"auth_url": "https://example.com/echo/authorize"}


def test_file_and_data_parts_pass_through_under_the_remotes_ids():
    events, _ = mapped("v10_artifacts.txt")
    deltas = {d.artifact_id: d for d in events if isinstance(d, ArtifactDelta)}
    assert deltas["file"].parts[0].raw == b"?artifacts please"
    assert deltas["file"].parts[0].filename == "echo.txt" and deltas["file"].last_chunk
    assert deltas["data"].parts[0].data.struct_value["words"] == 2
    assert deltas["notes"].name == "notes"


def test_a_file_by_url_passes_through():
    response = StreamResponse()
    update = response.artifact_update
    update.task_id, update.context_id = "t", "c"
    update.artifact.artifact_id = "report"
    update.artifact.parts.append(
        Part(url="https://files.example/r.pdf", media_type="application/pdf", filename="r.pdf")
    )
    [*_, delta] = RemoteTaskMapper().feed(response)
    assert delta.parts[0].url == "https://files.example/r.pdf"
    assert delta.parts[0].media_type == "application/pdf" and delta.parts[0].filename == "r.pdf"


def test_a_remote_failure_keeps_its_reason():
    events, _ = mapped("v10_failed.txt")
    assert events[-1] == Failed("the remote agent failed: cannot reach the chat backend at "
                                "http://127.0.0.1:9/v1/chat/completions")


def test_a_message_answer_completes_without_a_task():
    events, mapper = mapped("v10_message.txt")
    assert mapper.task_id is None and mapper.ended
    assert isinstance(events[-1], Completed)
    assert [p.text for p in events[-1].parts] == ["echo: just a message"]
    assert not any(isinstance(e, RunStarted) for e in events)


def test_an_answered_task_does_not_ask_again_for_its_own_snapshot():
    waiting = frames("v10_input_required.txt")[-1].status_update
    snapshot = StreamResponse(task=Task(id=waiting.task_id, context_id=waiting.context_id,
                                        status=waiting.status))
    mapper = RemoteTaskMapper(waiting.context_id, task_id=waiting.task_id, answering=True)
    assert mapper.feed(snapshot) == [] and not mapper.ended
    assert mapper.feed(snapshot) == []  # polled before the remote read the answer
    asked_again = StreamResponse()
    asked_again.status_update.CopyFrom(waiting)
    asked_again.status_update.status.message.parts[0].text = "Not that. What should I echo?"
    [event] = mapper.feed(asked_again)  # a new question: shown
    assert event == InputRequired("Not that. What should I echo?", {"choices": ["any text"]})


def status(state: int, text: str = "") -> StreamResponse:
    response = StreamResponse()
    response.status_update.task_id, response.status_update.context_id = "t", "c"
    response.status_update.status.CopyFrom(TaskStatus(state=state))
    if text:
        response.status_update.status.message.parts.append(Part(text=text))
    return response


@pytest.mark.parametrize("state, event", [
    (TaskState.TASK_STATE_REJECTED, Rejected("the remote agent rejected the task: not for me")),
    (TaskState.TASK_STATE_CANCELED, Canceled("the remote agent canceled the task: not for me")),
    (TaskState.TASK_STATE_WORKING, Progress("working", "not for me")),
])
def test_other_states_map_with_the_remotes_text(state, event):
    assert RemoteTaskMapper().feed(status(state, "not for me"))[-1] == event


def test_polled_snapshots_repeat_neither_unchanged_artifacts_nor_statuses():
    task = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
    task.artifacts.append(Artifact(artifact_id="a", parts=[Part(text="so far")]))
    mapper = RemoteTaskMapper()
    first = mapper.feed(StreamResponse(task=task))
    assert [type(e) for e in first] == [RunStarted, SessionUpdate, ArtifactDelta]
    assert mapper.feed(StreamResponse(task=task)) == []
    task.artifacts[0].parts.append(Part(text=" and more"))
    task.status.state = TaskState.TASK_STATE_COMPLETED
    [grown, done] = mapper.feed(StreamResponse(task=task))
    assert not grown.append and [p.text for p in grown.parts] == ["so far", " and more"]
    assert done == Completed(parts=None)


def test_a_completed_status_message_is_the_answer_when_no_artifact_came():
    [*_, done] = RemoteTaskMapper().feed(status(TaskState.TASK_STATE_COMPLETED, "all done"))
    assert [p.text for p in done.parts] == ["all done"]


SETTINGS = A2ARemoteSettings(remote_card_url="https://remote.example/card?token=s3cret-query",
                             remote_bearer_token="bearer-secret-1234")


@pytest.mark.parametrize("exc, reason", [
    (A2AClientTimeoutError("Client Request timed out"), "the remote agent sent nothing for 600 s"),
    (TaskNotFoundError("no task bearer-secret-1234"), "the remote agent refused the request "
                                                       "(TaskNotFoundError): no task ***"),
    (A2AClientError("HTTP Error 500: for url https://remote.example/card?token=s3cret-query"),
     "the call to the remote agent failed (A2AClientError)"),
])
def test_error_reasons_name_no_secret(exc, reason):
    shown = error_reason(exc, SETTINGS, SETTINGS.secrets())
    assert shown.startswith(reason)
    assert "bearer-secret-1234" not in shown and "s3cret-query" not in shown


def test_an_http_error_under_the_sdk_error_gives_its_status_only():
    request = httpx.Request("POST", "https://remote.example/a2a?key=s3cret-query")
    cause = httpx.HTTPStatusError(
        "401", request=request, response=httpx.Response(401, request=request)
    )
    try:
        try:
            raise cause
        except httpx.HTTPStatusError as inner:
            raise A2AClientError(f"HTTP Error 401: {inner} {request.url}") from inner
    except A2AClientError as exc:
        shown = error_reason(exc, SETTINGS, SETTINGS.secrets())
    assert shown.startswith("the remote agent rejected the API key (HTTP 401)")
    assert "s3cret-query" not in shown


async def test_oauth2_token_is_cached_and_fetched_again_after_a_401():
    issued = []

    def backend(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            issued.append(f"token-{len(issued) + 1}")
            return httpx.Response(200, json={"access_token": issued[-1], "expires_in": 3600})
        if request.headers["Authorization"] == "Bearer token-1" and len(issued) == 1 and \
                request.url.path == "/rotated":
            return httpx.Response(401)
        return httpx.Response(200, json={"seen": request.headers["Authorization"]})

    http = httpx.AsyncClient(transport=httpx.MockTransport(backend))
    settings = A2ARemoteSettings(remote_card_url="https://r.example/card",
                                 oauth2_token_url="https://r.example/token",
                                 oauth2_client_id="id", oauth2_client_secret="secret-0987")
    remote = httpx.AsyncClient(
        transport=httpx.MockTransport(backend), auth=OutboundAuth(settings, http)
    )
    assert (await remote.get("https://r.example/a")).json() == {"seen": "Bearer token-1"}
    assert (await remote.get("https://r.example/b")).json() == {"seen": "Bearer token-1"}
    assert (await remote.get("https://r.example/rotated")).json() == {"seen": "Bearer token-2"}
    assert issued == ["token-1", "token-2"]


async def test_a_refused_token_request_fails_without_the_client_secret():
    http = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(
        400, json={"error": "invalid_client", "echo": "secret-0987"})))
    settings = A2ARemoteSettings(remote_card_url="https://r.example/card",
                                 oauth2_token_url="https://r.example/token?x=1",
                                 oauth2_client_id="id", oauth2_client_secret="secret-0987")
    with pytest.raises(OutboundAuthError) as raised:
        await OutboundAuth(settings, http).token()
    assert raised.value.reason == ("the OAuth2 token endpoint https://r.example/token refused "
                                   "the client credentials (HTTP 400)")


def test_a_server_error_names_its_status_without_the_body():
    request = httpx.Request("POST", "https://remote.example/a2a")
    cause = httpx.HTTPStatusError("500", request=request, response=httpx.Response(
        500, request=request, text="trace with bearer-secret-1234"))
    try:
        try:
            raise cause
        except httpx.HTTPStatusError as inner:
            raise A2AClientError(f"HTTP Error 500: {inner.response.text}") from inner
    except A2AClientError as exc:
        assert (
            error_reason(exc, SETTINGS, SETTINGS.secrets()) == "the remote agent failed (HTTP 500)"
        )


def test_oauth2_needs_its_client_credentials():
    with pytest.raises(ValueError, match="oauth2_token_url needs oauth2_client_id"):
        A2ARemoteSettings(remote_card_url="https://r.example/card",
                          oauth2_token_url="https://r.example/token")


async def test_the_remotes_own_reasons_are_shown_without_the_credential_it_was_sent():
    async with httpx.AsyncClient() as http:
        handler = A2ARemoteHandler(SETTINGS, http)
        mapper = RemoteTaskMapper()
        [*_, failed] = mapper.feed(
            status(TaskState.TASK_STATE_FAILED, "bad token bearer-secret-1234")
        )
        assert handler._redacted(failed) == Failed("the remote agent failed: bad token ***")
        await handler.aclose()
