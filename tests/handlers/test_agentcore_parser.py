"""AgentCoreHandler on answers recorded from a real AgentCore Runtime app (tests/backends/agentcore
on the scripted LLM), through the handler's real HTTP path (``httpx.MockTransport``), and its
``InvokeAgentRuntime`` request checked against botocore's own serializer and signer; no server
needed."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.serialize import create_serializer
from botocore.session import get_session
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError

from handlers.agentcore import (
    SESSION_HEADER,
    AgentCoreHandler,
    AgentCoreSettings,
    AgentCoreStream,
    read_answer,
)
from handlers.base import Completed, Failed, Reply, TextDelta
from handlers.upstream import SSEFrame, SSEReader, UnexpectedFrame
from tests.handlers.openai_mock import Backend, collect, json_response, sse_response
from tests.support.admin_support import OPERATOR_KEY, admin
from tests.support.harness import running_gateway
from tests.support.messages import handler_request

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agentcore"
ARN = "arn:aws:bedrock-agentcore:eu-west-1:123456789012:runtime/my_agent-Ab12Cd34Ef"
SECRET = "fake-secret-key-0123456789abcdef0123456789"


SIGNED = ["content-type", "host", "x-amz-date", "x-amz-security-token",
          "x-amzn-bedrock-agentcore-runtime-session-id"]


def sigv4_authorization(url: str, headers: dict[str, str], body: bytes, region: str) -> str:
    """The ``Authorization`` botocore computes for ``POST url`` signed at the request's
    ``X-Amz-Date`` with the fake credentials (AKIDEXAMPLE, SECRET, a session token) over the
    headers the handler signs; ``headers``' names are lower-case."""
    request = AWSRequest(method="POST", url=url, data=body,
                         headers={name: headers[name] for name in SIGNED})
    request.context["timestamp"] = headers["x-amz-date"]
    signer = SigV4Auth(Credentials("AKIDEXAMPLE", SECRET, "fake-session-token"),
                       "bedrock-agentcore", region)
    signature = signer.signature(
        signer.string_to_sign(request, signer.canonical_request(request)), request)
    return (f"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/{headers['x-amz-date'][:8]}/{region}/"
            f"bedrock-agentcore/aws4_request, SignedHeaders={';'.join(SIGNED)}, "
            f"Signature={signature}")


def fake_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "fake-session-token")


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def frames(name: str) -> list[SSEFrame]:
    return SSEReader().feed(fixture(name))


def parse(name: str) -> list:
    stream = AgentCoreStream()
    events = [e for frame in frames(name) for e in stream.feed(frame)]
    return events + stream.finish()


def test_streamed_strings_are_deltas_and_the_end_completes():
    events = parse("stream_strings.txt")
    assert [e.text for e in events[:-1]] == [
        "Hello", " from", " fakellm.", " You", " said:", " first", " turn"]
    assert events[-1] == Completed(text="Hello from fakellm. You said: first turn")


def test_streamed_objects_with_data_are_deltas():
    events = parse("stream_dicts.txt")
    assert all(isinstance(e, TextDelta) for e in events[:-1])
    assert events[-1] == Completed(text="Hello from fakellm. You said: AGENTCORE_DICTS second turn")


def test_the_sdks_error_event_fails_the_answer():
    (event,) = parse("stream_error_event.txt")
    assert isinstance(event, Failed)
    assert event.reason.startswith(
        "the AgentCore app failed: HTTPStatusError: Server error '500 Internal Server Error'")


def test_other_objects_are_skipped():
    stream = AgentCoreStream()
    assert stream.feed(SSEFrame("", '{"event": {"messageStart": {}}}')) == []
    assert stream.feed(SSEFrame("", '{"text": "ok"}')) == [TextDelta("ok")]
    assert stream.finish() == [Completed(text="ok")]


@pytest.mark.parametrize(("data", "detail"), [
    ("not json", "data that is not JSON"),
    ("42", "data that is neither a string nor an object"),
    ("[\"a\"]", "data that is neither a string nor an object"),
])
def test_a_bad_frame_is_unexpected(data, detail):
    with pytest.raises(UnexpectedFrame) as caught:
        AgentCoreStream().feed(SSEFrame("", data))
    assert caught.value.reason == f"AgentCore sent an unexpected frame ({detail})"


def test_json_answers():
    assert read_answer(json.loads(fixture("answer.json"))) == Completed(
        text="Hello from fakellm. You said: AGENTCORE_JSON answer")
    assert read_answer("plain") == Completed(text="plain")
    assert read_answer({"error": "boom"}) == Failed("the AgentCore app failed: boom")
    (part,) = read_answer({"items": [1, "two"]}).parts
    assert MessageToDict(part.data) == {"items": [1, "two"]}
    assert MessageToDict(read_answer([1]).parts[0].data) == {"result": [1]}


@pytest.mark.parametrize(("settings", "field"), [
    ({}, "exactly one of agentcore_url and agentcore_runtime_arn"),
    ({"agentcore_url": "http://x", "agentcore_runtime_arn": ARN},
     "exactly one of agentcore_url and agentcore_runtime_arn"),
    ({"agentcore_runtime_arn": "arn:aws:lambda:eu-west-1:123456789012:function:f"},
     "agentcore_runtime_arn must look like"),
    ({"agentcore_url": "http://x", "agentcore_payload_key": ""}, "agentcore_payload_key"),
])
def test_bad_settings_name_the_field(settings, field):
    with pytest.raises(ValidationError) as caught:
        AgentCoreSettings(**settings)
    assert field in str(caught.value)


def test_the_region_comes_from_the_arn_unless_set():
    assert AgentCoreSettings(agentcore_runtime_arn=ARN).region == "eu-west-1"
    assert AgentCoreSettings(agentcore_runtime_arn=ARN,
                             agentcore_region="us-east-1").base_url() == (
        "https://bedrock-agentcore.us-east-1.amazonaws.com")


async def test_direct_call_sends_the_prompt_and_the_session_and_reads_json():
    backend = Backend(lambda request: json_response(fixture("answer.json")))
    async with backend.client() as http:
        handler = AgentCoreHandler(AgentCoreSettings(
            agentcore_url="http://app:8080/invocations", agentcore_payload_key="input"), http)
        request = handler_request("hello")
        events = await collect(handler.run(request))
    assert events == [Completed(text="Hello from fakellm. You said: AGENTCORE_JSON answer")]
    (sent,) = backend.requests
    assert str(sent.url) == "http://app:8080/invocations"
    assert json.loads(sent.content) == {"input": "hello"}
    session = sent.headers[SESSION_HEADER]
    assert session == request.backend_user(per_context=True) and 33 <= len(session) <= 256
    assert "authorization" not in sent.headers


async def test_message_mode_takes_a_stream_too():
    backend = Backend(lambda request: sse_response(fixture("stream_strings.txt")))
    async with backend.client() as http:
        handler = AgentCoreHandler(AgentCoreSettings(
            agentcore_url="http://app:8080", response_mode="message"), http)
        events = await collect(handler.run(handler_request("hello")))
    assert events == [Reply(text="Hello from fakellm. You said: first turn")]


async def test_an_http_error_fails_with_the_apps_message():
    backend = Backend(lambda request: json_response(fixture("http_500.json"), 500))
    async with backend.client() as http:
        handler = AgentCoreHandler(AgentCoreSettings(agentcore_url="http://app:8080"), http)
        events = await collect(handler.run(handler_request("hello")))
    assert events == [Failed("AgentCore failed (HTTP 500): 'list' object has no attribute 'get'")]


async def test_invoke_agent_runtime_matches_botocore_and_is_signed(monkeypatch):
    fake_aws_credentials(monkeypatch)
    backend = Backend(lambda request: (
        json_response(b"403 body", 403) if "403" in request.content.decode()
        else sse_response(fixture("stream_strings.txt"))))
    async with backend.client() as http:
        handler = AgentCoreHandler(AgentCoreSettings(
            agentcore_runtime_arn=ARN, agentcore_qualifier="prod"), http)
        request = handler_request("hello")
        events = await collect(handler.run(request))
        denied = await collect(handler.run(handler_request("403")))
    assert events[-1] == Completed(text="Hello from fakellm. You said: first turn")
    assert denied == [Failed(
        "AgentCore refused the request (HTTP 403): the AWS credentials lack "
        "bedrock-agentcore:InvokeAgentRuntime on this runtime, or the signature was rejected")]
    sent = backend.requests[0]
    session = request.backend_user(per_context=True)

    # the path, query and headers botocore would send for this operation
    model = get_session().get_service_model("bedrock-agentcore")
    expected = create_serializer("rest-json").serialize_to_request(
        {"agentRuntimeArn": ARN, "qualifier": "prod", "runtimeSessionId": session,
         "payload": b"{}"}, model.operation_model("InvokeAgentRuntime"))
    assert sent.url.host == "bedrock-agentcore.eu-west-1.amazonaws.com"
    assert sent.url.raw_path.decode() == (
        expected["url_path"] + "?" + urllib.parse.urlencode(expected["query_string"]))
    assert sent.headers[SESSION_HEADER] == expected["headers"][SESSION_HEADER]

    # the signature is the one botocore computes for the same request and time
    assert sent.headers["authorization"] == sigv4_authorization(
        str(sent.url), dict(sent.headers), sent.content, "eu-west-1")
    assert SECRET not in repr(events + denied)


async def test_without_aws_credentials_the_task_fails_clearly(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    backend = Backend(lambda request: httpx.Response(500))
    async with backend.client() as http:
        handler = AgentCoreHandler(AgentCoreSettings(agentcore_runtime_arn=ARN), http)
        events = await collect(handler.run(handler_request("hello")))
    assert events == [Failed("no AWS credentials found for AgentCore (environment, shared "
                             "config, container or instance role)")]
    assert backend.requests == []


async def test_the_admin_api_refuses_an_endpoint_without_one_target():
    async with running_gateway(operator_keys=[OPERATOR_KEY]) as gw:
        answers = [await admin(gw, "POST", "/endpoints", json={
            "name": "agentcore", "handler": "handlers.agentcore:AgentCoreHandler",
            "settings": settings}) for settings in (
                {}, {"agentcore_runtime_arn": "arn:aws:s3:::bucket"})]
        endpoints = (await admin(gw, "GET", "/endpoints")).json()
    for answer, field in zip(answers, ("agentcore_url", "agentcore_runtime_arn"), strict=True):
        assert answer.status_code == 400, answer.text
        assert field in " ".join(answer.json()["problems"])
    assert endpoints["endpoints"] == []  # nothing written


class CutStream(httpx.AsyncByteStream):
    """The first recorded event, then the connection breaks."""

    async def __aiter__(self):
        yield fixture("stream_strings.txt").split(b"\n\n")[0] + b"\n\n"
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")


async def test_a_cut_stream_fails_rather_than_completing():
    backend = Backend(lambda request: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=CutStream()))
    async with backend.client() as http:
        handler = AgentCoreHandler(AgentCoreSettings(agentcore_url="http://app:8080"), http)
        events = await collect(handler.run(handler_request("hello")))
    assert events == [TextDelta("Hello"), Failed(
        "AgentCore closed the connection before the answer was complete")]


async def test_a_bearer_token_replaces_the_signature_and_never_shows(monkeypatch):
    fake_aws_credentials(monkeypatch)
    token = "jwt-" + "x" * 40
    backend = Backend(lambda request: (
        json_response({"message": f"bad token {token}"}, 401) if b"denied" in request.content
        else json_response({"result": "ok"})))
    async with backend.client() as http:
        handler = AgentCoreHandler(AgentCoreSettings(
            agentcore_runtime_arn=ARN, agentcore_bearer_token=token), http)
        events = await collect(handler.run(handler_request("hello")))
        denied = await collect(handler.run(handler_request("denied")))
    assert events == [Completed(text="ok")]
    sent = backend.requests[0]
    assert sent.headers["authorization"] == f"Bearer {token}"
    assert "x-amz-date" not in sent.headers and SESSION_HEADER in sent.headers
    assert denied == [Failed("AgentCore rejected the API key (HTTP 401); check the endpoint's "
                             "API key setting")]
