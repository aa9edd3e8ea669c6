"""Push notifications: webhook configs, and delivery of task updates through the store's outbox.

Each notified state change of a task becomes one ``PushDelivery`` per webhook, recorded in
the store right after the task write by the same writer, claimed by this replica and POSTed
at once. A failed attempt (connection error, timeout, 5xx, 408, 429) is released with a due
time (exponential backoff with jitter); every replica's poll loop claims due deliveries, so
retries — and the deliveries of a replica that stopped — are sent by whichever replica gets
there first. The loop looks every ``poll_seconds``, or, with replicas sharing Redis, when a
delivery falls due (``PushSchedule``: the due times go to Redis), so idle replicas do not poll
the store. After ``max_attempts`` a delivery is given up and logged. At least once: a
receiver drops duplicates by ``X-A2A-Notification-Id``, the same on every attempt.

Each POST carries the ``StreamResponse`` JSON body, ``Content-Type: application/a2a+json``,
``Authorization: <scheme> <credentials>`` and ``X-A2A-Notification-Token`` as configured; it
goes only to an address the ``WebhookGuard`` checked just before.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from enum import Enum
from typing import Protocol

import httpx
import orjson
import structlog
from a2a.types import StreamResponse, Task, TaskPushNotificationConfig
from a2a.utils.errors import InvalidParamsError

from a2a_gateway.endpoints.registry import EndpointRuntime
from a2a_gateway.events import new_id, status_event
from a2a_gateway.observability.metrics import PUSH_DELIVERIES
from a2a_gateway.protojson import message_to_dict
from a2a_gateway.stores.base import PushDelivery, Scope, Store, StoreError
from a2a_gateway.tasks.push_guard import RefusedUrlError, UnresolvedHostError, WebhookGuard, pin

log = structlog.get_logger(__name__)

DELIVERY_ID_HEADER = "X-A2A-Notification-Id"
"""Names one notification: the same on every retry of it, so a receiver can drop duplicates."""

RETRIABLE_STATUSES = frozenset({408, 429})
"""Besides 5xx: the receiver may take the notification later."""


class Outcome(Enum):
    DELIVERED = "delivered"
    RETRY = "retry"
    REFUSED = "refused"
    """Never deliverable as configured (a refused address, a redirect, a 4xx)."""


def retry_delay(attempts: int, base: float, cap: float) -> float:
    """Seconds to wait after ``attempts`` failed attempts: doubling from ``base`` up to ``cap``,
    then a random half of it taken off, so receivers coming back are not hit all at once."""
    delay = min(base * 2 ** (attempts - 1), cap)
    return delay / 2 + random.uniform(0, delay / 2)


def webhook_headers(config: TaskPushNotificationConfig, delivery_id: str) -> dict[str, str]:
    headers = {"Content-Type": "application/a2a+json", DELIVERY_ID_HEADER: delivery_id}
    if config.HasField("authentication") and config.authentication.scheme:
        auth = config.authentication
        headers["Authorization"] = f"{auth.scheme} {auth.credentials}"
    if config.token:
        headers["X-A2A-Notification-Token"] = config.token
    return headers


class PushSchedule(Protocol):
    """When replicas look for due deliveries (``LiveHub``: a fixed poll, or the due times the
    replicas share through Redis)."""

    def push_due(self, when: float) -> None: ...

    async def next_push_check(self, poll_seconds: float) -> None: ...


class PollEvery:
    """Look every ``poll_seconds``, whatever is due."""

    def push_due(self, when: float) -> None:
        pass

    async def next_push_check(self, poll_seconds: float) -> None:
        await asyncio.sleep(poll_seconds)


class PushNotifier:
    def __init__(
        self,
        store: Store,
        guard: WebhookGuard,
        *,
        replica_id: str = "gw",
        timeout: float = 10.0,
        max_attempts: int = 3,
        retry_base_seconds: float = 1.0,
        retry_max_seconds: float = 300.0,
        claim_seconds: float = 30.0,
        poll_seconds: float = 1.0,
        max_in_flight: int = 64,
        stop_grace_seconds: float = 5.0,
        http: httpx.AsyncClient | None = None,
        schedule: PushSchedule | None = None,
    ) -> None:
        self._store = store
        self._schedule = schedule or PollEvery()
        self.guard = guard
        self._replica_id = replica_id
        self._http = http  # else built by the first POST (``_client``)
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._retry_base = retry_base_seconds
        self._retry_max = retry_max_seconds
        self._claim_seconds = claim_seconds
        self._poll_seconds = poll_seconds
        self._max_in_flight = max_in_flight
        self._stop_grace = stop_grace_seconds
        self._in_flight: dict[asyncio.Task[None], PushDelivery] = {}
        self._poller: asyncio.Task[None] | None = None

    # configs ----------------------------------------------------------------------
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

    # recording ------------------------------------------------------------------------
    async def notify(
        self, runtime: EndpointRuntime, scope: Scope, task: Task,
        configs: list[TaskPushNotificationConfig] | None = None,
    ) -> None:
        """Record ``task``'s status for each of its webhooks (``configs``: already known, else
        read) and start sending. Never raises: a notification must not fail the task."""
        if not runtime.push_notifications:
            return
        try:
            if configs is None:
                configs = await self._store.list_push_configs(scope, task.id)
            if not configs:
                return
            body = orjson.dumps(message_to_dict(StreamResponse(status_update=status_event(task))))
            claim_until = time.time() + self._claim_seconds
            deliveries = [
                PushDelivery(new_id(), scope, task.id, config.id, body, claim_until, 1,
                             self._replica_id)
                for config in configs
            ]
            await self._store.add_push_deliveries(deliveries)
            self._schedule.push_due(claim_until)  # for the others, should this replica stop
        except StoreError as exc:
            log.error("push_not_recorded", task_id=task.id, error=str(exc))
            return
        for delivery in deliveries:
            self._send_soon(delivery)

    # sending --------------------------------------------------------------------------
    def start(self) -> None:
        """Poll the store for due deliveries (retries, and those of stopped replicas)."""
        self._poller = asyncio.create_task(self._poll(), name="push-outbox-poller")

    async def _poll(self) -> None:
        """Look at once (deliveries a stopped replica left), then whenever the schedule says."""
        while True:
            try:
                await self.send_due()
            except StoreError as exc:
                log.warning("push_poll_store_error", error=str(exc))
            except Exception:
                log.exception("push_poll_failed")
            await self._schedule.next_push_check(self._poll_seconds)

    async def send_due(self) -> int:
        """Claim the due deliveries this replica has room for and start them; how many."""
        room = self._max_in_flight - len(self._in_flight)
        now = time.time()
        if room <= 0:
            self._schedule.push_due(now + 1)  # look again once some are sent
            return 0
        claimed = await self._store.claim_push_deliveries(
            self._replica_id, now, now + self._claim_seconds, room
        )
        for delivery in claimed:
            self._send_soon(delivery)
        if claimed:  # due again for the others should this replica stop before sending
            self._schedule.push_due(now + self._claim_seconds)
        if len(claimed) == room:  # there may be more than there was room for
            self._schedule.push_due(now + 1)
        return len(claimed)

    def _client(self) -> httpx.AsyncClient:
        """The webhook client, built on first use: a process that never delivers a
        notification (most cold starts) does not pay for its TLS context (≈ 20–50 ms of CPU)."""
        if self._http is None:
            # Its own client: no proxy from the environment (it would resolve the name itself),
            # no redirects, and no kept-alive connections, which are pooled by address alone and
            # would carry a request for one name over a TLS session verified for another.
            self._http = httpx.AsyncClient(
                trust_env=False, follow_redirects=False,
                limits=httpx.Limits(max_keepalive_connections=0),
            )
        return self._http

    def _send_soon(self, delivery: PushDelivery) -> None:
        sending = asyncio.create_task(self._attempt(delivery), name=f"push-{delivery.id}")
        self._in_flight[sending] = delivery
        sending.add_done_callback(self._forget)

    def _forget(self, sending: asyncio.Task[None]) -> None:
        self._in_flight.pop(sending, None)

    async def _attempt(self, delivery: PushDelivery) -> None:
        """One attempt, then the delivery is done, given up or due again later. A store error
        leaves it claimed: the claim runs out and the delivery is tried again."""
        facts = {"delivery_id": delivery.id, "task_id": delivery.task_id,
                 "config_id": delivery.config_id, "attempt": delivery.attempts}
        try:
            config = await self._store.get_push_config(
                delivery.scope, delivery.task_id, delivery.config_id
            )
            if config is None:
                log.info("push_config_deleted", **facts)
                await self._store.delete_push_delivery(delivery.id)
                return
            outcome, detail = await self._post(config, delivery)
            PUSH_DELIVERIES.labels(outcome.value).inc()
            if outcome is Outcome.DELIVERED:
                log.info("push_delivered", status=detail, **facts)
            elif outcome is Outcome.RETRY and delivery.attempts < self._max_attempts:
                wait = retry_delay(delivery.attempts, self._retry_base, self._retry_max)
                log.info("push_attempt_failed", reason=detail, retry_in=round(wait, 3), **facts)
                await self._store.retry_push_delivery(
                    delivery.id, self._replica_id, delivery.attempts, time.time() + wait
                )
                self._schedule.push_due(time.time() + wait)
                return
            else:
                log.warning("push_gave_up", reason=detail, **facts)
            await self._store.delete_push_delivery(delivery.id)
        except StoreError as exc:
            log.warning("push_store_error", error=str(exc), **facts)

    async def _post(
        self, config: TaskPushNotificationConfig, delivery: PushDelivery
    ) -> tuple[Outcome, str]:
        """POST the delivery once; the outcome and what the log says about it."""
        try:
            target = await self.guard.check(config.url)
        except UnresolvedHostError as exc:
            return Outcome.RETRY, str(exc)
        except RefusedUrlError as exc:
            return Outcome.REFUSED, str(exc)
        http = self._client()
        request = http.build_request(
            "POST", target.url, content=delivery.body,
            headers=webhook_headers(config, delivery.id), timeout=self._timeout,
        )
        try:
            response = await http.send(pin(request, target), stream=True)
            await response.aclose()  # the receiver's body is never read
        except httpx.HTTPError as exc:
            return Outcome.RETRY, type(exc).__name__
        status = response.status_code
        if status < 300:
            return Outcome.DELIVERED, str(status)
        if status >= 500 or status in RETRIABLE_STATUSES:
            return Outcome.RETRY, f"HTTP {status}"
        if status < 400:
            return Outcome.REFUSED, f"HTTP {status}: redirects are not followed"
        return Outcome.REFUSED, f"HTTP {status}"

    async def aclose(self) -> None:
        """Stop sending: POSTs under way get ``stop_grace_seconds`` to finish (one cut off
        may reach its receiver twice); the rest are released, due now, for the next replica."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self._in_flight:
            await asyncio.wait(list(self._in_flight), timeout=self._stop_grace)
        stopped = dict(self._in_flight)
        for sending in stopped:
            sending.cancel()
        for sending, delivery in stopped.items():
            with contextlib.suppress(asyncio.CancelledError):
                await sending
            if not sending.cancelled():
                continue  # it finished before the cancel
            with contextlib.suppress(StoreError):
                await self._store.retry_push_delivery(
                    delivery.id, self._replica_id, delivery.attempts, time.time()
                )
                self._schedule.push_due(time.time())
        if self._http is not None:
            await self._http.aclose()
