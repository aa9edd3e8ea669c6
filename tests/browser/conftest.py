"""Fixtures of the browser tests: the ``a2a-gateway demo`` command running as a child process
(console on, a known operator key; ``support.demo_gateway``), a headless Chromium driven by
Selenium through Debian's chromium-driver (its path given, so Selenium downloads nothing), and
the a2a-sdk client as the other caller (``support.send``). Screenshots go to
``tests/output/browser/``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.support import (
    CHROMEDRIVER,
    CHROMIUM,
    OPERATOR_KEY,
    SCREENSHOTS,
    WAIT_SECONDS,
    demo_gateway,
)


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    """The base URL of ``a2a-gateway demo`` on a memory store."""
    with demo_gateway(
        A2A_GATEWAY_OPERATOR_KEYS=OPERATOR_KEY, A2A_GATEWAY_ENDPOINT_CACHE_SECONDS="0.5"
    ) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(
            "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(argument)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_SECONDS)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def screenshot(browser: Any) -> Iterator[Callable[[str], Path]]:
    """``screenshot(name)`` keeps the browser's page as ``tests/output/browser/<name>.png``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        assert browser.save_screenshot(str(path)), f"no screenshot {path}"
        return path

    yield take
