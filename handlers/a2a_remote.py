"""Remote A2A handler: the backend is another A2A agent, named by the URL of its card.

The a2a-sdk client talks to it (``ClientFactory`` picks the 1.0 transport or the 0.3
compat one from the remote card) through the gateway's shared backend client
(``upstream.BackendTransport``). The remote task id is the run reference: the answer to
an INPUT_REQUIRED / AUTH_REQUIRED task goes back to the same remote task, cancel cancels
it and ``reattach`` follows it again (SubscribeToTask, else GetTask polling). The gateway
context maps to one remote context (kept in the context's handler memory).
``RemoteTaskMapper`` turns the remote's stream responses into handler events; the full
mapping table is in docs/handlers.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Generator
from typing import Any, ClassVar

import httpx
import structlog
from a2a.client import Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.client.errors import A2AClientError, A2AClientTimeoutError
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict, ParseError
from pydantic import Field, SecretStr, model_validator

from handlers.base import (
    ArtifactDelta,
    AuthRequired,
    Canceled,
    Completed,
    Failed,
    Handler,
    HandlerEvent,
    HandlerRequest,
    HandlerSettings,
    InputRequired,
    Progress,
    Rejected,
    RunStarted,
    SessionUpdate,
)
from handlers.upstream import (
    TRACE_HEADERS,
    BackendTransport,
    BridgeSettings,
    Deadline,
    RunTimedOut,
    UpstreamError,
    clip,
    correlation_headers,
    has_input,
    http_error_reason,
    make_timeout,
    redact,
    shown_url,
    transport_error_reason,
)

__all__ = ["A2ARemoteHandler", "A2ARemoteSettings", "RemoteTaskMapper"]

log = structlog.get_logger(__name__)

BACKEND = "the remote agent"
RUN = "the remote agent's task"
CONTEXT_KEY = "remote_context_id"
"""The remote context of this gateway context, in the context's handler memory."""
TERMINAL = {
    TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED,
}
INTERRUPTED = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
CARD_FIELDS = ("description", "skills", "defaultInputModes", "defaultOutputModes")
"""What ``card_from_remote`` takes from the remote card; interfaces and security stay the
gateway's own."""


class A2ARemoteSettings(BridgeSettings):
    """The remote agent and how to reach it; the response mode, ``run_timeout_seconds`` and
    the retries of HTTP 429/503 come from ``BridgeSettings``."""

    remote_card_url: str = Field(min_length=1)
    """URL of the remote agent's card (e.g. ``https://agent.example/.well-known/agent-card.json``)."""
    remote_timeout: float = Field(600.0, gt=0)
    """Seconds the remote may stay silent on one call or stream (connect: at most 10 s)."""
    card_refresh_seconds: float = Field(300.0, gt=0)
    """The remote card is read again after this long (and after a failed call)."""
    remote_streaming: bool = True
    """Stream from the remote when its card offers streaming; off (or a card without
    streaming): send the message with ``return_immediately``, then poll its task."""
    poll_interval_seconds: float = Field(1.0, gt=0)
    """GetTask interval when the remote task is followed by polling."""
    card_from_remote: bool = False
    """The gateway's card takes description, skills and modes from the remote card."""
    remote_api_key: SecretStr | None = None
    """Sent in ``remote_api_key_header``; write ``env:NAME`` in endpoint rows."""
    remote_api_key_header: str = "X-API-Key"
    """The header that carries ``remote_api_key``."""
    remote_bearer_token: SecretStr | None = None
    """Sent as ``Authorization: Bearer``."""
    oauth2_token_url: str | None = None
    """OAuth2 client credentials: the token endpoint; the token is cached until it expires."""
    oauth2_client_id: str | None = None
    """OAuth2 client credentials: the client id."""
    oauth2_client_secret: SecretStr | None = None
    """OAuth2 client credentials: the client secret; ``env:NAME`` in endpoint rows."""
    oauth2_scope: str | None = None
    """OAuth2 client credentials: the scope asked for (none: the server's default)."""

    @model_validator(mode="after")
    def _oauth2_complete(self) -> A2ARemoteSettings:
        if self.oauth2_token_url and not (self.oauth2_client_id and self.oauth2_client_secret):
            raise ValueError("oauth2_token_url needs oauth2_client_id and oauth2_client_secret")
        return self

    def secrets(self) -> tuple[str, ...]:
        values = (self.remote_api_key, self.remote_bearer_token, self.oauth2_client_secret)
        return tuple(v.get_secret_value() for v in values if v is not None)


class OutboundAuthError(UpstreamError):
    """The credentials for the remote agent could not be obtained."""


class OutboundAuth(httpx.Auth):
    """The endpoint's credentials on every call to the remote: an API key header, a bearer
    token, or an OAuth2 client-credentials token (fetched, cached until it expires, fetched
    again after a 401)."""

    EXPIRY_MARGIN_SECONDS = 30.0

    def __init__(self, settings: A2ARemoteSettings, http: httpx.AsyncClient) -> None:
        self.settings = settings
        self.http = http
        self._token: tuple[str, float] | None = None
        self._lock = asyncio.Lock()

    @property
    def oauth2(self) -> bool:
        return bool(self.settings.oauth2_token_url)

    @property
    def issued(self) -> tuple[str, ...]:
        """The OAuth2 token in use, if any (a secret like the configured ones)."""
        return (self._token[0],) if self._token else ()

    async def async_auth_flow(self, request: httpx.Request) -> Any:
        await self._apply(request)
        response = yield request
        if response.status_code == 401 and self.oauth2:
            self._token = None
            await self._apply(request)
            yield request

    async def _apply(self, request: httpx.Request) -> None:
        s = self.settings
        if s.remote_api_key is not None:
            request.headers[s.remote_api_key_header] = s.remote_api_key.get_secret_value()
        if s.remote_bearer_token is not None:
            request.headers["Authorization"] = f"Bearer {s.remote_bearer_token.get_secret_value()}"
        elif self.oauth2:
            request.headers["Authorization"] = f"Bearer {await self.token()}"

    async def token(self) -> str:
        async with self._lock:
            if self._token is None or time.monotonic() >= self._token[1]:
                self._token = await self._fetch_token()
            return self._token[0]

    async def _fetch_token(self) -> tuple[str, float]:
        s = self.settings
        url = str(s.oauth2_token_url)
        form = {"grant_type": "client_credentials"}
        if s.oauth2_scope:
            form["scope"] = s.oauth2_scope
        secret = s.oauth2_client_secret.get_secret_value() if s.oauth2_client_secret else ""
        try:
            response = await self.http.post(url, data=form, auth=(str(s.oauth2_client_id), secret),
                                            timeout=make_timeout(s.remote_timeout))
        except httpx.HTTPError as exc:
            raise OutboundAuthError(redact(transport_error_reason(
                "the OAuth2 token endpoint", url, exc, s.remote_timeout), s.secrets())) from None
        if response.status_code != 200:
            raise OutboundAuthError(f"the OAuth2 token endpoint {shown_url(url)} refused the "
                                    f"client credentials (HTTP {response.status_code})")
        try:
            body = response.json()
            token = body["access_token"]
            lifetime = float(body.get("expires_in") or 3600)
        except (ValueError, KeyError, TypeError):
            raise OutboundAuthError(
                "the OAuth2 token endpoint answered without an access_token"
            ) from None
        if not isinstance(token, str) or not token:
            raise OutboundAuthError("the OAuth2 token endpoint answered without an access_token")
        return token, time.monotonic() + max(0.0, lifetime - self.EXPIRY_MARGIN_SECONDS)


def error_reason(exc: BaseException, settings: A2ARemoteSettings, secrets: tuple[str, ...]) -> str:
    """A reason for a failed call to the remote, safe to show: the SDK's own messages may
    carry URLs and bodies, so they are rebuilt from the error's cause."""
    return redact(_reason(exc, settings), secrets)


def _reason(exc: BaseException, settings: A2ARemoteSettings) -> str:
    for cause in _causes(exc):
        if isinstance(cause, UpstreamError):
            return cause.reason
        if isinstance(cause, httpx.HTTPStatusError):  # the answer's body is not shown
            return http_error_reason(BACKEND, cause.response.status_code, "").rstrip(": ")
        if isinstance(cause, httpx.HTTPError):
            return transport_error_reason(BACKEND, _url(cause, settings), cause,
                                          settings.remote_timeout)
    if isinstance(exc, ParseError):
        return f"{BACKEND} sent an answer that is not valid A2A ({clip(str(exc), 300)})"
    if isinstance(exc, A2AClientTimeoutError):
        return f"{BACKEND} sent nothing for {settings.remote_timeout:g} s (timeout)"
    if isinstance(exc, A2AError) and not isinstance(exc, A2AClientError):
        return f"{BACKEND} refused the request ({type(exc).__name__}): {clip(str(exc))}"
    return f"the call to {BACKEND} failed ({type(exc).__name__})"


def _url(exc: httpx.HTTPError, settings: A2ARemoteSettings) -> str:
    try:
        return str(exc.request.url)
    except RuntimeError:  # an error raised before a request was made
        return settings.remote_card_url


def _causes(exc: BaseException) -> Generator[BaseException, None, None]:
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def status_text(status: TaskStatus) -> str:
    return "\n".join(p.text for p in status.message.parts if p.text)


def status_data(status: TaskStatus) -> dict[str, Any] | None:
    for part in status.message.parts:
        if part.HasField("data") and part.data.HasField("struct_value"):
            return MessageToDict(part.data.struct_value)
    return None


class RemoteTaskMapper:
    """The remote's stream responses (or polled tasks) → handler events, for one remote task.

    Artifacts pass through under the remote's ids (all part kinds, ``append`` and
    ``last_chunk`` kept); an artifact seen again unchanged in a snapshot is not repeated."""

    def __init__(self, known_context: str | None = None, *, task_id: str | None = None,
                 answering: bool = False) -> None:
        self.task_id = task_id
        self.context_id = known_context
        self._answering = answering
        """The remote task waits for the answer being sent: the first snapshot still says so."""
        self.ended = False
        """A terminal or interrupted state, or a Message answer, arrived."""
        self._started = False
        self._artifacts: dict[str, bytes] = {}
        self._status: bytes | None = None

    def feed(self, response: StreamResponse) -> list[HandlerEvent]:
        kind = response.WhichOneof("payload")
        answering, self._answering = self._answering, False
        if kind == "message":
            return self._message(response.message)
        if kind == "task":
            return self._task(response.task, answering=answering)
        if kind == "status_update":
            update = response.status_update
            return self._begin(update.task_id, update.context_id) + self._on_status(update.status)
        if kind == "artifact_update":
            update = response.artifact_update
            return self._begin(update.task_id, update.context_id) + self._artifact(
                update.artifact, append=update.append, last_chunk=update.last_chunk)
        return []

    def _message(self, message: Message) -> list[HandlerEvent]:
        if self.task_id is None:  # the remote answered without a task
            self.ended = True
            return [*self._context(message.context_id),
                    Completed(parts=list(message.parts),
                              metadata=MessageToDict(message.metadata) if message.metadata else {})]
        text = "\n".join(p.text for p in message.parts if p.text)
        return [Progress("message", text)] if text else []

    def _task(self, task: Task, *, answering: bool = False) -> list[HandlerEvent]:
        events = self._begin(task.id, task.context_id)
        for artifact in task.artifacts:
            if self._artifacts.get(artifact.artifact_id) != artifact.SerializeToString():
                events += self._artifact(artifact, append=False, last_chunk=False)
        if answering and task.status.state in INTERRUPTED:
            # the question being answered: not asked again, in this or a polled snapshot
            self._status = task.status.SerializeToString()
            return events
        return events + self._on_status(task.status)

    def _begin(self, task_id: str, context_id: str) -> list[HandlerEvent]:
        if self._started:
            return []
        self._started = True
        events: list[HandlerEvent] = []
        if task_id and self.task_id is None:
            self.task_id = task_id
            events.append(RunStarted(task_id))
        return events + self._context(context_id)

    def _context(self, context_id: str) -> list[HandlerEvent]:
        if not context_id or context_id == self.context_id:
            return []
        self.context_id = context_id
        return [SessionUpdate({CONTEXT_KEY: context_id})]

    def _artifact(
        self, artifact: Artifact, *, append: bool, last_chunk: bool
    ) -> list[HandlerEvent]:
        whole = self._artifacts.get(artifact.artifact_id)
        if append and whole is not None:
            merged = Artifact.FromString(whole)
            merged.parts.extend(artifact.parts)
            self._artifacts[artifact.artifact_id] = merged.SerializeToString()
        else:
            self._artifacts[artifact.artifact_id] = artifact.SerializeToString()
        return [
            ArtifactDelta(
                artifact.artifact_id,
                list(artifact.parts),
                name=artifact.name,
                append=append,
                last_chunk=last_chunk,
                metadata=MessageToDict(artifact.metadata) if artifact.metadata else {},
            )
        ]

    def _on_status(self, status: TaskStatus) -> list[HandlerEvent]:
        seen = status.SerializeToString()
        if seen == self._status:
            return []
        self._status = seen
        state, text = status.state, status_text(status)
        if state in TERMINAL or state in INTERRUPTED:
            self.ended = True
        if state == TaskState.TASK_STATE_COMPLETED:
            # an answer given only in the final status message becomes the artifact
            parts = list(status.message.parts) if not self._artifacts else None
            return [Completed(parts=parts or None)]
        if state == TaskState.TASK_STATE_INPUT_REQUIRED:
            return [
                InputRequired(text or "The remote agent asks for more input.", status_data(status))
            ]
        if state == TaskState.TASK_STATE_AUTH_REQUIRED:
            return [
                AuthRequired(
                    text or "The remote agent asks for authorization.", status_data(status)
                )
            ]
        if state == TaskState.TASK_STATE_FAILED:
            return [Failed(f"{BACKEND} failed: {clip(text)}" if text else f"{BACKEND} failed")]
        if state == TaskState.TASK_STATE_REJECTED:
            return [Rejected(f"{BACKEND} rejected the task: {clip(text)}" if text
                             else f"{BACKEND} rejected the task")]
        if state == TaskState.TASK_STATE_CANCELED:
            return [Canceled(f"{BACKEND} canceled the task: {clip(text)}" if text else "")]
        return [Progress("working", text)] if text else []


class A2ARemoteHandler(Handler):
    """Another A2A agent, named by the URL of its card."""

    Settings: ClassVar[type[HandlerSettings]] = A2ARemoteSettings
    supports_reattach: ClassVar[bool] = True
    accepted_file_types: ClassVar[tuple[str, ...]] = ("*/*",)
    """File parts go to the remote as they came; the remote refuses what it does not take."""
    settings: A2ARemoteSettings

    def __init__(self, settings: HandlerSettings, http: httpx.AsyncClient) -> None:
        super().__init__(settings, http)
        self._secrets = self.settings.secrets()
        self._auth = OutboundAuth(self.settings, http)
        self._remote_http = httpx.AsyncClient(
            transport=BackendTransport(http, BACKEND, self.settings.retry),
            auth=self._auth,
            timeout=make_timeout(self.settings.remote_timeout),
        )
        self._card: AgentCard | None = None
        self._client: Client | None = None
        self._card_read_at = 0.0
        self._card_lock = asyncio.Lock()
        self._followed: set[str] = set()
        """Remote task ids whose events an iterator of this instance reads now."""

    # -- the contract --------------------------------------------------------------

    async def open(self) -> None:
        if self.settings.card_from_remote:
            with contextlib.suppress(UpstreamError):
                await self._remote()

    def card_fields(self) -> dict[str, Any]:
        if not self.settings.card_from_remote or self._card is None:
            return {}
        card = MessageToDict(self._card)
        fields = {key: card[key] for key in CARD_FIELDS if card.get(key)}
        for skill in fields.get("skills", []):
            skill.pop("securityRequirements", None)  # the remote's, not the gateway's
        return fields

    async def run(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        if not has_input(request):
            yield Rejected(f"the message has no text, data or file for {BACKEND}")
            return
        message = self._outbound(request)
        mapper = RemoteTaskMapper(self._remote_context(request), task_id=message.task_id or None,
                                  answering=bool(message.task_id))
        deadline = self.settings.deadline(RUN)
        try:
            streams = await self._streams()
        except UpstreamError as exc:
            yield Failed(exc.reason)
            return
        send = SendMessageRequest(message=message)
        # a remote without streaming answers at once with its task, which is then polled
        send.configuration.return_immediately = not streams
        async with contextlib.aclosing(
            self._follow(
                request,
                mapper,
                deadline,
                lambda client: client.send_message(send, context=self._context(request)),
            )
        ) as events:
            async for event in events:
                # a Message answer (no remote task) is answered as the response mode asks
                yield self.answer(event) if mapper.task_id is None else event
        if mapper.ended:
            return
        if streams:
            yield Failed(f"{BACKEND} ended the stream before the task finished")
            return
        async with contextlib.aclosing(self._poll(request, mapper, deadline)) as events:
            async for event in events:
                yield event

    async def cancel(self, request: HandlerRequest) -> bool:
        if not request.run_ref:
            return False
        try:
            client = await self._remote()
            await client.cancel_task(CancelTaskRequest(id=request.run_ref),
                                     context=self._context(request))
        except Exception as exc:  # a task the remote already ended, an unreachable remote
            log.warning("remote_cancel_failed", run_ref=request.run_ref,
                        reason=self._reason(exc))
            return False
        return request.run_ref in self._followed

    async def reattach(self, request: HandlerRequest) -> AsyncIterator[HandlerEvent]:
        if not request.run_ref:
            yield Failed(f"no task of {BACKEND} to re-attach to")
            return
        task_id = request.run_ref
        mapper = RemoteTaskMapper(self._remote_context(request), task_id=task_id)
        deadline = self.settings.deadline(RUN)
        try:
            streams = await self._streams()
        except UpstreamError:
            streams = False  # polling reports an unreachable remote
        if streams:
            async with contextlib.aclosing(self._follow(
                    request, mapper, deadline,
                    lambda client: client.subscribe(SubscribeToTaskRequest(id=task_id),
                                                    context=self._context(request)),
                    quiet=True)) as events:
                async for event in events:
                    yield event
        if mapper.ended:
            return
        async with contextlib.aclosing(self._poll(request, mapper, deadline)) as events:
            async for event in events:
                yield event

    async def aclose(self) -> None:
        await self._remote_http.aclose()

    # -- following the remote task ------------------------------------------------

    async def _follow(self, request: HandlerRequest, mapper: RemoteTaskMapper, deadline: Deadline,
                      call: Any, *, quiet: bool = False) -> AsyncIterator[HandlerEvent]:
        """The events of one streamed (or blocking) call until the remote task ends or waits
        for input (``mapper.ended``), or the call ends. A failed call fails the task (and
        ends the mapper); ``quiet``: it just ends the iterator (the caller goes on polling)."""
        try:
            client = await self._remote()
        except UpstreamError as exc:
            mapper.ended = True
            yield Failed(exc.reason)
            return
        stream = call(client)
        try:
            while not mapper.ended:
                try:
                    response = await deadline.within(anext(stream))
                except StopAsyncIteration:
                    break
                events = mapper.feed(response)
                if mapper.task_id:
                    self._followed.add(mapper.task_id)
                for event in events:
                    yield self._redacted(event)
        except RunTimedOut as exc:
            mapper.ended = True
            yield await self._abandon(request, mapper, exc.reason)
        except Exception as exc:
            self._forget_card()
            reason = self._reason(exc)
            log.warning("remote_call_failed", task_id=request.task_id, reason=reason)
            if not quiet:
                mapper.ended = True
                yield Failed(reason)
        finally:
            if mapper.task_id:
                self._followed.discard(mapper.task_id)
            with contextlib.suppress(Exception):
                await stream.aclose()

    async def _poll(self, request: HandlerRequest, mapper: RemoteTaskMapper,
                    deadline: Deadline) -> AsyncIterator[HandlerEvent]:
        """GetTask until the remote task ends or waits for input."""
        assert mapper.task_id is not None
        self._followed.add(mapper.task_id)
        try:
            while not mapper.ended:
                try:
                    client = await self._remote()
                    task = await deadline.within(client.get_task(
                        GetTaskRequest(id=mapper.task_id), context=self._context(request)))
                except RunTimedOut as exc:
                    mapper.ended = True
                    yield await self._abandon(request, mapper, exc.reason)
                    return
                except Exception as exc:
                    self._forget_card()
                    mapper.ended = True
                    yield Failed(self._reason(exc))
                    return
                for event in mapper.feed(StreamResponse(task=task)):
                    yield self._redacted(event)
                if not mapper.ended:
                    await asyncio.sleep(min(self.settings.poll_interval_seconds,
                                            max(0.0, deadline.remaining())))
                    if deadline.remaining() <= 0:
                        yield await self._abandon(request, mapper, deadline.reason)
                        return
        finally:
            self._followed.discard(mapper.task_id)

    async def _abandon(
        self, request: HandlerRequest, mapper: RemoteTaskMapper, reason: str
    ) -> Failed:
        """Cancel a remote task the bridge gives up on (best effort) and fail the gateway's."""
        if mapper.task_id:
            with contextlib.suppress(Exception):
                client = await self._remote()
                await client.cancel_task(CancelTaskRequest(id=mapper.task_id),
                                         context=self._context(request))
        return Failed(reason)

    # -- the remote card and client ------------------------------------------------

    async def _remote(self) -> Client:
        """The client for the remote card, read again every ``card_refresh_seconds``."""
        async with self._card_lock:
            fresh = time.monotonic() - self._card_read_at < self.settings.card_refresh_seconds
            if self._client is None or not fresh:
                card = await self._read_card()
                config = ClientConfig(streaming=self.settings.remote_streaming,
                                      httpx_client=self._remote_http,
                                      supported_protocol_bindings=["JSONRPC", "HTTP+JSON"])
                try:
                    self._client = ClientFactory(config).create(card)
                except ValueError:
                    raise UpstreamError(f"{BACKEND}'s card offers no JSON-RPC or HTTP+JSON "
                                        "interface this gateway can use") from None
                self._card, self._card_read_at = card, time.monotonic()
            return self._client

    async def _read_card(self) -> AgentCard:
        url = self.settings.remote_card_url
        try:
            response = await self._remote_http.get(url)
        except httpx.HTTPError as exc:
            raise UpstreamError(redact(transport_error_reason(
                BACKEND, url, exc, self.settings.remote_timeout), self._secrets)) from None
        if response.status_code != 200:
            raise UpstreamError(f"cannot read {BACKEND}'s card at {shown_url(url)} "
                                f"(HTTP {response.status_code})", response.status_code)
        try:
            return parse_agent_card(response.json())
        except (ValueError, ParseError):
            raise UpstreamError(
                f"{BACKEND}'s card at {shown_url(url)} is not a valid agent card"
            ) from None

    def _redacted(self, event: HandlerEvent) -> HandlerEvent:
        """The remote's own reasons may echo a credential it was sent."""
        if isinstance(event, Failed | Rejected | Canceled) and event.reason:
            return type(event)(redact(event.reason, self._secrets + self._auth.issued))
        return event

    def _reason(self, exc: BaseException) -> str:
        return error_reason(exc, self.settings, self._secrets + self._auth.issued)

    def _forget_card(self) -> None:
        """After a failure the card is read again: the remote may have moved or changed."""
        self._card_read_at = 0.0

    async def _streams(self) -> bool:
        await self._remote()
        return bool(
            self.settings.remote_streaming and self._card and self._card.capabilities.streaming
        )

    # -- what is sent --------------------------------------------------------------

    def _outbound(self, request: HandlerRequest) -> Message:
        """The caller's message for the remote: its parts and metadata, in the remote's
        context, and (an answer to INPUT_REQUIRED/AUTH_REQUIRED) in the remote's task."""
        message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER)
        message.parts.extend(request.message.parts)
        if request.message.metadata:
            message.metadata.CopyFrom(request.message.metadata)
        message.context_id = self._remote_context(request) or ""
        if request.pending_input is not None and request.run_ref:
            message.task_id = request.run_ref
        return message

    @staticmethod
    def _remote_context(request: HandlerRequest) -> str | None:
        """The remote context of the request's gateway context, once the remote named one."""
        context = request.session.get(CONTEXT_KEY)
        return context if isinstance(context, str) and context else None

    @staticmethod
    def _context(request: HandlerRequest) -> ClientCallContext:
        """The caller's trace context goes on (the backend transport may replace it), with
        the task's ids (``X-A2A-Task-Id``, ...) for the remote's logs."""
        headers = {k: v for k, v in request.headers.items() if k.lower() in TRACE_HEADERS}
        headers.update(correlation_headers(request))
        return ClientCallContext(service_parameters=headers or None)

