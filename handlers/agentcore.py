"""An agent on AWS Bedrock AgentCore Runtime: an app built on the ``bedrock-agentcore`` SDK's
``BedrockAgentCoreApp`` (``POST /invocations``, ``GET /ping``).

It is reached one of two ways, which one setting decides:

* ``agentcore_url``: the app itself (a local process or a container): ``POST {url}/invocations``;
* ``agentcore_runtime_arn``: the runtime on AWS, through AgentCore's ``InvokeAgentRuntime``
  (``POST /runtimes/{url-encoded ARN}/invocations[?qualifier=]`` on
  ``https://bedrock-agentcore.{region}.amazonaws.com``), signed with SigV4 for the service
  ``bedrock-agentcore`` with the credentials of botocore's default chain, or, for a runtime
  whose inbound auth is OAuth, with ``agentcore_bearer_token`` as ``Authorization: Bearer``.

One A2A message is one invocation: the body is ``{<agentcore_payload_key>: <text>}`` (by
default ``{"prompt": …}``, the SDK examples' shape). Each caller's A2A context is one runtime
session: the ``X-Amzn-Bedrock-AgentCore-Runtime-Session-Id`` header carries an opaque value
derived from tenant, endpoint, caller and context (36 characters; AgentCore wants 33 to 256),
so two turns of a context reach the same session (on AWS: the same microVM, which keeps the
app's memory).

The app decides the answer's shape. Server-sent events (an entrypoint that yields): the SDK
writes each yielded value as one ``data: <JSON>`` event; a JSON string is a text chunk, an
object with a string ``data`` or ``text`` is one too (``data`` is a Strands agent's text
event), any other object is skipped, and the end of the stream completes the task with the
text streamed. An object with an ``error`` (the SDK's event when the entrypoint raises while
streaming: ``{"error", "error_type", "message"}``) fails it. A JSON answer (an entrypoint that
returns) completes the task at once: a string is the text, an object's string ``result``,
``response``, ``output`` or ``text`` is the text, any other value a data part.

Cancel closes the stream. That does not stop the app: ``bedrock-agentcore`` 1.25.0 runs an
async generator entrypoint on a worker loop that feeds a queue, and a client that goes away
leaves it running to the end of its answer. On AWS the handler therefore also calls
``StopRuntimeSession`` (``agentcore_stop_session_on_cancel``), which ends the session's microVM:
the context's next message starts a new one, without the app's memory of earlier turns.

See docs/handlers.md for the settings, the event mapping and the IAM policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import uuid
from typing import Any
from urllib.parse import quote

import httpx
import structlog
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.session import Session
from pydantic import Field, SecretStr, model_validator

from handlers.base import (
    Completed,
    Failed,
    HandlerEvent,
    HandlerRequest,
    TextDelta,
    data_part,
)
from handlers.bridge import StreamingBridge
from handlers.upstream import (
    BridgeSettings,
    SSEFrame,
    UnexpectedFrame,
    Upstream,
    UpstreamError,
    clip,
    request_text,
)

__all__ = ["AgentCoreHandler", "AgentCoreSettings", "AgentCoreStream", "SigV4Signer",
           "read_answer"]

log = structlog.get_logger(__name__)

BACKEND = "AgentCore"
SERVICE = "bedrock-agentcore"
SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
ARN = re.compile(r"arn:aws[a-z-]*:bedrock-agentcore:([a-z0-9-]+):\d{12}:runtime/[A-Za-z0-9_-]+")
TEXT_KEYS = ("data", "text")
"""Keys of a streamed object that carry a text chunk."""
ANSWER_KEYS = ("result", "response", "output", "text")
"""Keys of a JSON answer that carry its text."""


class AgentCoreSettings(BridgeSettings):
    agentcore_url: str | None = None
    """The app's base URL (``POST {url}/invocations``): a local process or a container.
    Set this or ``agentcore_runtime_arn``, not both."""
    agentcore_runtime_arn: str | None = None
    """The runtime on AWS (``arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>``),
    invoked through ``InvokeAgentRuntime`` with SigV4 and the default credential chain."""
    agentcore_region: str | None = None
    """The runtime's AWS region; unset: the ARN's."""
    agentcore_qualifier: str | None = None
    """The runtime endpoint or version to invoke (``qualifier``); unset: ``DEFAULT``."""
    agentcore_endpoint_url: str | None = None
    """The AgentCore data-plane URL; unset: ``https://bedrock-agentcore.<region>.amazonaws.com``
    (set it for a VPC endpoint)."""
    agentcore_bearer_token: SecretStr | None = None
    """Sent as ``Authorization: Bearer`` instead of a SigV4 signature: for a runtime whose
    inbound auth is OAuth (a JWT authorizer), or an app behind an authenticating proxy;
    ``env:NAME`` in endpoint rows."""
    agentcore_payload_key: str = Field("prompt", min_length=1)
    """The key of the message's text in the invocation body (``{"prompt": <text>}``)."""
    agentcore_timeout: float = Field(default=600.0, gt=0)
    """Seconds the app may stay silent (connect: at most 10 s) before the task fails."""
    agentcore_stop_session_on_cancel: bool = True
    """On AWS, a canceled task also calls ``StopRuntimeSession``, which ends the session's
    microVM (the context's next message starts a new one without the app's memory)."""

    @model_validator(mode="after")
    def _one_target(self) -> AgentCoreSettings:
        if (self.agentcore_url is None) == (self.agentcore_runtime_arn is None):
            raise ValueError("set exactly one of agentcore_url and agentcore_runtime_arn")
        arn = self.agentcore_runtime_arn
        if arn is not None and ARN.fullmatch(arn) is None:
            raise ValueError("agentcore_runtime_arn must look like "
                             "arn:aws:bedrock-agentcore:<region>:<account>:runtime/<id>")
        return self

    @property
    def region(self) -> str:
        """``agentcore_region``, else the ARN's region ("" without an ARN)."""
        match = ARN.fullmatch(self.agentcore_runtime_arn or "")
        return self.agentcore_region or (match.group(1) if match else "")

    @property
    def on_aws(self) -> bool:
        return self.agentcore_runtime_arn is not None

    @property
    def signed(self) -> bool:
        """Calls are signed with SigV4: on AWS, unless a bearer token is set."""
        return self.on_aws and self.agentcore_bearer_token is None

    def runtime_path(self, action: str) -> str:
        """The path of a runtime's ``action`` (``invocations``, ``stopruntimesession``)."""
        arn = quote(self.agentcore_runtime_arn or "", safe="")
        qualifier = f"?qualifier={quote(self.agentcore_qualifier, safe='')}" if (
            self.agentcore_qualifier) else ""
        return f"/runtimes/{arn}/{action}{qualifier}"

    def base_url(self) -> str:
        if self.agentcore_url is not None:
            return self.agentcore_url
        return self.agentcore_endpoint_url or (
            f"https://bedrock-agentcore.{self.region}.amazonaws.com")


class SigV4Signer:
    """Signs calls for one region with botocore's ``SigV4Auth`` and the credentials of
    botocore's default chain (environment, shared files, container or instance role),
    looked up once and refreshed by botocore when they expire."""

    def __init__(self, region: str) -> None:
        self.region = region
        self._credentials: Credentials | None = None

    async def _frozen(self) -> Any:
        if self._credentials is None:
            # the chain may ask the instance metadata service: never on the event loop
            self._credentials = await asyncio.to_thread(Session().get_credentials)
            if self._credentials is None:
                raise UpstreamError("no AWS credentials found for AgentCore (environment, "
                                    "shared config, container or instance role)")
        return await asyncio.to_thread(self._credentials.get_frozen_credentials)

    async def headers(self, url: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` with the signature of ``POST url`` with ``body`` (``Authorization``,
        ``X-Amz-Date`` and, for temporary credentials, ``X-Amz-Security-Token``)."""
        request = AWSRequest(method="POST", url=url, data=body, headers=headers)
        SigV4Auth(await self._frozen(), SERVICE, self.region).add_auth(request)
        return dict(request.headers.items())


def _error_reason(value: dict[str, Any]) -> str:
    kind = value.get("error_type")
    error = value.get("error")
    text = error if isinstance(error, str) else json.dumps(error)
    prefix = f"{kind}: " if isinstance(kind, str) and kind else ""
    return f"the AgentCore app failed: {clip(prefix + text)}"


class AgentCoreStream:
    """Maps the events of one streamed invocation to handler events: text chunks are deltas;
    an error object ends the answer as ``Failed``; the end of the stream completes it."""

    def __init__(self) -> None:
        self.done = False
        self.deltas: list[str] = []
        self.terminal: list[HandlerEvent] | None = None

    def feed(self, frame: SSEFrame) -> list[HandlerEvent]:
        """Events for one frame; ``UnexpectedFrame`` when it has an unknown shape."""
        if frame.done:
            self.done = True
            return []
        try:
            value = json.loads(frame.data)
        except ValueError:
            raise UnexpectedFrame(BACKEND, "data that is not JSON") from None
        if isinstance(value, dict):
            if "error" in value:
                self.terminal = [Failed(_error_reason(value))]
                return []
            value = next((value[k] for k in TEXT_KEYS if isinstance(value.get(k), str)), "")
        elif not isinstance(value, str):
            raise UnexpectedFrame(BACKEND, "data that is neither a string nor an object")
        if not value:
            return []
        self.deltas.append(value)
        return [TextDelta(value)]

    @property
    def ended(self) -> bool:
        return self.terminal is not None or self.done

    def finish(self) -> list[HandlerEvent]:
        return self.terminal or [Completed(text="".join(self.deltas))]


def read_answer(value: Any) -> HandlerEvent:
    """``Completed`` (or ``Failed``) for a JSON answer of any shape."""
    if isinstance(value, str):
        return Completed(text=value)
    if isinstance(value, dict):
        if "error" in value:
            return Failed(_error_reason(value))
        text = next((value[k] for k in ANSWER_KEYS if isinstance(value.get(k), str)), None)
        return Completed(text=text) if text is not None else Completed(parts=[data_part(value)])
    return Completed(parts=[data_part({"result": value})])


class AgentCoreHandler(StreamingBridge):
    """An AgentCore Runtime app, directly (``/invocations``) or on AWS (``InvokeAgentRuntime``)."""

    Settings = AgentCoreSettings
    settings: AgentCoreSettings
    path = "/invocations"
    run_name = "the AgentCore invocation"
    failure_log = "agentcore_request_failed"
    answers_only_streamed = True  # the app, not the request, picks a stream or JSON
    accepts_json_answer = True

    def __init__(self, settings: AgentCoreSettings, http: httpx.AsyncClient) -> None:
        super().__init__(settings, http)
        s = self.settings
        self.signer = SigV4Signer(s.region) if s.signed else None
        if s.on_aws:
            self.path = s.runtime_path("invocations")

    def make_upstream(self) -> Upstream:
        s = self.settings
        return Upstream.for_backend(self.http, BACKEND, s, url=s.base_url(),
                                    drop_suffix="/invocations", timeout=s.agentcore_timeout,
                                    api_key=s.agentcore_bearer_token)

    def session_id(self, request: HandlerRequest) -> str:
        """The runtime session of this caller's context (36 characters)."""
        return request.backend_user(per_context=True)

    def build_body(self, request: HandlerRequest, *, stream: bool) -> dict[str, Any]:
        return {self.settings.agentcore_payload_key: request_text(request)}

    def stream_parser(self, body: dict[str, Any]) -> AgentCoreStream:
        return AgentCoreStream()

    def read_answer(self, data: Any) -> HandlerEvent:
        return read_answer(data)

    async def upstream_for(self, request: HandlerRequest, path: str,
                           body: dict[str, Any]) -> Upstream:
        """The session header, and on AWS the call's signature (over the body, its type and
        the session; the other headers go unsigned)."""
        headers = {"Content-Type": "application/json", SESSION_HEADER: self.session_id(request)}
        if self.signer is not None:
            url = self.upstream.base_url + path
            content = httpx.Request("POST", url, json=body).content  # the bytes httpx will send
            headers = await self.signer.headers(url, content, headers)
        headers["Accept"] = "text/event-stream, application/json"
        return dataclasses.replace(self.upstream, headers={**self.upstream.headers, **headers})

    def failure_reason(self, exc: UpstreamError) -> str:
        if exc.status == 403 and self.signer is not None:
            return ("AgentCore refused the request (HTTP 403): the AWS credentials lack "
                    "bedrock-agentcore:InvokeAgentRuntime on this runtime, or the signature "
                    "was rejected")
        return exc.reason

    async def cancel(self, request: HandlerRequest) -> bool:
        """On AWS (``agentcore_stop_session_on_cancel``), ``StopRuntimeSession``; the gateway
        then closes the stream either way (False)."""
        if not self.settings.on_aws or not self.settings.agentcore_stop_session_on_cancel:
            return False
        path = self.settings.runtime_path("stopruntimesession")
        body = {"clientToken": str(uuid.uuid4())}
        try:
            upstream = await self.upstream_for(request, path, body)
            # any 2xx is done: the operation's answer is in its headers, its body may be empty
            async with upstream.call("POST", path, body, request=request, retry=False,
                                     timeout=10):
                pass
        except UpstreamError as exc:
            log.warning("agentcore_stop_session_failed", endpoint_id=request.endpoint_id,
                        task_id=request.task_id, reason=exc.reason)
        return False

