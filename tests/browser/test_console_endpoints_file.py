"""Endpoints declared in an endpoints file, in headless Chromium against ``a2a-gateway demo``
serving one: the console marks them ("endpoints file", with what that means for a change made
on the page), and rows made otherwise carry no mark. Kept as a screenshot."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.browser.support import DEMO_ENDPOINT_ID, OPERATOR_KEY, demo_gateway
from tests.browser.test_console import endpoint_row, open_page, wait

pytestmark = pytest.mark.timeout(300)

FILE_ENDPOINT_ID = str(uuid.uuid4())


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    declared: Path = tmp_path_factory.mktemp("endpoints") / "endpoints.yaml"
    declared.write_text(
        "endpoints:\n"
        f"  - id: {FILE_ENDPOINT_ID}\n"
        "    name: Declared echo\n"
        "    handler: handlers.echo:EchoHandler\n"
        "    public: true\n"
    )
    with demo_gateway(
        A2A_GATEWAY_OPERATOR_KEYS=OPERATOR_KEY, A2A_GATEWAY_ENDPOINTS_FILE=str(declared)
    ) as base:
        yield base


def test_an_endpoint_of_the_endpoints_file_is_marked_as_such(gateway, browser, screenshot):
    open_page(browser, gateway, "endpoints")
    wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-endpoint-id="{FILE_ENDPOINT_ID}"]'),
        "the declared endpoint listed",
    )
    declared = endpoint_row(browser, FILE_ENDPOINT_ID)
    [mark] = declared.find_elements(By.CSS_SELECTOR, "td.name .from-file")
    assert mark.text == "endpoints file"
    assert "lasts until the file is applied again" in mark.get_attribute("title")
    assert "lasts until the file is applied again" in declared.find_element(
        By.CSS_SELECTOR, "button.toggle"
    ).get_attribute("title")
    assert (
        endpoint_row(browser, DEMO_ENDPOINT_ID).find_elements(By.CSS_SELECTOR, ".from-file") == []
    )
    screenshot("endpoints-file")
