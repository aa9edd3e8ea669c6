"""The operator console across replicas, in headless Chromium: two ``a2a-gateway serve``
processes on one PostgreSQL database, the console open on replica A while the tasks run on
replica B. A's page lists B's task, streams its text as it is made and shows its raw events;
a task on B is canceled from A's page; an endpoint disabled on A's page is 404 on B at once
(the endpoint cache is an hour long, so only the database's notification can do it).
Kept as screenshots."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.types import TaskState
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.support import OPERATOR_KEY, WAIT_SECONDS, gateway_process, get_task, send
from tests.browser.test_console import (
    endpoint_row,
    open_page,
    open_raw_panel,
    task_row_state,
    text_of,
    wait,
)
from tests.stores.pg_support import fresh_database
from tests.support.cli_process import run_cli
from tests.support.messages import send_request

pytestmark = pytest.mark.timeout(300)

AN_HOUR = 3600


class Replicas:
    def __init__(self, a: str, b: str, endpoint_id: str) -> None:
        self.a, self.b, self.endpoint_id = a, b, endpoint_id


@pytest.fixture(scope="module")
def replicas() -> Iterator[Replicas]:
    """Replicas A and B (``serve``, console on, one session secret and operator key) on a
    fresh migrated PostgreSQL database holding one public echo endpoint, 0.1 s a word."""
    loop = asyncio.new_event_loop()  # the database's admin connection lives on it
    database = fresh_database(template=None)
    try:
        url = loop.run_until_complete(
            database.__aenter__()
        )  # skips without PostgreSQL (fails under CI)
    except BaseException:
        loop.close()
        raise
    try:
        run_cli("migrate", "--store", url, check=True)
        added = run_cli("endpoints", "add", "--store", url, "--name", "Replica echo", "--handler",
                        "handlers.echo:EchoHandler", "--public", "--set", "delay=0.1", check=True)
        endpoint_id = added.stdout.strip().splitlines()[-1]
        env = {
            "A2A_GATEWAY_CONSOLE": "true",
            "A2A_GATEWAY_CONSOLE_SESSION_SECRET": "shared-" + OPERATOR_KEY,
            "A2A_GATEWAY_OPERATOR_KEYS": OPERATOR_KEY,
            "A2A_GATEWAY_ENDPOINT_CACHE_SECONDS": str(AN_HOUR),
            # a follower on A polls the store only every 30 s: what streams in came live from B
            "A2A_GATEWAY_REMOTE_POLL_SECONDS": "30",
        }
        with gateway_process("serve", "--store", url, A2A_GATEWAY_REPLICA_ID="a", **env) as a, \
                gateway_process("serve", "--store", url, A2A_GATEWAY_REPLICA_ID="b", **env) as b:
            yield Replicas(a, b, endpoint_id)
    finally:
        loop.run_until_complete(database.__aexit__(None, None, None))
        loop.close()


def start_streaming(base: str, endpoint_id: str, text: str) -> tuple[threading.Thread, list[Any]]:
    """A streaming SendMessage by the a2a-sdk client in a thread; its events as they end up."""
    events: list[Any] = []
    caller = threading.Thread(
        target=lambda: events.extend(
            send(base, send_request(text), streaming=True, endpoint_id=endpoint_id)
        )
    )
    caller.start()
    return caller, events


def open_live_tasks(driver: Any, base: str) -> None:
    open_page(driver, base, "tasks")
    wait(driver, lambda d: text_of(d, "feed-status") == "live", "the feed connected")


def working_task_link(driver: Any) -> Any:
    """The link of the first task listed as working (the earlier tests' tasks have ended)."""
    def working(d: Any) -> Any:
        return [link for link in d.find_elements(By.CSS_SELECTOR, "#tasks-table a.task-link")
                if task_row_state(d, link.text) == "working"]
    return wait(driver, working, "the running task's row, working")[0]


def test_a_task_on_replica_b_is_listed_and_streams_live_on_replica_a(replicas, browser, screenshot):
    open_live_tasks(browser, replicas.a)
    words = " ".join(f"word{i}" for i in range(100))  # 0.1 s a word: about 10 s of streaming
    full = f"echo: {words}"
    caller, events = start_streaming(replicas.b, replicas.endpoint_id, words)
    try:
        link = working_task_link(browser)
        task_id = link.text
        link.click()
        wait(browser, lambda d: text_of(d, "task-state") == "working", "the task page, working")
        shown: list[str] = []
        deadline = time.monotonic() + WAIT_SECONDS
        while text_of(browser, "task-state") == "working" and time.monotonic() < deadline:
            text = text_of(browser, "task-text")
            if text and (not shown or text != shown[-1]):
                shown.append(text)
                if len(shown) == 3:
                    screenshot("replicas-task-live")
            time.sleep(0.2)
    finally:
        caller.join(WAIT_SECONDS)
    assert events and events[0].task.id == task_id
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    partial = [text for text in shown if text != full]
    assert len(partial) >= 3, f"the text grew in {len(partial)} steps on A's page: {partial}"
    assert all(text.startswith("echo: word0") and full.startswith(text) for text in partial)
    assert all(len(before) < len(after) for before, after in zip(partial, partial[1:]))
    wait(
        browser, lambda d: text_of(d, "task-state") == "completed", "the task completed on A's page"
    )
    wait(browser, lambda d: text_of(d, "task-text") == full, "the whole echo on A's page")
    open_raw_panel(browser)
    raw = [line for line in text_of(browser, "task-events").splitlines() if line]
    assert len([line for line in raw if '"artifactUpdate"' in line]) > 1
    assert '"TASK_STATE_COMPLETED"' in raw[-1]
    open_live_tasks(browser, replicas.a)
    wait(
        browser,
        lambda d: task_row_state(d, task_id) == "completed",
        "the completed task in A's list",
    )
    print(f"the text of B's task grew in {len(partial)} steps on A's page")


def test_a_task_on_replica_b_is_canceled_from_replica_a(replicas, browser, screenshot):
    open_live_tasks(browser, replicas.a)
    words = " ".join(f"w{i}" for i in range(600))  # a minute of streaming unless canceled
    caller, events = start_streaming(replicas.b, replicas.endpoint_id, words)
    try:
        link = working_task_link(browser)
        task_id = link.text
        link.click()
        wait(browser, lambda d: text_of(d, "task-state") == "working", "the task page, working")
        wait(
            browser,
            lambda d: text_of(d, "task-text").startswith("echo: w0"),
            "the text streaming in",
        )
        browser.find_element(By.ID, "task-cancel").click()
        wait(
            browser,
            lambda d: text_of(d, "task-state") == "canceled",
            "the task canceled on A's page",
        )
        screenshot("replicas-canceled")
    finally:
        caller.join(WAIT_SECONDS)
    assert not caller.is_alive(), "the caller's stream on B did not end"
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    assert get_task(replicas.b, task_id, endpoint_id=replicas.endpoint_id).status.state == \
        TaskState.TASK_STATE_CANCELED
    assert len(text_of(browser, "task-text")) < len(f"echo: {words}")
    assert not browser.find_element(By.ID, "task-cancel").is_enabled()
    open_live_tasks(browser, replicas.a)
    wait(
        browser, lambda d: task_row_state(d, task_id) == "canceled", "the canceled task in A's list"
    )


def test_an_endpoint_disabled_on_replica_a_is_404_on_replica_b_at_once(replicas, browser):
    card_on_b = f"{replicas.b}/{replicas.endpoint_id}/.well-known/agent-card.json"
    assert (
        httpx.get(card_on_b, timeout=WAIT_SECONDS).status_code == 200
    )  # B now holds the row for an hour
    open_page(browser, replicas.a, "endpoints")
    row = wait(
        browser,
        lambda d: d.find_elements(
            By.CSS_SELECTOR, f'tr[data-endpoint-id="{replicas.endpoint_id}"]'
        ),
        "the endpoint's row on A",
    )[0]
    assert row.find_element(By.CSS_SELECTOR, "td.enabled").text == "yes"
    row.find_element(By.CSS_SELECTOR, "button.toggle").click()
    wait(
        browser,
        lambda d: (
            endpoint_row(d, replicas.endpoint_id).find_element(By.CSS_SELECTOR, "td.enabled").text
            == "no"
        ),
        "the endpoint shown disabled on A",
    )
    WebDriverWait(None, WAIT_SECONDS, poll_frequency=0.2).until(
        lambda _: httpx.get(card_on_b, timeout=WAIT_SECONDS).status_code == 404,
        message="the card's 404 on B",
    )
