"""The official a2a-sdk 1.3.0 server: Starlette + uvicorn (httptools, uvloop),
``DefaultRequestHandler``, ``InMemoryTaskStore`` and an echo ``AgentExecutor``.

The executor does what the gateway's echo endpoint does for a blocking SendMessage:
enqueue the Task (SUBMITTED), move it to WORKING, add one artifact ``"echo: <text>"``
and complete it. JSON-RPC 1.0 is served at ``/{endpoint_id}/a2a`` (any id).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import uvicorn  # noqa: E402
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part  # noqa: E402
from a2a.server.agent_execution import AgentExecutor, RequestContext  # noqa: E402
from a2a.server.events import EventQueue  # noqa: E402
from a2a.server.request_handlers import DefaultRequestHandler  # noqa: E402
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes  # noqa: E402
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater  # noqa: E402
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Mount  # noqa: E402

from bench.servers.common import BENCH_ENDPOINT_ID, announce  # noqa: E402


class EchoExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await updater.add_artifact([new_text_part(f"echo: {context.get_user_input()}")])
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def build_app(port: int) -> Starlette:
    url = f"http://127.0.0.1:{port}/{BENCH_ENDPOINT_ID}/a2a"
    card = AgentCard(
        name="echo",
        description="benchmark echo",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes the input", tags=["echo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [*create_jsonrpc_routes(handler, "/a2a"), *create_agent_card_routes(card)]
    return Starlette(routes=[Mount("/{endpoint_id}", routes=routes)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8702)
    args = p.parse_args()
    announce("a2a-sdk", args.port, True)
    uvicorn.run(
        build_app(args.port), host=args.host, port=args.port, loop="uvloop", http="httptools",
        log_level="warning", access_log=False, lifespan="on",
    )


if __name__ == "__main__":
    main()
