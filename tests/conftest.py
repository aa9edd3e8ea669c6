"""Shared fixtures: a running gateway on the memory store with an echo endpoint, and an
HTTP client for raw calls to it.

Tests that need a service skip when it is not configured; under CI (``CI=true``, set by
.ci/run, which starts every service) a skip is turned into a failure, so none can pass
silently there.

Property-based tests run half their examples without ``CI=true`` (a Hypothesis profile for
those that take the default count, ``tests.support.examples.examples(n)`` for those that set
their own): a developer's run without services is long enough as it is, and CI's run (with
every service and ``CI=true``) still tries every example. The operator fuzz
(test_fuzz_operator.py) keeps its full count: with half, its admin API surface never
generates a request that creates something (no 201), which that test requires.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import settings

from tests.stores.dynamo_support import stop_local_moto
from tests.support.examples import examples, full_run
from tests.support.harness import RunningGateway, running_gateway

if not full_run():  # with CI=true Hypothesis loads its own "ci" profile, as before
    settings.register_profile("half", max_examples=examples(settings.default.max_examples))
    settings.load_profile("half")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every service runs: {report.longrepr}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_local_moto()  # the run's own moto server, when no A2A_TEST_DYNAMODB_ENDPOINT was given


@pytest.fixture
async def gw() -> AsyncIterator[RunningGateway]:
    async with running_gateway() as running:
        yield running


@pytest.fixture
async def echo_id(gw: RunningGateway) -> str:
    return await gw.add_endpoint("handlers.echo:EchoHandler", settings={"delay": 0.0}, name="echo")


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client
