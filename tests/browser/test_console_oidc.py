"""Signing in to the console in headless Chromium through a real OpenID Provider
(tests/oidc_provider): the login page offers the issuer, the issuer's own login and consent
pages sign in a user of its ``a2a-operators`` group, and the console then shows who is
logged in and the demo endpoint; a user outside the group gets the 403 page. Each page is
kept as a screenshot (``oidc-*``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.browser.support import DEMO_ENDPOINT_ID, demo_gateway
from tests.browser.test_console import text_of, wait
from tests.support.oidc_support import CONFIDENTIAL, OPERATORS_GROUP, issuer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    """``a2a-gateway demo`` whose console takes the issuer's ``a2a-operators``."""
    with demo_gateway(
        A2A_GATEWAY_CONSOLE_OIDC_ISSUER=issuer(),
        A2A_GATEWAY_CONSOLE_OIDC_CLIENT_ID=CONFIDENTIAL["client_id"],
        A2A_GATEWAY_CONSOLE_OIDC_CLIENT_SECRET=CONFIDENTIAL["client_secret"],
        A2A_GATEWAY_CONSOLE_OIDC_OPERATOR_VALUES=OPERATORS_GROUP,
    ) as base:
        yield base


def sign_in_at_the_issuer(driver: Any, gateway: str, login: str, screenshot: Any = None) -> None:
    """From the console's login page through the issuer's login and consent pages."""
    driver.delete_all_cookies()
    driver.get(f"{gateway}/console")
    link = wait(driver, lambda d: d.find_element(By.ID, "oidc-sign-in-link") if d.find_element(
        By.ID, "oidc-sign-in").is_displayed() else None, "the issuer's sign-in link")
    assert link.text == f"Sign in with {issuer()}"
    assert not driver.find_element(By.ID, "nav").is_displayed()  # no Log out before logging in
    if screenshot:
        screenshot("oidc-login")
    link.click()
    field = wait(driver, lambda d: d.find_elements(By.NAME, "login"), "the issuer's login form")[0]
    assert driver.current_url.startswith(issuer())
    field.send_keys(login)
    driver.find_element(By.NAME, "password").send_keys("any password")
    if screenshot:
        screenshot("oidc-issuer-login")
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(
        driver,
        lambda d: "Continue" in d.find_element(By.CSS_SELECTOR, "button[type=submit]").text,
        "the issuer's consent page",
    )
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(driver, lambda d: d.current_url.startswith(gateway), "the way back to the gateway")


def test_an_operator_signs_in_at_the_issuer_and_sees_the_endpoints(gateway, browser, screenshot):
    sign_in_at_the_issuer(browser, gateway, f"alice:{OPERATORS_GROUP}", screenshot)
    wait(
        browser,
        lambda d: d.execute_script("return document.body.dataset.page") == "tasks-page",
        "the console",
    )
    assert text_of(browser, "whoami") == f"alice ({issuer()})"
    browser.find_element(By.ID, "nav-endpoints").click()
    row = wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-endpoint-id="{DEMO_ENDPOINT_ID}"]'),
        "the demo endpoint's row",
    )[0]
    assert "Echo demo" in row.text
    screenshot("oidc-endpoints")
    browser.find_element(By.ID, "logout").click()
    wait(
        browser,
        lambda d: d.find_element(By.ID, "login-page").is_displayed(),
        "the login page after logging out",
    )


def test_a_user_outside_the_operator_group_sees_the_403_page(gateway, browser, screenshot):
    sign_in_at_the_issuer(browser, gateway, "mallory:developers")
    title = wait(browser, lambda d: d.find_elements(By.ID, "sign-in-title"), "the refusal page")[0]
    assert title.text == "Sign-in failed"
    message = text_of(browser, "sign-in-message")
    assert (
        "mallory" in message and "not a gateway operator" in message and "developers" not in message
    )
    screenshot("oidc-refused")
    browser.get(f"{gateway}/console")
    wait(
        browser,
        lambda d: d.find_element(By.ID, "login-page").is_displayed(),
        "the login page: no session",
    )
