"""DynamoDB stores for tests, on a moto server: ``A2A_TEST_DYNAMODB_ENDPOINT`` when given (CI's,
.ci/services/05-moto.sh), else one the test run starts itself (``moto_server.py``, moto comes
with the ``test`` extra) the first time a test needs it, and stops when the run ends.

Each test gets its own table prefix, so tests never see each other's items even
when several runs share one moto server; the tables are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

# moto accepts any credentials; explicit ones keep real AWS credentials out of tests.
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
REGION = "eu-central-1"
ENV_VAR = "A2A_TEST_DYNAMODB_ENDPOINT"


class LocalMoto:
    """``moto_server.py`` as a child process of the test run (not a thread of it: moto's
    work stays off the event loops under test)."""

    def __init__(self) -> None:
        self._log = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("moto_server.py"))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        assert self._process.stdout is not None
        port = self._process.stdout.readline().strip()  # printed once it accepts connections
        if not port.isdigit():
            self._log.seek(0)
            output = self._log.read().decode(errors="replace")[-2000:]
            self.stop()
            raise RuntimeError(f"moto_server.py did not start: {output}")
        self.url = f"http://127.0.0.1:{int(port)}"

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        assert self._process.stdout is not None
        self._process.stdout.close()
        self._log.close()


_local: list[LocalMoto] = []
_starting = threading.Lock()


def moto_endpoint() -> str:
    """The moto server's URL: the given one, else the run's own (started on the first call)."""
    if given := os.environ.get(ENV_VAR):
        return given
    with _starting:
        if not _local:
            _local.append(LocalMoto())
        return _local[0].url


def stop_local_moto() -> None:
    """Stops the run's own moto server, if one was started."""
    while _local:
        _local.pop().stop()


def store_url(endpoint: str, prefix: str, **extra: object) -> str:
    query = f"region={REGION}&table_prefix={quote(prefix)}&endpoint_url={quote(endpoint, safe='')}"
    return "dynamodb://?" + "&".join([query, *(f"{k}={v}" for k, v in extra.items())])


def unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}-"


async def drop_tables(url: str) -> None:
    from a2a_gateway.stores.dynamodb import DynamoDBSettings, _client, table_definitions

    settings = DynamoDBSettings.from_url(url)

    def drop() -> None:
        client = _client(settings, CREDENTIALS)
        try:
            for name in (d["TableName"] for d in table_definitions(settings)):
                try:
                    client.delete_table(TableName=name)
                except client.exceptions.ResourceNotFoundException:
                    pass
        finally:
            client.close()

    await asyncio.to_thread(drop)


def use_moto_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway opening a ``dynamodb://`` URL itself goes through boto3's default chain:
    give that chain moto's dummy credentials and nothing else."""
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CREDENTIALS["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", CREDENTIALS["aws_secret_access_key"])
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@asynccontextmanager
async def fresh_tables(**extra: object) -> AsyncIterator[str]:
    """The URL of new tables under a prefix of their own, dropped afterwards; ``extra`` adds
    URL options (e.g. ``ttl_days=1``)."""
    from a2a_gateway.stores.dynamodb import create_tables

    url = store_url(moto_endpoint(), unique_prefix(), **extra)
    await create_tables(url, **CREDENTIALS)
    try:
        yield url
    finally:
        await drop_tables(url)


@asynccontextmanager
async def open_test_store(request: pytest.FixtureRequest, **extra: object) -> AsyncIterator:
    """A ``DynamoDBStore`` on fresh tables; ``extra`` adds URL options (e.g. ``ttl_days=1``)."""
    from a2a_gateway.stores.dynamodb import DynamoDBStore

    async with fresh_tables(**extra) as url:
        store = await DynamoDBStore.open(url, **CREDENTIALS)
        try:
            yield store
        finally:
            await store.aclose()
