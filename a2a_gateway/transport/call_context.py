"""The a2a-sdk ``ServerCallContext`` of a request, shared by the JSON-RPC and REST bindings."""

from __future__ import annotations

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from aiohttp import web

from a2a_gateway.endpoints.registry import EndpointRuntime
from a2a_gateway.state import Gateway
from a2a_gateway.transport.keys import REQUEST_ID


def call_context(
    request: web.Request,
    gateway: Gateway,
    runtime: EndpointRuntime,
    user: User,
    activated: list[str],
) -> ServerCallContext:
    # model_construct: these values are ours and already valid (saves pydantic's checks)
    return ServerCallContext.model_construct(
        state={
            "headers": request.headers,
            "base_url": gateway.base_url(request),
            "grpc_url": gateway.grpc_url(request),
            "request_id": request.get(REQUEST_ID),
        },
        user=user,
        tenant=runtime.endpoint.tenant,
        requested_extensions=set(activated),
    )
