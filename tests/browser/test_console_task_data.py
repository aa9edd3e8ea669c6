"""The console's task list and a task's raw data in headless Chromium against ``a2a-gateway
demo``: tasks that finished before the page opened are listed (from the admin API, not the
feed) and filtered by state and context, older ones a page at a time; the task page's raw
panel shows a streaming task's events as they arrive and an ended task's stored JSON, and a
``<script>`` in the task stays text there. Screenshots: tasks-finished, task-raw-events,
task-raw."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest
from a2a.types import TaskState
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.browser.support import send, send_each
from tests.browser.test_console import open_page, open_raw_panel, task_row_state, text_of, wait
from tests.support.messages import send_request

pytestmark = pytest.mark.timeout(300)


def content(driver: Any, element_id: str) -> str:
    """The element's whole text (a scrolled <pre> included), as the page holds it."""
    return driver.execute_script(
        "return document.getElementById(arguments[0]).textContent", element_id
    )


def listed(driver: Any) -> list[str]:
    return [
        row.get_attribute("data-task-id")
        for row in driver.find_elements(By.CSS_SELECTOR, "#tasks-table tbody tr")
    ]


def filter_tasks(driver: Any, *, state: str = "", context: str = "") -> None:
    Select(driver.find_element(By.ID, "filter-state")).select_by_value(state)
    field = driver.find_element(By.ID, "filter-context")
    field.clear()
    if context:
        field.send_keys(context)
    driver.find_element(By.ID, "filter-apply").click()


def reopen_tasks(driver: Any, base: str) -> None:
    """The tasks page loaded afresh (the list starts from the admin API again)."""
    driver.get("about:blank")
    open_page(driver, base, "tasks")


def show_raw_panel(driver: Any) -> None:
    """Scroll the raw panel into the screenshot."""
    driver.execute_script("document.getElementById('task-raw').scrollIntoView()")


def raw_events(driver: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in content(driver, "task-events").splitlines() if line]


def test_finished_tasks_are_listed_filtered_by_state_and_context_and_paged(
    gateway, browser, screenshot
):
    done = send(gateway, send_request("finished before the page opened"), streaming=False)[-1].task
    asked = send(gateway, send_request("waiting ?input"), streaming=False)[-1].task
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    reopen_tasks(browser, gateway)
    wait(
        browser,
        lambda d: task_row_state(d, done.id) == "completed",
        "the finished task in the list",
    )
    assert task_row_state(browser, asked.id) == "input-required"
    # it ended before the page opened: its start is not known, so no duration is made up
    cells = browser.find_elements(By.CSS_SELECTOR, f'#tasks-table tr[data-task-id="{done.id}"] td')
    assert cells[5].text == "–"

    filter_tasks(browser, state="completed")
    wait(
        browser,
        lambda d: done.id in listed(d) and asked.id not in listed(d),
        "only the completed task",
    )
    screenshot("tasks-finished")
    filter_tasks(browser, state="input-required")
    wait(browser, lambda d: listed(d) == [asked.id], "only the waiting task")
    filter_tasks(browser, context=done.context_id)
    wait(browser, lambda d: listed(d) == [done.id], "only the task of that context")

    answers = send_each(gateway, [send_request(f"task {i}") for i in range(50)], streaming=False)
    more = [events[-1].task.id for events in answers]
    reopen_tasks(browser, gateway)
    # a first page of the 50 newest, and the waiting task: the feed's snapshot of active tasks
    wait(browser, lambda d: set(listed(d)) == {*more, asked.id}, "the first page")
    wait(
        browser,
        lambda d: d.find_element(By.ID, "tasks-more").is_displayed(),
        "a button for older tasks",
    )
    browser.find_element(By.ID, "tasks-more").click()
    wait(browser, lambda d: len(listed(d)) == 52, "the older tasks")
    assert listed(browser)[-2:] == [asked.id, done.id]
    wait(browser, lambda d: not d.find_element(By.ID, "tasks-more").is_displayed(), "no more pages")


def watch_streaming_task(
    driver: Any, base: str, text: str
) -> tuple[str, threading.Thread, list[Any]]:
    """Start ``text`` streaming from the a2a-sdk client (its own context, which the list is
    filtered to) and open its task page while it runs; (task id, caller thread, its events)."""
    context = str(uuid.uuid4())
    reopen_tasks(driver, base)
    filter_tasks(driver, context=context)
    wait(driver, lambda d: text_of(d, "feed-status") == "live", "the feed connected")
    events: list[Any] = []
    caller = threading.Thread(target=lambda: events.extend(
        send(base, send_request(text, context_id=context), streaming=True)))
    caller.start()
    link = wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#tasks-table a.task-link"),
        "the task's row",
    )[0]
    task_id = link.text
    link.click()
    wait(driver, lambda d: text_of(d, "task-state") == "working", "the running task's page")
    open_raw_panel(driver)
    return task_id, caller, events


def test_the_raw_panel_shows_a_streaming_tasks_events_then_its_stored_json(
    gateway, browser, screenshot
):
    words = " ".join(f"word{i}" for i in range(120))  # 0.05 s a word: about 6 s of streaming
    task_id, caller, events = watch_streaming_task(browser, gateway, words)
    try:
        assert not browser.find_element(By.ID, "task-stored").is_displayed()  # not while it runs
        wait(
            browser,
            lambda d: len([e for e in raw_events(d) if "artifactUpdate" in e]) >= 3,
            "chunks as they came",
        )
        assert text_of(browser, "task-state") == "working"
        show_raw_panel(browser)
        screenshot("task-raw-events")
        wait(browser, lambda d: text_of(d, "task-state") == "completed", "the task completed")
    finally:
        caller.join(60)
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    raw = raw_events(browser)
    assert raw[0]["task"]["id"] == task_id
    assert raw[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    chunks = "".join(
        p["text"]
        for e in raw
        if "artifactUpdate" in e
        for p in e["artifactUpdate"]["artifact"]["parts"]
    )
    assert chunks.startswith("echo: word0") and len([e for e in raw if "artifactUpdate" in e]) > 3

    wait(browser, lambda d: d.find_element(By.ID, "task-stored").is_displayed(), "the stored task")
    stored = json.loads(content(browser, "task-json"))
    assert stored["id"] == task_id and stored["status"]["state"] == "TASK_STATE_COMPLETED"
    assert stored["history"][0]["parts"][0]["text"] == words
    assert stored["artifacts"][0]["parts"][0]["text"] == f"echo: {words}"
    show_raw_panel(browser)
    screenshot("task-raw")


def test_a_script_in_a_task_stays_text_in_the_raw_panel(gateway, browser, screenshot):
    payload = (
        '<script>window.__xss=1;alert(1)</script><img src=x onerror="window.__xss=2;alert(2)">'
    )
    words = " ".join(f"w{i}" for i in range(60))
    task_id, caller, _ = watch_streaming_task(browser, gateway, f"{payload} {words}")
    try:
        wait(
            browser,
            lambda d: "<script>window.__xss=1" in content(d, "task-events"),
            "the payload in the raw events",
        )
        wait(browser, lambda d: text_of(d, "task-state") == "completed", "the task completed")
    finally:
        caller.join(60)
    wait(browser, lambda d: d.find_element(By.ID, "task-stored").is_displayed(), "the stored task")
    stored = json.loads(content(browser, "task-json"))
    assert stored["history"][0]["parts"][0]["text"] == f"{payload} {words}"
    assert stored["artifacts"][0]["parts"][0]["text"] == f"echo: {payload} {words}"
    assert "<script>window.__xss=1;alert(1)</script><img src=x" in text_of(
        browser, "task-json"
    )  # shown as text
    assert browser.execute_script("return window.__xss") is None
    assert browser.find_elements(By.CSS_SELECTOR, "main img, main script") == []
    # the page's own scripts only (one file per console page): none came from the payload
    scripts = browser.find_elements(By.TAG_NAME, "script")
    assert scripts and all(
        (s.get_attribute("src") or "").startswith(f"{gateway}/console/static/") for s in scripts
    )
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - reading it is what raises
    show_raw_panel(browser)
    screenshot("task-raw-xss")
