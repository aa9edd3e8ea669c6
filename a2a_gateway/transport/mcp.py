"""``/{endpoint_id}/mcp``: the endpoint as an MCP server (Streamable HTTP, the ``mcp`` SDK).

The view resolves the endpoint and authenticates the caller exactly as the A2A routes do (same
credentials, rate limit, tenant), then hands the request to the SDK's session manager through
``mcp_asgi``; the tools are ``mcp_tools``. Refusals are JSON-RPC error bodies with the HTTP
status of the gateway error: 401 names the endpoint's RFC 9728 protected-resource metadata
when it takes JWTs (served at ``/.well-known/oauth-protected-resource/{endpoint_id}/mcp``).
An endpoint whose metadata says ``mcp: false``, or every endpoint with ``A2A_GATEWAY_MCP=false``,
answers 404; a gateway installed without the ``mcp`` extra answers 501.

Sessions: a 2025-era client (``initialize``) gets a session held by the replica that opened
it (``Mcp-Session-Id``, bound to the caller), which lets the gateway elicit answers and hear
``notifications/cancelled``; a 2026-07-28 client sends self-contained requests any replica
serves. The SDK (``mcp``, an optional extra) loads with the first MCP request.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson
from a2a.auth.user import User
from aiohttp import web

from a2a_gateway.endpoints.registry import EndpointRuntime
from a2a_gateway.errors import EndpointNotFoundError, GatewayError, UnauthenticatedError
from a2a_gateway.state import GATEWAY

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

MCP_PATH = "/{endpoint_id}/mcp"
RESOURCE_METADATA_PREFIX = "/.well-known/oauth-protected-resource"
JSONRPC_CODES = {401: -32001, 403: -32001, 404: -32601, 429: -32000}
"""JSON-RPC codes of the gateway's refusals (MCP defines none for them): server-defined codes
(-32000 to -32099) for a refused credential and a spent rate limit, method not found for an
endpoint that does not serve MCP; anything else is -32603."""


class McpNotInstalledError(GatewayError):
    """The gateway runs without the ``mcp`` extra."""

    http_status = 501
    status = "UNIMPLEMENTED"
    message = "this gateway is installed without MCP support (the a2a-gateway[mcp] extra)"


class McpService:
    """The SDK's session manager, started with the first MCP request and stopped with the app
    (which ends its sessions and their open streams)."""

    def __init__(self) -> None:
        self._manager: StreamableHTTPSessionManager | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()

    async def manager(self, max_body_bytes: int) -> StreamableHTTPSessionManager:
        """The running session manager (started by the first call)."""
        async with self._lock:
            if self._manager is None:
                from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

                from a2a_gateway.transport.mcp_tools import build_server

                manager = StreamableHTTPSessionManager(
                    build_server(), max_request_body_size=max_body_bytes
                )
                started = asyncio.Event()
                self._runner = asyncio.create_task(self._run(manager, started))
                await asyncio.wait(
                    [self._runner, asyncio.ensure_future(started.wait())],
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if self._runner.done():
                    self._runner.result()  # raises what stopped it
                self._manager = manager
        return self._manager

    def stopping(self) -> bool:
        return self._stop.is_set()

    async def _run(self, manager: StreamableHTTPSessionManager, started: asyncio.Event) -> None:
        async with manager.run():
            started.set()
            await self._stop.wait()

    async def close(self, _app: web.Application | None = None) -> None:
        self._stop.set()
        if self._runner is not None:
            await self._runner


MCP_SERVICE = web.AppKey("mcp_service", McpService)


def serves_mcp(runtime: EndpointRuntime, enabled: bool) -> bool:
    """MCP is on for the gateway and the endpoint's metadata does not turn it off."""
    return enabled and runtime.endpoint.metadata.get("mcp", True) is not False


def resource_url(base_url: str, endpoint_id: str) -> str:
    return f"{base_url}/{endpoint_id}/mcp"


def _refusal(
    exc: GatewayError, runtime: EndpointRuntime | None, base_url: str
) -> web.Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {
        "code": JSONRPC_CODES.get(exc.http_status, -32603), "message": exc.message}}
    headers = exc.headers()
    if isinstance(exc, UnauthenticatedError) and runtime is not None and runtime.auth.jwt:
        metadata = f"{base_url}{RESOURCE_METADATA_PREFIX}/{runtime.endpoint.id}/mcp"
        headers["WWW-Authenticate"] += f', resource_metadata="{metadata}"'
    return web.Response(status=exc.http_status, body=orjson.dumps(body), headers=headers,
                        content_type="application/json")


def _session_owner(endpoint_id: str, user: User) -> Any:
    """The identity a stateful session is bound to: endpoint and principal."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    principal = user.user_name if user.is_authenticated else ""
    return AuthenticatedUser(AccessToken(
        token="", client_id=f"{endpoint_id}/{principal}", scopes=[], subject=principal or None,
    ))


async def mcp_endpoint(request: web.Request) -> web.StreamResponse:
    from a2a_gateway.transport.mcp_asgi import serve_asgi

    gateway = request.app[GATEWAY]
    base_url = gateway.base_url(request)
    runtime = None
    try:
        runtime = await gateway.registry.get(request.match_info["endpoint_id"])
        if not serves_mcp(runtime, gateway.settings.mcp):
            raise EndpointNotFoundError("this endpoint is not served over MCP")
        user = await gateway.auth.caller(request.headers, runtime.auth_view)
        service = request.app[MCP_SERVICE]
        try:
            manager = await service.manager(gateway.settings.max_body_bytes)
            from a2a_gateway.transport.mcp_tools import SCOPE_KEY, McpCall
        except ImportError:
            raise McpNotInstalledError() from None
    except GatewayError as exc:
        return _refusal(exc, runtime, base_url)
    scope = {
        SCOPE_KEY: McpCall(request, gateway, runtime, user, service.stopping),
        "user": _session_owner(runtime.endpoint.id, user),
    }
    return await serve_asgi(request, manager.handle_request, scope)


async def protected_resource_metadata(request: web.Request) -> web.StreamResponse:
    """RFC 9728 metadata of an endpoint's MCP URL, when the endpoint takes JWTs."""
    gateway = request.app[GATEWAY]
    runtime = await gateway.registry.get(request.match_info["endpoint_id"])
    jwt = runtime.auth.jwt
    if jwt is None or not serves_mcp(runtime, gateway.settings.mcp):
        raise web.HTTPNotFound(reason="this endpoint takes no OAuth access tokens")
    body = {
        "resource": resource_url(gateway.base_url(request), runtime.endpoint.id),
        "authorization_servers": [jwt.issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": runtime.endpoint.name,
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def add_mcp_routes(app: web.Application) -> None:
    service = app[MCP_SERVICE] = McpService()
    for method in ("POST", "GET", "DELETE"):
        app.router.add_route(method, MCP_PATH, mcp_endpoint)
    app.router.add_get(f"{RESOURCE_METADATA_PREFIX}{MCP_PATH}", protected_resource_metadata,
                       allow_head=False)
    app.on_shutdown.append(service.close)
