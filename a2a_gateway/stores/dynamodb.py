"""DynamoDB store (``dynamodb://?region=…&table_prefix=a2a-``): boto3 in a dedicated thread pool.

Two tables. ``<prefix>endpoints`` is keyed by endpoint id. ``<prefix>tasks`` holds tasks, push
configs and contexts under a partition key that names tenant, endpoint and principal
(``T#t#E#e#P#p``), so no key can reach across scopes. Sparse indexes serve ListTasks (all, by
context, by state; newest status first) and the ownership leases. Every task write is conditional;
terminal tasks get an ``expires_at`` TTL when ``ttl_days`` is set, and reads skip expired items
because DynamoDB deletes them lazily. The table layout is described in ``docs/dynamodb.md``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
from a2a.types import Task, TaskPushNotificationConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from a2a_gateway.stores.base import (
    TERMINAL_STATES,
    ClaimedTask,
    ConflictError,
    Context,
    Endpoint,
    Scope,
    Store,
    StoredTask,
    StoreError,
    StoreUnavailableError,
    TaskPage,
    TaskQuery,
    status_timestamp_us,
)
from a2a_gateway.stores.page_token import decode_page_token, encode_page_token

LEASE_SHARDS = 8
"""Fixed: the lease index partition of a task is ``crc32(key) % LEASE_SHARDS``."""

_RETRIABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ThrottlingException",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionInProgressException",
    }
)
_LIST_PROJECTION = ["task", "expires_at", "state"]


@dataclass(frozen=True, slots=True)
class DynamoDBSettings:
    """Parsed from the store URL's query string."""

    region: str | None = None
    table_prefix: str = "a2a-"
    endpoint_url: str | None = None
    ttl_days: float = 0.0
    """Retention of terminal tasks; 0 keeps them forever."""
    retry_mode: str = "standard"
    max_attempts: int = 5
    """Attempts per call, the first included (botocore backs off between them)."""
    pool_size: int = 16
    connect_timeout: float = 3.0
    read_timeout: float = 10.0

    @classmethod
    def from_url(cls, url: str) -> DynamoDBSettings:
        parts = urlsplit(url)
        if parts.scheme != "dynamodb":
            raise ValueError(f"not a dynamodb:// URL: {parts.scheme!r}")
        raw = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        known = cls.__dataclass_fields__
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ValueError(f"unknown dynamodb:// option(s): {', '.join(unknown)}")
        if raw.get("retry_mode", "standard") not in ("standard", "adaptive", "legacy"):
            raise ValueError("retry_mode must be standard, adaptive or legacy")
        kwargs: dict[str, Any] = {}
        for name, value in raw.items():
            kind = known[name].type
            cast = {"int": int, "float": float}.get(kind, str)
            kwargs[name] = cast(value)
        return cls(**kwargs)

    @property
    def endpoints_table(self) -> str:
        return f"{self.table_prefix}endpoints"

    @property
    def tasks_table(self) -> str:
        return f"{self.table_prefix}tasks"


# -- keys and attribute values -------------------------------------------------------------------


def _esc(part: str) -> str:
    """Escape the key separator so ``a#b`` as a tenant can never alias another scope."""
    return part.replace("%", "%25").replace("#", "%23")


def scope_key(scope: Scope) -> str:
    return f"T#{_esc(scope.tenant)}#E#{_esc(scope.endpoint_id)}#P#{_esc(scope.principal)}"


def status_key(status_us: int, task_id: str) -> str:
    """Sorts by status time, then task id (fixed-width number, so string order is time order)."""
    return f"{max(status_us, 0):020d}#{task_id}"


def _S(value: str) -> dict[str, str]:  # noqa: N802 - DynamoDB type letters
    return {"S": value}


def _N(value: float) -> dict[str, str]:  # noqa: N802
    return {"N": repr(value) if isinstance(value, float) else str(value)}


class _Expr:
    """Builds an expression's placeholders as they are used: real DynamoDB rejects unused
    names and values (moto does not), and every attribute name goes through ``#`` because
    ``state``, ``owner`` and others are reserved words."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def n(self, attribute: str) -> str:
        self.names[f"#{attribute}"] = attribute
        return f"#{attribute}"

    def v(self, value: Any) -> str:
        key = f":v{len(self.values)}"
        self.values[key] = value
        return key

    def not_expired(self, now: float) -> str:
        expires_at = self.n("expires_at")
        return f"(attribute_not_exists({expires_at}) OR {expires_at} > {self.v(_N(int(now)))})"

    def not_terminal(self) -> str:
        states = ", ".join(self.v(_N(int(s))) for s in sorted(TERMINAL_STATES))
        return f"NOT {self.n('state')} IN ({states})"

    def params(self, **kwargs: Any) -> dict[str, Any]:
        out = {k: v for k, v in kwargs.items() if v is not None}
        if self.names:
            out["ExpressionAttributeNames"] = self.names
        if self.values:
            out["ExpressionAttributeValues"] = self.values
        return out


def _expired(item: dict[str, Any], now: float) -> bool:
    return "expires_at" in item and float(item["expires_at"]["N"]) <= now


def _stored_from_item(item: dict[str, Any]) -> StoredTask:
    return StoredTask(
        task=Task.FromString(item["task"]["B"]),
        version=int(item["version"]["N"]),
        run_ref=item["run_ref"]["S"] if "run_ref" in item else None,
        run_state=json.loads(item["run_state"]["S"]),
        owner=item["owner"]["S"] if "owner" in item else None,
        lease_until=float(item["lease_until"]["N"]) if "lease_until" in item else None,
    )


def _endpoint_item(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "id": _S(endpoint.id),
        "tenant": _S(endpoint.tenant),
        "name": _S(endpoint.name),
        "description": _S(endpoint.description),
        "enabled": {"BOOL": endpoint.enabled},
        "card": _S(json.dumps(endpoint.card)),
        "metadata": _S(json.dumps(endpoint.metadata)),
        "created_at": _S(endpoint.created_at.isoformat()),
        "updated_at": _S(endpoint.updated_at.isoformat()),
    }


def _endpoint_from_item(item: dict[str, Any]) -> Endpoint:
    return Endpoint(
        id=item["id"]["S"],
        tenant=item["tenant"]["S"],
        name=item["name"]["S"],
        description=item["description"]["S"],
        enabled=item["enabled"]["BOOL"],
        card=json.loads(item["card"]["S"]),
        metadata=json.loads(item["metadata"]["S"]),
        created_at=datetime.fromisoformat(item["created_at"]["S"]),
        updated_at=datetime.fromisoformat(item["updated_at"]["S"]),
    )


# -- schema --------------------------------------------------------------------------------------


def _index(name: str, hash_key: str, range_key: str, include: list[str] | None) -> dict[str, Any]:
    projection: dict[str, Any] = {"ProjectionType": "KEYS_ONLY"}
    if include:
        projection = {"ProjectionType": "INCLUDE", "NonKeyAttributes": include}
    return {
        "IndexName": name,
        "KeySchema": [
            {"AttributeName": hash_key, "KeyType": "HASH"},
            {"AttributeName": range_key, "KeyType": "RANGE"},
        ],
        "Projection": projection,
    }


def table_definitions(settings: DynamoDBSettings) -> list[dict[str, Any]]:
    """``CreateTable`` arguments for both tables (``deploy/dynamodb`` mirrors these)."""

    def attrs(**kinds: str) -> list[dict[str, str]]:
        return [{"AttributeName": k, "AttributeType": t} for k, t in kinds.items()]

    return [
        {
            "TableName": settings.endpoints_table,
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": attrs(id="S"),
            "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
        },
        {
            "TableName": settings.tasks_table,
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": attrs(
                pk="S", sk="S", status_key="S", ctx_pk="S", state_pk="S",
                owner="S", lease_shard="S", lease_until="N",
            ),
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "GlobalSecondaryIndexes": [
                _index("by_status", "pk", "status_key", _LIST_PROJECTION),
                _index("by_context", "ctx_pk", "status_key", _LIST_PROJECTION),
                _index("by_state", "state_pk", "status_key", _LIST_PROJECTION),
                _index("by_owner", "owner", "sk", None),
                _index("by_lease", "lease_shard", "lease_until", None),
            ],
        },
    ]


def _client(settings: DynamoDBSettings, credentials: dict[str, str]) -> Any:
    config = Config(
        max_pool_connections=settings.pool_size,
        retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts},
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
    )
    session = boto3.session.Session(region_name=settings.region, **credentials)
    return session.client("dynamodb", endpoint_url=settings.endpoint_url, config=config)


def _credentials(options: dict[str, Any]) -> dict[str, str]:
    """Explicit credentials (tests, emulators); otherwise boto3's default chain."""
    names = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
    return {k: str(options.pop(k)) for k in names if options.get(k) is not None}


def _map_errors(op: str, fn: Callable[[], Any]) -> Any:
    """Run one boto3 call (retried by botocore) and translate what it raises into store errors."""
    try:
        return fn()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "ConditionalCheckFailedException":
            raise
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in _RETRIABLE_CODES or status >= 500:
            raise StoreUnavailableError(f"dynamodb {op}: {code or status} after retries") from exc
        if code == "ResourceNotFoundException":
            raise StoreError(f"dynamodb {op}: table missing (run `a2a-gateway migrate`)") from exc
        raise StoreError(f"dynamodb {op}: {code}") from exc
    except NoCredentialsError as exc:
        raise StoreError("dynamodb: no AWS credentials found") from exc
    except BotoCoreError as exc:
        raise StoreUnavailableError(f"dynamodb {op}: {type(exc).__name__}") from exc


def _start(key: dict[str, Any] | None) -> dict[str, Any]:
    return {"ExclusiveStartKey": key} if key else {}


def _call_mapped(op: str, fn: Callable[[], Any]) -> Any:
    try:
        return _map_errors(op, fn)
    except ClientError as exc:  # only a failed condition gets through _map_errors
        raise ConflictError(f"dynamodb {op}: condition failed") from exc


# -- the store -----------------------------------------------------------------------------------


def _task_sk(task_id: str) -> str:
    return f"TASK#{_esc(task_id)}"


def _lease_shard(pk: str, sk: str) -> str:
    return f"L{zlib.crc32(f'{pk}|{sk}'.encode()) % LEASE_SHARDS}"


def _task_index_attrs(spk: str, task: Task) -> dict[str, Any]:
    """The attributes derived from the task that the list indexes are keyed on."""
    return {
        "task": {"B": task.SerializeToString()},
        "state": _N(int(task.status.state)),
        "context_id": _S(task.context_id),
        "status_key": _S(status_key(status_timestamp_us(task), task.id)),
        "ctx_pk": _S(f"{spk}#C#{_esc(task.context_id)}"),
        "state_pk": _S(f"{spk}#S#{int(task.status.state)}"),
    }


class DynamoDBStore(Store):
    """Use ``open()``; the boto3 client and its pool belong to the store until ``aclose()``."""

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
        self._token_key = {"key": page_token_key} if page_token_key else {}

    @classmethod
    async def open(cls, url: str, **options: Any) -> DynamoDBStore:
        """Options: ``page_token_key`` (shared by all replicas), explicit ``aws_access_key_id``
        / ``aws_secret_access_key`` / ``aws_session_token`` (else boto3's default chain)."""
        settings = DynamoDBSettings.from_url(url)
        options = dict(options)
        credentials = _credentials(options)
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
        """One boto3 call on the store's pool; a failed condition becomes ``ConflictError``."""
        fn = functools.partial(getattr(self._client, op), **kwargs)
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, _call_mapped, op, fn
        )

    async def _query_all(self, **params: Any) -> list[dict[str, Any]]:
        items, start = [], None
        while True:
            resp = await self._call("query", **params, **_start(start))
            items += resp.get("Items", [])
            start = resp.get("LastEvaluatedKey")
            if not start:
                return items

    async def ping(self) -> None:
        try:
            await self._call("get_item", TableName=self._endpoints, Key={"id": _S("#ping")})
        except StoreUnavailableError:
            raise
        except StoreError as exc:
            raise StoreUnavailableError(str(exc)) from exc

    # endpoints ---------------------------------------------------------------------------------
    async def create_endpoint(self, endpoint: Endpoint) -> None:
        e = _Expr()
        try:
            await self._call(
                "put_item",
                **e.params(
                    TableName=self._endpoints,
                    Item=_endpoint_item(endpoint),
                    ConditionExpression=f"attribute_not_exists({e.n('id')})",
                ),
            )
        except ConflictError as exc:
            raise ConflictError(f"endpoint {endpoint.id} exists") from exc

    async def update_endpoint(self, endpoint: Endpoint) -> None:
        e = _Expr()
        try:
            await self._call(
                "put_item",
                **e.params(
                    TableName=self._endpoints,
                    Item=_endpoint_item(endpoint),
                    ConditionExpression=f"attribute_exists({e.n('id')})",
                ),
            )
        except ConflictError:
            raise KeyError(endpoint.id) from None

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        resp = await self._call(
            "get_item", TableName=self._endpoints, Key={"id": _S(endpoint_id)}, ConsistentRead=True
        )
        return _endpoint_from_item(resp["Item"]) if "Item" in resp else None

    async def list_endpoints(self) -> list[Endpoint]:
        items, start = [], None
        while True:
            resp = await self._call(
                "scan",
                TableName=self._endpoints,
                ConsistentRead=True,
                **_start(start),
            )
            items += resp.get("Items", [])
            start = resp.get("LastEvaluatedKey")
            if not start:
                break
        endpoints = [_endpoint_from_item(i) for i in items]
        return sorted(endpoints, key=lambda ep: (ep.created_at, ep.id))

    # tasks -------------------------------------------------------------------------------------
    def _expires_at(self, task: Task, now: float) -> dict[str, Any]:
        if task.status.state in TERMINAL_STATES and self._settings.ttl_days > 0:
            return {"expires_at": _N(int(now + self._settings.ttl_days * 86400))}
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
    ) -> int:
        spk, sk, now = scope_key(scope), _task_sk(task.id), time.time()
        item: dict[str, Any] = {
            "pk": _S(spk),
            "sk": _S(sk),
            "tenant": _S(scope.tenant),
            "endpoint_id": _S(scope.endpoint_id),
            "principal": _S(scope.principal),
            "version": _N(1),
            "run_state": _S(json.dumps(run_state or {})),
            **_task_index_attrs(spk, task),
            **self._expires_at(task, now),
        }
        if run_ref is not None:
            item["run_ref"] = _S(run_ref)
        if owner and task.status.state not in TERMINAL_STATES:
            item["owner"] = _S(owner)
            if lease_until is not None:
                item["lease_until"] = _N(float(lease_until))
                item["lease_shard"] = _S(_lease_shard(spk, sk))
        e = _Expr()
        # An expired item DynamoDB has not deleted yet is gone for readers, so it may be replaced.
        condition = (
            f"attribute_not_exists({e.n('pk')}) OR {e.n('expires_at')} <= {e.v(_N(int(now)))}"
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
    ) -> int:
        spk, sk = scope_key(scope), _task_sk(task.id)
        terminal = task.status.state in TERMINAL_STATES
        sets = {**_task_index_attrs(spk, task), **self._expires_at(task, time.time())}
        if run_ref is not None:
            sets["run_ref"] = _S(run_ref)
        if run_state is not None:
            sets["run_state"] = _S(json.dumps(run_state))
        removes = []
        if owner and not terminal:
            sets["owner"] = _S(owner)
        else:
            removes.append("owner")
        if owner and not terminal and lease_until is not None:
            sets["lease_until"] = _N(float(lease_until))
            sets["lease_shard"] = _S(_lease_shard(spk, sk))
        else:
            removes += ["lease_until", "lease_shard"]
        e = _Expr()
        update = "SET " + ", ".join(
            [f"{e.n(k)} = {e.v(v)}" for k, v in sets.items()]
            + [f"{e.n('version')} = {e.n('version')} + {e.v(_N(1))}"]
        )
        update += " REMOVE " + ", ".join(e.n(k) for k in removes)
        condition = f"{e.n('version')} = {e.v(_N(expected_version))} AND {e.not_terminal()}"
        try:
            await self._call(
                "update_item",
                **e.params(
                    TableName=self._tasks,
                    Key={"pk": _S(spk), "sk": _S(sk)},
                    UpdateExpression=update,
                    ConditionExpression=condition,
                ),
            )
        except ConflictError as exc:
            raise ConflictError(f"task {task.id} changed, is terminal or is missing") from exc
        return expected_version + 1

    async def get_task(self, scope: Scope, task_id: str) -> StoredTask | None:
        resp = await self._call(
            "get_item",
            TableName=self._tasks,
            Key={"pk": _S(scope_key(scope)), "sk": _S(_task_sk(task_id))},
            ConsistentRead=True,
        )
        item = resp.get("Item")
        if item is None or _expired(item, time.time()):
            return None
        return _stored_from_item(item)

    async def list_tasks(self, scope: Scope, query: TaskQuery) -> TaskPage:
        spk, now = scope_key(scope), time.time()
        if query.context_id:
            index, hash_attr = "by_context", "ctx_pk"
            hash_value = f"{spk}#C#{_esc(query.context_id)}"
        elif query.state:
            index, hash_attr, hash_value = "by_state", "state_pk", f"{spk}#S#{int(query.state)}"
        else:
            index, hash_attr, hash_value = "by_status", "pk", spk

        def params(*, count: bool) -> dict[str, Any]:
            e = _Expr()
            key = f"{e.n(hash_attr)} = {e.v(_S(hash_value))}"
            if query.status_after_us is not None:
                lower = f"{max(query.status_after_us, 0):020d}"
                key += f" AND {e.n('status_key')} >= {e.v(_S(lower))}"
            filters = [e.not_expired(now)]
            if query.context_id and query.state:
                filters.append(f"{e.n('state')} = {e.v(_N(int(query.state)))}")
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
            status_us, task_id = decode_page_token(query.page_token, **self._token_key)
            start = {
                "pk": _S(spk),
                "sk": _S(_task_sk(task_id)),
                "status_key": _S(status_key(status_us, task_id)),
                hash_attr: _S(hash_value),
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
            token = encode_page_token(max(status_timestamp_us(last), 0), last.id, **self._token_key)
        return TaskPage(tasks, token, total)

    # push configs ------------------------------------------------------------------------------
    def _push_key(self, scope: Scope, task_id: str, config_id: str) -> dict[str, Any]:
        return {"pk": _S(scope_key(scope)), "sk": _S(f"PUSH#{_esc(task_id)}#{_esc(config_id)}")}

    async def put_push_config(self, scope: Scope, config: TaskPushNotificationConfig) -> None:
        item = {
            **self._push_key(scope, config.task_id, config.id),
            "config_id": _S(config.id),
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
        e = _Expr()
        key = (
            f"{e.n('pk')} = {e.v(_S(scope_key(scope)))}"
            f" AND begins_with({e.n('sk')}, {e.v(_S(f'PUSH#{_esc(task_id)}#'))})"
        )
        items = await self._query_all(
            **e.params(TableName=self._tasks, KeyConditionExpression=key, ConsistentRead=True)
        )
        configs = [TaskPushNotificationConfig.FromString(i["config"]["B"]) for i in items]
        return sorted(configs, key=lambda c: c.id)

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> None:
        await self._call(
            "delete_item", TableName=self._tasks, Key=self._push_key(scope, task_id, config_id)
        )

    # contexts ----------------------------------------------------------------------------------
    def _context_key(self, scope: Scope, context_id: str) -> dict[str, Any]:
        return {"pk": _S(scope_key(scope)), "sk": _S(f"CTX#{_esc(context_id)}")}

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
            "turns": _S(json.dumps(context.turns)),
            "session": _S(json.dumps(context.session)),
        }
        await self._call("put_item", TableName=self._tasks, Item=item)

    # leases ------------------------------------------------------------------------------------
    async def renew_leases(self, owner: str, task_ids: list[str], lease_until: float) -> None:
        if not owner or not task_ids:
            return
        wanted = {_task_sk(task_id) for task_id in task_ids}
        e = _Expr()
        owned = await self._query_all(
            **e.params(
                TableName=self._tasks,
                IndexName="by_owner",
                KeyConditionExpression=f"{e.n('owner')} = {e.v(_S(owner))}",
            )
        )
        keys = [{"pk": i["pk"], "sk": i["sk"]} for i in owned if i["sk"]["S"] in wanted]
        await asyncio.gather(*(self._renew_one(key, owner, lease_until) for key in keys))

    async def _renew_one(self, key: dict[str, Any], owner: str, lease_until: float) -> None:
        e = _Expr()
        update = (
            f"SET {e.n('lease_until')} = {e.v(_N(float(lease_until)))},"
            f" {e.n('lease_shard')} = {e.v(_S(_lease_shard(key['pk']['S'], key['sk']['S'])))}"
        )
        condition = f"{e.n('owner')} = {e.v(_S(owner))} AND {e.not_terminal()}"
        try:
            await self._call(
                "update_item",
                **e.params(
                    TableName=self._tasks,
                    Key=key,
                    UpdateExpression=update,
                    ConditionExpression=condition,
                ),
            )
        except ConflictError:
            pass  # finished or taken over since the index was read

    async def claim_expired_tasks(
        self, owner: str, now: float, lease_until: float, limit: int = 100
    ) -> list[ClaimedTask]:
        async def expired_in(shard: int) -> list[dict[str, Any]]:
            e = _Expr()
            key = (
                f"{e.n('lease_shard')} = {e.v(_S(f'L{shard}'))}"
                f" AND {e.n('lease_until')} < {e.v(_N(float(now)))}"
            )
            resp = await self._call(
                "query",
                **e.params(
                    TableName=self._tasks,
                    IndexName="by_lease",
                    KeyConditionExpression=key,
                    Limit=limit,
                ),
            )
            return resp.get("Items", [])

        shards = await asyncio.gather(*(expired_in(s) for s in range(LEASE_SHARDS)))
        candidates = sorted(
            (i for items in shards for i in items), key=lambda i: float(i["lease_until"]["N"])
        )[:limit]
        claimed = await asyncio.gather(
            *(self._claim_one(i, owner, now, lease_until) for i in candidates)
        )
        return [c for c in claimed if c is not None]

    async def _claim_one(
        self, key_item: dict[str, Any], owner: str, now: float, lease_until: float
    ) -> ClaimedTask | None:
        e = _Expr()
        update = (
            f"SET {e.n('owner')} = {e.v(_S(owner))},"
            f" {e.n('lease_until')} = {e.v(_N(float(lease_until)))},"
            f" {e.n('version')} = {e.n('version')} + {e.v(_N(1))}"
        )
        # The index may be stale: the condition re-checks the lease on the item itself.
        condition = (
            f"attribute_exists({e.n('owner')}) AND {e.n('lease_until')} < {e.v(_N(float(now)))}"
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
        return ClaimedTask(scope, _stored_from_item(item))


# -- migrate -------------------------------------------------------------------------------------


async def create_tables(url: str, **options: Any) -> list[str]:
    """Create the tables, their indexes and the TTL setting where missing (idempotent);
    return what was created. Options: explicit AWS credentials, as for ``open()``."""
    settings = DynamoDBSettings.from_url(url)
    credentials = _credentials(dict(options))
    return await asyncio.to_thread(
        _map_errors, "create_tables", functools.partial(_create_tables, settings, credentials)
    )


def _create_tables(settings: DynamoDBSettings, credentials: dict[str, str]) -> list[str]:
    client = _client(settings, credentials)
    created: list[str] = []
    try:
        for definition in table_definitions(settings):
            name = definition["TableName"]
            try:
                table = client.describe_table(TableName=name)["Table"]
            except client.exceptions.ResourceNotFoundException:
                try:
                    client.create_table(**definition)
                    created.append(name)
                except client.exceptions.ResourceInUseException:
                    pass  # another migrate run is creating it
                client.get_waiter("table_exists").wait(
                    TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 300}
                )
                table = client.describe_table(TableName=name)["Table"]
            created += _create_missing_indexes(client, definition, table)
        ttl = client.describe_time_to_live(TableName=settings.tasks_table)["TimeToLiveDescription"]
        if ttl.get("TimeToLiveStatus") in (None, "DISABLED"):
            client.update_time_to_live(
                TableName=settings.tasks_table,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"},
            )
            created.append(f"{settings.tasks_table} ttl:expires_at")
    finally:
        client.close()
    return created


def _create_missing_indexes(
    client: Any, definition: dict[str, Any], table: dict[str, Any]
) -> list[str]:
    """Indexes added after a table was created: one ``UpdateTable`` each, waiting for the
    backfill, since DynamoDB creates one index per call."""
    name, created = definition["TableName"], []
    existing = {i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])}
    for index in definition.get("GlobalSecondaryIndexes", []):
        if index["IndexName"] in existing:
            continue
        client.update_table(
            TableName=name,
            AttributeDefinitions=definition["AttributeDefinitions"],
            GlobalSecondaryIndexUpdates=[{"Create": index}],
        )
        for _ in range(1800):
            described = client.describe_table(TableName=name)["Table"]
            status = {
                i["IndexName"]: i.get("IndexStatus")
                for i in described.get("GlobalSecondaryIndexes", [])
            }
            if status.get(index["IndexName"]) == "ACTIVE":
                break
            time.sleep(1)
        created.append(f"{name}:{index['IndexName']}")
    return created
