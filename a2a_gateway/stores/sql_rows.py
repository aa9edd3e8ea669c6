"""Rows of the SQL stores (PostgreSQL, SQLite) as the store contract's records.

The two drivers differ only in how a value comes back: asyncpg gives datetimes and decoded
JSON, SQLite ISO text and JSON text. A ``RowReader`` is told which, and reads every table the
same way for both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from a2a.types import Task

from a2a_gateway.stores.base import ApiKey, Endpoint, PushDelivery, Scope, StoredTask


@dataclass(frozen=True, slots=True)
class RowReader:
    time: Callable[[Any], datetime]
    """A non-NULL timestamp column as an aware UTC datetime."""
    json: Callable[[Any], Any]
    """A JSON column as Python values."""

    def _optional_time(self, value: Any) -> datetime | None:
        return None if value is None else self.time(value)

    def endpoint(self, row: Mapping[str, Any]) -> Endpoint:
        return Endpoint(
            id=row["id"],
            tenant=row["tenant"],
            name=row["name"],
            description=row["description"],
            enabled=bool(row["enabled"]),
            card=self.json(row["card"]),
            metadata=self.json(row["metadata"]),
            created_at=self.time(row["created_at"]),
            updated_at=self.time(row["updated_at"]),
        )

    def api_key(self, row: Mapping[str, Any]) -> ApiKey:
        return ApiKey(
            id=row["id"],
            endpoint_id=row["endpoint_id"],
            tenant=row["tenant"],
            principal=row["principal"],
            name=row["name"],
            key_hash=row["key_hash"],
            created_at=self.time(row["created_at"]),
            expires_at=self._optional_time(row["expires_at"]),
            revoked_at=self._optional_time(row["revoked_at"]),
            limits=self.json(row["limits"]),
        )

    def stored_task(self, row: Mapping[str, Any]) -> StoredTask:
        return StoredTask(
            task=Task.FromString(row["task"]),
            version=row["version"],
            run_ref=row["run_ref"],
            run_state=self.json(row["run_state"]),
            owner=row["owner"],
            lease_until=row["lease_until"],
        )

    def delivery(self, row: Mapping[str, Any]) -> PushDelivery:
        return PushDelivery(
            id=row["id"],
            scope=Scope(row["tenant"], row["endpoint_id"], row["principal"]),
            task_id=row["task_id"],
            config_id=row["config_id"],
            body=row["body"],
            due_at=row["due_at"],
            attempts=row["attempts"],
            owner=row["owner"],
        )
