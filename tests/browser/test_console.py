"""The operator console in headless Chromium against ``a2a-gateway demo``: log in, see the
demo endpoint, watch a task streamed by the a2a-sdk client appear, stream its text and
complete, cancel a task from the page, create an endpoint from the form and disable it (its
card answers 404), create a key and see it listed without its secret, and a message that is
an XSS payload stay text. Each page is kept as a screenshot."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from a2a.types import TaskState
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.support import DEMO_ENDPOINT_ID, OPERATOR_KEY, WAIT_SECONDS, send
from tests.support.messages import send_request

pytestmark = pytest.mark.timeout(300)


def wait(driver: Any, condition: Any, what: str) -> Any:
    """``condition``'s first truthy value (pages re-render: a stale element is tried again)."""
    return WebDriverWait(
        driver,
        WAIT_SECONDS,
        poll_frequency=0.1,
        ignored_exceptions=[StaleElementReferenceException],
    ).until(condition, message=what)


def text_of(driver: Any, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def open_page(driver: Any, base: str, page: str) -> None:
    """The console at ``#/<page>``, logged in."""
    driver.get(f"{base}/console#/{page}")
    wait(
        driver,
        lambda d: d.execute_script("return document.body.dataset.page || ''"),
        "the console to start",
    )
    if driver.execute_script("return document.body.dataset.page") == "login-page":
        field = driver.find_element(By.ID, "login-key")
        field.clear()
        field.send_keys(OPERATOR_KEY)
        driver.find_element(By.ID, "login-submit").click()
    wanted = "task-page" if page.startswith("task/") else f"{page}-page"
    wait(
        driver,
        lambda d: d.execute_script("return document.body.dataset.page") == wanted,
        f"the {page} page",
    )


def open_raw_panel(driver: Any) -> None:
    """Open the task page's collapsible raw A2A events panel (unless it is open)."""
    if not driver.find_element(By.ID, "task-raw").get_attribute("open"):
        driver.find_element(By.CSS_SELECTOR, "#task-raw summary").click()
    wait(
        driver,
        lambda d: d.find_element(By.ID, "task-events").is_displayed(),
        "the raw events panel open",
    )


def task_row_state(driver: Any, task_id: str) -> str:
    rows = driver.find_elements(
        By.CSS_SELECTOR, f'#tasks-table tr[data-task-id="{task_id}"] td.state'
    )
    return rows[0].text if rows else ""


def endpoint_row(driver: Any, endpoint_id: str) -> Any:
    return driver.find_element(
        By.CSS_SELECTOR, f'#endpoints-table tr[data-endpoint-id="{endpoint_id}"]'
    )


def test_log_in_and_see_the_demo_endpoint(gateway, browser, screenshot):
    browser.get(f"{gateway}/console")
    wait(browser, lambda d: d.find_element(By.ID, "login-page").is_displayed(), "the login page")
    screenshot("login")
    browser.find_element(By.ID, "login-key").send_keys("not-the-operator-key")
    browser.find_element(By.ID, "login-submit").click()
    wait(browser, lambda d: text_of(d, "login-error"), "the refused login's error")
    assert browser.find_element(By.ID, "login-page").is_displayed()

    open_page(browser, gateway, "endpoints")
    wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-endpoint-id="{DEMO_ENDPOINT_ID}"]'),
        "the demo endpoint's row",
    )
    row = endpoint_row(browser, DEMO_ENDPOINT_ID)
    assert "Echo demo" in row.text and "handlers.echo:EchoHandler" in row.text
    assert row.find_element(By.CSS_SELECTOR, "td.enabled").text == "yes"
    card = row.find_element(By.LINK_TEXT, "card").get_attribute("href")
    assert card == f"{gateway}/{DEMO_ENDPOINT_ID}/.well-known/agent-card.json"
    screenshot("endpoints")


def test_a_task_streamed_by_another_client_appears_streams_its_text_and_completes(
    gateway, browser, screenshot
):
    open_page(browser, gateway, "tasks")
    words = " ".join(f"word{i}" for i in range(120))  # 0.05 s a word: about 6 s of streaming
    events: list[Any] = []
    caller = threading.Thread(
        target=lambda: events.extend(send(gateway, send_request(words), streaming=True))
    )
    caller.start()
    try:
        link = wait(
            browser,
            lambda d: d.find_elements(By.CSS_SELECTOR, "#tasks-table a.task-link"),
            "the task's row",
        )[0]
        task_id = link.text
        assert task_row_state(browser, task_id) in ("submitted", "working")
        screenshot("tasks")
        link.click()
        wait(
            browser,
            lambda d: d.execute_script("return document.body.dataset.page") == "task-page",
            "the task page",
        )
        partial = wait(browser, lambda d: text_of(d, "task-text"), "the first streamed words")
        state_then = text_of(browser, "task-state")
        screenshot("task-streaming")
        wait(
            browser,
            lambda d: text_of(d, "task-state") == "completed",
            "the task completed on its page",
        )
    finally:
        caller.join(WAIT_SECONDS)
    assert events and events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert events[0].task.id == task_id
    assert (
        state_then == "working"
        and partial.startswith("echo: word0")
        and len(partial) < len(f"echo: {words}")
    )
    wait(browser, lambda d: text_of(d, "task-text") == f"echo: {words}", "the whole text")
    timeline = [
        li.get_attribute("data-state")
        for li in browser.find_elements(By.CSS_SELECTOR, "#task-timeline li")
    ]
    assert timeline[-2:] == ["working", "completed"]
    assert f"user: {words}" in text_of(browser, "task-history")
    open_raw_panel(browser)
    raw = [line for line in text_of(browser, "task-events").splitlines() if line]
    assert len([line for line in raw if '"artifactUpdate"' in line]) > 1  # chunks, as they came
    screenshot("task")

    open_page(browser, gateway, "tasks")
    wait(
        browser,
        lambda d: task_row_state(d, task_id) == "completed",
        "the completed task in the list",
    )


def test_cancel_a_task_from_its_page(gateway, browser, screenshot):
    asked = send(gateway, send_request("cancel me ?input"), streaming=False)[-1].task
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    open_page(browser, gateway, "tasks")
    wait(
        browser,
        lambda d: task_row_state(d, asked.id) == "input-required",
        "the waiting task in the list",
    )
    browser.find_element(By.LINK_TEXT, asked.id).click()
    wait(browser, lambda d: text_of(d, "task-state") == "input-required", "the task page")
    browser.find_element(By.ID, "task-cancel").click()
    wait(browser, lambda d: text_of(d, "task-state") == "canceled", "the task canceled")
    screenshot("task-canceled")
    answer = httpx.get(
        f"{gateway}/admin/api/endpoints/{DEMO_ENDPOINT_ID}/tasks/{asked.id}?principal=anonymous",
        headers={"Authorization": f"Bearer {OPERATOR_KEY}"},
        timeout=WAIT_SECONDS,
    )
    assert answer.json()["state"] == "TASK_STATE_CANCELED"
    assert not browser.find_element(By.ID, "task-cancel").is_enabled()


def test_create_an_endpoint_from_the_form_and_disable_it(gateway, browser, screenshot):
    open_page(browser, gateway, "endpoints")
    browser.find_element(By.ID, "endpoint-name").send_keys("made in the browser")
    settings = browser.find_element(By.ID, "endpoint-settings")
    settings.clear()
    settings.send_keys('{"no_such_setting": 1}')
    browser.find_element(By.ID, "endpoint-create").click()
    wait(
        browser,
        lambda d: "unknown setting no_such_setting" in text_of(d, "endpoint-problems"),
        "the problem shown",
    )
    settings.clear()
    settings.send_keys('{"delay": 0}')
    browser.find_element(By.ID, "endpoint-public").click()
    browser.find_element(By.ID, "endpoint-create").click()
    endpoint_id = wait(
        browser,
        lambda d: [
            r.get_attribute("data-endpoint-id")
            for r in d.find_elements(By.CSS_SELECTOR, "#endpoints-table tbody tr")
            if "made in the browser" in r.text
        ],
        "the new endpoint's row",
    )[0]
    card_url = f"{gateway}/{endpoint_id}/.well-known/agent-card.json"
    assert httpx.get(card_url, timeout=WAIT_SECONDS).status_code == 200
    assert (
        send(gateway, send_request("hi"), streaming=False, endpoint_id=endpoint_id)[
            -1
        ].task.status.state
        == TaskState.TASK_STATE_COMPLETED
    )

    endpoint_row(browser, endpoint_id).find_element(By.CSS_SELECTOR, "button.toggle").click()
    wait(
        browser,
        lambda d: (
            endpoint_row(d, endpoint_id).find_element(By.CSS_SELECTOR, "td.enabled").text == "no"
        ),
        "the endpoint shown disabled",
    )
    WebDriverWait(None, WAIT_SECONDS, poll_frequency=0.2).until(
        lambda _: httpx.get(card_url, timeout=WAIT_SECONDS).status_code == 404,
        message="the disabled card's 404",
    )
    screenshot("endpoint-disabled")


def test_create_a_key_and_see_it_listed_without_its_secret(gateway, browser, screenshot):
    open_page(browser, gateway, "endpoints")
    wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-endpoint-id="{DEMO_ENDPOINT_ID}"]'),
        "the demo endpoint's row",
    )
    endpoint_row(browser, DEMO_ENDPOINT_ID).find_element(By.CSS_SELECTOR, "button.keys").click()
    wait(browser, lambda d: d.find_element(By.ID, "keys-panel").is_displayed(), "the keys panel")
    browser.find_element(By.ID, "key-principal").send_keys("browser-bob")
    browser.find_element(By.ID, "key-name").send_keys("made in the browser")
    browser.find_element(By.ID, "key-create").click()
    key = wait(browser, lambda d: text_of(d, "new-key"), "the new key, shown once")
    assert key.startswith("a2agw_")
    key_id = key.split("_")[1]
    row = wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'#keys-table tr[data-key-id="{key_id}"]'),
        "the key's row",
    )[0]
    assert (
        "browser-bob" in row.text and row.find_element(By.CSS_SELECTOR, "td.state").text == "active"
    )
    assert (
        row.find_element(By.CSS_SELECTOR, "td.expires").text == "never"
    )  # made without expiresDays
    assert "Expires" in [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#keys-table th")]
    browser.find_element(By.ID, "key-principal").send_keys("browser-carol")
    browser.find_element(By.ID, "key-expires-days").send_keys("30")
    browser.find_element(By.ID, "key-create").click()
    dated = wait(browser, lambda d: [r for r in d.find_elements(By.CSS_SELECTOR, "#keys-table tr")
                                     if "browser-carol" in r.text], "the key that expires")[0]
    expires = datetime.fromisoformat(dated.find_element(By.CSS_SELECTOR, "td.expires").text)
    assert 29 < (expires - datetime.now(UTC)).total_seconds() / 86400 <= 30
    assert key not in text_of(browser, "keys-table")
    screenshot("key-created")

    endpoint_row(browser, DEMO_ENDPOINT_ID).find_element(By.CSS_SELECTOR, "button.keys").click()
    wait(
        browser,
        lambda d: not d.find_element(By.ID, "new-key-box").is_displayed(),
        "the key no longer shown",
    )
    wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'#keys-table tr[data-key-id="{key_id}"]'),
        "the listed key",
    )
    secret = key.removeprefix(f"a2agw_{key_id}_")  # may hold "_" itself (URL-safe base64)
    assert key not in browser.page_source and secret not in browser.page_source
    screenshot("keys")


def test_a_keys_limits_are_set_at_creation_shown_and_changed(gateway, browser, screenshot):
    open_page(browser, gateway, "endpoints")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR,
                                            f'tr[data-endpoint-id="{DEMO_ENDPOINT_ID}"]'),
         "the demo endpoint's row")
    endpoint_row(browser, DEMO_ENDPOINT_ID).find_element(By.CSS_SELECTOR, "button.keys").click()
    wait(browser, lambda d: d.find_element(By.ID, "keys-panel").is_displayed(), "the keys panel")
    browser.find_element(By.ID, "key-principal").send_keys("limited-dave")
    browser.find_element(By.ID, "key-limits").send_keys("tasks_per_minute=5, cost_per_day=2.5")
    browser.find_element(By.ID, "key-create").click()
    key_id = wait(browser, lambda d: text_of(d, "new-key"), "the new key").split("_")[1]

    def row() -> Any:
        return wait(browser, lambda d: d.find_elements(
            By.CSS_SELECTOR, f'#keys-table tr[data-key-id="{key_id}"]'), "the key's row")[0]

    def limits_shown() -> str:
        return row().find_element(By.CSS_SELECTOR, "td.limits").text

    wait(browser, lambda d: limits_shown() == "tasks_per_minute=5 cost_per_day=2.5",
         "the limits it was made with")

    def stored() -> dict[str, Any]:
        keys = httpx.get(f"{gateway}/admin/api/endpoints/{DEMO_ENDPOINT_ID}/keys",
                         headers={"Authorization": f"Bearer {OPERATOR_KEY}"}).json()["keys"]
        return next(k["limits"] for k in keys if k["id"] == key_id)

    def save(text: str) -> None:
        row().find_element(By.CSS_SELECTOR, "button.edit-limits").click()
        field = row().find_element(By.CSS_SELECTOR, "input.limits-input")
        field.clear()
        field.send_keys(text)
        row().find_element(By.CSS_SELECTOR, "button.save-limits").click()

    save("concurrent_tasks=0")  # refused by the gateway, naming the field; nothing written
    wait(browser, lambda d: "limits.concurrent_tasks" in text_of(d, "endpoints-error"),
         "the refusal naming the limit")
    assert stored() == {"tasks_per_minute": 5, "cost_per_day": 2.5}
    screenshot("key-limits-refused")
    save("concurrent_tasks=2 tasks_per_day=100")
    wait(browser, lambda d: limits_shown() == "concurrent_tasks=2 tasks_per_day=100",
         "the changed limits")
    assert stored() == {"concurrent_tasks": 2, "tasks_per_day": 100}
    assert text_of(browser, "endpoints-error") == ""
    screenshot("key-limits")

    # an endpoint's limits (all its callers together): set in the form's JSON box, shown in its row
    browser.find_element(By.ID, "endpoint-name").send_keys("limited in the browser")
    settings = browser.find_element(By.ID, "endpoint-settings")
    settings.clear()
    settings.send_keys('{"delay": 0, "limits": {"tasks_per_hour": 0}}')
    browser.find_element(By.ID, "endpoint-create").click()
    wait(browser, lambda d: "limits.tasks_per_hour" in text_of(d, "endpoint-problems"),
         "the malformed limit named")
    settings.clear()
    settings.send_keys('{"delay": 0, "limits": {"tasks_per_hour": 30}}')
    browser.find_element(By.ID, "endpoint-create").click()
    wait(browser, lambda d: [r for r in d.find_elements(By.CSS_SELECTOR, "#endpoints-table tr")
                             if "limited in the browser" in r.text
                             and "tasks_per_hour=30" in r.text], "the endpoint's limits shown")
    browser.execute_script("window.scrollTo(0, 0)")
    screenshot("endpoint-limits")


def test_an_xss_payload_in_a_message_stays_text(gateway, browser, screenshot):
    payload = (
        '<img src=x onerror="window.__xss=1;alert(1)"><script>window.__xss=2;alert(2)</script>'
    )
    open_page(browser, gateway, "tasks")  # the list shows what the feed announces from now on
    wait(browser, lambda d: text_of(d, "feed-status") == "live", "the feed connected")
    task = send(gateway, send_request(payload), streaming=False)[-1].task
    wait(browser, lambda d: d.find_elements(By.LINK_TEXT, task.id), "the task's row")
    browser.find_element(By.LINK_TEXT, task.id).click()
    wait(browser, lambda d: text_of(d, "task-state") == "completed", "the task page")
    wait(
        browser,
        lambda d: text_of(d, "task-text") == f"echo: {payload}",
        "the payload shown as text",
    )
    assert payload in text_of(browser, "task-history")
    assert browser.execute_script("return window.__xss") is None
    assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
    scripts = [s.get_attribute("src") for s in browser.find_elements(By.TAG_NAME, "script")]
    assert f"{gateway}/console/static/console.js" in scripts
    assert all(s.startswith(f"{gateway}/console/static/") for s in scripts)  # none inline
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - reading it is what raises
    screenshot("task-xss")
