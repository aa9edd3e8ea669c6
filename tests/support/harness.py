"""A real gateway on a free loopback port, and real a2a-sdk clients for it.

    async with running_gateway() as gw:
        endpoint_id = await gw.add_endpoint("handlers.echo:EchoHandler", settings={"delay": 0})
        async with gw.client(endpoint_id, version="1.0") as client:
            async for event in client.send_message(request): ...

``running_gateway(grpc=True)`` also serves the gRPC binding (plaintext, a free port), and
``gw.client(endpoint_id, binding="GRPC")`` talks to it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.client.auth.credentials import CredentialService
from a2a.client.auth.interceptor import AuthInterceptor
from a2a.types import AgentCard, StreamResponse
from aiohttp import web

from a2a_gateway.app import build_app, gateway_runner
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.state import GATEWAY, Gateway
from a2a_gateway.stores.base import Endpoint, Store


def require_env(*names: str) -> str:
    """The value of the first of ``names`` (service variables set by .ci/services); skip the
    test when any is unset. In CI a skip is a failure (tests/conftest.py)."""
    missing = [name for name in names if not os.environ.get(name)]
    if missing:
        pytest.skip(f"service not configured: {', '.join(missing)} unset (see .ci/services)")
    return os.environ[names[0]]


@dataclass
class RunningGateway:
    base_url: str
    app: web.Application

    @property
    def gateway(self) -> Gateway:
        return self.app[GATEWAY]

    @property
    def store(self) -> Store:
        return self.gateway.store

    async def add_endpoint(
        self,
        handler: str = "handlers.echo:EchoHandler",
        *,
        settings: dict[str, Any] | None = None,
        card: dict[str, Any] | None = None,
        name: str = "test agent",
        tenant: str = "default",
        endpoint_id: str | None = None,
        enabled: bool = True,
    ) -> str:
        module_name, _, class_name = handler.partition(":")
        endpoint = Endpoint(
            id=endpoint_id or str(uuid.uuid4()),
            name=name,
            tenant=tenant,
            enabled=enabled,
            card=card or {},
            metadata={"module_name": module_name, "class_name": class_name, **(settings or {})},
        )
        await self.store.create_endpoint(endpoint)
        return endpoint.id

    def endpoint_url(self, endpoint_id: str) -> str:
        return f"{self.base_url}/{endpoint_id}"

    def jsonrpc_url(self, endpoint_id: str) -> str:
        return f"{self.base_url}/{endpoint_id}/a2a"

    def rest_url(self, endpoint_id: str) -> str:
        return f"{self.base_url}/{endpoint_id}/a2a/rest"

    async def card(self, endpoint_id: str) -> AgentCard:
        async with httpx.AsyncClient() as http:
            resolver = A2ACardResolver(http, self.endpoint_url(endpoint_id))
            return await resolver.get_agent_card()

    @asynccontextmanager
    async def client(
        self,
        endpoint_id: str,
        *,
        version: str = "1.0",
        binding: str = "JSONRPC",
        streaming: bool = True,
        timeout: float = 30.0,
        api_key: str | None = None,
    ) -> AsyncIterator[Client]:
        """An a2a-sdk client that discovered the endpoint through its card and talks
        ``binding`` (JSONRPC, HTTP+JSON or GRPC) at protocol ``version`` (1.0 or 0.3);
        ``api_key`` is sent as the card's security schemes say (the SDK's AuthInterceptor)."""
        card = await self.card(endpoint_id)
        chosen = [
            i for i in card.supported_interfaces
            if i.protocol_binding == binding and i.protocol_version == version
        ]
        if not chosen:
            raise ValueError(f"the card offers no {binding} {version} interface")
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(chosen)
        http = httpx.AsyncClient(timeout=httpx.Timeout(timeout))
        config = ClientConfig(
            streaming=streaming,
            httpx_client=http,
            supported_protocol_bindings=[binding],
            grpc_channel_factory=grpc_channel if binding == "GRPC" else None,
        )
        if version == "0.3":
            http.headers["A2A-Version"] = "0.3"
        interceptors = (
            [AuthInterceptor(ApiKeyCredentials(api_key))] if api_key is not None else None
        )
        client = ClientFactory(config).create(card, interceptors=interceptors)
        try:
            yield client
        finally:
            await client.close()
            await http.aclose()


def grpc_channel(url: str) -> Any:
    """A plaintext gRPC channel to ``url`` (``host:port``), imported only by gRPC tests."""
    import grpc

    return grpc.aio.insecure_channel(url)


class ApiKeyCredentials(CredentialService):
    """One API key for whichever scheme the card names (``apiKey`` header or bearer)."""

    def __init__(self, key: str) -> None:
        self._key = key

    async def get_credentials(self, security_scheme_name: str, context: Any) -> str | None:
        return self._key


@asynccontextmanager
async def running_gateway(
    store_url: str = "memory://", *, store: Store | None = None,
    http: httpx.AsyncClient | None = None, grpc: bool = False,
    lingering_seconds: float | None = None, middlewares: tuple[Any, ...] = (), **settings: Any
) -> AsyncIterator[RunningGateway]:
    """Serve the gateway app on 127.0.0.1 with a free port for the duration of the block;
    ``grpc``: the gRPC binding too, plaintext, on a free port. ``lingering_seconds`` replaces
    aiohttp's ``lingering_time`` (10 s): how long a connection answered before its whole body
    arrived still reads and drops the rest before it is closed (tests of such answers wait
    for that close). ``middlewares`` run after the gateway's own (e.g. to record what it
    was sent)."""
    defaults: dict[str, Any] = {
        "push_allow_private_urls": True, "log_level": "warning", "lease_seconds": 30.0,
        "allow_unauthenticated_endpoints": True,
        **({"grpc_port": 0, "grpc_allow_plaintext": True} if grpc else {}),
    }
    gateway_settings = GatewaySettings(store=store_url, **{**defaults, **settings})
    app = build_app(gateway_settings, store=store, http=http)
    app.middlewares.extend(middlewares)
    lingering = {} if lingering_seconds is None else {"lingering_time": lingering_seconds}
    runner = gateway_runner(app, gateway_settings, **lingering)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield RunningGateway(f"http://127.0.0.1:{port}", app)
    finally:
        await runner.cleanup()


async def collect(stream: Any) -> list[StreamResponse]:
    """Every event of an a2a-sdk client stream."""
    return [event async for event in stream]


def reconstruct(events: list[StreamResponse]) -> dict[str, str]:
    """Text per artifact id, applying ``append`` / replace as a client would."""
    texts: dict[str, str] = {}
    for ev in events:
        if ev.HasField("artifact_update"):
            upd = ev.artifact_update
            text = "".join(p.text for p in upd.artifact.parts)
            aid = upd.artifact.artifact_id
            texts[aid] = texts.get(aid, "") + text if upd.append else text
    return texts
