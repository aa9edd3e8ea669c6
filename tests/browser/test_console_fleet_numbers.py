"""The numbers page's "This replica / Whole fleet" switch, in headless Chromium: two
``a2a-gateway demo`` processes sharing a Redis (``A2A_TEST_REDIS_URL``, a key prefix of the
module's own), sent 2 and 3 requests. On replica alpha's page "This replica" counts 2; "Whole
fleet" counts 5, says which replicas answered and draws each one's p95; back to "This
replica", 2 again. A gateway without Redis does not offer the switch. Kept as a screenshot."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from a2a_gateway.live.redis import open_redis
from tests.browser.support import DEMO_ENDPOINT_ID, OPERATOR_KEY, gateway_process, send
from tests.browser.test_console import open_page, text_of, wait
from tests.support.harness import require_env
from tests.support.messages import send_request

pytestmark = pytest.mark.timeout(300)

ROW = f'#numbers-table tr[data-endpoint-id="{DEMO_ENDPOINT_ID}"]'


async def delete_keys(url: str, prefix: str) -> None:
    redis = open_redis(url)
    try:
        keys = await redis.keys(f"{prefix}*")
        if keys:
            await redis.delete(*keys)
    finally:
        await redis.aclose()


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[str, str]]:
    """Replicas alpha and beta (``demo``, memory stores) sharing the test Redis; their URLs."""
    url, prefix = require_env("A2A_TEST_REDIS_URL"), f"t{uuid.uuid4().hex[:8]}:"
    env = {"A2A_GATEWAY_OPERATOR_KEYS": OPERATOR_KEY, "A2A_GATEWAY_REDIS_URL": url,
           "A2A_GATEWAY_REDIS_PREFIX": prefix, "A2A_GATEWAY_STATS_INTERVAL_SECONDS": "0.5"}
    try:
        with gateway_process("demo", "--store", "memory://", A2A_GATEWAY_REPLICA_ID="alpha",
                             **env) as alpha, \
                gateway_process("demo", "--store", "memory://", A2A_GATEWAY_REPLICA_ID="beta",
                                **env) as beta:
            yield alpha, beta
    finally:
        asyncio.run(delete_keys(url, prefix))


def counted(driver: Any) -> int | None:
    cells = driver.find_elements(By.CSS_SELECTOR, f"{ROW} .requests-total")
    return int(cells[0].text) if cells and cells[0].text.isdigit() else None


def choose(driver: Any, scope: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f'input[name="numbers-scope"][value="{scope}"]').click()


@pytest.mark.redis
def test_the_switch_shows_the_whole_fleets_counts_and_who_answered(fleet, browser, screenshot):
    alpha, beta = fleet
    for base, count in ((alpha, 2), (beta, 3)):
        for n in range(count):
            send(base, send_request(f"count me {n}"), streaming=False)

    open_page(browser, alpha, "numbers")
    wait(browser, lambda d: counted(d) == 2, "alpha's own requests")
    assert browser.find_element(By.ID, "numbers-scope").is_displayed()
    assert "replica alpha" in text_of(browser, "numbers-status")
    assert text_of(browser, "numbers-answered") == ""

    choose(browser, "fleet")
    wait(browser, lambda d: counted(d) == 5, "alpha's and beta's requests summed")
    wait(browser, lambda d: text_of(d, "numbers-answered") == "2 replicas answered: alpha, beta",
         "which replicas answered")
    assert "whole fleet" in text_of(browser, "numbers-status")
    titles = [p.find_element(By.TAG_NAME, "title").get_attribute("textContent")
              for p in browser.find_elements(By.CSS_SELECTOR, "#latency-chart path")]
    assert titles == ["alpha p95", "beta p95"]
    legend = browser.find_element(By.CSS_SELECTOR, "#latency-chart .legend").text
    assert "alpha" in legend and "beta" in legend and "over 3 requests" in legend
    assert "completed 5" in browser.find_element(By.CSS_SELECTOR, f"{ROW} .outcomes-total").text
    screenshot("numbers-fleet")

    choose(browser, "replica")
    wait(browser, lambda d: counted(d) == 2 and "replica alpha" in text_of(d, "numbers-status"),
         "alpha's own requests again")
    assert text_of(browser, "numbers-answered") == ""


def test_without_redis_the_switch_is_not_offered(gateway, browser):
    open_page(browser, gateway, "numbers")
    wait(browser, lambda d: "replica" in text_of(d, "numbers-status"), "the numbers drawn")
    assert not browser.find_element(By.ID, "numbers-scope").is_displayed()
