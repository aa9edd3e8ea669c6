"""Push notifications: webhook configs and delivery of task updates.

Each durable state change of a task is POSTed, as a ``StreamResponse`` JSON body,
to every webhook configured for the task, with ``Authorization: <scheme>
<credentials>`` and ``X-A2A-Notification-Token``. Delivery runs in the
background with bounded retries and never blocks the task. Webhook URLs on
loopback, private, link-local and similar addresses are refused unless the
gateway allows them (for local testing).
"""

from __future__ import annotations

import asyncio
import contextlib
import random

import httpx
import orjson
import structlog
from a2a.types import StreamResponse, Task, TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError

from a2a_gateway.executor import new_id, status_event
from a2a_gateway.push_guard import RefusedUrlError, WebhookGuard, pin
from a2a_gateway.registry import EndpointRuntime
from a2a_gateway.stores.base import Scope, Store
from a2a_gateway.transport.protojson import message_to_dict

log = structlog.get_logger(__name__)

DELIVERY_ID_HEADER = "X-A2A-Notification-Id"
"""Names one notification: the same on every retry of it, so a receiver can drop duplicates."""


def retry_delay(attempts: int, base: float, cap: float) -> float:
    """Seconds to wait after ``attempts`` failed attempts: doubling from ``base`` up to ``cap``,
    then a random half of it taken off, so receivers coming back are not hit all at once."""
    delay = min(base * 2 ** (attempts - 1), cap)
    return delay / 2 + random.uniform(0, delay / 2)


class PushNotifier:
    def __init__(
        self,
        store: Store,
        guard: WebhookGuard,
        *,
        timeout: float = 10.0,
        max_attempts: int = 3,
        retry_base_seconds: float = 1.0,
        retry_max_seconds: float = 300.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._store = store
        self.guard = guard
        # Its own client: no proxy from the environment (it would resolve the name itself),
        # no redirects, and no kept-alive connections, which are pooled by address alone and
        # would carry a request for one name over a TLS session verified for another.
        self._http = http or httpx.AsyncClient(
            trust_env=False, follow_redirects=False, limits=httpx.Limits(max_keepalive_connections=0)
        )
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._retry_base = retry_base_seconds
        self._retry_max = retry_max_seconds
        self._deliveries: set[asyncio.Task[None]] = set()

    async def check_url(self, url: str) -> None:
        """``InvalidParamsError`` (-32602) with the reason when ``url`` may not be called."""
        try:
            await self.guard.check(url)
        except RefusedUrlError as exc:
            raise InvalidParamsError(str(exc)) from None

    async def save_inline_config(
        self, scope: Scope, task_id: str, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        """Store a config that came with SendMessage for the new task; returns it."""
        stored = TaskPushNotificationConfig()
        stored.CopyFrom(config)
        stored.task_id = task_id
        stored.id = stored.id or task_id
        await self._store.put_push_config(scope, stored)
        return stored

    async def notify(
        self, runtime: EndpointRuntime, scope: Scope, task: Task,
        configs: list[TaskPushNotificationConfig] | None = None,
    ) -> None:
        """Deliver ``task``'s status to its webhooks (``configs``: already known, else read)."""
        if not runtime.push_notifications:
            return
        if configs is None:
            configs = await self._store.list_push_configs(scope, task.id)
        if not configs:
            return
        body = orjson.dumps(message_to_dict(StreamResponse(status_update=status_event(task))))
        for config in configs:
            delivery = asyncio.create_task(self._deliver(config, body))
            self._deliveries.add(delivery)
            delivery.add_done_callback(self._deliveries.discard)

    async def _deliver(self, config: TaskPushNotificationConfig, body: bytes) -> None:
        headers = {"Content-Type": "application/a2a+json"}
        if config.HasField("authentication") and config.authentication.scheme:
            headers["Authorization"] = f"{config.authentication.scheme} {config.authentication.credentials}"
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        headers[DELIVERY_ID_HEADER] = new_id()
        for attempt in range(1, self._max_attempts + 1):
            try:
                target = await self.guard.check(config.url)
                request = self._http.build_request(
                    "POST", target.url, content=body, headers=headers, timeout=self._timeout
                )
                response = await self._http.send(pin(request, target), follow_redirects=False)
                if response.status_code < 500:
                    if response.status_code >= 300:
                        log.warning("push_rejected", task_id=config.task_id, status=response.status_code)
                    return
            except RefusedUrlError as exc:
                log.warning("push_url_refused", task_id=config.task_id, reason=str(exc))
                return
            except httpx.HTTPError as exc:
                log.info("push_attempt_failed", task_id=config.task_id, attempt=attempt, error=type(exc).__name__)
            await asyncio.sleep(retry_delay(attempt, self._retry_base, self._retry_max))
        log.warning("push_gave_up", task_id=config.task_id, attempts=self._max_attempts)

    async def aclose(self) -> None:
        for delivery in list(self._deliveries):
            delivery.cancel()
        for delivery in list(self._deliveries):
            with contextlib.suppress(asyncio.CancelledError):
                await delivery
        await self._http.aclose()
