"""The console's usage page in headless Chromium against ``a2a-gateway demo``: after tasks on a
priced endpoint, the page shows that endpoint's row (tasks, outcomes, cost as money in its
currency) and a bar for today in the chart per day, and the caller filter narrows the table.
The page is kept as a screenshot."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.types import TaskState
from selenium.webdriver.common.by import By

from tests.browser.support import OPERATOR_KEY, WAIT_SECONDS, send
from tests.browser.test_console import open_page, wait
from tests.support.messages import send_request

pytestmark = pytest.mark.timeout(300)

AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}


def priced_endpoint(gateway: str) -> str:
    made = httpx.post(f"{gateway}/admin/api/endpoints", headers=AS_OPERATOR, timeout=WAIT_SECONDS,
                      json={"name": "priced echo", "handler": "handlers.echo:EchoHandler",
                            "public": True, "settings": {"delay": 0},
                            "cost": {"currency": "EUR", "per_task": 0.25}})
    assert made.status_code == 201, made.text
    return made.json()["endpoint"]["id"]


def test_the_usage_page_shows_tasks_and_cost_per_endpoint_and_day(gateway, browser, screenshot):
    endpoint_id = priced_endpoint(gateway)
    for n in range(3):
        [*_, last] = send(gateway, send_request(f"bill me {n}"), streaming=False,
                          endpoint_id=endpoint_id)
        assert last.task.status.state == TaskState.TASK_STATE_COMPLETED

    open_page(browser, gateway, "usage")
    row = f'#usage-table tr[data-endpoint="{endpoint_id}"]'
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the priced endpoint's row")
    cells = {name: browser.find_element(By.CSS_SELECTOR, f"{row} td.{name}").text
             for name in ("endpoint", "principal", "tasks", "cost")}
    assert cells["endpoint"] == "priced echo" and cells["principal"] == "anonymous"
    assert cells["tasks"] == "3"
    assert "0.75" in cells["cost"] and ("€" in cells["cost"] or "EUR" in cells["cost"]), cells
    completed = browser.find_elements(By.CSS_SELECTOR, f"{row} svg rect.outcome-completed")
    assert completed and float(completed[0].get_attribute("width")) > 0

    bars = browser.find_elements(By.CSS_SELECTOR, "#usage-chart rect.usage-bar")
    assert len(bars) == 30  # the last 30 days, today included
    today = bars[-1]
    assert int(today.get_attribute("data-tasks")) >= 3 and float(today.get_attribute("height")) > 0
    assert "tasks" in today.find_element(By.TAG_NAME, "title").get_attribute("textContent")
    screenshot("usage")

    browser.find_element(By.ID, "usage-principal").send_keys("nobody-at-all")
    browser.find_element(By.ID, "usage-apply").click()

    def emptied(driver: Any) -> bool:
        return not driver.find_elements(By.CSS_SELECTOR, row) and driver.find_element(
            By.ID, "usage-empty").is_displayed()

    wait(browser, emptied, "the caller filter to empty the table")
    assert browser.find_element(By.ID, "usage-page-error").text == ""
