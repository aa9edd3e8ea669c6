"""The console's new-endpoint form in headless Chromium against ``a2a-gateway demo`` on a
SQLite store (so the test reads the rows it makes): the OpenAI chat handler picked from the
list gets a field per setting (placeholders, help text); a secret typed as such is refused
before sending and nothing is written; with ``env:NAME`` the gateway's own check answers (a
bad timeout shown next to its field), then the endpoint is created with exactly the settings
entered; the echo handler with every field left empty is created with its defaults and
answers. Kept as screenshots (``endpoint-form-*``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from a2a.types import TaskState
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from a2a_gateway.stores import open_store
from a2a_gateway.stores.base import Endpoint
from tests.browser.support import OPERATOR_KEY, gateway_process, send
from tests.browser.test_console import open_page, text_of, wait
from tests.support.messages import send_request

pytestmark = pytest.mark.timeout(300)

CHAT = "handlers.openai_chat:OpenAIChatHandler"
ECHO = "handlers.echo:EchoHandler"


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('form') / 'gateway.db'}"


@pytest.fixture(scope="module")
def gateway(store_url: str) -> Iterator[str]:
    with gateway_process("demo", "--store", store_url,
                         A2A_GATEWAY_OPERATOR_KEYS=OPERATOR_KEY) as base:
        yield base


def rows_named(store_url: str, name: str) -> list[Endpoint]:
    async def read() -> list[Endpoint]:
        store = await open_store(store_url)
        try:
            return [e for e in await store.list_endpoints() if e.name == name]
        finally:
            await store.aclose()

    return asyncio.run(read())


def choose(driver: Any, handler: str) -> None:
    wait(driver, lambda d: d.find_elements(
        By.CSS_SELECTOR, f'#endpoint-handler-choice option[value="{handler}"]'
    ), f"{handler} offered")
    Select(driver.find_element(By.ID, "endpoint-handler-choice")).select_by_value(handler)


def fill(driver: Any, values: dict[str, str]) -> None:
    for name, value in values.items():
        field = driver.find_element(By.ID, f"setting-{name}")
        field.clear()
        field.send_keys(value)


def problems_of(driver: Any, setting: str) -> str:
    return driver.find_element(
        By.CSS_SELECTOR, f'#endpoint-fields tr[data-setting="{setting}"] .setting-problems'
    ).text


def created_row(driver: Any, name: str) -> str:
    return wait(driver, lambda d: [
        r.get_attribute("data-endpoint-id")
        for r in d.find_elements(By.CSS_SELECTOR, "#endpoints-table tbody tr") if name in r.text
    ], f"the row of {name}")[0]


def test_the_chat_handlers_form_refuses_a_plain_secret_and_creates_what_was_entered(
    gateway, store_url, browser, screenshot
):
    open_page(browser, gateway, "endpoints")
    choose(browser, CHAT)
    model = wait(browser, lambda d: d.find_element(By.ID, "setting-model"), "the model field")
    assert model.get_attribute("placeholder") == "default"
    assert "model of every request" in browser.find_element(
        By.CSS_SELECTOR, '#endpoint-fields tr[data-setting="model"]').text
    assert browser.find_element(By.ID, "setting-stream_usage").is_selected()  # its default
    assert not browser.find_element(By.ID, "endpoint-handler").is_displayed()
    assert "OpenAI-compatible" in text_of(browser, "endpoint-handler-description")
    browser.find_element(By.ID, "endpoint-name").send_keys("chat from the form")
    fill(browser, {"base_url": "http://127.0.0.1:9/v1", "model": "m-1", "timeout": "0",
                   "extra_headers": '{"X-Route": "a"}', "api_key": "sk-typed-as-such"})
    Select(browser.find_element(By.ID, "setting-response_mode")).select_by_visible_text("message")
    browser.find_element(By.ID, "setting-stream_usage").click()
    screenshot("endpoint-form-chat")

    browser.find_element(By.ID, "endpoint-create").click()
    wait(browser, lambda d: "env:NAME reference" in problems_of(d, "api_key"),
         "the plain secret refused next to its field")
    assert "api_key:" in text_of(browser, "endpoint-problems")
    assert problems_of(browser, "timeout") == ""  # refused before the gateway saw it
    screenshot("endpoint-form-secret-refused")
    assert rows_named(store_url, "chat from the form") == []

    fill(browser, {"api_key": "env:CHAT_API_KEY"})
    browser.find_element(By.ID, "endpoint-create").click()
    wait(browser, lambda d: "greater than 0" in problems_of(d, "timeout"),
         "the gateway's check shown next to the timeout")
    assert problems_of(browser, "api_key") == ""
    assert rows_named(store_url, "chat from the form") == []

    fill(browser, {"timeout": "30"})
    browser.find_element(By.ID, "endpoint-create").click()
    created_row(browser, "chat from the form")
    [row] = rows_named(store_url, "chat from the form")
    assert row.metadata == {
        "module_name": "handlers.openai_chat", "class_name": "OpenAIChatHandler",
        "base_url": "http://127.0.0.1:9/v1", "model": "m-1", "timeout": 30,
        "extra_headers": {"X-Route": "a"}, "api_key": "env:CHAT_API_KEY",
        "response_mode": "message", "stream_usage": False,
    }
    assert browser.find_element(By.ID, "setting-model").get_attribute("value") == ""  # reset
    screenshot("endpoint-form-created")


def test_the_echo_handler_with_every_field_empty_takes_its_defaults(
    gateway, store_url, browser, screenshot
):
    open_page(browser, gateway, "endpoints")
    choose(browser, ECHO)
    delay = wait(browser, lambda d: d.find_element(By.ID, "setting-delay"), "the delay field")
    assert delay.get_attribute("placeholder") == "0.05"
    browser.find_element(By.ID, "endpoint-name").send_keys("echo from the form")
    browser.find_element(By.ID, "endpoint-public").click()
    browser.find_element(By.ID, "endpoint-create").click()
    endpoint_id = created_row(browser, "echo from the form")
    [row] = rows_named(store_url, "echo from the form")
    assert row.metadata == {"module_name": "handlers.echo", "class_name": "EchoHandler",
                            "public": True}
    answer = send(gateway, send_request("hi form"), streaming=False, endpoint_id=endpoint_id)
    assert answer[-1].task.status.state == TaskState.TASK_STATE_COMPLETED
    screenshot("endpoint-form-echo")

