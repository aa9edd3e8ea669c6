"""Backend health and numbers at a glance in headless Chromium against ``a2a-gateway demo``:
an OpenAI-chat endpoint whose backend port is closed shows ``failing`` with its reason in the
endpoints list; a backend whose error message is HTML shows that message as text; after
traffic the numbers page draws its charts (SVG paths) and counts the requests sent. Each page
is kept as a screenshot."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from a2a.types import TaskState
from selenium.webdriver.common.by import By

from tests.browser.support import (
    DEMO_ENDPOINT_ID,
    OPERATOR_KEY,
    WAIT_SECONDS,
    demo_gateway,
    send,
)
from tests.browser.test_console import endpoint_row, open_page, wait
from tests.support.messages import send_request

pytestmark = pytest.mark.timeout(300)

AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR_KEY}"}
HTML_ERROR = '<img src=x onerror="window.__xss=3"><b>bold</b>'


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    """The conftest's ``a2a-gateway demo``, reading its numbers every second instead of every
    10 s (``stats_interval_seconds``), so the numbers page counts traffic without the test
    waiting out a 10 s sample."""
    with demo_gateway(
        A2A_GATEWAY_OPERATOR_KEYS=OPERATOR_KEY,
        A2A_GATEWAY_ENDPOINT_CACHE_SECONDS="0.5",
        A2A_GATEWAY_STATS_INTERVAL_SECONDS="1",
    ) as base:
        yield base


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ErrorBackend(BaseHTTPRequestHandler):
    """A chat backend that answers every call with HTTP 500 and an HTML error message."""

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": {"message": HTML_ERROR}}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def error_backend() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), ErrorBackend)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def chat_endpoint(gateway: str, name: str, base_url: str) -> str:
    made = httpx.post(
        f"{gateway}/admin/api/endpoints",
        headers=AS_OPERATOR,
        timeout=WAIT_SECONDS,
        json={
            "name": name,
            "handler": "handlers.openai_chat:OpenAIChatHandler",
            "public": True,
            "settings": {"base_url": base_url, "model": "m"},
        },
    )
    assert made.status_code == 201, made.text
    return made.json()["endpoint"]["id"]


def health_shown(driver: Any, endpoint_id: str) -> tuple[str, str]:
    """The status word and the message of the endpoint's row."""
    cell = endpoint_row(driver, endpoint_id).find_element(By.CSS_SELECTOR, "td.health")
    messages = cell.find_elements(By.CSS_SELECTOR, ".health-message")
    return cell.find_element(By.CSS_SELECTOR, ".health-status").text, messages[
        0
    ].text if messages else ""


def test_a_backend_that_is_down_shows_failing_with_its_reason(
    gateway, browser, screenshot, error_backend
):
    down = chat_endpoint(gateway, "chat backend down", f"http://127.0.0.1:{closed_port()}/v1")
    erring = chat_endpoint(gateway, "chat backend erring", error_backend)
    for endpoint_id in (down, erring):
        task = send(gateway, send_request("hello"), streaming=False, endpoint_id=endpoint_id)[
            -1
        ].task
        assert task.status.state == TaskState.TASK_STATE_FAILED
    assert (
        send(gateway, send_request("hi"), streaming=False)[-1].task.status.state
        == TaskState.TASK_STATE_COMPLETED
    )

    open_page(browser, gateway, "endpoints")
    wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-endpoint-id="{down}"]'),
        "the endpoint's row",
    )
    status, message = health_shown(browser, down)
    assert status == "failing" and message.startswith("cannot reach the chat backend at http://127.0.0.1:")
    cell = endpoint_row(browser, down).find_element(By.CSS_SELECTOR, "td.health")
    assert (
        cell.find_element(By.CSS_SELECTOR, ".health-status").value_of_css_property("color")
        == "rgba(192, 57, 43, 1)"
    )
    assert cell.find_element(By.TAG_NAME, "time").get_attribute("datetime")
    assert health_shown(browser, DEMO_ENDPOINT_ID)[0] == "ok"

    status, message = health_shown(browser, erring)
    assert status == "failing" and HTML_ERROR in message  # the backend's HTML, as text
    assert browser.execute_script("return window.__xss") is None
    assert browser.find_elements(By.CSS_SELECTOR, "#endpoints-table img, #endpoints-table b") == []
    screenshot("endpoints-health")


def test_the_numbers_page_draws_the_traffic(gateway, browser, screenshot):
    before = httpx.get(
        f"{gateway}/admin/api/stats", headers=AS_OPERATOR, timeout=WAIT_SECONDS
    ).json()
    sent_before = before["endpoints"].get(DEMO_ENDPOINT_ID, {"total": {"requests": 0}})["total"][
        "requests"
    ]
    for n in range(3):
        send(gateway, send_request(f"count me {n}"), streaming=False)

    open_page(browser, gateway, "numbers")
    row = f'#numbers-table tr[data-endpoint-id="{DEMO_ENDPOINT_ID}"]'

    def counted(driver: Any) -> int:
        cells = driver.find_elements(By.CSS_SELECTOR, f"{row} .requests-total")
        return int(cells[0].text) if cells and cells[0].text.isdigit() else 0

    wait(browser, lambda d: counted(d) >= sent_before + 3, "the requests sent, counted on the page")
    assert "Echo demo" in browser.find_element(By.CSS_SELECTOR, f"{row} td.name").text
    paths = {
        name: [
            p.get_attribute("d")
            for p in browser.find_elements(By.CSS_SELECTOR, f"{where} svg path")
        ]
        for name, where in (
            ("latency", "#latency-chart"),
            ("streams", "#streams-chart"),
            ("requests", row),
        )
    }
    assert all(paths.values()) and all(d.startswith("M") for ds in paths.values() for d in ds), (
        paths
    )
    # a line of several points, or a lone point drawn as a dash: never an invisible "M x y"
    assert all(" L" in d or d.endswith(" h3") for ds in paths.values() for d in ds), paths
    assert len(browser.find_elements(By.CSS_SELECTOR, "#latency-chart path.line-p99")) == 1
    outcomes = browser.find_elements(By.CSS_SELECTOR, f"{row} svg rect.outcome-completed")
    assert outcomes and float(outcomes[0].get_attribute("width")) > 0
    assert "completed" in browser.find_element(By.CSS_SELECTOR, f"{row} .outcomes-total").text
    assert "over" in browser.find_element(By.CSS_SELECTOR, "#latency-chart .legend").text
    screenshot("numbers")
