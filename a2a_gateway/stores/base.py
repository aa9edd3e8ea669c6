"""The store contract: endpoints, API keys, tasks, push configs, the push delivery outbox,
conversation contexts, leases, backend health.

Every task, context and push config is keyed by a ``Scope`` (tenant, endpoint,
caller principal) and every read filters on all three, so one caller never sees
another's rows. Task updates are conditional on the version the writer read, so
two writers cannot lose an update, and a terminal task is never reopened.

Push deliveries (the outbox) are claimed like tasks: a replica takes the due ones with a
time-limited claim, so a delivery whose replica stopped is sent by another.

API keys are addressed by their public id alone (what a caller presents); the key
names the scope its caller gets.

Stores hold protobuf ``Task`` objects; trimming (history length, artifacts) for a
response is the caller's job. Implementations: ``memory``, ``sqlite``, ``postgres``
and ``dynamodb``; ``tests/stores`` is the one contract suite they pass.
"""

from __future__ import annotations

import functools
import inspect
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from a2a.types import Task, TaskPushNotificationConfig
from a2a.types.a2a_pb2 import (  # plain ints: the enum wrappers resolve names per access
    TASK_STATE_CANCELED,
    TASK_STATE_COMPLETED,
    TASK_STATE_FAILED,
    TASK_STATE_REJECTED,
    TASK_STATE_UNSPECIFIED,
)

from a2a_gateway.observability.metrics import STORE_LATENCY
from a2a_gateway.observability.tracing import store_call

TERMINAL_STATES = frozenset(
    {
        TASK_STATE_COMPLETED,
        TASK_STATE_FAILED,
        TASK_STATE_CANCELED,
        TASK_STATE_REJECTED,
    }
)


class StoreError(Exception):
    """Base of store errors."""


class StoreUnavailableError(StoreError):
    """The backing database cannot be reached; the request may be retried."""


class ConflictError(StoreError):
    """A conditional write lost: the row changed since it was read, or already exists,
    or the task is terminal."""


class InvalidPageTokenError(StoreError):
    """A ListTasks page token that this store did not issue (or that was altered)."""


NOT_TERMINAL_SQL = f"state NOT IN ({','.join(str(s) for s in sorted(TERMINAL_STATES))})"
"""SQL condition for the non-terminal tasks (task states are stored as their numbers)."""


@dataclass(frozen=True, slots=True)
class Scope:
    tenant: str
    endpoint_id: str
    principal: str = "anonymous"

    def as_tuple(self) -> tuple[str, str, str]:
        """``(tenant, endpoint_id, principal)``, in the order of the stores' key columns."""
        return (self.tenant, self.endpoint_id, self.principal)


@dataclass(slots=True)
class Endpoint:
    id: str
    name: str
    tenant: str = "default"
    description: str = ""
    enabled: bool = True
    card: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(slots=True)
class ApiKey:
    """A caller's API key as stored: its hash, never the key itself."""

    id: str
    """Public key id (16 lowercase hex characters), unique."""
    endpoint_id: str
    tenant: str
    principal: str
    """The caller identity tasks are recorded under."""
    name: str
    """The operator's label ("" if none)."""
    key_hash: str
    """Hex HMAC-SHA-256 of the full key."""
    created_at: datetime
    """Aware UTC; stores keep microseconds."""
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    limits: dict[str, int | float] = field(default_factory=dict)
    """The key's quota limits by name (``governance.limits``); empty: none."""


@dataclass(slots=True)
class EndpointHealth:
    """How an endpoint's handler runs ended: counts, and the last success and last error.

    Also a change to add to a stored record (``Store.record_backend_health``): counts add, the
    later of each time wins, and the later error brings its message. Adding is commutative, so
    the replicas' changes may reach the store in any order."""

    successes: int = 0
    errors: int = 0
    last_success: float | None = None
    """Epoch seconds."""
    last_error: float | None = None
    last_error_message: str = ""

    @property
    def status(self) -> str:
        """``ok``, ``failing`` (the last outcome was an error) or ``unknown`` (none yet)."""
        if self.last_error is None:
            return "unknown" if self.last_success is None else "ok"
        return (
            "ok"
            if self.last_success is not None and self.last_success >= self.last_error
            else "failing"
        )

    def add(self, change: EndpointHealth) -> EndpointHealth:
        """A new record: this one with ``change`` added."""
        error_later = change.last_error is not None and (
            self.last_error is None or change.last_error > self.last_error
        )
        return EndpointHealth(
            successes=self.successes + change.successes,
            errors=self.errors + change.errors,
            last_success=_later(self.last_success, change.last_success),
            last_error=change.last_error if error_later else self.last_error,
            last_error_message=change.last_error_message
            if error_later
            else self.last_error_message,
        )


def _later(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass(slots=True)
class StoredTask:
    task: Task
    version: int
    run_ref: str | None = None
    run_state: dict[str, Any] = field(default_factory=dict)
    """Gateway bookkeeping for the run (e.g. the pending input request)."""
    owner: str | None = None
    """The replica running the task, while it is not terminal."""
    lease_until: float | None = None
    """Epoch seconds after which another replica may take the task over."""


@dataclass(slots=True)
class ClaimedTask:
    """A task whose owner's lease expired, now owned by the claiming replica."""

    scope: Scope
    stored: StoredTask


@dataclass(slots=True)
class PushDelivery:
    """One notification for one webhook, kept until it is delivered or given up."""

    id: str
    """Unique; the receiver sees it on every attempt, to drop duplicates."""
    scope: Scope
    task_id: str
    config_id: str
    body: bytes
    """What is POSTed (a ``StreamResponse`` as JSON)."""
    due_at: float
    """Epoch seconds from which a replica may claim it: its next retry, or its claim's end."""
    attempts: int = 0
    """Claims so far, one per attempt: counted when claimed, so an attempt cut short by a
    stopped replica counts too."""
    owner: str | None = None
    """The replica whose claim it is (None between attempts)."""


# usage ------------------------------------------------------------------------------
USAGE_GROUPS = ("endpoint", "principal", "day")
"""What ``UsageQuery.group_by`` may name."""


@dataclass(slots=True)
class UsageRecord:
    """What one task used, written with the task's terminal write (``usage=`` of
    ``create_task``/``update_task``): on the task's own row or item, so the ledger costs no
    write of its own. Its outcome is the task's terminal state; tenant, endpoint, principal,
    task and context are the task's. Not frozen: a frozen dataclass of eleven fields costs
    ~5 µs to build, at every task's end, and nothing changes a record once built."""

    started_at: datetime
    """Aware UTC: when the gateway took the task's first message."""
    ended_at: datetime
    """Aware UTC: the terminal write; the ledger's time filters and days use it."""
    key_id: str = ""
    """The API key of the request that started the task ("" for other credentials)."""
    key_name: str = ""
    requests: int = 1
    """Messages the task received (the first one and each answer)."""
    bytes_in: int = 0
    """Serialized size of those messages."""
    bytes_out: int = 0
    """Serialized size of the task's artifacts and of the agent's messages."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: int = 0
    """Millionths of ``currency``; 0 without a price."""
    currency: str = ""


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """Filters of ``Store.usage_summary``; None matches everything."""

    endpoint_id: str | None = None
    principal: str | None = None
    tenant: str | None = None
    key_id: str | None = None
    start: datetime | None = None
    """Tasks that ended at or after this instant."""
    end: datetime | None = None
    """Tasks that ended before this instant."""
    group_by: tuple[str, ...] = ()
    """A subset of ``USAGE_GROUPS``: one ``UsageTotals`` per distinct combination."""


@dataclass(slots=True)
class UsageTotals:
    """The sums over one group of ended tasks that carry a usage record."""

    endpoint_id: str | None = None
    """Set when grouped by endpoint (likewise ``principal`` and ``day``)."""
    principal: str | None = None
    day: str | None = None
    """``YYYY-MM-DD`` (UTC) of the tasks' end."""
    tasks: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    """Tasks by outcome: ``completed``, ``failed``, ``canceled``, ``rejected``."""
    duration_seconds: float = 0.0
    """Sum of the tasks' ``ended_at - started_at``."""
    requests: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_micros: dict[str, int] = field(default_factory=dict)
    """Cost by currency (tasks without a price add nothing)."""


@dataclass(frozen=True, slots=True)
class TaskQuery:
    context_id: str = ""
    state: int = TASK_STATE_UNSPECIFIED
    status_after_us: int | None = None
    """Only tasks whose status timestamp is at or after this (epoch microseconds)."""
    page_size: int = 50
    page_token: str = ""


@dataclass(slots=True)
class TaskPage:
    tasks: list[Task]
    next_page_token: str
    total_size: int


@dataclass(slots=True)
class EndpointTaskPage:
    """A page of one endpoint's tasks, each with the scope (tenant, principal) it runs in."""

    tasks: list[tuple[Scope, Task]]
    next_page_token: str
    """Empty on the last page."""


@dataclass(slots=True)
class Context:
    """What the gateway remembers of one conversation (A2A context)."""

    turns: list[dict[str, str]] = field(default_factory=list)
    """``{"role": "user"|"agent", "text": ...}``, oldest first."""
    session: dict[str, Any] = field(default_factory=dict)
    """Handler memory (``SessionUpdate``)."""


# audit ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One change an operator made, as ``governance.audit.record`` wrote it (secrets removed)."""

    id: str
    at: datetime
    """Aware UTC; stores keep microseconds."""
    actor: str
    """Operator key id, ``oidc:<subject>``, ``os:<user>`` (the CLI) or ``gateway`` (itself)."""
    action: str
    """Stable dotted name, e.g. ``endpoint.disabled``."""
    target: str
    """The endpoint, key or task id the action was on ("" if none)."""
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """Filters of ``list_audit_entries``; each empty one matches every entry."""

    action: str = ""
    target: str = ""
    actor: str = ""
    since: datetime | None = None
    """Entries at or after this instant."""
    until: datetime | None = None
    """Entries before this instant."""
    page_size: int = 50
    page_token: str = ""


@dataclass(slots=True)
class AuditPage:
    entries: list[AuditEntry]
    next_page_token: str
    """Empty on the last page."""


def audit_time_us(value: datetime) -> int:
    """An audit time as epoch microseconds (the stores' order and page-token unit)."""
    delta = as_utc(value) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def audit_time(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)


def status_timestamp_us(task: Task) -> int:
    """The task's status timestamp in epoch microseconds (0 when unset)."""
    ts = task.status.timestamp
    return ts.seconds * 1_000_000 + ts.nanos // 1000


def as_utc(value: datetime) -> datetime:
    """The same instant in UTC (a naive value is taken as UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utc_text(value: datetime) -> str:
    """Fixed-width UTC ISO 8601 with microseconds, so text order is time order."""
    return as_utc(value).isoformat(timespec="microseconds")


def utc_from_text(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text is not None else None


def storable_key_id(key_id: str) -> bool:
    """Whether every store can address ``key_id``: 1 to 2048 bytes of UTF-8 (DynamoDB's key
    limits) without NUL (PostgreSQL text). Looking up any other id finds nothing."""
    try:
        size = len(key_id.encode())
    except UnicodeEncodeError:  # lone surrogates, e.g. from undecodable header bytes
        return False
    return 0 < size <= 2048 and "\x00" not in key_id


def _timed(
    operation: str, store: str, call: Callable[..., Awaitable[Any]]
) -> Callable[..., Awaitable[Any]]:
    observe = STORE_LATENCY.labels(operation).observe

    @functools.wraps(call)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        with store_call(operation, store):
            try:
                return await call(*args, **kwargs)
            finally:
                observe(time.perf_counter() - started)

    return timed


class Store(ABC):
    """Persistence for the gateway. All methods are coroutines safe to call concurrently."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every public coroutine of a store driver (a direct subclass) is timed and traced,
        by name and the driver's kind (``PostgresStore``: ``postgres``)."""
        super().__init_subclass__(**kwargs)
        if Store not in cls.__bases__:
            return
        kind = cls.__name__.removesuffix("Store").lower()
        for name, member in list(vars(cls).items()):
            if not name.startswith("_") and inspect.iscoroutinefunction(member):
                setattr(cls, name, _timed(name, kind, member))

    # lifecycle -------------------------------------------------------------
    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise ``StoreUnavailableError`` unless the store answers."""

    # endpoints -------------------------------------------------------------
    @abstractmethod
    async def create_endpoint(self, endpoint: Endpoint) -> None:
        """Insert; ``ConflictError`` if the id exists."""

    @abstractmethod
    async def update_endpoint(self, endpoint: Endpoint) -> None:
        """Replace the row (sets ``updated_at``); ``KeyError`` if missing."""

    @abstractmethod
    async def delete_endpoint(self, endpoint_id: str) -> bool:
        """Remove the row; False if there is none. Its keys and tasks stay (unreachable)."""

    @abstractmethod
    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None: ...

    @abstractmethod
    async def list_endpoints(self) -> list[Endpoint]: ...

    # API keys --------------------------------------------------------------
    @abstractmethod
    async def create_api_key(self, key: ApiKey) -> None:
        """Insert; ``ConflictError`` if the id exists."""

    @abstractmethod
    async def get_api_key(self, key_id: str) -> ApiKey | None:
        """One primary-key read (every authenticated request makes it); None also for an id
        no store could hold (``storable_key_id``), whatever a caller presented."""

    @abstractmethod
    async def list_api_keys(self, endpoint_id: str | None = None) -> list[ApiKey]:
        """Every key (of ``endpoint_id`` if given), revoked ones included, ordered by
        ``created_at`` then id. For operators, not request paths: on DynamoDB it is a Scan."""

    @abstractmethod
    async def revoke_api_key(self, key_id: str, revoked_at: datetime) -> bool:
        """Set ``revoked_at`` unless already set (the first revocation time stays);
        False if there is no such key."""

    # tasks -----------------------------------------------------------------
    @abstractmethod
    async def create_task(
        self,
        scope: Scope,
        task: Task,
        *,
        run_ref: str | None = None,
        run_state: dict[str, Any] | None = None,
        owner: str | None = None,
        lease_until: float | None = None,
        usage: UsageRecord | None = None,
    ) -> int:
        """Insert a new task at version 1; ``ConflictError`` if its id exists. ``usage`` (a
        terminal task's) is written with it, in the same write."""

    @abstractmethod
    async def update_task(
        self,
        scope: Scope,
        task: Task,
        *,
        expected_version: int,
        run_ref: str | None = None,
        run_state: dict[str, Any] | None = None,
        owner: str | None = None,
        lease_until: float | None = None,
        usage: UsageRecord | None = None,
    ) -> int:
        """Replace the task if its stored version is ``expected_version`` and it is not
        terminal; return the new version. ``ConflictError`` otherwise (also if missing).
        ``run_ref``/``run_state`` left as None keep their stored values; a terminal
        ``task`` clears ``owner`` and ``lease_until``. ``usage`` (a terminal task's) is
        written in the same write, so it lands exactly when the terminal state does."""

    @abstractmethod
    async def get_task(self, scope: Scope, task_id: str) -> StoredTask | None: ...

    @abstractmethod
    async def list_active_tasks(self, endpoint_id: str, limit: int) -> list[tuple[Scope, Task]]:
        """The endpoint's non-terminal tasks of every tenant and principal, newest status
        first, at most ``limit`` (for its operators: the event feed's snapshot)."""

    @abstractmethod
    async def list_endpoint_tasks(
        self,
        endpoint_id: str,
        *,
        states: frozenset[int] = frozenset(),
        context_id: str = "",
        page_size: int = 50,
        page_token: str = "",
    ) -> EndpointTaskPage:
        """The endpoint's tasks of every tenant and principal and of any state (only
        ``states`` if given, only ``context_id``'s if given), newest status first (ties: task
        id), keyset paginated with the tokens of ``list_tasks``; no total. For its operators:
        callers list theirs with ``list_tasks``. A page may hold fewer than ``page_size``
        tasks and still have a next token (DynamoDB bounds what one page reads)."""

    @abstractmethod
    async def list_tasks(self, scope: Scope, query: TaskQuery) -> TaskPage:
        """Tasks of ``scope``, newest status timestamp first (ties: task id), keyset
        paginated; ``InvalidPageTokenError`` for a token this store did not issue."""

    # push notification configs ----------------------------------------------
    @abstractmethod
    async def put_push_config(self, scope: Scope, config: TaskPushNotificationConfig) -> None:
        """Insert or replace the config ``(config.task_id, config.id)``."""

    @abstractmethod
    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> TaskPushNotificationConfig | None: ...

    @abstractmethod
    async def list_push_configs(
        self, scope: Scope, task_id: str
    ) -> list[TaskPushNotificationConfig]: ...

    @abstractmethod
    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> None:
        """Idempotent."""

    # push delivery outbox ----------------------------------------------------
    @abstractmethod
    async def add_push_deliveries(self, deliveries: list[PushDelivery]) -> None:
        """Insert each as given (a replica adds them claimed by itself, to send at once)."""

    @abstractmethod
    async def claim_push_deliveries(
        self, owner: str, now: float, claim_until: float, limit: int = 100
    ) -> list[PushDelivery]:
        """Take up to ``limit`` deliveries due at or before ``now``, earliest first: each gets
        ``owner``, one more attempt and ``due_at = claim_until`` (conditional, so two
        replicas never claim the same delivery)."""

    @abstractmethod
    async def retry_push_delivery(
        self, delivery_id: str, owner: str, attempts: int, due_at: float
    ) -> None:
        """After a failed attempt: unclaimed and due again at ``due_at``, if ``owner``'s claim
        for attempt ``attempts`` still holds (otherwise the delivery is someone else's now)."""

    @abstractmethod
    async def delete_push_delivery(self, delivery_id: str) -> None:
        """Delivered or given up. Idempotent."""

    # conversation contexts ---------------------------------------------------
    @abstractmethod
    async def get_context(self, scope: Scope, context_id: str) -> Context | None: ...

    @abstractmethod
    async def put_context(self, scope: Scope, context_id: str, context: Context) -> None:
        """Insert or replace."""

    # backend health ----------------------------------------------------------
    @abstractmethod
    async def record_backend_health(self, endpoint_id: str, change: EndpointHealth) -> None:
        """Add ``change`` to the endpoint's stored health (``EndpointHealth.add``), atomically:
        replicas recording at once lose nothing."""

    @abstractmethod
    async def list_backend_health(self) -> dict[str, EndpointHealth]:
        """The stored health of every endpoint that has one, by endpoint id."""

    # audit ------------------------------------------------------------------------------
    @abstractmethod
    async def append_audit_entry(self, entry: AuditEntry) -> None:
        """Insert; ``ConflictError`` if the id exists. Entries are never changed afterwards
        (only ``prune_audit_entries`` removes them)."""

    @abstractmethod
    async def list_audit_entries(self, query: AuditQuery) -> AuditPage:
        """Entries matching ``query``, newest first (ties: id, descending), keyset paginated;
        ``InvalidPageTokenError`` for a token this store did not issue. A page may hold fewer
        than ``page_size`` entries and still have a next token (DynamoDB bounds what one page
        reads when filters leave most entries out)."""

    @abstractmethod
    async def prune_audit_entries(self, older_than: datetime) -> int:
        """Remove the entries from before ``older_than``; return how many."""

    # quotas ------------------------------------------------------------------
    @abstractmethod
    async def set_api_key_limits(self, key_id: str, limits: dict[str, int | float]) -> bool:
        """Replace the key's limits (``{}`` clears them); False if there is no such key."""

    @abstractmethod
    async def count_quota(self, counter: str, limit: int, expires_at: float) -> bool:
        """Add one to ``counter`` if it is below ``limit`` (a missing counter is at 0), as
        one conditional write: replicas counting at once never pass the limit together.
        True if counted. ``expires_at`` (epoch seconds, the window's end) lets the store
        drop the counter afterwards."""

    @abstractmethod
    async def uncount_quota(self, counter: str) -> None:
        """Take one back from ``counter`` (never below 0): a count whose task did not start."""

    @abstractmethod
    async def take_quota_slot(
        self, subject: str, slot_id: str, limit: int, now: float, lease_until: float
    ) -> bool:
        """Hold ``slot_id`` for ``subject`` until ``lease_until`` if fewer than ``limit`` of its
        slots are live (lease not ended before ``now``), atomically across replicas. True if
        taken."""

    @abstractmethod
    async def renew_quota_slots(
        self, subject: str, slot_ids: list[str], lease_until: float
    ) -> None:
        """Extend the leases of those of ``slot_ids`` that ``subject`` still holds."""

    @abstractmethod
    async def release_quota_slots(self, subject: str, slot_ids: list[str]) -> None:
        """Free those of ``slot_ids`` that ``subject`` holds. Idempotent."""

    @abstractmethod
    async def prune_quotas(self, now: float) -> None:
        """Drop counters whose window ended and slots whose lease ended before ``now`` (a
        store may leave that to its own expiry)."""

    # usage ---------------------------------------------------------------------------------
    @abstractmethod
    async def usage_summary(self, query: UsageQuery) -> list[UsageTotals]:
        """Sums of the usage records of ended tasks matching ``query``: one ``UsageTotals``
        per group of ``query.group_by`` (one in all without groups), ordered by day, endpoint,
        principal; no entry for a group without tasks. SQLite: one aggregate query (indexed by
        end time, endpoint and principal); PostgreSQL: the daily sums for the whole days of the
        range and the tasks for its partial days; DynamoDB: one ``Query`` per day of a range
        with a start of up to 62 days, else a scan of the ledger's index."""

    # ownership leases --------------------------------------------------------
    @abstractmethod
    async def renew_leases(self, owner: str, task_ids: list[str], lease_until: float) -> None:
        """Extend the lease of the non-terminal tasks in ``task_ids`` owned by ``owner``
        (one batch per replica per interval)."""

    @abstractmethod
    async def claim_expired_tasks(
        self, owner: str, now: float, lease_until: float, limit: int = 100
    ) -> list[ClaimedTask]:
        """Take over non-terminal tasks whose owner's lease ended before ``now``
        (conditional, so two replicas never claim the same task)."""
