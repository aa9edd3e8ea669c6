"""DynamoDB store (``dynamodb://?region=…&table_prefix=a2a-``): botocore in a dedicated thread pool.

Four tables. ``<prefix>endpoints`` is keyed by endpoint id, ``<prefix>api_keys`` by key id,
``<prefix>push_deliveries`` (the push outbox) by delivery id, with a sharded index of due times.
``<prefix>tasks`` holds tasks, push configs and contexts under a partition key that names tenant,
endpoint and principal (``T#t#E#e#P#p``), so no key can reach across scopes. Sparse indexes serve
ListTasks (all, by context, by state; newest status first) and the ownership leases. Every task
write is conditional; terminal tasks get an ``expires_at`` TTL when ``ttl_days`` is set, and reads
skip expired items because DynamoDB deletes them lazily. The table layout is described in
``docs/dynamodb.md``.

This module is the store; ``dynamodb_items`` holds the key design and item encoding,
``dynamodb_schema`` the settings, client, error mapping and tables (``create_tables``). The names
callers use — ``DynamoDBStore``, ``DynamoDBSettings``, ``create_tables``, ``table_definitions``,
``scope_key`` — are importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from a2a.types import Task, TaskPushNotificationConfig

from a2a_gateway.stores.audit_pages import audit_cursor, audit_matches, audit_page, time_bounds_us
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
    StoreError,
    StoreUnavailableError,
    TaskPage,
    TaskQuery,
    UsageQuery,
    UsageRecord,
    UsageTotals,
    audit_time,
    audit_time_us,
    status_timestamp_us,
    storable_key_id,
    utc_text,
)
from a2a_gateway.stores.dynamodb_items import (
    HEALTH_PK,
    LEASE_SHARDS,
    QUOTA_COUNTER_PK,
    QUOTA_SLOTS_PK,
    Expr,
    N,
    S,
    api_key_from_item,
    api_key_item,
    delivery_from_item,
    delivery_item,
    endpoint_from_item,
    endpoint_item,
    esc,
    expired,
    health_from_item,
    lease_shard,
    scope_key,
    status_key,
    stored_from_item,
    task_index_attrs,
    task_sk,
)
from a2a_gateway.stores.dynamodb_schema import (
    AUDIT_PK,
    DynamoDBSettings,
    MissingTableError,
    audit_sort_key,
    call_mapped,
    client_credentials,
    create_tables,
    make_client,
    table_definitions,
)
from a2a_gateway.stores.dynamodb_usage import summarize_usage, usage_attrs
from a2a_gateway.stores.page_token import decode_page_token, encode_page_token

__all__ = [
    "LEASE_SHARDS",
    "DynamoDBSettings",
    "DynamoDBStore",
    "MissingTableError",
    "create_tables",
    "scope_key",
    "status_key",
    "table_definitions",
]

_client = make_client  # the name test helpers and scripts import from this module


def _scope_of_key(pk: str) -> Scope:
    """The scope a task key (``scope_key``) was made of."""
    _, tenant, _, endpoint_id, _, principal = pk.split("#")
    return Scope(
        *(part.replace("%23", "#").replace("%25", "%") for part in (tenant, endpoint_id, principal))
    )


_ENDPOINT_PAGE_QUERIES = 10
"""Queries one page of an endpoint's tasks makes at most: when filters leave most index items
out, the page ends early with a next token instead of reading the endpoint's whole history."""
_BATCH_GET = 100
"""Keys per ``BatchGetItem`` (DynamoDB's limit)."""


def _cursor_of(status_key_value: str) -> tuple[int, str]:
    """The keyset cursor (status time, task id) a ``status_key`` was made of."""
    status_us, _, task_id = status_key_value.partition("#")
    return int(status_us), task_id


def _start(key: dict[str, Any] | None) -> dict[str, Any]:
    return {"ExclusiveStartKey": key} if key else {}


def _audit_entry(item: dict[str, Any]) -> AuditEntry:
    def doc(name: str) -> dict[str, Any] | None:
        return json.loads(item[name]["S"]) if name in item else None

    return AuditEntry(
        id=item["id"]["S"],
        at=audit_time(int(item["at_us"]["N"])),
        actor=item["actor"]["S"],
        action=item["action"]["S"],
        target=item["target"]["S"],
        before=doc("before"),
        after=doc("after"),
        details=doc("details") or {},
    )


class DynamoDBStore(Store):
    """Use ``open()``; the botocore client and its pool belong to the store until ``aclose()``."""

    def __init__(
        self,
        client: Any,
        executor: ThreadPoolExecutor,
        settings: DynamoDBSettings,
        page_token_key: bytes | None = None,
    ) -> None:
        self._client = client
        self._executor = executor
        self._settings = settings
        self._endpoints = settings.endpoints_table
        self._tasks = settings.tasks_table
        self._api_keys = settings.api_keys_table
        self._deliveries = settings.push_deliveries_table
        self._token_key = page_token_key

    @classmethod
    async def open(cls, url: str, **options: Any) -> DynamoDBStore:
        """Options: ``page_token_key`` (shared by all replicas), explicit ``aws_access_key_id``
        / ``aws_secret_access_key`` / ``aws_session_token`` (else botocore's default chain)."""
        settings = DynamoDBSettings.from_url(url)
        options = dict(options)
        credentials = client_credentials(options)
        key = options.pop("page_token_key", None)
        if options:
            raise TypeError(f"unknown DynamoDBStore options: {', '.join(sorted(options))}")
        if isinstance(key, str):
            key = key.encode()
        executor = ThreadPoolExecutor(settings.pool_size, thread_name_prefix="a2a-dynamodb")
        try:
            client = await asyncio.get_running_loop().run_in_executor(
                executor, _client, settings, credentials
            )
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(client, executor, settings, key)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._executor.shutdown, True)
        self._client.close()

    async def _call(self, op: str, **kwargs: Any) -> dict[str, Any]:
        """One botocore call on the store's pool; a failed condition becomes ``ConflictError``."""
        fn = functools.partial(getattr(self._client, op), **kwargs)
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, call_mapped, op, fn
        )

    async def _all_pages(self, op: str, **params: Any) -> list[dict[str, Any]]:
        """Every item a ``query`` or ``scan`` returns, following ``LastEvaluatedKey``."""
        items, start = [], None
        while True:
            resp = await self._call(op, **params, **_start(start))
            items += resp.get("Items", [])
            start = resp.get("LastEvaluatedKey")
            if not start:
                return items

    async def ping(self) -> None:
        try:
            await self._call("get_item", TableName=self._endpoints, Key={"id": S("#ping")})
        except StoreUnavailableError:
            raise
        except StoreError as exc:
            raise StoreUnavailableError(str(exc)) from exc

    async def check_schema(self) -> None:
        """``MissingTableError`` naming a table that does not exist (``serve`` checks this at
        startup). One ``GetItem`` per table, which the gateway's IAM policy already allows."""
        probes = {
            self._endpoints: {"id": S("#ping")},
            self._tasks: {"pk": S("#ping"), "sk": S("#ping")},
            self._api_keys: {"id": S("#ping")},
            self._deliveries: {"id": S("#ping")},
        }
        for table, key in probes.items():
            try:
                await self._call("get_item", TableName=table, Key=key)
            except MissingTableError as exc:
                raise MissingTableError(
                    f"dynamodb table {table} does not exist: run `a2a-gateway migrate`"
                ) from exc

    # endpoints ---------------------------------------------------------------------------------
    async def create_endpoint(self, endpoint: Endpoint) -> None:
        e = Expr()
        try:
            await self._call(
                "put_item",
                **e.params(
                    TableName=self._endpoints,
                    Item=endpoint_item(endpoint),
                    ConditionExpression=f"attribute_not_exists({e.n('id')})",
                ),
            )
        except ConflictError as exc:
            raise ConflictError(f"endpoint {endpoint.id} exists") from exc

    async def update_endpoint(self, endpoint: Endpoint) -> None:
        e = Expr()
        try:
            await self._call(
                "put_item",
                **e.params(
                    TableName=self._endpoints,
                    Item=endpoint_item(endpoint),
                    ConditionExpression=f"attribute_exists({e.n('id')})",
                ),
            )
        except ConflictError:
            raise KeyError(endpoint.id) from None

    async def delete_endpoint(self, endpoint_id: str) -> bool:
        if not storable_key_id(endpoint_id):
            return False
        resp = await self._call("delete_item", TableName=self._endpoints,
                                Key={"id": S(endpoint_id)}, ReturnValues="ALL_OLD")
        return "Attributes" in resp

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        resp = await self._call(
            "get_item", TableName=self._endpoints, Key={"id": S(endpoint_id)}, ConsistentRead=True
        )
        return endpoint_from_item(resp["Item"]) if "Item" in resp else None

    async def list_endpoints(self) -> list[Endpoint]:
        items = await self._all_pages("scan", TableName=self._endpoints, ConsistentRead=True)
        endpoints = [endpoint_from_item(i) for i in items]
        return sorted(endpoints, key=lambda ep: (ep.created_at, ep.id))

    # API keys ----------------------------------------------------------------------------------
    async def create_api_key(self, key: ApiKey) -> None:
        e = Expr()
        try:
            await self._call(
                "put_item",
                **e.params(
                    TableName=self._api_keys,
                    Item=api_key_item(key),
                    ConditionExpression=f"attribute_not_exists({e.n('id')})",
                ),
            )
        except ConflictError as exc:
            raise ConflictError(f"API key {key.id} exists") from exc

    async def get_api_key(self, key_id: str) -> ApiKey | None:
        if not storable_key_id(key_id):
            return None
        resp = await self._call(
            "get_item", TableName=self._api_keys, Key={"id": S(key_id)}, ConsistentRead=True
        )
        return api_key_from_item(resp["Item"]) if "Item" in resp else None

    async def list_api_keys(self, endpoint_id: str | None = None) -> list[ApiKey]:
        # A consistent Scan (operators only): a key just created is listed, and the table
        # holds a few rows per endpoint, so an index would buy nothing.
        e = Expr()
        wanted = None
        if endpoint_id is not None:
            wanted = f"{e.n('endpoint_id')} = {e.v(S(endpoint_id))}"
        items = await self._all_pages(
            "scan",
            **e.params(TableName=self._api_keys, ConsistentRead=True, FilterExpression=wanted),
        )
        keys = [api_key_from_item(i) for i in items]
        return sorted(keys, key=lambda k: (k.created_at, k.id))

    async def revoke_api_key(self, key_id: str, revoked_at: datetime) -> bool:
        if not storable_key_id(key_id):
            return False
        e = Expr()
        revoked, now = e.n("revoked_at"), e.v(S(utc_text(revoked_at)))
        try:
            await self._call(
                "update_item",
                **e.params(
                    TableName=self._api_keys,
                    Key={"id": S(key_id)},
                    UpdateExpression=f"SET {revoked} = if_not_exists({revoked}, {now})",
                    ConditionExpression=f"attribute_exists({e.n('id')})",
                ),
            )
        except ConflictError:
            return False
        return True

    # tasks -------------------------------------------------------------------------------------
    def _expires_at(self, task: Task, now: float) -> dict[str, Any]:
        if task.status.state in TERMINAL_STATES and self._settings.ttl_days > 0:
            return {"expires_at": N(int(now + self._settings.ttl_days * 86400))}
        return {}

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
        spk, sk, now = scope_key(scope), task_sk(task.id), time.time()
        item: dict[str, Any] = {
            "pk": S(spk),
            "sk": S(sk),
            "tenant": S(scope.tenant),
            "endpoint_id": S(scope.endpoint_id),
            "principal": S(scope.principal),
            "version": N(1),
            "run_state": S(json.dumps(run_state or {})),
            **task_index_attrs(spk, task),
            **self._expires_at(task, now),
            **usage_attrs(usage),
        }
        if run_ref is not None:
            item["run_ref"] = S(run_ref)
        if owner and task.status.state not in TERMINAL_STATES:
            item["owner"] = S(owner)
            if lease_until is not None:
                item["lease_until"] = N(float(lease_until))
                item["lease_shard"] = S(lease_shard(spk, sk))
        e = Expr()
        # An expired item DynamoDB has not deleted yet is gone for readers, so it may be replaced.
        condition = (
            f"attribute_not_exists({e.n('pk')}) OR {e.n('expires_at')} <= {e.v(N(int(now)))}"
        )
        try:
            await self._call(
                "put_item",
                **e.params(TableName=self._tasks, Item=item, ConditionExpression=condition),
            )
        except ConflictError as exc:
            raise ConflictError(f"task {task.id} exists") from exc
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
        spk, sk = scope_key(scope), task_sk(task.id)
        terminal = task.status.state in TERMINAL_STATES
        sets = {
            **task_index_attrs(spk, task),
            **self._expires_at(task, time.time()),
            **usage_attrs(usage),
        }
        if run_ref is not None:
            sets["run_ref"] = S(run_ref)
        if run_state is not None:
            sets["run_state"] = S(json.dumps(run_state))
        removes = []
        if owner and not terminal:
            sets["owner"] = S(owner)
        else:
            removes.append("owner")
        if owner and not terminal and lease_until is not None:
            sets["lease_until"] = N(float(lease_until))
            sets["lease_shard"] = S(lease_shard(spk, sk))
        else:
            removes += ["lease_until", "lease_shard"]
        e = Expr()
        update = "SET " + ", ".join(
            [f"{e.n(k)} = {e.v(v)}" for k, v in sets.items()]
            + [f"{e.n('version')} = {e.n('version')} + {e.v(N(1))}"]
        )
        if removes:  # an empty REMOVE clause is a syntax error
            update += " REMOVE " + ", ".join(e.n(k) for k in removes)
        condition = f"{e.n('version')} = {e.v(N(expected_version))} AND {e.not_terminal()}"
        try:
            await self._call(
                "update_item",
                **e.params(
                    TableName=self._tasks,
                    Key={"pk": S(spk), "sk": S(sk)},
                    UpdateExpression=update,
                    ConditionExpression=condition,
                ),
            )
        except ConflictError as exc:
            raise ConflictError(f"task {task.id} changed, is terminal or is missing") from exc
        return expected_version + 1

    # usage (the ledger on the task items: dynamodb_usage) -------------------------
    async def usage_summary(self, query: UsageQuery) -> list[UsageTotals]:
        return await summarize_usage(self._all_pages, self._tasks, query, time.time())

    async def get_task(self, scope: Scope, task_id: str) -> StoredTask | None:
        resp = await self._call(
            "get_item",
            TableName=self._tasks,
            Key={"pk": S(scope_key(scope)), "sk": S(task_sk(task_id))},
            ConsistentRead=True,
        )
        item = resp.get("Item")
        if item is None or expired(item, time.time()):
            return None
        return stored_from_item(item)

    async def list_active_tasks(self, endpoint_id: str, limit: int) -> list[tuple[Scope, Task]]:
        # A Scan (operators only, when a feed client starts from a snapshot): the task keys
        # lead with the caller's scope, so no index lists one endpoint's tasks across callers.
        e = Expr()
        wanted = " AND ".join([
            f"begins_with({e.n('sk')}, {e.v(S('TASK#'))})",
            f"contains({e.n('pk')}, {e.v(S(f'#E#{esc(endpoint_id)}#P#'))})",
            e.not_terminal(),
            e.not_expired(time.time()),
        ])
        items = await self._all_pages("scan", **e.params(
            TableName=self._tasks, ConsistentRead=True, FilterExpression=wanted,
            ProjectionExpression=f"{e.n('pk')}, {e.n('task')}",
        ))
        found = [(_scope_of_key(i["pk"]["S"]), Task.FromString(i["task"]["B"])) for i in items]
        found.sort(key=lambda f: (status_timestamp_us(f[1]), f[1].id), reverse=True)
        return found[:limit]

    async def list_endpoint_tasks(
        self,
        endpoint_id: str,
        *,
        states: frozenset[int] = frozenset(),
        context_id: str = "",
        page_size: int = 50,
        page_token: str = "",
    ) -> EndpointTaskPage:
        # by_endpoint holds keys, state and context only, so a task's text updates do not
        # rewrite it; the page's tasks are then read from the table.
        e = Expr()
        key = f"{e.n('endpoint_id')} = {e.v(S(endpoint_id))}"
        if page_token:
            status_us, task_id = decode_page_token(page_token, key=self._token_key)
            key += f" AND {e.n('status_key')} < {e.v(S(status_key(status_us, task_id)))}"
        filters = [e.not_expired(time.time())]
        if states:
            filters.append(
                f"{e.n('state')} IN ({', '.join(e.v(N(int(s))) for s in sorted(states))})"
            )
        if context_id:
            filters.append(f"{e.n('context_id')} = {e.v(S(context_id))}")
        params = e.params(
            TableName=self._tasks,
            IndexName="by_endpoint",
            KeyConditionExpression=key,
            FilterExpression=" AND ".join(filters),
            ScanIndexForward=False,
        )
        found: list[dict[str, Any]] = []
        cursor = None
        for _ in range(_ENDPOINT_PAGE_QUERIES):
            resp = await self._call("query", **params, Limit=page_size + 1, **_start(cursor))
            found += resp.get("Items", [])
            cursor = resp.get("LastEvaluatedKey")
            if len(found) > page_size or not cursor:
                break
        page = found[:page_size]
        last = page[-1] if len(found) > page_size else cursor
        token = (
            encode_page_token(*_cursor_of(last["status_key"]["S"]), key=self._token_key)
            if last
            else ""
        )
        return EndpointTaskPage(await self._tasks_of(page), token)

    async def _tasks_of(self, keys: list[dict[str, Any]]) -> list[tuple[Scope, Task]]:
        """The tasks of index items, in their order (``BatchGetItem``; items gone meanwhile are
        left out)."""
        wanted = [{"pk": k["pk"], "sk": k["sk"]} for k in keys]
        e = Expr()
        projection = e.params(ProjectionExpression=f"{e.n('pk')}, {e.n('sk')}, {e.n('task')}")
        read: dict[tuple[str, str], Task] = {}
        for first in range(0, len(wanted), _BATCH_GET):
            pending: dict[str, Any] = {
                self._tasks: {
                    "Keys": wanted[first : first + _BATCH_GET],
                    "ConsistentRead": True,
                    **projection,
                }
            }
            for attempt in range(10):
                resp = await self._call("batch_get_item", RequestItems=pending)
                for item in resp.get("Responses", {}).get(self._tasks, []):
                    read[(item["pk"]["S"], item["sk"]["S"])] = Task.FromString(item["task"]["B"])
                pending = resp.get("UnprocessedKeys") or {}
                if not pending:
                    break
                await asyncio.sleep(
                    min(0.05 * 2**attempt, 1.0)
                )  # throttled: DynamoDB asks to back off
            else:
                raise StoreUnavailableError(
                    "dynamodb batch_get_item: keys left unprocessed after retries"
                )
        return [(_scope_of_key(k["pk"]["S"]), read[(k["pk"]["S"], k["sk"]["S"])])
                for k in wanted if (k["pk"]["S"], k["sk"]["S"]) in read]

    async def list_tasks(self, scope: Scope, query: TaskQuery) -> TaskPage:
        spk, now = scope_key(scope), time.time()
        if query.context_id:
            index, hash_attr = "by_context", "ctx_pk"
            hash_value = f"{spk}#C#{esc(query.context_id)}"
        elif query.state:
            index, hash_attr, hash_value = "by_state", "state_pk", f"{spk}#S#{int(query.state)}"
        else:
            index, hash_attr, hash_value = "by_status", "pk", spk

        def params(*, count: bool) -> dict[str, Any]:
            e = Expr()
            key = f"{e.n(hash_attr)} = {e.v(S(hash_value))}"
            if query.status_after_us is not None:
                lower = f"{max(query.status_after_us, 0):020d}"
                key += f" AND {e.n('status_key')} >= {e.v(S(lower))}"
            filters = [e.not_expired(now)]
            if query.context_id and query.state:
                filters.append(f"{e.n('state')} = {e.v(N(int(query.state)))}")
            return e.params(
                TableName=self._tasks,
                IndexName=index,
                KeyConditionExpression=key,
                FilterExpression=" AND ".join(filters),
                Select="COUNT" if count else None,
                ProjectionExpression=None if count else e.n("task"),
                ScanIndexForward=False,
            )

        start = None
        if query.page_token:
            # The token is the signed keyset cursor of the last task returned; the
            # ExclusiveStartKey for this index is rebuilt from it and the query.
            status_us, task_id = decode_page_token(query.page_token, key=self._token_key)
            start = {
                "pk": S(spk),
                "sk": S(task_sk(task_id)),
                "status_key": S(status_key(status_us, task_id)),
                hash_attr: S(hash_value),
            }

        async def page() -> list[dict[str, Any]]:
            items, cursor = [], start
            while len(items) <= query.page_size:
                resp = await self._call(
                    "query",
                    **params(count=False),
                    Limit=query.page_size + 1,
                    **_start(cursor),
                )
                items += resp.get("Items", [])
                cursor = resp.get("LastEvaluatedKey")
                if not cursor:
                    break
            return items

        async def count() -> int:
            total, cursor = 0, None
            while True:
                resp = await self._call(
                    "query", **params(count=True), **_start(cursor)
                )
                total += resp["Count"]
                cursor = resp.get("LastEvaluatedKey")
                if not cursor:
                    return total

        if query.page_size <= 0:
            return TaskPage([], "", await count())
        items, total = await asyncio.gather(page(), count())
        tasks = [Task.FromString(i["task"]["B"]) for i in items[: query.page_size]]
        token = ""
        if len(items) > query.page_size:
            last = tasks[-1]
            token = encode_page_token(
                max(status_timestamp_us(last), 0), last.id, key=self._token_key
            )
        return TaskPage(tasks, token, total)

    # push configs ------------------------------------------------------------------------------
    def _push_key(self, scope: Scope, task_id: str, config_id: str) -> dict[str, Any]:
        return {"pk": S(scope_key(scope)), "sk": S(f"PUSH#{esc(task_id)}#{esc(config_id)}")}

    async def put_push_config(self, scope: Scope, config: TaskPushNotificationConfig) -> None:
        item = {
            **self._push_key(scope, config.task_id, config.id),
            "config_id": S(config.id),
            "config": {"B": config.SerializeToString()},
        }
        await self._call("put_item", TableName=self._tasks, Item=item)

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> TaskPushNotificationConfig | None:
        resp = await self._call(
            "get_item",
            TableName=self._tasks,
            Key=self._push_key(scope, task_id, config_id),
            ConsistentRead=True,
        )
        item = resp.get("Item")
        return TaskPushNotificationConfig.FromString(item["config"]["B"]) if item else None

    async def list_push_configs(
        self, scope: Scope, task_id: str
    ) -> list[TaskPushNotificationConfig]:
        e = Expr()
        key = (
            f"{e.n('pk')} = {e.v(S(scope_key(scope)))}"
            f" AND begins_with({e.n('sk')}, {e.v(S(f'PUSH#{esc(task_id)}#'))})"
        )
        items = await self._all_pages(
            "query",
            **e.params(TableName=self._tasks, KeyConditionExpression=key, ConsistentRead=True),
        )
        configs = [TaskPushNotificationConfig.FromString(i["config"]["B"]) for i in items]
        return sorted(configs, key=lambda c: c.id)

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> None:
        await self._call(
            "delete_item", TableName=self._tasks, Key=self._push_key(scope, task_id, config_id)
        )

    # push delivery outbox ----------------------------------------------------------------------
    async def add_push_deliveries(self, deliveries: list[PushDelivery]) -> None:
        e = Expr()
        condition = f"attribute_not_exists({e.n('id')})"
        try:
            await asyncio.gather(*(
                self._call(
                    "put_item",
                    **e.params(
                        TableName=self._deliveries,
                        Item=delivery_item(d),
                        ConditionExpression=condition,
                    ),
                )
                for d in deliveries
            ))
        except ConflictError as exc:
            raise ConflictError("a push delivery with this id exists") from exc

    async def _earliest_due(
        self,
        table: str,
        index: str,
        shard: tuple[str, str],
        time_attr: str,
        before: str,
        now: float,
        limit: int,
    ) -> list[dict[str, Any]]:
        """The items of ``index`` whose ``time_attr`` is ``before`` (``<`` or ``<=``) ``now``,
        read from every one of the ``LEASE_SHARDS`` shards at once (``shard``: the shard key's
        name and its values' prefix), the earliest first, at most ``limit``."""
        async def due_in(number: int) -> list[dict[str, Any]]:
            e = Expr()
            key = (
                f"{e.n(shard[0])} = {e.v(S(f'{shard[1]}{number}'))}"
                f" AND {e.n(time_attr)} {before} {e.v(N(float(now)))}"
            )
            resp = await self._call(
                "query",
                **e.params(
                    TableName=table, IndexName=index, KeyConditionExpression=key, Limit=limit
                ),
            )
            return resp.get("Items", [])

        shards = await asyncio.gather(*(due_in(n) for n in range(LEASE_SHARDS)))
        items = (i for found in shards for i in found)
        return sorted(items, key=lambda i: float(i[time_attr]["N"]))[:limit]

    async def claim_push_deliveries(
        self, owner: str, now: float, claim_until: float, limit: int = 100
    ) -> list[PushDelivery]:
        candidates = await self._earliest_due(
            self._deliveries, "by_due", ("due_shard", "D"), "due_at", "<=", now, limit,
        )
        claimed = await asyncio.gather(
            *(self._claim_delivery(i["id"], owner, now, claim_until) for i in candidates)
        )
        return [c for c in claimed if c is not None]

    async def _claim_delivery(
        self, key: dict[str, Any], owner: str, now: float, claim_until: float
    ) -> PushDelivery | None:
        e = Expr()
        update = (
            f"SET {e.n('owner')} = {e.v(S(owner))},"
            f" {e.n('due_at')} = {e.v(N(float(claim_until)))},"
            f" {e.n('attempts')} = {e.n('attempts')} + {e.v(N(1))}"
        )
        # the index may be stale (or another replica just claimed it): re-checked on the item
        condition = f"{e.n('due_at')} <= {e.v(N(float(now)))}"
        try:
            resp = await self._call(
                "update_item",
                **e.params(
                    TableName=self._deliveries,
                    Key={"id": key},
                    UpdateExpression=update,
                    ConditionExpression=condition,
                    ReturnValues="ALL_NEW",
                ),
            )
        except ConflictError:
            return None
        return delivery_from_item(resp["Attributes"])

    async def retry_push_delivery(
        self, delivery_id: str, owner: str, attempts: int, due_at: float
    ) -> None:
        e = Expr()
        update = f"SET {e.n('due_at')} = {e.v(N(float(due_at)))} REMOVE {e.n('owner')}"
        condition = f"{e.n('owner')} = {e.v(S(owner))} AND {e.n('attempts')} = {e.v(N(attempts))}"
        with contextlib.suppress(ConflictError):  # claimed by another replica since
            await self._call(
                "update_item",
                **e.params(
                    TableName=self._deliveries,
                    Key={"id": S(delivery_id)},
                    UpdateExpression=update,
                    ConditionExpression=condition,
                ),
            )

    async def delete_push_delivery(self, delivery_id: str) -> None:
        await self._call("delete_item", TableName=self._deliveries, Key={"id": S(delivery_id)})

    # contexts ----------------------------------------------------------------------------------
    def _context_key(self, scope: Scope, context_id: str) -> dict[str, Any]:
        return {"pk": S(scope_key(scope)), "sk": S(f"CTX#{esc(context_id)}")}

    async def get_context(self, scope: Scope, context_id: str) -> Context | None:
        resp = await self._call(
            "get_item",
            TableName=self._tasks,
            Key=self._context_key(scope, context_id),
            ConsistentRead=True,
        )
        item = resp.get("Item")
        if item is None:
            return None
        turns, session = json.loads(item["turns"]["S"]), json.loads(item["session"]["S"])
        return Context(turns=turns, session=session)

    async def put_context(self, scope: Scope, context_id: str, context: Context) -> None:
        item = {
            **self._context_key(scope, context_id),
            "turns": S(json.dumps(context.turns)),
            "session": S(json.dumps(context.session)),
        }
        await self._call("put_item", TableName=self._tasks, Item=item)

    # backend health ----------------------------------------------------------------------------
    async def record_backend_health(self, endpoint_id: str, change: EndpointHealth) -> None:
        key = {"pk": S(HEALTH_PK), "sk": S(endpoint_id)}
        times = [
            ("last_success", change.last_success, {}),
            ("last_error", change.last_error, {"last_error_message": S(change.last_error_message)}),
        ]
        later = [(name, at, extra) for name, at, extra in times if at is not None]
        try:  # one call: the counts, and every time this change holds (the later one, usually)
            await self._update_health(key, change, later)
        except ConflictError:  # a stored time is later: add the counts, then each time still later
            await self._update_health(key, change, [])
            for time_later in later:
                with contextlib.suppress(ConflictError):
                    await self._update_health(key, None, [time_later])

    async def _update_health(self, key: dict[str, Any], counts: EndpointHealth | None,
                             times: list[tuple[str, float, dict[str, Any]]]) -> None:
        """ADD ``counts``; SET each of ``times`` (with its ``extra`` attributes) on the condition
        that the stored time is missing or earlier."""
        e, sets, conditions = Expr(), [], []
        for name, at, extra in times:
            value = e.v(N(at))
            sets += [f"{e.n(name)} = {value}", *(f"{e.n(k)} = {e.v(v)}" for k, v in extra.items())]
            conditions.append(f"(attribute_not_exists({e.n(name)}) OR {e.n(name)} < {value})")
        update = ""
        if counts is not None:
            update = (f"ADD {e.n('successes')} {e.v(N(counts.successes))},"
                      f" {e.n('errors')} {e.v(N(counts.errors))}")
        if sets:
            update += " SET " + ", ".join(sets)
        await self._call("update_item", **e.params(
            TableName=self._tasks, Key=key, UpdateExpression=update.strip(),
            ConditionExpression=" AND ".join(conditions) or None,
        ))

    async def list_backend_health(self) -> dict[str, EndpointHealth]:
        e = Expr()
        items = await self._all_pages("query", **e.params(
            TableName=self._tasks, ConsistentRead=True,
            KeyConditionExpression=f"{e.n('pk')} = {e.v(S(HEALTH_PK))}",
        ))
        return {item["sk"]["S"]: health_from_item(item) for item in items}

    # audit -------------------------------------------------------------------------------------
    async def append_audit_entry(self, entry: AuditEntry) -> None:
        at_us = audit_time_us(entry.at)
        item = {
            "pk": S(AUDIT_PK),
            "sk": S(audit_sort_key(at_us, entry.id)),
            "id": S(entry.id),
            "at_us": N(at_us),
            "actor": S(entry.actor),
            "action": S(entry.action),
            "target": S(entry.target),
            "details": S(json.dumps(entry.details, sort_keys=True)),
        }
        for name, value in (("before", entry.before), ("after", entry.after)):
            if value is not None:
                item[name] = S(json.dumps(value, sort_keys=True))
        e = Expr()
        try:
            await self._call("put_item", **e.params(
                TableName=self._tasks, Item=item,
                ConditionExpression=f"attribute_not_exists({e.n('pk')})",
            ))
        except ConflictError as exc:
            raise ConflictError(f"audit entry {entry.id} exists") from exc

    async def list_audit_entries(self, query: AuditQuery) -> AuditPage:
        cursor = audit_cursor(query, self._token_key)
        since, until = time_bounds_us(query)
        if until is not None and until <= 0:
            return AuditPage([], "")
        high = audit_sort_key(cursor[0], cursor[1]) if cursor else "9" * 21
        if until is not None:
            high = min(high, audit_sort_key(until))
        e = Expr()
        key = (f"{e.n('pk')} = {e.v(S(AUDIT_PK))} AND {e.n('sk')} BETWEEN"
               f" {e.v(S(audit_sort_key(since or 0)))} AND {e.v(S(high))}")
        wanted = [f"{e.n(name)} = {e.v(S(value))}"
                  for name, value in (("action", query.action), ("target", query.target),
                                      ("actor", query.actor)) if value]
        found: list[AuditEntry] = []
        start = None
        for _ in range(_ENDPOINT_PAGE_QUERIES):
            resp = await self._call("query", **e.params(
                TableName=self._tasks, ConsistentRead=True, KeyConditionExpression=key,
                FilterExpression=" AND ".join(wanted) or None, ScanIndexForward=False,
                Limit=query.page_size + 1 if not wanted else max(query.page_size + 1, 200),
                **_start(start),
            ))
            found += [entry for entry in map(_audit_entry, resp.get("Items", []))
                      if audit_matches(entry, query, cursor)]
            start = resp.get("LastEvaluatedKey")
            if not start or len(found) > query.page_size:
                break
        if start and len(found) <= query.page_size:  # filters left most items out: end early,
            at_us, _, entry_id = start["sk"]["S"].partition("#")  # going on below what was read
            return AuditPage(found, encode_page_token(int(at_us), entry_id, key=self._token_key))
        return audit_page(found[: query.page_size + 1], query.page_size, self._token_key)

    async def prune_audit_entries(self, older_than: datetime) -> int:
        e = Expr()
        items = await self._all_pages("query", **e.params(
            TableName=self._tasks, ConsistentRead=True, ProjectionExpression="pk, sk",
            KeyConditionExpression=f"{e.n('pk')} = {e.v(S(AUDIT_PK))} AND {e.n('sk')} <"
            f" {e.v(S(audit_sort_key(audit_time_us(older_than))))}",
        ))
        # DeleteItem, which the gateway's IAM policy grants (BatchWriteItem it does not), a
        # pool's worth at a time
        for first in range(0, len(items), self._settings.pool_size):
            await asyncio.gather(*(
                self._call("delete_item", TableName=self._tasks,
                           Key={"pk": item["pk"], "sk": item["sk"]})
                for item in items[first:first + self._settings.pool_size]
            ))
        return len(items)

    # leases ------------------------------------------------------------------------------------
    async def renew_leases(self, owner: str, task_ids: list[str], lease_until: float) -> None:
        if not owner or not task_ids:
            return
        wanted = {task_sk(task_id) for task_id in task_ids}
        e = Expr()
        owned = await self._all_pages(
            "query",
            **e.params(
                TableName=self._tasks,
                IndexName="by_owner",
                KeyConditionExpression=f"{e.n('owner')} = {e.v(S(owner))}",
            ),
        )
        keys = [{"pk": i["pk"], "sk": i["sk"]} for i in owned if i["sk"]["S"] in wanted]
        await asyncio.gather(*(self._renew_one(key, owner, lease_until) for key in keys))

    async def _renew_one(self, key: dict[str, Any], owner: str, lease_until: float) -> None:
        e = Expr()
        update = (
            f"SET {e.n('lease_until')} = {e.v(N(float(lease_until)))},"
            f" {e.n('lease_shard')} = {e.v(S(lease_shard(key['pk']['S'], key['sk']['S'])))}"
        )
        condition = f"{e.n('owner')} = {e.v(S(owner))} AND {e.not_terminal()}"
        with contextlib.suppress(ConflictError):  # finished or taken over since the index was read
            await self._call(
                "update_item",
                **e.params(
                    TableName=self._tasks,
                    Key=key,
                    UpdateExpression=update,
                    ConditionExpression=condition,
                ),
            )

    async def claim_expired_tasks(
        self, owner: str, now: float, lease_until: float, limit: int = 100
    ) -> list[ClaimedTask]:
        candidates = await self._earliest_due(
            self._tasks, "by_lease", ("lease_shard", "L"), "lease_until", "<", now, limit,
        )
        claimed = await asyncio.gather(
            *(self._claim_one(i, owner, now, lease_until) for i in candidates)
        )
        return [c for c in claimed if c is not None]

    async def _claim_one(
        self, key_item: dict[str, Any], owner: str, now: float, lease_until: float
    ) -> ClaimedTask | None:
        e = Expr()
        update = (
            f"SET {e.n('owner')} = {e.v(S(owner))},"
            f" {e.n('lease_until')} = {e.v(N(float(lease_until)))},"
            f" {e.n('version')} = {e.n('version')} + {e.v(N(1))}"
        )
        # The index may be stale: the condition re-checks the lease on the item itself.
        condition = (
            f"attribute_exists({e.n('owner')}) AND {e.n('lease_until')} < {e.v(N(float(now)))}"
            f" AND {e.not_terminal()}"
        )
        try:
            resp = await self._call(
                "update_item",
                **e.params(
                    TableName=self._tasks,
                    Key={"pk": key_item["pk"], "sk": key_item["sk"]},
                    UpdateExpression=update,
                    ConditionExpression=condition,
                    ReturnValues="ALL_NEW",
                ),
            )
        except ConflictError:
            return None
        item = resp["Attributes"]
        scope = Scope(item["tenant"]["S"], item["endpoint_id"]["S"], item["principal"]["S"])
        return ClaimedTask(scope, stored_from_item(item))

    # quotas ------------------------------------------------------------------------------------
    async def set_api_key_limits(self, key_id: str, limits: dict[str, int | float]) -> bool:
        if not storable_key_id(key_id):
            return False
        e = Expr()
        try:
            await self._call("update_item", **e.params(
                TableName=self._api_keys, Key={"id": S(key_id)},
                UpdateExpression=f"SET {e.n('limits')} = {e.v(S(json.dumps(limits)))}",
                ConditionExpression=f"attribute_exists({e.n('id')})",
            ))
        except ConflictError:
            return False
        return True

    async def count_quota(self, counter: str, limit: int, expires_at: float) -> bool:
        e = Expr()
        count = e.n("count")
        try:  # the condition and the add are one conditional write
            await self._call("update_item", **e.params(
                TableName=self._tasks, Key=_quota_key(QUOTA_COUNTER_PK, counter),
                UpdateExpression=f"ADD {count} {e.v(N(1))}"
                f" SET {e.n('expires_at')} = {e.v(N(int(expires_at) + 1))}",
                ConditionExpression=f"attribute_not_exists({count}) OR {count} < {e.v(N(limit))}",
            ))
        except ConflictError:
            return False
        return True

    async def uncount_quota(self, counter: str) -> None:
        e = Expr()
        count = e.n("count")
        with contextlib.suppress(ConflictError):  # at zero, or pruned with its window
            await self._call("update_item", **e.params(
                TableName=self._tasks, Key=_quota_key(QUOTA_COUNTER_PK, counter),
                UpdateExpression=f"ADD {count} {e.v(N(-1))}",
                ConditionExpression=f"{count} > {e.v(N(0))}",
            ))

    async def take_quota_slot(
        self, subject: str, slot_id: str, limit: int, now: float, lease_until: float
    ) -> bool:
        def take(slots: dict[str, float]) -> dict[str, float] | None:
            live = {slot: until for slot, until in slots.items() if until >= now}
            return None if len(live) >= limit else {**live, slot_id: lease_until}

        return await self._change_slots(subject, take)

    async def renew_quota_slots(
        self, subject: str, slot_ids: list[str], lease_until: float
    ) -> None:
        def renew(slots: dict[str, float]) -> dict[str, float] | None:
            held = [slot for slot in slot_ids if slot in slots]
            return {**slots, **dict.fromkeys(held, lease_until)} if held else None

        await self._change_slots(subject, renew)

    async def release_quota_slots(self, subject: str, slot_ids: list[str]) -> None:
        freed = set(slot_ids)

        def release(slots: dict[str, float]) -> dict[str, float] | None:
            kept = {s: u for s, u in slots.items() if s not in freed}
            return kept if len(kept) < len(slots) else None

        await self._change_slots(subject, release)

    async def prune_quotas(self, now: float) -> None:
        """Nothing to do: counters expire with the table's TTL, and a subject's expired slots
        are dropped by its next ``take_quota_slot``."""

    async def _change_slots(
        self, subject: str, change: Callable[[dict[str, float]], dict[str, float] | None]
    ) -> bool:
        """Apply ``change`` to the subject's slots, written only if no one wrote them since
        they were read (retried then); False when ``change`` wants no write."""
        key = _quota_key(QUOTA_SLOTS_PK, subject)
        for _ in range(_SLOT_ATTEMPTS):
            resp = await self._call("get_item", TableName=self._tasks, Key=key, ConsistentRead=True)
            item = resp.get("Item", {})
            version = int(item["version"]["N"]) if "version" in item else 0
            slots = {s: float(u["N"]) for s, u in item.get("slots", {}).get("M", {}).items()}
            changed = change(slots)
            if changed is None:
                return False
            e = Expr()
            stored = e.n("version")
            condition = (f"{stored} = {e.v(N(version))}" if version
                         else f"attribute_not_exists({stored})")
            try:
                await self._call("update_item", **e.params(
                    TableName=self._tasks, Key=key,
                    UpdateExpression=f"SET {e.n('slots')} = "
                    f"{e.v({'M': {s: N(u) for s, u in changed.items()}})},"
                    f" {stored} = {e.v(N(version + 1))}",
                    ConditionExpression=condition,
                ))
            except ConflictError:
                continue
            return True
        raise StoreUnavailableError(f"the concurrency slots of {subject} stay contended")


_SLOT_ATTEMPTS = 20


def _quota_key(prefix: str, name: str) -> dict[str, Any]:
    return {"pk": S(prefix + name), "sk": S("#")}
