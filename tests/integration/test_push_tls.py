"""A webhook over HTTPS reached at its pinned address still verifies the certificate of its
name: the TLS handshake sends the name (SNI) and checks the certificate against it."""

from __future__ import annotations

import datetime
import ssl
import time
from pathlib import Path

import httpx
import pytest
from a2a.types import TaskPushNotificationConfig
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from a2a_gateway.stores.base import PushDelivery, Scope
from a2a_gateway.stores.memory import MemoryStore
from a2a_gateway.tasks.push import PushNotifier
from a2a_gateway.tasks.push_guard import WebhookGuard
from tests.support.webhooks import fake_dns

SCOPE = Scope("default", "ep", "anonymous")


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(
    subject: str, issuer_key, issuer: str, key, *, ca: bool, sans: list
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject)).issuer_name(_name(issuer))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it issued for hooks.test only (not for 127.0.0.1)."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("test ca", ca_key, "test ca", ca_key, ca=True, sans=[])
    cert = _certificate("hooks.test", ca_key, "test ca", key, ca=False,
                        sans=[x509.DNSName("hooks.test")])
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(pem))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"


async def _https_receiver(
    cert: Path, key: Path, received: list[dict]
) -> tuple[web.AppRunner, int]:
    async def hook(request: web.Request) -> web.Response:
        received.append(dict(request.headers))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
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
