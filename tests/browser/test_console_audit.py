"""The console's kill switch and audit page in headless Chromium against ``a2a-gateway demo``:
the Kill button disables the demo endpoint and cancels its waiting task (CANCELED with the
operator's reason), and the audit page shows that change — who, what, which tasks — next to
the console sign-in, filtered by action. Kept as the screenshot ``audit``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.types import TaskState
from selenium.webdriver.common.by import By

from tests.browser.support import DEMO_ENDPOINT_ID, OPERATOR_KEY, WAIT_SECONDS, send
from tests.browser.test_console import endpoint_row, open_page, text_of, wait
from tests.support.messages import send_request

pytestmark = pytest.mark.timeout(300)


def audit_rows(driver: Any) -> list[tuple[str, str, str, str]]:
    """(actor, action, target, what changed) of each row shown."""
    return [
        tuple(row.find_element(By.CSS_SELECTOR, f"td.{name}").text
              for name in ("actor", "action", "target", "change"))
        for row in driver.find_elements(By.CSS_SELECTOR, "#audit-table tbody tr")
    ]


def test_the_kill_button_cancels_running_tasks_and_the_audit_page_shows_it(
    gateway, browser, screenshot
):
    waiting = send(gateway, send_request("kill me ?input"), streaming=False)[-1].task
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    open_page(browser, gateway, "endpoints")
    wait(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, f'tr[data-endpoint-id="{DEMO_ENDPOINT_ID}"] button.kill'),
        "the demo endpoint's Kill button")
    endpoint_row(browser, DEMO_ENDPOINT_ID).find_element(By.CSS_SELECTOR, "button.kill").click()
    wait(browser, lambda d: endpoint_row(d, DEMO_ENDPOINT_ID).find_element(
        By.CSS_SELECTOR, "td.enabled").text == "no", "the endpoint shown disabled")
    task = httpx.get(
        f"{gateway}/admin/api/endpoints/{DEMO_ENDPOINT_ID}/tasks/{waiting.id}?principal=anonymous",
        headers={"Authorization": f"Bearer {OPERATOR_KEY}"}, timeout=WAIT_SECONDS,
    ).json()["task"]
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    reason = task["status"]["message"]["parts"][0]["text"]

    browser.find_element(By.ID, "nav-audit").click()
    wait(browser, lambda d: d.execute_script("return document.body.dataset.page") == "audit-page",
         "the audit page")
    rows = wait(browser, lambda d: audit_rows(d), "the audit entries")
    disabled = [r for r in rows if r[1] == "endpoint.disabled"]
    assert disabled and disabled[0][2] == DEMO_ENDPOINT_ID
    actor, _, _, change = disabled[0]
    assert actor.startswith("key:") and reason == f"canceled by operator {actor}: endpoint disabled"
    assert "enabled: true → false" in change and waiting.id in change
    assert any(r[1] == "console.signed_in" and r[0] == actor for r in rows)
    assert OPERATOR_KEY not in browser.page_source

    browser.find_element(By.ID, "audit-action").send_keys("endpoint.disabled")
    browser.find_element(By.ID, "audit-apply").click()
    wait(browser, lambda d: {r[1] for r in audit_rows(d)} == {"endpoint.disabled"},
         "only the endpoint.disabled entries")
    assert text_of(browser, "audit-page-error") == ""
    screenshot("audit")


def test_revoke_and_cancel_ends_the_tasks_of_the_keys_principal(gateway, browser, screenshot):
    operator = {"Authorization": f"Bearer {OPERATOR_KEY}"}
    base = f"{gateway}/admin/api/endpoints/{DEMO_ENDPOINT_ID}"
    assert httpx.post(f"{base}/enable", headers=operator, timeout=WAIT_SECONDS).status_code == 200
    created = httpx.post(f"{base}/keys", headers=operator, json={"principal": "browser-dave"},
                         timeout=WAIT_SECONDS).json()
    sent = httpx.post(f"{gateway}/{DEMO_ENDPOINT_ID}/a2a", timeout=WAIT_SECONDS, json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "dave-1", "role": "ROLE_USER", "parts": [{"text": "dave ?input"}]}}},
        headers={"Authorization": f"Bearer {created['key']}", "A2A-Version": "1.0"}).json()
    task_id = sent["result"]["task"]["id"]

    open_page(browser, gateway, "endpoints")
    keys_button = f'tr[data-endpoint-id="{DEMO_ENDPOINT_ID}"] button.keys'
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, keys_button), "the Keys button")
    endpoint_row(browser, DEMO_ENDPOINT_ID).find_element(By.CSS_SELECTOR, "button.keys").click()
    selector = f'#keys-table tr[data-key-id="{created["id"]}"]'
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f"{selector} button.revoke-kill"),
         "the key's Revoke and cancel button")
    browser.find_element(By.CSS_SELECTOR, f"{selector} button.revoke-kill").click()
    wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, f"{selector} td.state").text
         == "revoked", "the key shown revoked")
    screenshot("key-revoked-and-canceled")
    task = httpx.get(f"{base}/tasks/{task_id}?principal=browser-dave", headers=operator,
                     timeout=WAIT_SECONDS).json()["task"]
    assert task["status"]["state"] == "TASK_STATE_CANCELED"
    assert task["status"]["message"]["parts"][0]["text"].endswith(": API key revoked")
    [entry] = httpx.get(f"{gateway}/admin/api/audit?action=key.revoked&target={created['id']}",
                        headers=operator, timeout=WAIT_SECONDS).json()["entries"]
    assert entry["details"] == {"canceledTasks": [task_id]}
