"""DynamoDB store: the key design and how tasks, endpoints, API keys, push deliveries, backend
health and expressions become items.

Every task-table partition key starts with the caller's scope (``T#t#E#e#P#p``), with ``%`` and
``#`` escaped inside names, so no key can reach across tenants, endpoints or principals. The
layout is described in ``docs/dynamodb.md``; the tables themselves in ``dynamodb_schema.py``.
"""

from __future__ import annotations

import json
import zlib
from datetime import datetime
from typing import Any

from a2a.types import Task

from a2a_gateway.stores.base import (
    TERMINAL_STATES,
    ApiKey,
    Endpoint,
    EndpointHealth,
    PushDelivery,
    Scope,
    StoredTask,
    status_timestamp_us,
    utc_from_text,
    utc_text,
)

HEALTH_PK = "#health"
"""The tasks-table partition of the backend health items (sort key: the endpoint id); no scope
starts with ``#``, and the items carry no index attribute."""

QUOTA_COUNTER_PK = "#quota#"
"""Tasks-table partitions of the quota window counters (``#quota#<counter>``, sort key ``#``);
their ``expires_at`` is the window's end, so the table's TTL deletes them."""
QUOTA_SLOTS_PK = "#slots#"
"""Tasks-table partitions of the concurrency slots (``#slots#<subject>``, sort key ``#``): one
item per subject holding ``slots`` (slot id → lease end) and a ``version``."""

LEASE_SHARDS = 8
"""Fixed: the lease index partition of a task is ``crc32(key) % LEASE_SHARDS``."""

# -- keys and attribute values -------------------------------------------------------------------


def esc(part: str) -> str:
    """Escape the key separator so ``a#b`` as a tenant can never alias another scope."""
    return part.replace("%", "%25").replace("#", "%23")


def scope_key(scope: Scope) -> str:
    return f"T#{esc(scope.tenant)}#E#{esc(scope.endpoint_id)}#P#{esc(scope.principal)}"


def status_key(status_us: int, task_id: str) -> str:
    """Sorts by status time, then task id (fixed-width number, so string order is time order)."""
    return f"{max(status_us, 0):020d}#{task_id}"


def S(value: str) -> dict[str, str]:  # noqa: N802 - DynamoDB type letters
    return {"S": value}


def N(value: float) -> dict[str, str]:  # noqa: N802
    return {"N": repr(value) if isinstance(value, float) else str(value)}


class Expr:
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
        return f"(attribute_not_exists({expires_at}) OR {expires_at} > {self.v(N(int(now)))})"

    def not_terminal(self) -> str:
        states = ", ".join(self.v(N(int(s))) for s in sorted(TERMINAL_STATES))
        return f"NOT {self.n('state')} IN ({states})"

    def params(self, **kwargs: Any) -> dict[str, Any]:
        out = {k: v for k, v in kwargs.items() if v is not None}
        if self.names:
            out["ExpressionAttributeNames"] = self.names
        if self.values:
            out["ExpressionAttributeValues"] = self.values
        return out


def expired(item: dict[str, Any], now: float) -> bool:
    return "expires_at" in item and float(item["expires_at"]["N"]) <= now


def stored_from_item(item: dict[str, Any]) -> StoredTask:
    return StoredTask(
        task=Task.FromString(item["task"]["B"]),
        version=int(item["version"]["N"]),
        run_ref=item["run_ref"]["S"] if "run_ref" in item else None,
        run_state=json.loads(item["run_state"]["S"]),
        owner=item["owner"]["S"] if "owner" in item else None,
        lease_until=float(item["lease_until"]["N"]) if "lease_until" in item else None,
    )


def endpoint_item(endpoint: Endpoint) -> dict[str, Any]:
    return {
        "id": S(endpoint.id),
        "tenant": S(endpoint.tenant),
        "name": S(endpoint.name),
        "description": S(endpoint.description),
        "enabled": {"BOOL": endpoint.enabled},
        "card": S(json.dumps(endpoint.card)),
        "metadata": S(json.dumps(endpoint.metadata)),
        "created_at": S(endpoint.created_at.isoformat()),
        "updated_at": S(endpoint.updated_at.isoformat()),
    }


def endpoint_from_item(item: dict[str, Any]) -> Endpoint:
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


def api_key_item(key: ApiKey) -> dict[str, Any]:
    """Times are ISO text, not numbers: no TTL setting can ever delete a key item."""
    item = {
        "id": S(key.id),
        "endpoint_id": S(key.endpoint_id),
        "tenant": S(key.tenant),
        "principal": S(key.principal),
        "name": S(key.name),
        "key_hash": S(key.key_hash),
        "created_at": S(utc_text(key.created_at)),
    }
    if key.expires_at is not None:
        item["expires_at"] = S(utc_text(key.expires_at))
    if key.revoked_at is not None:
        item["revoked_at"] = S(utc_text(key.revoked_at))
    if key.limits:
        item["limits"] = S(json.dumps(key.limits))
    return item


def api_key_from_item(item: dict[str, Any]) -> ApiKey:
    def text(name: str) -> str | None:
        return item[name]["S"] if name in item else None

    return ApiKey(
        id=item["id"]["S"],
        endpoint_id=item["endpoint_id"]["S"],
        tenant=item["tenant"]["S"],
        principal=item["principal"]["S"],
        name=item["name"]["S"],
        key_hash=item["key_hash"]["S"],
        created_at=datetime.fromisoformat(item["created_at"]["S"]),
        expires_at=utc_from_text(text("expires_at")),
        revoked_at=utc_from_text(text("revoked_at")),
        limits=json.loads(item["limits"]["S"]) if "limits" in item else {},
    )


def task_sk(task_id: str) -> str:
    return f"TASK#{esc(task_id)}"


def lease_shard(pk: str, sk: str) -> str:
    return f"L{zlib.crc32(f'{pk}|{sk}'.encode()) % LEASE_SHARDS}"


def task_index_attrs(spk: str, task: Task) -> dict[str, Any]:
    """The attributes derived from the task that the list indexes are keyed on."""
    return {
        "task": {"B": task.SerializeToString()},
        "state": N(int(task.status.state)),
        "context_id": S(task.context_id),
        "status_key": S(status_key(status_timestamp_us(task), task.id)),
        "ctx_pk": S(f"{spk}#C#{esc(task.context_id)}"),
        "state_pk": S(f"{spk}#S#{int(task.status.state)}"),
    }



def due_shard(delivery_id: str) -> str:
    """The ``by_due`` index partition of a delivery (``D0``…``D7``)."""
    return f"D{zlib.crc32(delivery_id.encode()) % LEASE_SHARDS}"


def delivery_item(delivery: PushDelivery) -> dict[str, Any]:
    item = {
        "id": S(delivery.id),
        "tenant": S(delivery.scope.tenant),
        "endpoint_id": S(delivery.scope.endpoint_id),
        "principal": S(delivery.scope.principal),
        "task_id": S(delivery.task_id),
        "config_id": S(delivery.config_id),
        "body": {"B": delivery.body},
        "due_at": N(float(delivery.due_at)),
        "due_shard": S(due_shard(delivery.id)),
        "attempts": N(delivery.attempts),
    }
    if delivery.owner is not None:
        item["owner"] = S(delivery.owner)
    return item


def delivery_from_item(item: dict[str, Any]) -> PushDelivery:
    return PushDelivery(
        id=item["id"]["S"],
        scope=Scope(item["tenant"]["S"], item["endpoint_id"]["S"], item["principal"]["S"]),
        task_id=item["task_id"]["S"],
        config_id=item["config_id"]["S"],
        body=bytes(item["body"]["B"]),
        due_at=float(item["due_at"]["N"]),
        attempts=int(item["attempts"]["N"]),
        owner=item["owner"]["S"] if "owner" in item else None,
    )


def health_from_item(item: dict[str, Any]) -> EndpointHealth:
    def number(name: str) -> float | None:
        return float(item[name]["N"]) if name in item else None

    return EndpointHealth(
        successes=int(item.get("successes", {}).get("N", 0)),
        errors=int(item.get("errors", {}).get("N", 0)),
        last_success=number("last_success"),
        last_error=number("last_error"),
        last_error_message=item.get("last_error_message", {}).get("S", ""),
    )
