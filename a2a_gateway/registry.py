"""Endpoint registry: endpoint id → row → allowlisted handler class → cached runtime.

A runtime holds the endpoint row, its handler instance (settings resolved) and its
agent card. Rows are re-read at most every ``endpoint_cache_seconds``; a changed
row builds a new runtime and closes the old handler.
"""

from __future__ import annotations

import asyncio
import importlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import structlog

from a2a_gateway.errors import EndpointMisconfiguredError, EndpointNotFoundError
from a2a_gateway.settings import GatewaySettings, HandlerSettingsError, resolve_handler_settings
from a2a_gateway.stores.base import Endpoint, Store
from handlers.base import Handler

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class EndpointRuntime:
    endpoint: Endpoint
    handler: Handler | None
    problem: str | None = None
    """Why the handler could not be built (the endpoint then answers with an error)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Per-runtime caches owned by other modules (card bytes, request handlers)."""

    @property
    def capabilities(self) -> dict[str, Any]:
        return self.endpoint.card.get("capabilities", {})

    @property
    def streaming(self) -> bool:
        return bool(self.capabilities.get("streaming", True))

    @property
    def push_notifications(self) -> bool:
        return bool(self.capabilities.get("pushNotifications", True))

    @property
    def extended_card(self) -> bool:
        return bool(self.capabilities.get("extendedAgentCard", False))

    @property
    def extensions(self) -> list[dict[str, Any]]:
        return list(self.capabilities.get("extensions", []))

    def require_handler(self) -> Handler:
        if self.handler is None:
            raise EndpointMisconfiguredError(f"endpoint is misconfigured: {self.problem}")
        return self.handler


def handler_path(metadata: dict[str, Any]) -> str:
    return f"{metadata.get('module_name', '')}:{metadata.get('class_name', '')}"


def load_handler_class(metadata: dict[str, Any], allowlist: list[str]) -> type[Handler]:
    module_name = str(metadata.get("module_name") or "")
    class_name = str(metadata.get("class_name") or "")
    if not module_name or not class_name:
        raise EndpointMisconfiguredError("metadata must name module_name and class_name")
    if not any(module_name.startswith(p) or module_name == p.rstrip(".") for p in allowlist):
        raise EndpointMisconfiguredError(f"handler module {module_name!r} is not in the allowlist")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise EndpointMisconfiguredError(f"handler module {module_name!r} cannot be imported") from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Handler)):
        raise EndpointMisconfiguredError(f"{module_name}.{class_name} is not a handler class")
    return cls


def is_endpoint_id(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class EndpointRegistry:
    def __init__(self, store: Store, settings: GatewaySettings, http: httpx.AsyncClient) -> None:
        self._store = store
        self._settings = settings
        self._http = http
        self._cache: dict[str, tuple[float, EndpointRuntime | None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, endpoint_id: str) -> EndpointRuntime:
        """The runtime of an enabled endpoint; ``EndpointNotFoundError`` otherwise."""
        cached = self._cache.get(endpoint_id)
        if cached is not None and time.monotonic() - cached[0] < self._settings.endpoint_cache_seconds:
            runtime = cached[1]
        else:
            runtime = await self._refresh(endpoint_id)
        if runtime is None or not runtime.endpoint.enabled:
            raise EndpointNotFoundError(f"no endpoint {endpoint_id}")
        return runtime

    async def _refresh(self, endpoint_id: str) -> EndpointRuntime | None:
        if not is_endpoint_id(endpoint_id):
            return None
        lock = self._locks.setdefault(endpoint_id, asyncio.Lock())
        try:
            async with lock:
                return await self._reload(endpoint_id)
        finally:
            if not lock.locked():
                self._locks.pop(endpoint_id, None)

    async def _reload(self, endpoint_id: str) -> EndpointRuntime | None:
        cached = self._cache.get(endpoint_id)
        if cached is not None and time.monotonic() - cached[0] < self._settings.endpoint_cache_seconds:
            return cached[1]
        row = await self._store.get_endpoint(endpoint_id)
        old = cached[1] if cached else None
        if row is not None and old is not None and old.endpoint.updated_at == row.updated_at:
            runtime: EndpointRuntime | None = old
        else:
            runtime = self._build(row) if row is not None else None
            if old is not None and old.handler is not None:
                await old.handler.aclose()
        if runtime is None:
            self._cache.pop(endpoint_id, None)  # unknown ids are not remembered
        else:
            self._cache[endpoint_id] = (time.monotonic(), runtime)
        return runtime

    def _build(self, endpoint: Endpoint) -> EndpointRuntime:
        path = handler_path(endpoint.metadata)
        try:
            cls = load_handler_class(endpoint.metadata, self._settings.handler_allowlist)
            settings = resolve_handler_settings(cls.Settings, path, endpoint.metadata, self._settings)
            return EndpointRuntime(endpoint, cls(settings, self._http))
        except (EndpointMisconfiguredError, HandlerSettingsError) as exc:
            log.warning("endpoint_misconfigured", endpoint_id=endpoint.id, problem=str(exc))
            return EndpointRuntime(endpoint, None, problem=str(exc))

    async def aclose(self) -> None:
        for _, runtime in self._cache.values():
            if runtime is not None and runtime.handler is not None:
                await runtime.handler.aclose()
        self._cache.clear()
