"""In-memory store (``memory://``): for tests, benchmarks and throwaway demos."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from a2a.types import Task, TaskPushNotificationConfig
from google.protobuf.message import Message

from a2a_gateway.stores.audit_pages import audit_cursor, audit_matches, audit_page
from a2a_gateway.stores.base import (
    TERMINAL_STATES,
    ApiKey,
    AuditEntry,
    AuditPage,
    AuditQuery,
    ClaimedTask,
    ConflictError,
    Context,
    Endpoint,
    EndpointHealth,
    EndpointTaskPage,
    PushDelivery,
    Scope,
    Store,
    StoredTask,
    TaskPage,
    TaskQuery,
    UsageQuery,
    UsageRecord,
    UsageTotals,
    as_utc,
    audit_time_us,
    status_timestamp_us,
    storable_key_id,
)
from a2a_gateway.stores.page_token import decode_page_token, encode_page_token
from a2a_gateway.stores.usage_rows import fold, matches, partial_of

M = TypeVar("M", bound=Message)


def _copy(message: M) -> M:
    """A detached copy, so callers never share this store's objects."""
    out = type(message)()
    out.CopyFrom(message)
    return out


class MemoryStore(Store):
    def __init__(self, page_token_key: bytes | None = None) -> None:
        self._token_key = page_token_key
        self._endpoints: dict[str, Endpoint] = {}
        self._api_keys: dict[str, ApiKey] = {}
        self._tasks: dict[tuple[Scope, str], StoredTask] = {}
        self._push: dict[tuple[Scope, str], dict[str, TaskPushNotificationConfig]] = {}
        self._contexts: dict[tuple[Scope, str], Context] = {}
        self._deliveries: dict[str, PushDelivery] = {}
        self._health: dict[str, EndpointHealth] = {}
        self._quota_counters: dict[str, tuple[int, float]] = {}
        """counter → (count, expires_at)."""
        self._quota_slots: dict[str, dict[str, float]] = {}
        """subject → slot id → lease_until."""
        self._usage: dict[tuple[Scope, str], tuple[int, UsageRecord]] = {}
        """Per task: its terminal state and usage record."""
        self._audit: list[AuditEntry] = []

    async def ping(self) -> None:
        return None

    # endpoints
    async def create_endpoint(self, endpoint: Endpoint) -> None:
        if endpoint.id in self._endpoints:
            raise ConflictError(f"endpoint {endpoint.id} exists")
        self._endpoints[endpoint.id] = copy.deepcopy(endpoint)

    async def update_endpoint(self, endpoint: Endpoint) -> None:
        if endpoint.id not in self._endpoints:
            raise KeyError(endpoint.id)
        self._endpoints[endpoint.id] = copy.deepcopy(endpoint)

    async def delete_endpoint(self, endpoint_id: str) -> bool:
        return self._endpoints.pop(endpoint_id, None) is not None

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        found = self._endpoints.get(endpoint_id)
        return copy.deepcopy(found) if found else None

    async def list_endpoints(self) -> list[Endpoint]:
        return [
            copy.deepcopy(e) for e in sorted(self._endpoints.values(), key=lambda e: e.created_at)
        ]

    # API keys
    async def create_api_key(self, key: ApiKey) -> None:
        if key.id in self._api_keys:
            raise ConflictError(f"API key {key.id} exists")
        self._api_keys[key.id] = replace(
            key,
            limits=dict(key.limits),
            created_at=as_utc(key.created_at),
            expires_at=key.expires_at and as_utc(key.expires_at),
            revoked_at=key.revoked_at and as_utc(key.revoked_at),
        )

    async def get_api_key(self, key_id: str) -> ApiKey | None:
        if not storable_key_id(key_id):
            return None
        found = self._api_keys.get(key_id)
        return replace(found, limits=dict(found.limits)) if found else None

    async def list_api_keys(self, endpoint_id: str | None = None) -> list[ApiKey]:
        keys = [
            replace(k)
            for k in self._api_keys.values()
            if endpoint_id is None or k.endpoint_id == endpoint_id
        ]
        return sorted(keys, key=lambda k: (k.created_at, k.id))

    async def revoke_api_key(self, key_id: str, revoked_at: datetime) -> bool:
        if not storable_key_id(key_id):
            return False
        found = self._api_keys.get(key_id)
        if found is None:
            return False
        if found.revoked_at is None:
            found.revoked_at = as_utc(revoked_at)
        return True

    # tasks
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
        key = (scope, task.id)
        if key in self._tasks:
            raise ConflictError(f"task {task.id} exists")
        self._tasks[key] = StoredTask(
            _copy(task), 1, run_ref, dict(run_state or {}), owner, lease_until
        )
        self._keep_usage(key, task, usage)
        return 1

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
        stored = self._tasks.get((scope, task.id))
        if stored is None or stored.version != expected_version:
            raise ConflictError(f"task {task.id} changed or is missing")
        if stored.task.status.state in TERMINAL_STATES:
            raise ConflictError(f"task {task.id} is terminal")
        terminal = task.status.state in TERMINAL_STATES
        self._tasks[(scope, task.id)] = StoredTask(
            _copy(task),
            stored.version + 1,
            run_ref if run_ref is not None else stored.run_ref,
            dict(run_state) if run_state is not None else stored.run_state,
            None if terminal else owner,
            None if terminal else lease_until,
        )
        self._keep_usage((scope, task.id), task, usage)
        return stored.version + 1

    async def get_task(self, scope: Scope, task_id: str) -> StoredTask | None:
        stored = self._tasks.get((scope, task_id))
        if stored is None:
            return None
        return replace(stored, task=_copy(stored.task), run_state=dict(stored.run_state))

    async def list_active_tasks(self, endpoint_id: str, limit: int) -> list[tuple[Scope, Task]]:
        rows = [
            (status_timestamp_us(s.task), s.task.id, sc, s.task)
            for (sc, _), s in self._tasks.items()
            if sc.endpoint_id == endpoint_id and s.task.status.state not in TERMINAL_STATES
        ]
        rows.sort(key=lambda r: (r[0], r[1]), reverse=True)
        return [(sc, _copy(task)) for _, _, sc, task in rows[:limit]]

    async def list_endpoint_tasks(
        self,
        endpoint_id: str,
        *,
        states: frozenset[int] = frozenset(),
        context_id: str = "",
        page_size: int = 50,
        page_token: str = "",
    ) -> EndpointTaskPage:
        cursor = decode_page_token(page_token, key=self._token_key) if page_token else None
        rows = [
            ((status_timestamp_us(s.task), s.task.id), sc, s.task)
            for (sc, _), s in self._tasks.items()
            if sc.endpoint_id == endpoint_id
            and (not states or s.task.status.state in states)
            and (not context_id or s.task.context_id == context_id)
        ]
        rows = sorted(
            (r for r in rows if cursor is None or r[0] < cursor), key=lambda r: r[0], reverse=True
        )
        page = rows[:page_size]
        more = len(rows) > page_size and page
        token = encode_page_token(*page[-1][0], key=self._token_key) if more else ""
        return EndpointTaskPage([(sc, _copy(task)) for _, sc, task in page], token)

    async def list_tasks(self, scope: Scope, query: TaskQuery) -> TaskPage:
        rows = [
            (status_timestamp_us(s.task), s.task.id, s.task)
            for (sc, _), s in self._tasks.items()
            if sc == scope
            and (not query.context_id or s.task.context_id == query.context_id)
            and (not query.state or s.task.status.state == query.state)
            and (
                query.status_after_us is None
                or status_timestamp_us(s.task) >= query.status_after_us
            )
        ]
        rows.sort(key=lambda r: (r[0], r[1]), reverse=True)
        total = len(rows)
        if query.page_token:
            cursor = decode_page_token(query.page_token, key=self._token_key)
            rows = [r for r in rows if (r[0], r[1]) < cursor]
        page = rows[: query.page_size]
        more = len(rows) > query.page_size
        token = (
            encode_page_token(page[-1][0], page[-1][1], key=self._token_key)
            if more and page
            else ""
        )
        return TaskPage([_copy(r[2]) for r in page], token, total)

    # push configs
    async def put_push_config(self, scope: Scope, config: TaskPushNotificationConfig) -> None:
        self._push.setdefault((scope, config.task_id), {})[config.id] = _copy(config)

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> TaskPushNotificationConfig | None:
        found = self._push.get((scope, task_id), {}).get(config_id)
        return _copy(found) if found is not None else None

    async def list_push_configs(
        self, scope: Scope, task_id: str
    ) -> list[TaskPushNotificationConfig]:
        configs = self._push.get((scope, task_id), {})
        return [_copy(configs[k]) for k in sorted(configs)]

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> None:
        self._push.get((scope, task_id), {}).pop(config_id, None)

    # push delivery outbox
    async def add_push_deliveries(self, deliveries: list[PushDelivery]) -> None:
        for delivery in deliveries:
            if delivery.id in self._deliveries:
                raise ConflictError(f"push delivery {delivery.id} exists")
        self._deliveries.update((d.id, replace(d)) for d in deliveries)

    async def claim_push_deliveries(
        self, owner: str, now: float, claim_until: float, limit: int = 100
    ) -> list[PushDelivery]:
        due = sorted(
            (d for d in self._deliveries.values() if d.due_at <= now), key=lambda d: d.due_at
        )
        for delivery in due[:limit]:
            delivery.owner, delivery.due_at = owner, claim_until
            delivery.attempts += 1
        return [replace(d) for d in due[:limit]]

    async def retry_push_delivery(
        self, delivery_id: str, owner: str, attempts: int, due_at: float
    ) -> None:
        found = self._deliveries.get(delivery_id)
        if found is not None and found.owner == owner and found.attempts == attempts:
            found.owner, found.due_at = None, due_at

    async def delete_push_delivery(self, delivery_id: str) -> None:
        self._deliveries.pop(delivery_id, None)

    # contexts
    async def get_context(self, scope: Scope, context_id: str) -> Context | None:
        found = self._contexts.get((scope, context_id))
        return copy.deepcopy(found) if found else None

    async def put_context(self, scope: Scope, context_id: str, context: Context) -> None:
        self._contexts[(scope, context_id)] = copy.deepcopy(context)

    # backend health
    async def record_backend_health(self, endpoint_id: str, change: EndpointHealth) -> None:
        self._health[endpoint_id] = self._health.get(endpoint_id, EndpointHealth()).add(change)

    async def list_backend_health(self) -> dict[str, EndpointHealth]:
        return {endpoint_id: replace(health) for endpoint_id, health in self._health.items()}

    # audit ------------------------------------------------------------------------------
    async def append_audit_entry(self, entry: AuditEntry) -> None:
        if any(e.id == entry.id for e in self._audit):
            raise ConflictError(f"audit entry {entry.id} exists")
        self._audit.append(copy.deepcopy(entry))

    async def list_audit_entries(self, query: AuditQuery) -> AuditPage:
        cursor = audit_cursor(query, self._token_key)
        newest_first = sorted(self._audit, key=lambda e: (audit_time_us(e.at), e.id), reverse=True)
        found = [e for e in newest_first if audit_matches(e, query, cursor)]
        return audit_page(copy.deepcopy(found[: query.page_size + 1]), query.page_size,
                          self._token_key)

    async def prune_audit_entries(self, older_than: datetime) -> int:
        kept = [e for e in self._audit if as_utc(e.at) >= as_utc(older_than)]
        pruned, self._audit = len(self._audit) - len(kept), kept
        return pruned

    # leases
    async def renew_leases(self, owner: str, task_ids: list[str], lease_until: float) -> None:
        wanted = set(task_ids)
        for stored in self._tasks.values():
            if stored.owner == owner and stored.task.id in wanted:
                stored.lease_until = lease_until

    async def claim_expired_tasks(
        self, owner: str, now: float, lease_until: float, limit: int = 100
    ) -> list[ClaimedTask]:
        claimed: list[ClaimedTask] = []
        for (scope, _), stored in self._tasks.items():
            if len(claimed) >= limit:
                break
            if (
                stored.owner is not None
                and stored.lease_until is not None
                and stored.lease_until < now
                and stored.task.status.state not in TERMINAL_STATES
            ):
                stored.owner, stored.lease_until = owner, lease_until
                stored.version += 1
                claimed.append(ClaimedTask(scope, replace(stored, task=_copy(stored.task))))
        return claimed

    # usage ------------------------------------------------------------------------------
    def _keep_usage(self, key: tuple[Scope, str], task: Task, usage: UsageRecord | None) -> None:
        if usage is not None:
            self._usage[key] = (int(task.status.state), usage)

    async def usage_summary(self, query: UsageQuery) -> list[UsageTotals]:
        return fold(
            partial_of(query, scope.endpoint_id, scope.principal, state, usage)
            for (scope, _), (state, usage) in self._usage.items()
            if matches(query, scope.tenant, scope.endpoint_id, scope.principal, usage)
        )

    # quotas -----------------------------------------------------------------------------
    async def set_api_key_limits(self, key_id: str, limits: dict[str, int | float]) -> bool:
        found = self._api_keys.get(key_id) if storable_key_id(key_id) else None
        if found is None:
            return False
        found.limits = dict(limits)
        return True

    async def count_quota(self, counter: str, limit: int, expires_at: float) -> bool:
        count, _ = self._quota_counters.get(counter, (0, expires_at))
        if count >= limit:
            return False
        self._quota_counters[counter] = (count + 1, expires_at)
        return True

    async def uncount_quota(self, counter: str) -> None:
        count, expires_at = self._quota_counters.get(counter, (0, 0.0))
        if count > 0:
            self._quota_counters[counter] = (count - 1, expires_at)

    async def take_quota_slot(
        self, subject: str, slot_id: str, limit: int, now: float, lease_until: float
    ) -> bool:
        slots = self._quota_slots.setdefault(subject, {})
        live = {slot: until for slot, until in slots.items() if until >= now}
        if len(live) >= limit:
            return False
        live[slot_id] = lease_until
        self._quota_slots[subject] = live
        return True

    async def renew_quota_slots(
        self, subject: str, slot_ids: list[str], lease_until: float
    ) -> None:
        slots = self._quota_slots.get(subject, {})
        for slot_id in slot_ids:
            if slot_id in slots:
                slots[slot_id] = lease_until

    async def release_quota_slots(self, subject: str, slot_ids: list[str]) -> None:
        slots = self._quota_slots.get(subject, {})
        for slot_id in slot_ids:
            slots.pop(slot_id, None)

    async def prune_quotas(self, now: float) -> None:
        self._quota_counters = {
            counter: value for counter, value in self._quota_counters.items() if value[1] >= now
        }
        for subject, slots in list(self._quota_slots.items()):
            live = {slot: until for slot, until in slots.items() if until >= now}
            if live:
                self._quota_slots[subject] = live
            else:
                del self._quota_slots[subject]
