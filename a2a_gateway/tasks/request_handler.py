"""The a2a-sdk ``RequestHandler`` of one endpoint, on the gateway's task engine.

Transports call these methods with protobuf requests (1.0); the SDK's
``RequestHandler03`` wraps the same object for 0.3. Capability checks, request
validation and response trimming (history length, artifacts) live here; running
tasks is the engine's job.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.types.a2a_pb2 import (  # plain ints: the enum wrappers resolve names per access
    ROLE_UNSPECIFIED,
    TASK_STATE_UNSPECIFIED,
)
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE, MAX_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from a2a_gateway.endpoints.card import build_card
from a2a_gateway.endpoints.card_signing import CardSigner
from a2a_gateway.endpoints.registry import EndpointRuntime
from a2a_gateway.events import copy_task
from a2a_gateway.generation import CURRENT_GENERATION, IF_GENERATION_MATCH
from a2a_gateway.governance.quotas import NOTHING_TAKEN, Quotas
from a2a_gateway.stores.base import InvalidPageTokenError, Scope, TaskQuery
from a2a_gateway.tasks.conversation import Caller
from a2a_gateway.tasks.engine import SendOutcome, TaskEngine
from a2a_gateway.tasks.ids import check_ids
from a2a_gateway.tasks.long_poll import task_beyond
from a2a_gateway.tasks.push import PushNotifier
from a2a_gateway.tasks.streams import (
    LAST_EVENT_ID,
    send_stream,
    settled_elsewhere,
    subscribe_stream,
    tagged,
)

ANONYMOUS = "anonymous"


def trim_task(task: Task, history_length: int | None, include_artifacts: bool = True) -> Task:
    """A copy of ``task`` for a response: at most ``history_length`` recent messages."""
    out = copy_task(task)
    if history_length is not None:
        kept = list(out.history)[-history_length:] if history_length > 0 else []
        del out.history[:]
        out.history.extend(kept)
    if not include_artifacts:
        del out.artifacts[:]
    return out


def _history_length(params: object) -> int | None:
    if params.HasField("history_length"):  # type: ignore[attr-defined]
        value = params.history_length  # type: ignore[attr-defined]
        if value < 0:
            raise InvalidParamsError("historyLength must not be negative")
        return value
    return None


def _validate_message(message: Message) -> None:
    if not message.message_id:
        raise InvalidParamsError("message.messageId is required")
    if not message.parts:
        raise InvalidParamsError("message.parts must contain at least one part")
    if message.role == ROLE_UNSPECIFIED:
        raise InvalidParamsError("message.role is required")
    for part in message.parts:
        if part.WhichOneof("content") is None:
            raise InvalidParamsError("every message part needs text, raw, url or data")


class GatewayRequestHandler(RequestHandler):
    def __init__(
        self,
        runtime: EndpointRuntime,
        engine: TaskEngine,
        push: PushNotifier,
        card_signer: CardSigner,
        max_push_configs: int = 10,
        quotas: Quotas | None = None,
    ) -> None:
        self.runtime = runtime
        self.engine = engine
        self.store = engine.store
        self.push = push
        self.card_signer = card_signer
        self.max_push_configs = max_push_configs
        self.quotas = quotas

    def _scope(self, context: ServerCallContext) -> Scope:
        endpoint = self.runtime.endpoint
        principal = context.user.user_name if context.user.is_authenticated else ANONYMOUS
        tenant = getattr(context.user, "tenant", None) or endpoint.tenant  # a token's tenant claim
        return Scope(tenant, endpoint.id, principal or ANONYMOUS)

    # messages ---------------------------------------------------------------------
    async def _start(
        self, params: SendMessageRequest, context: ServerCallContext, *, streaming: bool
    ) -> SendOutcome:
        if not params.HasField("message"):
            raise InvalidParamsError("message is required")
        check_ids(params)
        _validate_message(params.message)
        push_config = None
        config = params.configuration
        if config.HasField("task_push_notification_config"):
            if not self.runtime.push_notifications:
                raise PushNotificationNotSupportedError()
            push_config = config.task_push_notification_config
            await self.push.check_url(push_config.url)
        scope = self._scope(context)
        key = getattr(context.user, "key", None)
        caller = Caller.of(
            scope.principal, context.requested_extensions, context.state.get("headers") or {},
            ("", "") if key is None else (key.id, key.name),
        )
        # a new task is admitted by its key's and endpoint's quotas before any work starts; a
        # follow-up message belongs to a task already admitted
        admission = NOTHING_TAKEN
        if not params.message.task_id and self.quotas is not None:
            admission = await self.quotas.admit(
                self.runtime.endpoint.id, self.runtime.limits, key
            )
        try:
            # the request's own message (parsed for this call): the engine fills in its ids
            outcome = await self.engine.send(
                self.runtime, scope, params.message,
                streaming=streaming, subscribe=streaming, push_config=push_config, caller=caller,
                blocking=not streaming and not config.return_immediately,
                if_generation_match=context.state.get(IF_GENERATION_MATCH),
            )
        except BaseException:
            if admission is not NOTHING_TAKEN:
                await self.quotas.give_back(admission)  # type: ignore[union-attr]
            raise
        if admission is not NOTHING_TAKEN:
            self.quotas.hold_until(admission, outcome.run)  # type: ignore[union-attr]
        return outcome

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        history_length = _history_length(params.configuration)
        outcome = await self._start(params, context, streaming=False)
        run = outcome.run
        if run is None:
            task = outcome.task
            if outcome.follow_version is not None and not params.configuration.return_immediately:
                task = await settled_elsewhere(self.engine, outcome)
            return trim_task(task, history_length)  # type: ignore[arg-type]
        if params.configuration.return_immediately:
            await run.created.wait()
        else:
            await run.settled.wait()
        if run.store_error is not None:
            raise run.store_error
        if run.reply is not None:
            return run.reply
        return trim_task(run.task, history_length)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        if not self.runtime.streaming:
            raise UnsupportedOperationError("this agent does not stream")
        history_length = _history_length(params.configuration)
        outcome = await self._start(params, context, streaming=True)
        del params  # a stream may idle for hours: it keeps no request
        events = send_stream(self.engine, outcome)
        try:
            async for event_id, event in events:
                if isinstance(event, Task):
                    event = trim_task(event, history_length)
                yield tagged(context, event_id, event)
                del event  # as in on_subscribe_to_task
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        if not self.runtime.streaming:
            raise UnsupportedOperationError("this agent does not stream")
        check_ids(params)
        # a reconnecting client names its last event: the stream goes on after it
        last_event_id = (context.state.get("headers") or {}).get(LAST_EVENT_ID)
        events = subscribe_stream(self.engine, self._scope(context), params.id, last_event_id)
        del params  # as on_message_send_stream
        try:
            async for event_id, event in events:
                yield tagged(context, event_id, event)
                del event  # an idle stream keeps no event it sent (its starting point's)
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    # tasks ------------------------------------------------------------------------------
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        check_ids(params)
        scope = self._scope(context)
        stored = await self.store.get_task(scope, params.id)
        if stored is None:
            raise TaskNotFoundError(f"Task {params.id} not found")
        task = stored.task
        beyond = context.state.get(CURRENT_GENERATION)
        if beyond is not None:  # a long-poll
            task = await task_beyond(
                self.engine, scope, task, beyond, self.engine.limits.long_poll_seconds
            )
        return trim_task(task, _history_length(params))

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        check_ids(params)
        page_size = (
            params.page_size if params.HasField("page_size") else DEFAULT_LIST_TASKS_PAGE_SIZE
        )
        if not 1 <= page_size <= MAX_LIST_TASKS_PAGE_SIZE:
            raise InvalidParamsError(f"pageSize must be between 1 and {MAX_LIST_TASKS_PAGE_SIZE}")
        after = None
        if params.HasField("status_timestamp_after"):
            ts = params.status_timestamp_after
            after = ts.seconds * 1_000_000 + ts.nanos // 1000
        if params.status == TASK_STATE_UNSPECIFIED and params.status != 0:
            raise InvalidParamsError("invalid status filter")
        query = TaskQuery(
            context_id=params.context_id, state=params.status, status_after_us=after,
            page_size=page_size, page_token=params.page_token,
        )
        try:
            page = await self.store.list_tasks(self._scope(context), query)
        except InvalidPageTokenError:
            raise InvalidParamsError("invalid pageToken") from None
        history_length = _history_length(params)
        include_artifacts = (
            params.include_artifacts if params.HasField("include_artifacts") else False
        )
        tasks = [trim_task(t, history_length, include_artifacts) for t in page.tasks]
        return ListTasksResponse(
            tasks=tasks,
            next_page_token=page.next_page_token,
            page_size=page_size,
            total_size=page.total_size,
        )

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        check_ids(params)
        return await self.engine.cancel(self.runtime, self._scope(context), params.id)

    # push notification configs ----------------------------------------------------------
    def _require_push(self) -> None:
        if not self.runtime.push_notifications:
            raise PushNotificationNotSupportedError()

    async def _require_task(self, context: ServerCallContext, task_id: str) -> Scope:
        scope = self._scope(context)
        if not task_id or await self.store.get_task(scope, task_id) is None:
            raise TaskNotFoundError(f"Task {task_id} not found")
        return scope

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        self._require_push()
        check_ids(params)
        scope = await self._require_task(context, params.task_id)
        if not params.url:
            raise InvalidParamsError("url is required")
        await self.push.check_url(params.url)
        config = TaskPushNotificationConfig()
        config.CopyFrom(params)
        config.id = config.id or config.task_id
        existing = await self.store.list_push_configs(scope, config.task_id)
        if len(existing) >= self.max_push_configs and all(c.id != config.id for c in existing):
            raise InvalidParamsError(
                f"task {config.task_id} has {len(existing)} push notification configs, the "
                "max_push_configs_per_task limit"
            )
        await self.store.put_push_config(scope, config)
        return config

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        self._require_push()
        check_ids(params)
        scope = await self._require_task(context, params.task_id)
        config = await self.store.get_push_config(
            scope, params.task_id, params.id or params.task_id
        )
        if config is None:
            raise TaskNotFoundError(f"push notification config {params.id} not found")
        return config

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        self._require_push()
        check_ids(params)
        scope = await self._require_task(context, params.task_id)
        configs = await self.store.list_push_configs(scope, params.task_id)
        return ListTaskPushNotificationConfigsResponse(configs=configs)

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        self._require_push()
        check_ids(params)
        scope = await self._require_task(context, params.task_id)
        await self.store.delete_push_config(scope, params.task_id, params.id)

    # extended card ---------------------------------------------------------------------------
    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        if not self.runtime.extended_card:
            raise UnsupportedOperationError("this agent declares no extended agent card")
        if not context.user.is_authenticated:
            raise ExtendedAgentCardNotConfiguredError(
                "the extended card is for authenticated callers only"
            )
        base_url, grpc_url = context.state.get("base_url", ""), context.state.get("grpc_url", "")
        cached = self.runtime.extended_card_cache
        if (
            cached is None or cached[0] != f"{base_url} {grpc_url}"
        ):  # built and signed once per runtime
            card = build_card(self.runtime.endpoint, base_url, extended=True,
                              auth=self.runtime.auth, grpc_url=grpc_url)
            cached = self.runtime.extended_card_cache = (f"{base_url} {grpc_url}",
                                                         self.card_signer.sign(card, base_url))
        return cached[1]
