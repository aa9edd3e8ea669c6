"""Dispatch mode: a new run goes to a worker instead of starting where the request came in.

The API instance records the task for a worker (owner ``DISPATCH_OWNER``, a claim deadline,
``DISPATCHED`` in its run state) and hands a ``Dispatcher`` the task's ids (``TaskRef``); a
worker gets them as an event (``parse_event``), claims the task with one conditional write
and runs it (``TaskEngine.run_dispatched``). The default, in-process mode has no dispatcher:
the engine starts the run itself. ``LambdaDispatcher`` invokes the worker Lambda
asynchronously, at AWS or at any Lambda API endpoint (``endpoint_url``, e.g. a local one).

Asynchronous invocations arrive at least once, so a worker's claim is what makes a
duplicated delivery harmless. A task no worker claims is failed by the recovery of any
replica (or the worker's ``sweep`` event) once the claim deadline passed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from a2a_gateway.errors import GatewayError
from a2a_gateway.settings import GatewaySettings
from a2a_gateway.stores.base import Scope

EVENT_KEY = "a2a_gateway"
"""The key of every worker event; its value names the event (``run_task``, ``sweep``)."""

RUN_TASK = "run_task"
SWEEP = "sweep"
SWEEP_EVENT = {EVENT_KEY: SWEEP}
"""Fail the dispatched tasks no worker claimed in time (a scheduled rule sends it: frozen
API instances run no lease loop)."""

DISPATCH_OWNER = "dispatch"
"""The owner of a task recorded for a worker, until a worker claims it."""

DISPATCHED = "dispatched"
"""``run_state`` key of a task waiting for a worker: what the worker starts (``action``:
``run`` or ``reattach``) and the request's own parts it cannot read from the task."""

NOT_CLAIMED = "no worker took the task in time"
"""The status message of a dispatched task failed because no worker claimed it."""

NOT_DISPATCHED = "the task could not be handed to a worker"
"""The status message of a task failed because the worker could not be invoked."""

_MAX_PAYLOAD_BYTES = 256 * 1024  # Lambda's limit is 1 MB: a bigger body is not a reference


class DispatchError(GatewayError):
    """The worker could not be invoked: the task is failed, the caller may send it again."""

    http_status = 503
    status = "UNAVAILABLE"
    message = "the task could not be handed to a worker; retry later"

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class DispatchSetupError(ValueError):
    """Dispatch mode cannot start as configured (startup stops with the reason)."""


class BadEventError(ValueError):
    """A worker event that is neither a task reference nor a sweep."""


@dataclass(frozen=True, slots=True)
class TaskRef:
    """What a worker is told about a task: its ids, nothing else (the store has the rest)."""

    tenant: str
    endpoint_id: str
    principal: str
    task_id: str

    @classmethod
    def of(cls, scope: Scope, task_id: str) -> TaskRef:
        return cls(scope.tenant, scope.endpoint_id, scope.principal, task_id)

    @property
    def scope(self) -> Scope:
        return Scope(self.tenant, self.endpoint_id, self.principal)

    def to_payload(self) -> bytes:
        return orjson.dumps({
            EVENT_KEY: RUN_TASK, "tenant": self.tenant, "endpoint_id": self.endpoint_id,
            "principal": self.principal, "task_id": self.task_id,
        })

    @classmethod
    def from_payload(cls, body: dict[str, Any]) -> TaskRef:
        values = {
            name: body.get(name) for name in ("tenant", "endpoint_id", "principal", "task_id")
        }
        bad = [name for name, value in values.items() if not isinstance(value, str) or not value]
        if bad:
            raise BadEventError(f"a run_task event needs non-empty strings: {', '.join(bad)}")
        return cls(**values)  # type: ignore[arg-type]


def parse_event(body: bytes) -> TaskRef | None:
    """The task reference of a worker event, or None for a sweep; ``BadEventError`` otherwise."""
    if len(body) > _MAX_PAYLOAD_BYTES:
        raise BadEventError("the event is too large to be a task reference")
    try:
        event = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadEventError("the event is not JSON") from None
    kind = event.get(EVENT_KEY) if isinstance(event, dict) else None
    if kind == SWEEP:
        return None
    if kind == RUN_TASK:
        return TaskRef.from_payload(event)
    raise BadEventError(f'not a gateway event: "{EVENT_KEY}" must be "{RUN_TASK}" or "{SWEEP}"')


class Dispatcher(Protocol):
    async def dispatch(self, ref: TaskRef) -> None:
        """Hand ``ref`` to a worker; ``DispatchError`` when it was not accepted."""


class LambdaDispatcher:
    """Invokes the worker Lambda asynchronously (``InvocationType=Event``) with a ``TaskRef``."""

    def __init__(self, function: str, *, endpoint_url: str | None = None, region: str | None = None,
                 timeout: float = 10.0) -> None:
        try:
            import boto3  # the dynamodb extra: only dispatch mode needs it
            from botocore.config import Config
            from botocore.exceptions import NoRegionError
        except ImportError:
            raise DispatchSetupError(
                'dispatch = "lambda" needs boto3: install a2a-gateway[dynamodb]'
            ) from None
        self._function = function
        try:
            self._client = boto3.client(
                "lambda", endpoint_url=endpoint_url, region_name=region,
                config=Config(connect_timeout=timeout, read_timeout=timeout,
                              retries={"mode": "standard", "max_attempts": 3}),
            )
        except NoRegionError:
            raise DispatchSetupError(
                'dispatch = "lambda" needs a region: set dispatch_region (or AWS_REGION)'
            ) from None

    async def dispatch(self, ref: TaskRef) -> None:
        try:
            response = await asyncio.to_thread(
                self._client.invoke, FunctionName=self._function, InvocationType="Event",
                Payload=ref.to_payload(),
            )
        except Exception as exc:  # botocore's errors: unreachable, refused, throttled
            raise DispatchError(
                f"{NOT_DISPATCHED} (the invoke failed: {type(exc).__name__}); retry later"
            ) from exc
        if response.get("StatusCode") != 202:
            raise DispatchError(
                f"{NOT_DISPATCHED} (the invoke answered {response.get('StatusCode')}, not 202); "
                "retry later"
            )


def dispatcher_of(settings: GatewaySettings) -> Dispatcher | None:
    """The dispatcher the settings ask for (None: runs start in this process)."""
    if settings.dispatch != "lambda":
        return None
    return LambdaDispatcher(
        settings.dispatch_function or "",
        endpoint_url=settings.dispatch_endpoint_url,
        region=settings.dispatch_region,
        timeout=settings.dispatch_timeout_seconds,
    )
