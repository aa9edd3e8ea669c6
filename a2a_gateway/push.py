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

import httpx
import orjson
import structlog
from a2a.types import StreamResponse, Task, TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError
from a2a.utils.push_url_validator import validate_push_notification_url

from a2a_gateway.executor import status_event
from a2a_gateway.registry import EndpointRuntime
from a2a_gateway.stores.base import Scope, Store
from a2a_gateway.transport.protojson import message_to_dict

log = structlog.get_logger(__name__)


class PushNotifier:
    def __init__(
        self,
        store: Store,
        http: httpx.AsyncClient,
        *,
        allow_private_urls: bool = False,
        timeout: float = 10.0,
        max_attempts: int = 3,
    ) -> None:
        self._store = store
        self._http = http
        self._allow_private = allow_private_urls
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._deliveries: set[asyncio.Task[None]] = set()

    async def check_url(self, url: str) -> None:
        if not url.startswith(("http://", "https://")):
            raise InvalidParamsError("push notification url must be http(s)")
        if self._allow_private:
            return
        if not await validate_push_notification_url(url):
            raise InvalidParamsError(
                "push notification url is not allowed (loopback, private or unresolvable address)"
            )

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
        for attempt in range(1, self._max_attempts + 1):
            try:
                await self.check_url(config.url)
                response = await self._http.post(
                    config.url, content=body, headers=headers, timeout=self._timeout, follow_redirects=False
                )
                if response.status_code < 500:
                    if response.status_code >= 400:
                        log.warning("push_rejected", task_id=config.task_id, status=response.status_code)
                    return
            except InvalidParamsError:
                log.warning("push_url_refused", task_id=config.task_id)
                return
            except httpx.HTTPError as exc:
                log.info("push_attempt_failed", task_id=config.task_id, attempt=attempt, error=type(exc).__name__)
            await asyncio.sleep(0.5 * 2 ** (attempt - 1))
        log.warning("push_gave_up", task_id=config.task_id, attempts=self._max_attempts)

    async def aclose(self) -> None:
        for delivery in list(self._deliveries):
            delivery.cancel()
        for delivery in list(self._deliveries):
            with contextlib.suppress(asyncio.CancelledError):
                await delivery
