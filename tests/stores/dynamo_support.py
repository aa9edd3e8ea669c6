"""DynamoDB stores for tests, on a moto server (``A2A_TEST_DYNAMODB_ENDPOINT``).

Each test gets its own table prefix, so tests never see each other's items even
when several runs share one moto server; the tables are deleted afterwards.
Without the variable the tests skip, except in CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import quote

import pytest

from tests.harness import require_env

# moto accepts any credentials; explicit ones keep real AWS credentials out of tests.
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
REGION = "eu-central-1"


def moto_endpoint() -> str:
    return require_env("A2A_TEST_DYNAMODB_ENDPOINT")


def store_url(endpoint: str, prefix: str, **extra: object) -> str:
    query = f"region={REGION}&table_prefix={quote(prefix)}&endpoint_url={quote(endpoint, safe='')}"
    return "dynamodb://?" + "&".join([query, *(f"{k}={v}" for k, v in extra.items())])


def unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}-"


async def drop_tables(url: str) -> None:
    from a2a_gateway.stores.dynamodb import DynamoDBSettings, _client

    settings = DynamoDBSettings.from_url(url)

    def drop() -> None:
        client = _client(settings, CREDENTIALS)
        try:
            for name in (settings.endpoints_table, settings.tasks_table):
                try:
                    client.delete_table(TableName=name)
                except client.exceptions.ResourceNotFoundException:
                    pass
        finally:
            client.close()

    await asyncio.to_thread(drop)


@asynccontextmanager
async def open_test_store(request: pytest.FixtureRequest, **extra: object) -> AsyncIterator:
    """A ``DynamoDBStore`` on fresh tables; ``extra`` adds URL options (e.g. ``ttl_days=1``)."""
    from a2a_gateway.stores.dynamodb import DynamoDBStore, create_tables

    url = store_url(moto_endpoint(), unique_prefix(), **extra)
    await create_tables(url, **CREDENTIALS)
    store = await DynamoDBStore.open(url, **CREDENTIALS)
    try:
        yield store
    finally:
        await store.aclose()
        await drop_tables(url)
