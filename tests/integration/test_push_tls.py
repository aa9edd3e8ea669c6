"""A webhook over HTTPS reached at its pinned address still verifies the certificate of its
name: the TLS handshake sends the name (SNI) and checks the certificate against it."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import httpx
import pytest
from a2a.types import TaskPushNotificationConfig
from aiohttp import web

from a2a_gateway.stores.base import PushDelivery, Scope
from a2a_gateway.stores.memory import MemoryStore
from a2a_gateway.tasks.push import PushNotifier
from a2a_gateway.tasks.push_guard import WebhookGuard
from tests.support.tls import server_tls, write_tls_files
from tests.support.webhooks import fake_dns

SCOPE = Scope("default", "ep", "anonymous")


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it issued for hooks.test only (not for 127.0.0.1)."""
    return write_tls_files(tmp_path, "hooks.test")


async def _https_receiver(
    cert: Path, key: Path, received: list[dict]
) -> tuple[web.AppRunner, int]:
    async def hook(request: web.Request) -> web.Response:
        received.append(dict(request.headers))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls(cert, key))
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


@pytest.mark.parametrize(("name", "delivered"), [("hooks.test", True), ("other.test", False)])
async def test_https_to_the_pinned_address_verifies_the_certificate_of_the_name(
    tls_files, name, delivered
):
    ca, cert, key = tls_files
    received: list[dict] = []
    runner, port = await _https_receiver(cert, key, received)
    store = MemoryStore()
    guard = WebhookGuard(allow_loopback=True, resolver=fake_dns({name: "127.0.0.1"}))
    client = httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(ca)), trust_env=False)
    notifier = PushNotifier(store, guard, max_attempts=1, http=client)
    try:
        url = f"https://{name}:{port}/hook"
        await store.put_push_config(SCOPE, TaskPushNotificationConfig(id="c", task_id="t", url=url))
        delivery = PushDelivery("d-1", SCOPE, "t", "c", b"{}", time.time() + 30, 1, "gw")
        await store.add_push_deliveries([delivery])
        outcome, detail = await notifier._post(
            await store.get_push_config(SCOPE, "t", "c"), delivery
        )
    finally:
        await notifier.aclose()
        await runner.cleanup()
    if delivered:
        assert (outcome.value, detail) == ("delivered", "204")
        assert received[0]["Host"] == f"hooks.test:{port}"
    else:
        # the server's certificate is for hooks.test: a name it does not cover fails the
        # handshake, although the address is the same
        assert outcome.value == "retry" and detail == "ConnectError" and received == []
