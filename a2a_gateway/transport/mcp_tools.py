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
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
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

from a2a_gateway.endpoints.card import build_card
from a2a_gateway.endpoints.registry import EndpointRuntime
from a2a_gateway.errors import GatewayError
from a2a_gateway.state import Gateway
from a2a_gateway.transport.call_context import call_context
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
) -> types.CallToolResult:
    call = _mcp_call(ctx)
    if params.name not in {tool.name for tool in tools(call)}:
        raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}")
    arguments = params.arguments or {}
    message = user_message(
        _argument(arguments, "message", required=True), None,
        _argument(arguments, "taskId"), _argument(arguments, "contextId"),
    )
    run = ToolRun(call, ctx, params.name)
    try:
        return await run.call(message)
    except (A2AError, GatewayError) as exc:
        return error_result(exc.message)  # type: ignore[union-attr]


class ToolRun:
    """One tool call: the A2A turns of its task until it ends or asks what cannot be asked."""

    def __init__(self, call: McpCall, ctx: ServerRequestContext[Any, Any], tool: str) -> None:
        self.handler = call.gateway.request_handlers(call.runtime)[0]
        self.context = call.call_context()
        self.ctx = ctx
        self.tool = tool
        self.task_id = ""
        self.chunks = 0
        self.streamed: set[str] = set()

    async def call(self, message: Message) -> types.CallToolResult:
        try:
            return await self._turns(message)
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):
                await self._cancel()
            raise

    async def _turns(self, message: Message) -> types.CallToolResult:
        while True:
            outcome = await self._turn(message)
            if isinstance(outcome, Message):
                return completed_result(Task(status={"message": outcome}))
            state = outcome.status.state
            if state == TaskState.TASK_STATE_COMPLETED:
                return completed_result(outcome)
            if state in FAILED_STATES:
                return failed_result(outcome)
            if state == TaskState.TASK_STATE_INPUT_REQUIRED and self._can_elicit():
                answer = await self._elicit(outcome)
                if isinstance(answer, types.CallToolResult):
                    return answer
                message = answer
                continue
            if state in ASKING_STATES:
                return asked_result(outcome, self.tool)
            return error_result("the task did not end; follow it with its taskId", outcome)

    async def _turn(self, message: Message) -> Task | Message:
        """Send ``message`` and stream its task until it ends or asks; the task as stored."""
        events = self.handler.on_message_send_stream(
            SendMessageRequest(message=message), self.context
        )
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
        return session.can_send_request and session.check_client_capability(
            types.ClientCapabilities(elicitation=types.ElicitationCapability())
        )

    async def _elicit(self, task: Task) -> Message | types.CallToolResult:
        """The client's answer as the follow-up message, or the result that ends the call."""
        schema, as_data = elicitation_schema(task)
        prompt = question(task)
        problem = ""
        for _ in range(ELICITATION_ATTEMPTS):
            answer = await self.ctx.session.elicit_form(
                prompt, schema, related_request_id=self.ctx.request_id
            )
            if answer.action != "accept":
                await self._cancel()
                verb = "declined" if answer.action == "decline" else "canceled"
                return error_result(f"the question was {verb}; the task was canceled", task)
            problem = schema_problem(schema, answer.content) or ""
            if not problem:
                content = dict(answer.content or {})
                if as_data:
                    return user_message(None, content, task.id, task.context_id)
                return user_message(str(content[ANSWER]), None, task.id, task.context_id)
            prompt = f"{question(task)}\n\nThe last answer was refused: {problem}"
        return error_result(f"the answer does not match the question: {problem}", task)

    async def _cancel(self) -> None:
        if not self.task_id:
            return
        try:
            await self.handler.on_cancel_task(CancelTaskRequest(id=self.task_id), self.context)
        except (A2AError, GatewayError):
            pass  # the task ended meanwhile, or is no longer there


def build_server() -> Server[Any]:
    return Server("a2a-gateway", on_list_tools=list_tools, on_call_tool=call_tool)
