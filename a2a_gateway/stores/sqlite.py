"""SQLite store (``sqlite:///path``): the embedded default, one file, WAL mode.

The schema comes from ``migrations/sqlite/NNNN_*.sql``, applied on open and tracked
with ``PRAGMA user_version``, so an older file is upgraded when it is opened. Tasks and
push configs are stored as serialized protobuf; the columns beside them exist for
filtering and ordering.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import aiosqlite
from a2a.types import Task, TaskPushNotificationConfig

from a2a_gateway.stores.audit_pages import audit_cursor, audit_page, json_or_none, time_bounds_us
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
from a2a_gateway.stores.migrations import migration_files
from a2a_gateway.stores.page_token import decode_page_token, encode_page_token, endpoint_task_page
from a2a_gateway.stores.sql_rows import RowReader
from a2a_gateway.stores.sqlite_batches import BatchedConnection
from a2a_gateway.stores.usage_rows import (
    USAGE_COLUMNS,
    fold,
    partials_of_rows,
    usage_sql,
    usage_values,
)

_SCOPE = "tenant = ? AND endpoint_id = ? AND principal = ?"
_SET_USAGE = ", ".join(f"{column} = ?" for column in USAGE_COLUMNS)
"""A task write sets the ledger's columns: a record at the terminal write, NULLs before."""
WAL_AUTOCHECKPOINT_PAGES = 4000


ROWS = RowReader(time=datetime.fromisoformat, json=json.loads)
"""SQLite holds ISO timestamps and JSON as text."""


def url_options(url: str) -> dict[str, Any]:
    """The options in a ``sqlite:///`` URL's query: ``synchronous`` (``NORMAL`` or ``FULL``)
    and ``wal_autocheckpoint`` (pages), e.g. ``sqlite:///./a.db?synchronous=FULL``."""
    options: dict[str, Any] = {}
    for key, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if key == "synchronous":
            options["synchronous"] = value
        elif key == "wal_autocheckpoint" and value.isdigit():
            options["wal_autocheckpoint_pages"] = int(value)
        else:
            raise StoreError(f"unknown SQLite store option {key}={value!r}"
                             " (synchronous=NORMAL|FULL, wal_autocheckpoint=<pages>)")
    return options


def _audit_entry(row: sqlite3.Row) -> AuditEntry:
    before, after = row["before"], row["after"]
    return AuditEntry(
        id=row["id"],
        at=audit_time(row["at_us"]),
        actor=row["actor"],
        action=row["action"],
        target=row["target"],
        before=json.loads(before) if before is not None else None,
        after=json.loads(after) if after is not None else None,
        details=json.loads(row["details"]),
    )


class SQLiteStore(Store):
    def __init__(self, conn: aiosqlite.Connection, page_token_key: bytes | None = None) -> None:
        self._db = conn
        self._batched = BatchedConnection(conn)
        self.applied_migrations: list[str] = []
        self._token_key = page_token_key

    @classmethod
    async def open(
        cls,
        path: str,
        page_token_key: bytes | None = None,
        *,
        synchronous: str = "NORMAL",
        wal_autocheckpoint_pages: int = WAL_AUTOCHECKPOINT_PAGES,
    ) -> SQLiteStore:
        """``synchronous``: ``NORMAL`` keeps every answered write through a crash of the
        process (it is in the WAL file) but may lose the writes since the last checkpoint to a
        power loss or OS crash; ``FULL`` syncs the WAL at every commit (one fsync per group).
        ``wal_autocheckpoint_pages``: WAL size that starts a checkpoint (SQLite's default is
        1,000 pages; fewer checkpoints copy each hot page less often)."""
        if path != ":memory:" and not Path(path).parent.is_dir():
            raise StoreError(f"the directory of the SQLite database {path} does not exist")
        if synchronous.upper() not in ("NORMAL", "FULL"):
            raise StoreError(f"SQLite synchronous must be NORMAL or FULL, not {synchronous!r}")
        try:
            conn = await aiosqlite.connect(path, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the SQLite database {path}: {exc}") from None
        try:
            conn.row_factory = aiosqlite.Row
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
            await conn.execute(f"PRAGMA wal_autocheckpoint={int(wal_autocheckpoint_pages)}")
            await conn.execute("PRAGMA busy_timeout=5000")
            store = cls(conn, page_token_key)
            store.applied_migrations = await store.migrate()
        except BaseException as exc:
            await conn.close()  # else its thread keeps the process alive
            if isinstance(exc, sqlite3.Error):  # not a database, a broken file, a read-only one
                raise StoreError(f"cannot open the SQLite database {path}: {exc}") from None
            raise
        return store

    async def migrate(self) -> list[str]:
        """Apply the SQLite migrations not yet applied; return their names."""
        async with self._db.execute("PRAGMA user_version") as cur:
            (current,) = await cur.fetchone()
        applied = []
        for number, name, sql in migration_files("sqlite"):
            if number <= current:
                continue
            await self._db.executescript(f"BEGIN;\n{sql}\nPRAGMA user_version = {number};\nCOMMIT;")
            applied.append(name)
        return applied

    async def aclose(self) -> None:
        await self._db.close()

    async def ping(self) -> None:
        try:
            await self._db.execute("SELECT 1")
        except Exception as exc:  # aiosqlite raises sqlite3 and ValueError alike
            raise StoreUnavailableError("sqlite store is not usable") from exc

    # endpoints -------------------------------------------------------------
    async def create_endpoint(self, endpoint: Endpoint) -> None:
        try:
            await self._db.execute(
                "INSERT INTO endpoints (id, tenant, name, description, enabled, card, metadata,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    endpoint.id,
                    endpoint.tenant,
                    endpoint.name,
                    endpoint.description,
                    int(endpoint.enabled),
                    json.dumps(endpoint.card),
                    json.dumps(endpoint.metadata),
                    endpoint.created_at.isoformat(),
                    endpoint.updated_at.isoformat(),
                ),
            )
        except aiosqlite.IntegrityError as exc:
            raise ConflictError(f"endpoint {endpoint.id} exists") from exc

    async def update_endpoint(self, endpoint: Endpoint) -> None:
        cur = await self._db.execute(
            "UPDATE endpoints SET tenant = ?, name = ?, description = ?, enabled = ?, card = ?,"
            " metadata = ?, updated_at = ? WHERE id = ?",
            (
                endpoint.tenant,
                endpoint.name,
                endpoint.description,
                int(endpoint.enabled),
                json.dumps(endpoint.card),
                json.dumps(endpoint.metadata),
                endpoint.updated_at.isoformat(),
                endpoint.id,
            ),
        )
        if cur.rowcount == 0:
            raise KeyError(endpoint.id)

    async def delete_endpoint(self, endpoint_id: str) -> bool:
        cur = await self._db.execute("DELETE FROM endpoints WHERE id = ?", (endpoint_id,))
        return cur.rowcount > 0

    async def get_endpoint(self, endpoint_id: str) -> Endpoint | None:
        rows = await self._db.execute_fetchall(
            "SELECT * FROM endpoints WHERE id = ?", (endpoint_id,)
        )
        return ROWS.endpoint(rows[0]) if rows else None

    async def list_endpoints(self) -> list[Endpoint]:
        async with self._db.execute("SELECT * FROM endpoints ORDER BY created_at, id") as cur:
            return [ROWS.endpoint(r) for r in await cur.fetchall()]

    # API keys --------------------------------------------------------------
    async def create_api_key(self, key: ApiKey) -> None:
        try:
            await self._db.execute(
                "INSERT INTO api_keys (id, endpoint_id, tenant, principal, name, key_hash,"
                " created_at, expires_at, revoked_at, limits)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key.id,
                    key.endpoint_id,
                    key.tenant,
                    key.principal,
                    key.name,
                    key.key_hash,
                    utc_text(key.created_at),
                    utc_text(key.expires_at) if key.expires_at else None,
                    utc_text(key.revoked_at) if key.revoked_at else None,
                    json.dumps(key.limits),
                ),
            )
        except aiosqlite.IntegrityError as exc:
            raise ConflictError(f"API key {key.id} exists") from exc

    async def get_api_key(self, key_id: str) -> ApiKey | None:
        if not storable_key_id(key_id):
            return None
        rows = await self._batched.read("SELECT * FROM api_keys WHERE id = ?", (key_id,))
        return ROWS.api_key(rows[0]) if rows else None

    async def list_api_keys(self, endpoint_id: str | None = None) -> list[ApiKey]:
        rows = await self._db.execute_fetchall(
            "SELECT * FROM api_keys WHERE ? IS NULL OR endpoint_id = ? ORDER BY created_at, id",
            (endpoint_id, endpoint_id),
        )
        return [ROWS.api_key(r) for r in rows]

    async def revoke_api_key(self, key_id: str, revoked_at: datetime) -> bool:
        if not storable_key_id(key_id):
            return False
        cur = await self._db.execute(
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?",
            (utc_text(revoked_at), key_id),
        )
        return cur.rowcount == 1

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
        try:
            await self._batched.write(
                "INSERT INTO tasks (tenant, endpoint_id, principal, id, context_id, state,"
                " status_us, version, task, run_ref, run_state, owner, lease_until,"
                f" {', '.join(USAGE_COLUMNS)})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?"
                f"{', ?' * len(USAGE_COLUMNS)})",
                (
                    *scope.as_tuple(),
                    task.id,
                    task.context_id,
                    int(task.status.state),
                    status_timestamp_us(task),
                    task.SerializeToString(),
                    run_ref,
                    json.dumps(run_state or {}),
                    owner,
                    lease_until,
                    *usage_values(usage),
                ),
            )
        except aiosqlite.IntegrityError as exc:
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
        terminal = task.status.state in TERMINAL_STATES
        written = await self._batched.write(
            "UPDATE tasks SET context_id = ?, state = ?, status_us = ?, version = version + 1,"
            " task = ?, run_ref = COALESCE(?, run_ref), run_state = COALESCE(?, run_state),"
            f" owner = ?, lease_until = ?, {_SET_USAGE} WHERE {_SCOPE} AND id = ?"
            f" AND version = ? AND {NOT_TERMINAL_SQL}",
            (
                task.context_id,
                int(task.status.state),
                status_timestamp_us(task),
                task.SerializeToString(),
                run_ref,
                json.dumps(run_state) if run_state is not None else None,
                None if terminal else owner,
                None if terminal else lease_until,
                *usage_values(usage),
                *scope.as_tuple(),
                task.id,
                expected_version,
            ),
        )
        if written.rowcount != 1:
            raise ConflictError(f"task {task.id} changed, is terminal or is missing")
        return expected_version + 1

    async def get_task(self, scope: Scope, task_id: str) -> StoredTask | None:
        rows = await self._batched.read(
            f"SELECT * FROM tasks WHERE {_SCOPE} AND id = ?", (*scope.as_tuple(), task_id)
        )
        return ROWS.stored_task(rows[0]) if rows else None

    async def list_active_tasks(self, endpoint_id: str, limit: int) -> list[tuple[Scope, Task]]:
        async with self._db.execute(
            "SELECT tenant, principal, task FROM tasks WHERE endpoint_id = ?"
            f" AND {NOT_TERMINAL_SQL}"
            " ORDER BY status_us DESC, id DESC LIMIT ?",
            [endpoint_id, limit],
        ) as cur:
            rows = await cur.fetchall()
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
        where, args = ["endpoint_id = ?"], [endpoint_id]
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args += sorted(states)
        if context_id:
            where.append("context_id = ?")
            args.append(context_id)
        if page_token:
            status_us, task_id = decode_page_token(page_token, key=self._token_key)
            where.append("(status_us < ? OR (status_us = ? AND id < ?))")
            args += [status_us, status_us, task_id]
        async with self._db.execute(
            f"SELECT tenant, principal, id, status_us, task FROM tasks WHERE {' AND '.join(where)}"
            " ORDER BY status_us DESC, id DESC LIMIT ?",
            [*args, page_size + 1],
        ) as cur:
            rows = await cur.fetchall()
        return endpoint_task_page(rows, endpoint_id, page_size, self._token_key)

    async def list_tasks(self, scope: Scope, query: TaskQuery) -> TaskPage:
        where, args = [_SCOPE], list(scope.as_tuple())
        if query.context_id:
            where.append("context_id = ?")
            args.append(query.context_id)
        if query.state:
            where.append("state = ?")
            args.append(int(query.state))
        if query.status_after_us is not None:
            where.append("status_us >= ?")
            args.append(query.status_after_us)
        filters = " AND ".join(where)
        async with self._db.execute(f"SELECT COUNT(*) FROM tasks WHERE {filters}", args) as cur:
            (total,) = await cur.fetchone()
        page_where, page_args = filters, list(args)
        if query.page_token:
            status_us, task_id = decode_page_token(query.page_token, key=self._token_key)
            page_where += " AND (status_us < ? OR (status_us = ? AND id < ?))"
            page_args += [status_us, status_us, task_id]
        async with self._db.execute(
            f"SELECT id, status_us, task FROM tasks WHERE {page_where}"
            " ORDER BY status_us DESC, id DESC LIMIT ?",
            [*page_args, query.page_size + 1],
        ) as cur:
            rows = await cur.fetchall()
        page = rows[: query.page_size]
        token = ""
        if len(rows) > query.page_size:
            token = encode_page_token(page[-1]["status_us"], page[-1]["id"], key=self._token_key)
        return TaskPage([Task.FromString(r["task"]) for r in page], token, total)

    # push configs ------------------------------------------------------------
    async def put_push_config(self, scope: Scope, config: TaskPushNotificationConfig) -> None:
        await self._batched.write(
            "INSERT OR REPLACE INTO push_configs (tenant, endpoint_id, principal, task_id, id,"
            " config) VALUES (?, ?, ?, ?, ?, ?)",
            (*scope.as_tuple(), config.task_id, config.id, config.SerializeToString()),
        )

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> TaskPushNotificationConfig | None:
        rows = await self._batched.read(
            f"SELECT config FROM push_configs WHERE {_SCOPE} AND task_id = ? AND id = ?",
            (*scope.as_tuple(), task_id, config_id),
        )
        return TaskPushNotificationConfig.FromString(rows[0]["config"]) if rows else None

    async def list_push_configs(
        self, scope: Scope, task_id: str
    ) -> list[TaskPushNotificationConfig]:
        rows = await self._batched.read(
            f"SELECT config FROM push_configs WHERE {_SCOPE} AND task_id = ? ORDER BY id",
            (*scope.as_tuple(), task_id),
        )
        return [TaskPushNotificationConfig.FromString(r["config"]) for r in rows]

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> None:
        await self._batched.write(
            f"DELETE FROM push_configs WHERE {_SCOPE} AND task_id = ? AND id = ?",
            (*scope.as_tuple(), task_id, config_id),
        )

    # push delivery outbox --------------------------------------------------------
    async def add_push_deliveries(self, deliveries: list[PushDelivery]) -> None:
        try:
            await self._batched.write_many(
                "INSERT INTO push_deliveries (id, tenant, endpoint_id, principal, task_id,"
                " config_id, body, due_at, attempts, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (d.id, *d.scope.as_tuple(), d.task_id, d.config_id, d.body, d.due_at,
                     d.attempts, d.owner)
                    for d in deliveries
                ],
            )
        except aiosqlite.IntegrityError as exc:
            raise ConflictError("a push delivery with this id exists") from exc

    async def claim_push_deliveries(
        self, owner: str, now: float, claim_until: float, limit: int = 100
    ) -> list[PushDelivery]:
        # one statement: the claim is atomic, whoever else looks at the same rows
        written = await self._batched.write(
            "UPDATE push_deliveries SET owner = ?, due_at = ?, attempts = attempts + 1"
            " WHERE id IN (SELECT id FROM push_deliveries WHERE due_at <= ?"
            " ORDER BY due_at LIMIT ?) RETURNING *",
            (owner, claim_until, now, limit),
        )
        return [ROWS.delivery(r) for r in written.rows]  # all due at claim_until now: any order

    async def retry_push_delivery(
        self, delivery_id: str, owner: str, attempts: int, due_at: float
    ) -> None:
        await self._batched.write(
            "UPDATE push_deliveries SET owner = NULL, due_at = ?"
            " WHERE id = ? AND owner = ? AND attempts = ?",
            (due_at, delivery_id, owner, attempts),
        )

    async def delete_push_delivery(self, delivery_id: str) -> None:
        await self._db.execute("DELETE FROM push_deliveries WHERE id = ?", (delivery_id,))

    # contexts ------------------------------------------------------------------
    async def get_context(self, scope: Scope, context_id: str) -> Context | None:
        rows = await self._batched.read(
            f"SELECT turns, session FROM contexts WHERE {_SCOPE} AND context_id = ?",
            (*scope.as_tuple(), context_id),
        )
        if not rows:
            return None
        row = rows[0]
        return Context(turns=json.loads(row["turns"]), session=json.loads(row["session"]))

    async def put_context(self, scope: Scope, context_id: str, context: Context) -> None:
        await self._batched.write(
            "INSERT OR REPLACE INTO contexts (tenant, endpoint_id, principal, context_id, turns,"
            " session) VALUES (?, ?, ?, ?, ?, ?)",
            (*scope.as_tuple(), context_id, json.dumps(context.turns), json.dumps(context.session)),
        )

    # backend health --------------------------------------------------------------
    async def record_backend_health(self, endpoint_id: str, change: EndpointHealth) -> None:
        await self._batched.write(
            "INSERT INTO backend_health (endpoint_id, successes, errors, last_success, last_error,"
            " last_error_message) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (endpoint_id) DO UPDATE SET"
            " successes = successes + excluded.successes, errors = errors + excluded.errors,"
            " last_success = max(coalesce(last_success, excluded.last_success),"
            " coalesce(excluded.last_success, last_success)),"
            " last_error_message = CASE WHEN excluded.last_error > coalesce(last_error, -1)"
            " THEN excluded.last_error_message ELSE last_error_message END,"
            " last_error = max(coalesce(last_error, excluded.last_error),"
            " coalesce(excluded.last_error, last_error))",
            (
                endpoint_id,
                change.successes,
                change.errors,
                change.last_success,
                change.last_error,
                change.last_error_message,
            ),
        )

    async def list_backend_health(self) -> dict[str, EndpointHealth]:
        rows = await self._batched.read("SELECT * FROM backend_health")
        return {
            r["endpoint_id"]: EndpointHealth(
                r["successes"],
                r["errors"],
                r["last_success"],
                r["last_error"],
                r["last_error_message"],
            )
            for r in rows
        }

    # audit ------------------------------------------------------------------------------
    async def append_audit_entry(self, entry: AuditEntry) -> None:
        try:
            await self._db.execute(
                "INSERT INTO audit_log (id, at_us, actor, action, target, before, after, details)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    entry.id,
                    audit_time_us(entry.at),
                    entry.actor,
                    entry.action,
                    entry.target,
                    json_or_none(entry.before),
                    json_or_none(entry.after),
                    json.dumps(entry.details, sort_keys=True),
                ),
            )
        except aiosqlite.IntegrityError as exc:
            raise ConflictError(f"audit entry {entry.id} exists") from exc

    async def list_audit_entries(self, query: AuditQuery) -> AuditPage:
        cursor = audit_cursor(query, self._token_key)
        since, until = time_bounds_us(query)
        where, params = ["1 = 1"], []
        for column, value in (("action", query.action), ("target", query.target),
                              ("actor", query.actor)):
            if value:
                where.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            where.append("at_us >= ?")
            params.append(since)
        if until is not None:
            where.append("at_us < ?")
            params.append(until)
        if cursor is not None:
            where.append("(at_us < ? OR (at_us = ? AND id < ?))")
            params += [cursor[0], cursor[0], cursor[1]]
        rows = await self._batched.read(
            f"SELECT * FROM audit_log WHERE {' AND '.join(where)}"
            " ORDER BY at_us DESC, id DESC LIMIT ?",
            (*params, query.page_size + 1),
        )
        return audit_page([_audit_entry(r) for r in rows], query.page_size, self._token_key)

    async def prune_audit_entries(self, older_than: datetime) -> int:
        written = await self._batched.write(
            "DELETE FROM audit_log WHERE at_us < ? RETURNING id", (audit_time_us(older_than),)
        )
        return len(written.rows)

    # leases ----------------------------------------------------------------------
    async def renew_leases(self, owner: str, task_ids: list[str], lease_until: float) -> None:
        if not task_ids:
            return
        marks = ",".join("?" * len(task_ids))
        await self._batched.write(
            f"UPDATE tasks SET lease_until = ? WHERE owner = ? AND id IN ({marks})"
            f" AND {NOT_TERMINAL_SQL}",
            (lease_until, owner, *task_ids),
        )

    async def claim_expired_tasks(
        self, owner: str, now: float, lease_until: float, limit: int = 100
    ) -> list[ClaimedTask]:
        # one statement: the claim is atomic, whoever else looks at the same rows
        written = await self._batched.write(
            "UPDATE tasks SET owner = ?, lease_until = ?, version = version + 1 WHERE rowid IN"
            " (SELECT rowid FROM tasks WHERE owner IS NOT NULL AND lease_until < ?"
            f" AND {NOT_TERMINAL_SQL} LIMIT ?) RETURNING *",
            (owner, lease_until, now, limit),
        )
        return [
            ClaimedTask(Scope(r["tenant"], r["endpoint_id"], r["principal"]), ROWS.stored_task(r))
            for r in written.rows
        ]

    # usage ------------------------------------------------------------------------------
    async def usage_summary(self, query: UsageQuery) -> list[UsageTotals]:
        sql, params = usage_sql(query, lambda _: "?")
        return fold(partials_of_rows(await self._batched.read(sql, params)))

    # quotas ------------------------------------------------------------------------
    async def set_api_key_limits(self, key_id: str, limits: dict[str, int | float]) -> bool:
        if not storable_key_id(key_id):
            return False
        written = await self._batched.write(
            "UPDATE api_keys SET limits = ? WHERE id = ?", (json.dumps(limits), key_id)
        )
        return written.rowcount == 1

    async def count_quota(self, counter: str, limit: int, expires_at: float) -> bool:
        # one statement: the writer is serialized, so the condition and the add are atomic
        written = await self._batched.write(
            "INSERT INTO quota_counters (counter, count, expires_at) SELECT ?, 1, ? WHERE ? > 0"
            " ON CONFLICT (counter) DO UPDATE SET count = count + 1 WHERE count < ?",
            (counter, expires_at, limit, limit),
        )
        return written.rowcount == 1

    async def uncount_quota(self, counter: str) -> None:
        await self._batched.write(
            "UPDATE quota_counters SET count = count - 1 WHERE counter = ? AND count > 0",
            (counter,),
        )

    async def take_quota_slot(
        self, subject: str, slot_id: str, limit: int, now: float, lease_until: float
    ) -> bool:
        written = await self._batched.write(
            "INSERT INTO quota_slots (subject, slot_id, lease_until) SELECT ?, ?, ?"
            " WHERE (SELECT count(*) FROM quota_slots WHERE subject = ? AND lease_until >= ?) < ?",
            (subject, slot_id, lease_until, subject, now, limit),
        )
        return written.rowcount == 1

    async def renew_quota_slots(
        self, subject: str, slot_ids: list[str], lease_until: float
    ) -> None:
        await self._batched.write_many(
            "UPDATE quota_slots SET lease_until = ? WHERE subject = ? AND slot_id = ?",
            [(lease_until, subject, slot_id) for slot_id in slot_ids],
        )

    async def release_quota_slots(self, subject: str, slot_ids: list[str]) -> None:
        await self._batched.write_many(
            "DELETE FROM quota_slots WHERE subject = ? AND slot_id = ?",
            [(subject, slot_id) for slot_id in slot_ids],
        )

    async def prune_quotas(self, now: float) -> None:
        await self._batched.write("DELETE FROM quota_counters WHERE expires_at < ?", (now,))
        await self._batched.write("DELETE FROM quota_slots WHERE lease_until < ?", (now,))

