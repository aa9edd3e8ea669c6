"""DynamoDB store: settings, the botocore client, error mapping, and the tables (``migrate``).

``DynamoDBSettings`` comes from the store URL (``dynamodb://?region=…&table_prefix=a2a-``).
``table_definitions`` is the schema — four tables, eight sparse indexes — that ``create_tables``
creates where missing and ``deploy/dynamodb/template.yaml`` mirrors as CloudFormation.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from a2a_gateway.stores.base import ConflictError, StoreError, StoreUnavailableError

RETRIABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ThrottlingException",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionInProgressException",
    }
)
LIST_PROJECTION = ["task", "expires_at", "state"]
ENDPOINT_PROJECTION = ["expires_at", "state", "context_id"]
"""``by_endpoint`` (operators' task list) carries no task: the page reads the tasks it shows."""

# -- usage ---------------------------------------------------------------------------------------
USAGE_INDEX = "by_usage_day"
"""The usage ledger's sparse index (``dynamodb_usage``): ended tasks with a usage record, by
the UTC day of their end and their end."""
USAGE_PROJECTION = [
    "tenant", "endpoint_id", "principal", "state", "expires_at", "usage_key_id",
    "usage_key_name", "started_us", "requests", "bytes_in", "bytes_out", "input_tokens",
    "output_tokens", "cost_micros", "currency",
]
"""What ``by_usage_day`` carries besides its keys: a summary reads the index alone."""


class MissingTableError(StoreError):
    """A table of the store does not exist: ``a2a-gateway migrate`` was not run (since the
    table was added)."""


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

    @property
    def api_keys_table(self) -> str:
        return f"{self.table_prefix}api_keys"

    @property
    def push_deliveries_table(self) -> str:
        return f"{self.table_prefix}push_deliveries"


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
    """``CreateTable`` arguments for every table (``deploy/dynamodb`` mirrors these)."""

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
                owner="S", lease_shard="S", lease_until="N", endpoint_id="S",
                usage_day="S", usage_end="N",
            ),
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "GlobalSecondaryIndexes": [
                _index("by_status", "pk", "status_key", LIST_PROJECTION),
                _index("by_context", "ctx_pk", "status_key", LIST_PROJECTION),
                _index("by_state", "state_pk", "status_key", LIST_PROJECTION),
                _index("by_owner", "owner", "sk", None),
                _index("by_lease", "lease_shard", "lease_until", None),
                _index("by_endpoint", "endpoint_id", "status_key", ENDPOINT_PROJECTION),
                _index(USAGE_INDEX, "usage_day", "usage_end", USAGE_PROJECTION),
            ],
        },
        {
            "TableName": settings.api_keys_table,
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": attrs(id="S"),
            "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
        },
        {
            "TableName": settings.push_deliveries_table,
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": attrs(id="S", due_shard="S", due_at="N"),
            "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
            "GlobalSecondaryIndexes": [_index("by_due", "due_shard", "due_at", None)],
        },
    ]


# -- audit ---------------------------------------------------------------------------------------

AUDIT_PK = "#audit"
"""The tasks-table partition of the audit log (sort key: ``audit_sort_key``); no scope starts with
``#``, and the items carry no index attribute. One partition: operators' changes are few, and a
page is one ``Query`` newest first."""


def audit_sort_key(at_us: int, entry_id: str = "") -> str:
    """Time first, zero-padded, so key order is time order (ties: the entry id)."""
    return f"{max(at_us, 0):020d}#{entry_id}" if entry_id else f"{max(at_us, 0):020d}"


def make_client(settings: DynamoDBSettings, credentials: dict[str, str]) -> Any:
    config = Config(
        max_pool_connections=settings.pool_size,
        retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts},
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
    )
    # botocore alone: boto3's session would add its resource layer and s3transfer to every
    # cold start (≈ 40–70 ms of CPU) for a client that is the same botocore client.
    session = botocore.session.get_session()
    return session.create_client("dynamodb", region_name=settings.region,
                                 endpoint_url=settings.endpoint_url, config=config, **credentials)


def client_credentials(options: dict[str, Any]) -> dict[str, str]:
    """Explicit credentials (tests, emulators); otherwise botocore's default chain."""
    names = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
    return {k: str(options.pop(k)) for k in names if options.get(k) is not None}


def map_errors(op: str, fn: Callable[[], Any]) -> Any:
    """One botocore call (retried by botocore), translating what it raises into store errors."""
    try:
        return fn()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "ConditionalCheckFailedException":
            raise
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in RETRIABLE_CODES or status >= 500:
            raise StoreUnavailableError(f"dynamodb {op}: {code or status} after retries") from exc
        if code == "ResourceNotFoundException":
            raise MissingTableError(
                f"dynamodb {op}: table missing (run `a2a-gateway migrate`)"
            ) from exc
        raise StoreError(f"dynamodb {op}: {code}") from exc
    except NoCredentialsError as exc:
        raise StoreError("dynamodb: no AWS credentials found") from exc
    except BotoCoreError as exc:
        raise StoreUnavailableError(f"dynamodb {op}: {type(exc).__name__}") from exc


def call_mapped(op: str, fn: Callable[[], Any]) -> Any:
    try:
        return map_errors(op, fn)
    except ClientError as exc:  # only a failed condition gets through map_errors
        raise ConflictError(f"dynamodb {op}: condition failed") from exc


# -- migrate -------------------------------------------------------------------------------------


async def create_tables(url: str, **options: Any) -> list[str]:
    """Create the tables, their indexes and the TTL setting where missing (idempotent);
    return what was created. Options: explicit AWS credentials, as for ``open()``."""
    settings = DynamoDBSettings.from_url(url)
    credentials = client_credentials(dict(options))
    return await asyncio.to_thread(
        map_errors, "create_tables", functools.partial(_create_tables, settings, credentials)
    )


def _create_tables(settings: DynamoDBSettings, credentials: dict[str, str]) -> list[str]:
    client = make_client(settings, credentials)
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
