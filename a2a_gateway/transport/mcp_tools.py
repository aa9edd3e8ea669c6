"""The MCP server of an endpoint: one tool per card skill (``ask`` without skills), whose call
is an A2A message through the endpoint's request handler.

A call streams the task (``on_message_send_stream``): text chunks become progress
notifications, the stored task at the end becomes the result (``mcp_results``). A task that
asks for input is put to the client as an elicitation when the client can be asked (the answer
continues the task, a decline or cancel cancels it), else the result says what is asked and
how to answer (the tool again, with ``taskId``). A call the client cancels cancels its task.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
import orjson
from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    SendMessageRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import A2AError
from aiohttp import web
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from a2a_gateway.endpoints.card import build_card
from a2a_gateway.endpoints.registry import EndpointRuntime
from a2a_gateway.errors import GatewayError
from a2a_gateway.protojson import message_to_dict
from a2a_gateway.state import Gateway
from a2a_gateway.transport.call_context import call_context
from a2a_gateway.transport.limits import check_request_limits
from a2a_gateway.transport.mcp_results import (
    ANSWER,
    ASKING_STATES,
    FAILED_STATES,
    asked_result,
    completed_result,
    elicitation_schema,
    error_result,
    failed_result,
    question,
    schema_problem,
    user_message,
)

SCOPE_KEY = "a2a_gateway.mcp_call"
"""The ASGI scope key of the ``McpCall`` the HTTP view resolved."""
DEFAULT_TOOL = "ask"
ELICITATION_ATTEMPTS = 2
"""An answer that does not match the request is refused and asked for once more."""
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to send to the agent."},
        "taskId": {"type": "string",
                   "description": "Answer the task that asked for input (its taskId)."},
        "contextId": {"type": "string", "description": "Continue this conversation."},
    },
    "required": ["message"],
}
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, slots=True)
class McpCall:
    """What the HTTP view resolved for one request: endpoint, authenticated caller."""

    request: web.Request
    gateway: Gateway
    runtime: EndpointRuntime
    user: User
    stopping: Callable[[], bool]
    """Whether the gateway is stopping (calls it ends leave their tasks to the other
    replicas rather than cancel them)."""

    def call_context(self) -> ServerCallContext:
        return call_context(self.request, self.gateway, self.runtime, self.user, [])


def _mcp_call(ctx: ServerRequestContext[Any, Any]) -> McpCall:
    http = ctx.request
    call = http.scope.get(SCOPE_KEY) if http is not None else None
    if not isinstance(call, McpCall):
        raise MCPError(types.INTERNAL_ERROR, "no endpoint for this request")
    return call


def tools(call: McpCall) -> list[types.Tool]:
    """A tool per skill of the endpoint's card, or ``ask``."""
    card = build_card(call.runtime.endpoint, call.gateway.base_url(call.request))
    found: list[types.Tool] = []
    names: set[str] = set()
    for skill in card.skills:
        name = _NOT_A_NAME.sub("_", skill.id or skill.name)[:64] or DEFAULT_TOOL
        if name in names:
            continue
        names.add(name)
        found.append(types.Tool(name=name, title=skill.name or None,
                                description=skill.description or card.description or None,
                                input_schema=INPUT_SCHEMA))
    return found or [types.Tool(
        name=DEFAULT_TOOL, title=card.name or None,
        description=card.description or f"Send a message to {card.name or 'the agent'}.",
        input_schema=INPUT_SCHEMA,
    )]


async def list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=tools(_mcp_call(ctx)))


def _argument(arguments: dict[str, Any], name: str, *, required: bool = False) -> str:
    value = arguments.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise MCPError(types.INVALID_PARAMS, f"arguments.{name} must be a non-empty string"
                       if required else f"arguments.{name} must be a string")
    return value


async def call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    call = _mcp_call(ctx)
    if params.name not in {tool.name for tool in tools(call)}:
        raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}")
    run = ToolRun(call, ctx, params.name)
    try:
        if params.request_state is not None:  # a 2026-07-28 client answering what was asked
            return await run.call(run.resume(params.request_state, params.input_responses))
        arguments = params.arguments or {}
        message = user_message(
            _argument(arguments, "message", required=True), None,
            _argument(arguments, "taskId"), _argument(arguments, "contextId"),
        )
        return await run.call(run.turns(message))
    except (A2AError, GatewayError) as exc:
        return error_result(exc.message)  # type: ignore[union-attr]


Outcome = types.CallToolResult | types.InputRequiredResult


class ToolRun:
    """One tool call: the A2A turns of its task until it ends or asks what cannot be asked.

    A question is put to a client with a back-channel (a 2025-era session) as an
    ``elicitation/create`` request and answered within the call; to a 2026-07-28 client as an
    ``InputRequiredResult``, whose retry (``requestState``: the task's ids, not a secret: the
    task is still looked up as the caller's) carries the answer.
    """

    def __init__(self, call: McpCall, ctx: ServerRequestContext[Any, Any], tool: str) -> None:
        self.handler = call.gateway.request_handlers(call.runtime)[0]
        self.context = call.call_context()
        self.settings = call.gateway.settings
        self.streaming = call.runtime.streaming
        self.stopping = call.stopping
        self.ctx = ctx
        self.tool = tool
        self.task_id = ""
        self.chunks = 0
        self.streamed: set[str] = set()

    async def call(self, work: Awaitable[Outcome]) -> Outcome:
        """``work``; a call the client cancels cancels its task (one the gateway's shutdown
        ends does not)."""
        try:
            return await work
        except asyncio.CancelledError:
            if not self.stopping():
                with anyio.CancelScope(shield=True):
                    await self._cancel()
            raise

    async def turns(self, message: Message) -> Outcome:
        while True:
            outcome = await self._turn(message)
            if isinstance(outcome, Message):
                return completed_result(Task(status={"message": outcome}))
            step = await self._after(outcome)
            if not isinstance(step, Message):
                return step
            message = step

    async def resume(self, request_state: str, responses: types.InputResponses | None) -> Outcome:
        """Continue the task ``request_state`` names with the client's answer."""
        try:
            state = orjson.loads(request_state)
            task_id, refusals = str(state["taskId"]), int(state.get("refused", 0))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise MCPError(types.INVALID_PARAMS, "requestState is not one this server issued"
                           ) from None
        self.task_id = task_id
        task = await self.handler.on_get_task(GetTaskRequest(id=task_id), self.context)
        assert task is not None  # on_get_task raises for a task it cannot find
        answer = (responses or {}).get(ANSWER)
        if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED or not isinstance(
            answer, types.ElicitResult
        ):
            step = await self._after(task)
        else:
            step = await self._answered(task, answer, refusals)
        return await self.turns(step) if isinstance(step, Message) else step

    async def _after(self, task: Task) -> Message | Outcome:
        """What follows a turn that left ``task`` as it is: the result, or the answer to its
        question as the next message."""
        state = task.status.state
        if state == TaskState.TASK_STATE_COMPLETED:
            return completed_result(task)
        if state in FAILED_STATES:
            return failed_result(task)
        if state == TaskState.TASK_STATE_INPUT_REQUIRED and self._can_elicit():
            return await self._elicit(task)
        if state == TaskState.TASK_STATE_INPUT_REQUIRED and self._can_ask_in_result():
            return self._input_required(task, question(task), 0)
        if state in ASKING_STATES:
            return asked_result(task, self.tool)
        return error_result("the task did not end; follow it with its taskId", task)

    async def _turn(self, message: Message) -> Task | Message:
        """Send ``message`` and stream its task until it ends or asks (an agent that does not
        stream: wait for that); the task as stored. The A2A routes' message limits apply."""
        check_request_limits({"message": message_to_dict(message)}, self.settings)
        request = SendMessageRequest(message=message)
        if not self.streaming:
            outcome = await self.handler.on_message_send(request, self.context)
            if isinstance(outcome, Task):
                self.task_id = outcome.id
            return outcome
        events = self.handler.on_message_send_stream(request, self.context)
        try:
            async for event in events:
                if isinstance(event, Message):
                    return event
                if isinstance(event, Task):
                    self.task_id = event.id
                elif isinstance(event, TaskStatusUpdateEvent | TaskArtifactUpdateEvent):
                    self.task_id = event.task_id
                if isinstance(event, TaskArtifactUpdateEvent):
                    await self._progress(event)
        finally:
            with anyio.CancelScope(shield=True):
                await events.aclose()  # type: ignore[attr-defined]
        task = await self.handler.on_get_task(GetTaskRequest(id=self.task_id), self.context)
        assert task is not None  # on_get_task raises for a task it cannot find
        return task

    async def _progress(self, event: TaskArtifactUpdateEvent) -> None:
        """Streamed text, not an artifact sent whole again after its chunks."""
        artifact_id = event.artifact.artifact_id
        if not event.append and artifact_id in self.streamed:
            return
        text = "".join(p.text for p in event.artifact.parts if p.WhichOneof("content") == "text")
        if text:
            self.streamed.add(artifact_id)
            self.chunks += 1
            await self.ctx.session.report_progress(self.chunks, None, text)

    def _can_elicit(self) -> bool:
        session = self.ctx.session
        return session.can_send_request and self._declared_elicitation()

    def _can_ask_in_result(self) -> bool:
        return self.ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and (
            self._declared_elicitation()
        )

    def _declared_elicitation(self) -> bool:
        return self.ctx.session.check_client_capability(
            types.ClientCapabilities(elicitation=types.ElicitationCapability())
        )

    def _input_required(self, task: Task, prompt: str, refusals: int) -> types.InputRequiredResult:
        schema, _ = elicitation_schema(task)
        ask = types.ElicitRequest(params=types.ElicitRequestFormParams(
            message=prompt, requested_schema=schema))
        state = {"taskId": task.id, "contextId": task.context_id, "refused": refusals}
        return types.InputRequiredResult(
            input_requests={ANSWER: ask}, request_state=orjson.dumps(state).decode()
        )

    async def _elicit(self, task: Task) -> Message | types.CallToolResult:
        """The client's answer as the follow-up message, or the result that ends the call."""
        schema, _ = elicitation_schema(task)
        prompt = question(task)
        for refusals in range(ELICITATION_ATTEMPTS):
            answer = await self.ctx.session.elicit_form(
                prompt, schema, related_request_id=self.ctx.request_id
            )
            step = await self._answered(task, answer, refusals)
            if not isinstance(step, types.InputRequiredResult):
                return step
            prompt = step.input_requests[ANSWER].params.message  # type: ignore[index,union-attr]
        raise AssertionError("_answered ends the call at the last attempt")

    async def _answered(
        self, task: Task, answer: types.ElicitResult, refusals: int
    ) -> Message | Outcome:
        """The follow-up message of an accepted answer; a canceled task for a declined or
        dismissed one; the question again for an answer the schema refuses (then an error)."""
        if answer.action != "accept":
            await self._cancel()
            verb = "declined" if answer.action == "decline" else "canceled"
            return error_result(f"the question was {verb}; the task was canceled", task)
        schema, as_data = elicitation_schema(task)
        problem = schema_problem(schema, answer.content)
        if problem is not None:
            if refusals + 1 >= ELICITATION_ATTEMPTS:
                return error_result(f"the answer does not match the question: {problem}", task)
            prompt = f"{question(task)}\n\nThe last answer was refused: {problem}"
            return self._input_required(task, prompt, refusals + 1)
        content = dict(answer.content or {})
        if as_data:
            return user_message(None, content, task.id, task.context_id)
        return user_message(str(content[ANSWER]), None, task.id, task.context_id)

    async def _cancel(self) -> None:
        if not self.task_id:
            return
        try:
            await self.handler.on_cancel_task(CancelTaskRequest(id=self.task_id), self.context)
        except (A2AError, GatewayError):
            pass  # the task ended meanwhile, or is no longer there


def build_server() -> Server[Any]:
    return Server("a2a-gateway", on_list_tools=list_tools, on_call_tool=call_tool)
