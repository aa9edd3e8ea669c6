"""PostgreSQL store (``postgresql://…``): one database shared by every gateway replica.

The schema comes only from ``migrations/postgres/NNNN_*.sql``, applied by
``migrate_postgres`` (``a2a-gateway migrate``, in ``postgres_migrations``);
``check_schema`` tells ``serve`` whether the database matches this code. Tasks are
stored as serialized protobuf next to the columns used to filter and order them;
endpoint cards, run state, contexts and push configs are JSONB. URL options
(pool size, timeouts) are listed in ``postgres_connection``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
from a2a.types import Task, TaskPushNotificationConfig
from google.protobuf import json_format

from a2a_gateway.stores.audit_pages import audit_cursor, audit_page
from a2a_gateway.stores.base import (
    NOT_TERMINAL_SQL,
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
    TaskPage,
    TaskQuery,
    UsageQuery,
    UsageRecord,
    UsageTotals,
    audit_time,
    status_timestamp_us,
    storable_key_id,
)
from a2a_gateway.stores.migrations import migration_files
from a2a_gateway.stores.page_token import decode_page_token, encode_page_token, endpoint_task_page
from a2a_gateway.stores.postgres_batches import INSERT_MANY, NewTask, TaskCreations, columns
from a2a_gateway.stores.postgres_connection import (
    UNAVAILABLE_ERRORS,
    redacted,
    split_url,
    unavailable,
)
from a2a_gateway.stores.postgres_migrations import (
    MigrationError,
    SchemaMismatchError,
    check_applied,
    check_schema,
    migrate_postgres,
)
from a2a_gateway.stores.sql_rows import RowReader
from a2a_gateway.stores.usage_rows import (
    USAGE_COLUMNS,
    daily_sql,
    fold,
    partials_of_daily_rows,
    partials_of_rows,
    usage_sql,
    usage_values,
    whole_days,
)

__all__ = [
    "MigrationError",
    "PostgresStore",
    "SchemaMismatchError",
    "check_schema",
    "migrate_postgres",
]

_SCOPE = "tenant = $1 AND endpoint_id = $2 AND principal = $3"
def _placeholder(n: int) -> str:
    return f"${n}"


_SET_USAGE = ", ".join(f"{column} = ${n}" for n, column in enumerate(USAGE_COLUMNS, 14))
"""A task update sets the ledger's columns ($14…): a record at the terminal write, NULLs before."""


ROWS = RowReader(time=lambda value: value.astimezone(UTC), json=lambda value: value)
"""asyncpg gives datetimes and (with the pool's codec) decoded JSON."""


def _holds_nul(*values: str) -> bool:
    """PostgreSQL text cannot hold NUL (the server refuses the statement), so a lookup by a
    value with one is answered without asking: no row has it."""
    return any("\x00" in value for value in values)


def _jsonb_encode(value: Any) -> bytes:
    # binary jsonb format: a version byte, then the JSON text
    return b"\x01" + orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


def _jsonb_decode(data: bytes) -> Any:
    return orjson.loads(data[1:])


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb", encoder=_jsonb_encode, decoder=_jsonb_decode, schema="pg_catalog", format="binary"
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool release hook. The store never changes session state (no SET, LISTEN,
    cursors or advisory locks on pooled connections), so asyncpg's default reset
    query, one more round trip per query, is skipped; an open transaction is still
    rolled back by the pool."""


def _push_to_json(config: TaskPushNotificationConfig) -> dict[str, Any]:
    return json_format.MessageToDict(config)


def _push_from_json(doc: dict[str, Any]) -> TaskPushNotificationConfig:
    return json_format.ParseDict(doc, TaskPushNotificationConfig())


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _at(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch is not None else None


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


class PostgresStore(Store):
    def __init__(
        self, pool: asyncpg.Pool, url: str, acquire_timeout: float, connect_timeout: float = 5.0,
        page_token_key: bytes | None = None,
    ) -> None:
        self._pool = pool
        self._url = url
        self._acquire_timeout = acquire_timeout
        self._connect_timeout = connect_timeout
        self._token_key = page_token_key
        self._creations = TaskCreations(self._insert_tasks, self._insert_task)

    @classmethod
    async def open(cls, url: str, **options: Any) -> PostgresStore:
        """Open a pool on ``url``; ``StoreUnavailableError`` if the server cannot be reached.
        ``page_token_key`` signs ListTasks page tokens (the same on every replica)."""
        token_key = options.pop("page_token_key", None)
        dsn, opts = split_url(url, options)
        extra = {}
        if "statement_cache_size" in opts:
            extra["statement_cache_size"] = opts["statement_cache_size"]
        try:
            pool = await asyncpg.create_pool(
                dsn,
                min_size=min(opts["pool_min_size"], opts["pool_size"]),
                max_size=opts["pool_size"],
                timeout=opts["connect_timeout"],
                command_timeout=opts["command_timeout"],
                init=_init_connection,
                reset=_keep_session,
                **extra,
            )
        except UNAVAILABLE_ERRORS as exc:
            raise unavailable(dsn, exc) from exc
        except asyncpg.PostgresError as exc:
            raise StoreError(f"cannot open postgres store at {redacted(dsn)}: {exc}") from exc
        store = cls(pool, dsn, opts["acquire_timeout"], opts["connect_timeout"], token_key)
        try:
            await store.ping()  # fail now, not on the first request
        except StoreError:
            await pool.close()
            raise
        return store

    async def aclose(self) -> None:
        await self._pool.close()

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection; driver errors come out as store errors."""
        try:
            async with self._pool.acquire(timeout=self._acquire_timeout) as conn:
                try:
                    yield conn
                except asyncpg.InterfaceError as exc:
                    if conn.is_closed():
                        raise unavailable(self._url, exc) from exc
                    raise
        except UNAVAILABLE_ERRORS as exc:
            raise unavailable(self._url, exc) from exc
        except asyncpg.UndefinedTableError as exc:
            raise SchemaMismatchError(
                f"postgres store at {redacted(self._url)} is not migrated ({exc});"
                " run `a2a-gateway migrate`"
            ) from exc
        except asyncpg.PostgresError as exc:
            raise StoreError(f"postgres store error: {exc}") from exc

    async def ping(self) -> None:
        async with self._conn() as conn:
            await conn.fetchval("SELECT 1")

    async def check_schema(self) -> None:
        """``SchemaMismatchError`` unless every migration of this code, and no other, is applied."""
        async with self._conn() as conn:
            await check_applied(conn, migration_files("postgres"))

    # LISTEN/NOTIFY (the cross-replica live hub) ----------------------------
    async def connect_listener(self) -> asyncpg.Connection:
        """A new connection outside the pool, for LISTEN (session state the pool must
        not see); the caller closes it. ``StoreUnavailableError`` if it cannot connect."""
        try:
            return await asyncpg.connect(self._url, timeout=self._connect_timeout)
        except UNAVAILABLE_ERRORS as exc:
            raise unavailable(self._url, exc) from exc
        except asyncpg.PostgresError as exc:
            raise StoreError(
                f"cannot connect to postgres store at {redacted(self._url)}: {exc}"
            ) from exc

    async def notify(self, messages: list[tuple[str, str]]) -> None:
        """NOTIFY each ``(channel, payload)`` in one statement (one transaction): listeners
        get them in this order. Payloads must be shorter than 8000 bytes."""
        if not messages:
            return
        async with self._conn() as conn:
            await conn.execute(
                "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p)",
                [m[0] for m in messages],
                [m[1] for m in messages],
            )

    # endpoints -------------------------------------------------------------
    async def create_endpoint(self, endpoint: Endpoint) -> None:
        async with self._conn() as conn:
            try:
                await conn.execute(
                    "INSERT INTO endpoints (id, tenant, name, description, enabled, card, metadata,"
                    " created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    endpoint.id,
                    endpoint.tenant,
                    endpoint.name,
                    endpoint.description,
                    endpoint.enabled,
                    endpoint.card,
                    endpoint.metadata,
                    _utc(endpoint.created_at),
                    _utc(endpoint.updated_at),
                )
            except asyncpg.UniqueViolationError as exc:
                raise ConflictError(f"endpoint {endpoint.id} exists") from exc

    async def update_endpoint(self, endpoint: Endpoint) -> None:
        async with self._conn() as conn:
            status = await conn.execute(
                "UPDATE endpoints SET tenant = $2, name = $3, description = $4, enabled = $5,"
                " card = $6, metadata = $7, updated_at = $8 WHERE id = $1",
                endpoint.id,
                endpoint.tenant,
                endpoint.name,
                endpoint.description,
                endpoint.enabled,
                endpoint.card,
                endpoint.metadata,
                _utc(endpoint.updated_at),
            )
        if status == "UPDATE 0":
            raise KeyError(endpoint.id)

    async def delete_endpoint(self, endpoint_id: str) -> bool:
        if _holds_nul(endpoint_id):
            return False
        async with self._conn() as conn:
            status = await conn.execute("DELETE FROM endpoints WHERE id = $1", endpoint_id)
        return status == "DELETE 1"

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        async with self._conn() as conn:
            row = await conn.fetchrow("SELECT * FROM endpoints WHERE id = $1", endpoint_id)
        return ROWS.endpoint(row) if row else None

    async def list_endpoints(self) -> list[Endpoint]:
        async with self._conn() as conn:
            rows = await conn.fetch("SELECT * FROM endpoints ORDER BY created_at, id")
        return [ROWS.endpoint(r) for r in rows]

    # API keys --------------------------------------------------------------
    async def create_api_key(self, key: ApiKey) -> None:
        async with self._conn() as conn:
            try:
                await conn.execute(
                    "INSERT INTO api_keys (id, endpoint_id, tenant, principal, name, key_hash,"
                    " created_at, expires_at, revoked_at, limits)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    key.id,
                    key.endpoint_id,
                    key.tenant,
                    key.principal,
                    key.name,
                    key.key_hash,
                    _utc(key.created_at),
                    key.expires_at and _utc(key.expires_at),
                    key.revoked_at and _utc(key.revoked_at),
                    key.limits,
                )
            except asyncpg.UniqueViolationError as exc:
                raise ConflictError(f"API key {key.id} exists") from exc

    async def get_api_key(self, key_id: str) -> ApiKey | None:
        if not storable_key_id(key_id):
            return None
        async with self._conn() as conn:
            row = await conn.fetchrow("SELECT * FROM api_keys WHERE id = $1", key_id)
        return ROWS.api_key(row) if row else None

    async def list_api_keys(self, endpoint_id: str | None = None) -> list[ApiKey]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT * FROM api_keys WHERE $1::text IS NULL OR endpoint_id = $1"
                " ORDER BY created_at, id",
                endpoint_id,
            )
        return [ROWS.api_key(r) for r in rows]

    async def revoke_api_key(self, key_id: str, revoked_at: datetime) -> bool:
        if not storable_key_id(key_id):
            return False
        async with self._conn() as conn:
            status = await conn.execute(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1",
                key_id,
                _utc(revoked_at),
            )
        return status == "UPDATE 1"

    # tasks -----------------------------------------------------------------
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
        await self._creations.create(
            NewTask(
                *scope.as_tuple(),
                task.id,
                task.context_id,
                int(task.status.state),
                status_timestamp_us(task),
                task.SerializeToString(),
                run_ref,
                run_state or {},
                owner,
                lease_until,
                usage_values(usage),
            )
        )
        return 1

    async def _insert_task(self, row: NewTask) -> None:
        async with self._conn() as conn:
            try:
                await conn.execute(
                    "INSERT INTO tasks (tenant, endpoint_id, principal, id, context_id, state,"
                    " status_us, version, task, run_ref, run_state, owner, lease_until,"
                    f" {', '.join(USAGE_COLUMNS)}) VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8,"
                    " $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)",
                    *row.values(),
                )
            except asyncpg.UniqueViolationError as exc:
                raise ConflictError(f"task {row.id} exists") from exc

    async def _insert_tasks(self, rows: Sequence[NewTask]) -> set[str]:
        async with self._conn() as conn:
            inserted = await conn.fetch(INSERT_MANY, *columns(rows))
        return {r["id"] for r in inserted}

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
        terminal = task.status.state in TERMINAL_STATES
        async with self._conn() as conn:
            version = await conn.fetchval(
                "UPDATE tasks SET context_id = $6, state = $7, status_us = $8,"
                " version = version + 1, task = $9, run_ref = COALESCE($10, run_ref),"
                " run_state = COALESCE($11, run_state), owner = $12, lease_until = $13,"
                f" {_SET_USAGE}"
                f" WHERE {_SCOPE} AND id = $4 AND version = $5 AND {NOT_TERMINAL_SQL}"
                " RETURNING version",
                *scope.as_tuple(),
                task.id,
                expected_version,
                task.context_id,
                int(task.status.state),
                status_timestamp_us(task),
                task.SerializeToString(),
                run_ref,
                run_state,
                None if terminal else owner,
                None if terminal else lease_until,
                *usage_values(usage),
            )
        if version is None:
            raise ConflictError(f"task {task.id} changed, is terminal or is missing")
        return version

    async def get_task(self, scope: Scope, task_id: str) -> StoredTask | None:
        if _holds_nul(*scope.as_tuple(), task_id):
            return None
        async with self._conn() as conn:
            row = await conn.fetchrow(
                "SELECT task, version, run_ref, run_state, owner, lease_until FROM tasks"
                f" WHERE {_SCOPE} AND id = $4",
                *scope.as_tuple(),
                task_id,
            )
        return ROWS.stored_task(row) if row else None

    async def list_active_tasks(self, endpoint_id: str, limit: int) -> list[tuple[Scope, Task]]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT tenant, principal, task FROM tasks WHERE endpoint_id = $1"
                f" AND {NOT_TERMINAL_SQL}"
                " ORDER BY status_us DESC, id DESC LIMIT $2",
                endpoint_id,
                limit,
            )
        return [
            (Scope(r["tenant"], endpoint_id, r["principal"]), Task.FromString(r["task"]))
            for r in rows
        ]

    async def list_endpoint_tasks(
        self,
        endpoint_id: str,
        *,
        states: frozenset[int] = frozenset(),
        context_id: str = "",
        page_size: int = 50,
        page_token: str = "",
    ) -> EndpointTaskPage:
        if _holds_nul(endpoint_id, context_id):
            return EndpointTaskPage([], "")
        where, args = ["endpoint_id = $1"], [endpoint_id]
        if states:
            args.append(sorted(states))
            where.append(f"state = ANY(${len(args)}::smallint[])")
        if context_id:
            args.append(context_id)
            where.append(f"context_id = ${len(args)}")
        if page_token:
            args += decode_page_token(page_token, key=self._token_key)
            where.append(f"(status_us, id) < (${len(args) - 1}, ${len(args)})")
        args.append(page_size + 1)
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT tenant, principal, id, status_us, task FROM tasks"
                f" WHERE {' AND '.join(where)}"
                f" ORDER BY status_us DESC, id DESC LIMIT ${len(args)}",
                *args,
            )
        return endpoint_task_page(rows, endpoint_id, page_size, self._token_key)

    async def list_tasks(self, scope: Scope, query: TaskQuery) -> TaskPage:
        if _holds_nul(*scope.as_tuple(), query.context_id):
            return TaskPage([], "", 0)
        where, args = [_SCOPE], list(scope.as_tuple())
        if query.context_id:
            args.append(query.context_id)
            where.append(f"context_id = ${len(args)}")
        if query.state:
            args.append(int(query.state))
            where.append(f"state = ${len(args)}")
        if query.status_after_us is not None:
            args.append(query.status_after_us)
            where.append(f"status_us >= ${len(args)}")
        filters = " AND ".join(where)
        page_where, page_args = filters, list(args)
        if query.page_token:
            status_us, task_id = decode_page_token(query.page_token, key=self._token_key)
            page_args += [status_us, task_id]
            n = len(page_args)
            page_where += f" AND (status_us, id) < (${n - 1}, ${n})"
        page_args.append(query.page_size + 1)
        async with self._conn() as conn:
            total = await conn.fetchval(f"SELECT count(*) FROM tasks WHERE {filters}", *args)
            rows = await conn.fetch(
                f"SELECT id, status_us, task FROM tasks WHERE {page_where}"
                f" ORDER BY status_us DESC, id DESC LIMIT ${len(page_args)}",
                *page_args,
            )
        page = rows[: query.page_size]
        token = ""
        if len(rows) > query.page_size:
            token = encode_page_token(page[-1]["status_us"], page[-1]["id"], key=self._token_key)
        return TaskPage([Task.FromString(r["task"]) for r in page], token, total)

    # push configs ------------------------------------------------------------
    async def put_push_config(self, scope: Scope, config: TaskPushNotificationConfig) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "INSERT INTO push_configs (tenant, endpoint_id, principal, task_id, id, config)"
                " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, endpoint_id, principal,"
                " task_id, id) DO UPDATE SET config = EXCLUDED.config",
                *scope.as_tuple(),
                config.task_id,
                config.id,
                _push_to_json(config),
            )

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> TaskPushNotificationConfig | None:
        async with self._conn() as conn:
            doc = await conn.fetchval(
                f"SELECT config FROM push_configs WHERE {_SCOPE} AND task_id = $4 AND id = $5",
                *scope.as_tuple(),
                task_id,
                config_id,
            )
        return _push_from_json(doc) if doc is not None else None

    async def list_push_configs(
        self, scope: Scope, task_id: str
    ) -> list[TaskPushNotificationConfig]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"SELECT config FROM push_configs WHERE {_SCOPE} AND task_id = $4 ORDER BY id",
                *scope.as_tuple(),
                task_id,
            )
        return [_push_from_json(r["config"]) for r in rows]

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> None:
        async with self._conn() as conn:
            await conn.execute(
                f"DELETE FROM push_configs WHERE {_SCOPE} AND task_id = $4 AND id = $5",
                *scope.as_tuple(),
                task_id,
                config_id,
            )

    # push delivery outbox --------------------------------------------------------
    async def add_push_deliveries(self, deliveries: list[PushDelivery]) -> None:
        if not deliveries:
            return
        async with self._conn() as conn:
            try:
                await conn.executemany(
                    "INSERT INTO push_deliveries (id, tenant, endpoint_id, principal, task_id,"
                    " config_id, body, due_at, attempts, owner)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    [
                        (d.id, *d.scope.as_tuple(), d.task_id, d.config_id, d.body, d.due_at,
                         d.attempts, d.owner)
                        for d in deliveries
                    ],
                )
            except asyncpg.UniqueViolationError as exc:
                raise ConflictError("a push delivery with this id exists") from exc

    async def claim_push_deliveries(
        self, owner: str, now: float, claim_until: float, limit: int = 100
    ) -> list[PushDelivery]:
        # as claim_expired_tasks: rows another replica is claiming are skipped
        async with self._conn() as conn:
            rows = await conn.fetch(
                "WITH due AS ("
                "  SELECT id FROM push_deliveries WHERE due_at <= $2"
                "  ORDER BY due_at LIMIT $4 FOR UPDATE SKIP LOCKED)"
                " UPDATE push_deliveries d SET owner = $1, due_at = $3, attempts = d.attempts + 1"
                " FROM due WHERE d.id = due.id RETURNING d.*",
                owner,
                now,
                claim_until,
                limit,
            )
        return [ROWS.delivery(r) for r in rows]

    async def retry_push_delivery(
        self, delivery_id: str, owner: str, attempts: int, due_at: float
    ) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "UPDATE push_deliveries SET owner = NULL, due_at = $4"
                " WHERE id = $1 AND owner = $2 AND attempts = $3",
                delivery_id,
                owner,
                attempts,
                due_at,
            )

    async def delete_push_delivery(self, delivery_id: str) -> None:
        async with self._conn() as conn:
            await conn.execute("DELETE FROM push_deliveries WHERE id = $1", delivery_id)

    # contexts ------------------------------------------------------------------
    async def get_context(self, scope: Scope, context_id: str) -> Context | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(
                f"SELECT turns, session FROM contexts WHERE {_SCOPE} AND context_id = $4",
                *scope.as_tuple(),
                context_id,
            )
        return Context(turns=row["turns"], session=row["session"]) if row else None

    async def put_context(self, scope: Scope, context_id: str, context: Context) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "INSERT INTO contexts (tenant, endpoint_id, principal, context_id, turns, session)"
                " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (tenant, endpoint_id, principal,"
                " context_id) DO UPDATE SET turns = EXCLUDED.turns, session = EXCLUDED.session",
                *scope.as_tuple(),
                context_id,
                context.turns,
                context.session,
            )

    # backend health --------------------------------------------------------------
    async def record_backend_health(self, endpoint_id: str, change: EndpointHealth) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "INSERT INTO backend_health AS h (endpoint_id, successes, errors, last_success,"
                " last_error, last_error_message) VALUES ($1, $2, $3, $4, $5, $6)"
                " ON CONFLICT (endpoint_id) DO UPDATE SET"
                " successes = h.successes + EXCLUDED.successes,"
                " errors = h.errors + EXCLUDED.errors,"
                " last_success = GREATEST(h.last_success, EXCLUDED.last_success),"
                " last_error = GREATEST(h.last_error, EXCLUDED.last_error),"
                " last_error_message = CASE"
                " WHEN EXCLUDED.last_error > COALESCE(h.last_error, '-infinity')"
                " THEN EXCLUDED.last_error_message ELSE h.last_error_message END",
                endpoint_id,
                change.successes,
                change.errors,
                _at(change.last_success),
                _at(change.last_error),
                change.last_error_message,
            )

    async def list_backend_health(self) -> dict[str, EndpointHealth]:
        async with self._conn() as conn:
            rows = await conn.fetch("SELECT * FROM backend_health")
        return {
            r["endpoint_id"]: EndpointHealth(
                r["successes"],
                r["errors"],
                _epoch(r["last_success"]),
                _epoch(r["last_error"]),
                r["last_error_message"],
            )
            for r in rows
        }

    # audit ------------------------------------------------------------------------------
    async def append_audit_entry(self, entry: AuditEntry) -> None:
        async with self._conn() as conn:
            try:
                await conn.execute(
                    "INSERT INTO audit_log (id, at, actor, action, target, before, after, details)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    entry.id,
                    _utc(entry.at),
                    entry.actor,
                    entry.action,
                    entry.target,
                    entry.before,
                    entry.after,
                    entry.details,
                )
            except asyncpg.UniqueViolationError as exc:
                raise ConflictError(f"audit entry {entry.id} exists") from exc

    async def list_audit_entries(self, query: AuditQuery) -> AuditPage:
        cursor = audit_cursor(query, self._token_key)
        if _holds_nul(query.action, query.target, query.actor):
            return AuditPage([], "")
        async with self._conn() as conn:
            rows = await conn.fetch(
                "SELECT * FROM audit_log WHERE ($1 = '' OR action = $1)"
                " AND ($2 = '' OR target = $2) AND ($3 = '' OR actor = $3)"
                " AND ($4::timestamptz IS NULL OR at >= $4)"
                " AND ($5::timestamptz IS NULL OR at < $5)"
                " AND ($6::timestamptz IS NULL OR (at, id) < ($6, $7))"
                " ORDER BY at DESC, id DESC LIMIT $8",
                query.action,
                query.target,
                query.actor,
                query.since and _utc(query.since),
                query.until and _utc(query.until),
                audit_time(cursor[0]) if cursor else None,
                cursor[1] if cursor else "",
                query.page_size + 1,
            )
        entries = [
            AuditEntry(
                id=r["id"], at=r["at"].astimezone(UTC), actor=r["actor"], action=r["action"],
                target=r["target"], before=r["before"], after=r["after"], details=r["details"],
            )
            for r in rows
        ]
        return audit_page(entries, query.page_size, self._token_key)

    async def prune_audit_entries(self, older_than: datetime) -> int:
        async with self._conn() as conn:
            status = await conn.execute("DELETE FROM audit_log WHERE at < $1", _utc(older_than))
        return int(status.split()[-1])

    # leases ----------------------------------------------------------------------
    async def renew_leases(self, owner: str, task_ids: list[str], lease_until: float) -> None:
        if not task_ids:
            return
        async with self._conn() as conn:
            await conn.execute(
                "UPDATE tasks SET lease_until = $3"
                f" WHERE id = ANY($2::text[]) AND owner = $1 AND {NOT_TERMINAL_SQL}",
                owner,
                task_ids,
                lease_until,
            )

    async def claim_expired_tasks(
        self, owner: str, now: float, lease_until: float, limit: int = 100
    ) -> list[ClaimedTask]:
        # One statement: the rows are locked as they are picked and rows another
        # replica is claiming are skipped, so a task is never claimed twice.
        async with self._conn() as conn:
            rows = await conn.fetch(
                "WITH expired AS ("
                "  SELECT id FROM tasks"
                f"  WHERE owner IS NOT NULL AND lease_until < $2 AND {NOT_TERMINAL_SQL}"
                "  ORDER BY lease_until LIMIT $4 FOR UPDATE SKIP LOCKED)"
                " UPDATE tasks t SET owner = $1, lease_until = $3, version = t.version + 1"
                " FROM expired WHERE t.id = expired.id"
                " RETURNING t.tenant, t.endpoint_id, t.principal, t.task, t.version,"
                " t.run_ref, t.run_state, t.owner, t.lease_until",
                owner,
                now,
                lease_until,
                limit,
            )
        return [
            ClaimedTask(Scope(r["tenant"], r["endpoint_id"], r["principal"]), ROWS.stored_task(r))
            for r in rows
        ]

    # quotas ------------------------------------------------------------------------
    async def set_api_key_limits(self, key_id: str, limits: dict[str, int | float]) -> bool:
        if not storable_key_id(key_id):
            return False
        async with self._conn() as conn:
            status = await conn.execute(
                "UPDATE api_keys SET limits = $2 WHERE id = $1", key_id, limits
            )
        return status == "UPDATE 1"

    async def count_quota(self, counter: str, limit: int, expires_at: float) -> bool:
        # the upsert's row lock makes the check and the add one step for every replica
        async with self._conn() as conn:
            row = await conn.fetchrow(
                "INSERT INTO quota_counters AS q (counter, count, expires_at)"
                " SELECT $1, 1, $3 WHERE $2::bigint > 0"
                " ON CONFLICT (counter) DO UPDATE SET count = q.count + 1 WHERE q.count < $2"
                " RETURNING q.count",
                counter, limit, expires_at,
            )
        return row is not None

    async def uncount_quota(self, counter: str) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "UPDATE quota_counters SET count = count - 1 WHERE counter = $1 AND count > 0",
                counter,
            )

    async def take_quota_slot(
        self, subject: str, slot_id: str, limit: int, now: float, lease_until: float
    ) -> bool:
        # a transaction-scoped lock per subject: two replicas never count the same slots at once
        async with self._conn() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", subject)
            taken = await conn.fetchval(
                "INSERT INTO quota_slots (subject, slot_id, lease_until) SELECT $1, $2, $3"
                " WHERE (SELECT count(*) FROM quota_slots WHERE subject = $1"
                " AND lease_until >= $4) < $5 RETURNING 1",
                subject, slot_id, lease_until, now, limit,
            )
        return taken is not None

    async def renew_quota_slots(
        self, subject: str, slot_ids: list[str], lease_until: float
    ) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "UPDATE quota_slots SET lease_until = $3 WHERE subject = $1"
                " AND slot_id = ANY($2::text[])",
                subject, slot_ids, lease_until,
            )

    async def release_quota_slots(self, subject: str, slot_ids: list[str]) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "DELETE FROM quota_slots WHERE subject = $1 AND slot_id = ANY($2::text[])",
                subject, slot_ids,
            )

    async def prune_quotas(self, now: float) -> None:
        async with self._conn() as conn:
            await conn.execute("DELETE FROM quota_counters WHERE expires_at < $1", now)
            await conn.execute("DELETE FROM quota_slots WHERE lease_until < $1", now)

    # usage ------------------------------------------------------------------------------
    async def usage_summary(self, query: UsageQuery) -> list[UsageTotals]:
        """Whole days from the daily sums (``usage_daily``), partial days from the tasks, in
        one repeatable-read transaction so a task ending meanwhile is counted once or not."""
        days, edges = whole_days(query)
        partials = []
        async with self._conn() as conn, conn.transaction(isolation="repeatable_read",
                                                          readonly=True):
            for edge in edges:
                sql, params = usage_sql(edge, _placeholder)
                partials += partials_of_rows(await conn.fetch(sql, *params))
            if days != (0, 0):
                sql, params = daily_sql(query, days, _placeholder)
                partials += partials_of_daily_rows(await conn.fetch(sql, *params))
        return fold(partials)
