"""The typed state of a running gateway (``GATEWAY``), which the transports read.

It lives apart from ``app.py`` (which builds it) so that ``transport/`` can import it
without importing the application that imports ``transport/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
from aiohttp import web

from a2a_gateway.auth.callers import Authenticator
from a2a_gateway.auth.operators import OperatorAuth
from a2a_gateway.endpoints.card_signing import CardSigner
from a2a_gateway.endpoints.registry import EndpointRegistry, EndpointRuntime
from a2a_gateway.governance.quotas import Quotas
from a2a_gateway.live.hub import LiveHub
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import Store
from a2a_gateway.tasks.engine import TaskEngine
from a2a_gateway.tasks.push import PushNotifier

if TYPE_CHECKING:
    from a2a.compat.v0_3.request_handler import RequestHandler03

    from a2a_gateway.tasks.request_handler import GatewayRequestHandler


@dataclass(slots=True)
class Gateway:
    settings: GatewaySettings
    store: Store
    http: httpx.AsyncClient
    registry: EndpointRegistry
    hub: LiveHub
    push: PushNotifier
    engine: TaskEngine
    auth: Authenticator
    card_signer: CardSigner
    """Signs the cards served (signs nothing without configured keys)."""
    operators: OperatorAuth
    """Who may watch an endpoint (its event feed)."""
    grpc_port: int | None = None
    """The port the gRPC binding listens on (None: no gRPC)."""
    quotas: Quotas | None = None
    """Admits new tasks against key and endpoint limits (None: no quotas, e.g. in tests)."""

    def request_handlers(
        self, runtime: EndpointRuntime
    ) -> tuple[GatewayRequestHandler, RequestHandler03]:
        """The endpoint's 1.0 request handler and its 0.3 adapter (built once per runtime)."""
        if runtime.request_handlers is None:
            # the a2a-sdk's server package (its default handler, gRPC, the 0.3 types: ~100 ms,
            # ~15 MB) loads with the first request or card, not at start-up (bench/cold_start.py)
            from a2a.compat.v0_3.request_handler import RequestHandler03

            from a2a_gateway.tasks.request_handler import GatewayRequestHandler

            v10 = GatewayRequestHandler(
                runtime, self.engine, self.push, self.card_signer,
                max_push_configs=self.settings.max_push_configs_per_task, quotas=self.quotas,
            )
            runtime.request_handlers = (v10, RequestHandler03(v10))
        return runtime.request_handlers

    def base_url(self, request: web.Request) -> str:
        """``public_base_url``, else the request's scheme and host; 400 for a Host header that is
        not UTF-8 (no URL, card or JSON answer can hold it)."""
        if self.settings.public_base_url:
            return self.settings.public_base_url
        try:
            request.host.encode()
        except UnicodeEncodeError:  # aiohttp keeps bytes that are not UTF-8 as lone surrogates
            raise web.HTTPBadRequest(reason="the Host header is not UTF-8") from None
        return f"{request.scheme}://{request.host}"

    def grpc_url(self, request: web.Request) -> str:
        """``host:port`` of the gRPC binding as cards list it (empty: no gRPC)."""
        if self.grpc_port is None:
            return ""
        host = request.url.host or self.settings.host
        return (
            self.settings.public_grpc_url
            or f"{f'[{host}]' if ':' in host else host}:{self.grpc_port}"
        )


GATEWAY = web.AppKey("gateway", Gateway)
