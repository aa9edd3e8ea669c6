"""``rediss://``: the gateway's Redis client over TLS, against a redis-server of the test's own
serving TLS only, with a certificate from a CA made here. With ``redis_ca_file`` naming that CA
the client and the live hub connect; without it the certificate is refused (the hub says
Redis is unreachable and the gateway serves without it).

Needs ``A2A_TEST_REDIS_SERVER`` (the redis-server binary, .ci/services/08-redis.sh)."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from a2a_gateway.live.hub import ReplayLimits
from a2a_gateway.live.redis import RedisLiveHub, open_redis
from tests.replicas.cluster import free_port
from tests.support.harness import require_env
from tests.support.waiting import eventually

pytestmark = pytest.mark.redis


def _pem(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signs for 127.0.0.1: (ca.pem, server.pem, server.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
              .issuer_name(ca_name).public_key(key.public_key())
              .serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5))
              .not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName(
                  [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                  critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return (
        _pem(directory / "ca.pem", ca.public_bytes(pem)),
        _pem(directory / "server.pem", server.public_bytes(pem)),
        _pem(directory / "server.key", key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())),
    )


@pytest.fixture
async def tls_redis(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """``(rediss:// URL, CA file)`` of a redis-server that speaks TLS only."""
    binary = require_env("A2A_TEST_REDIS_SERVER")
    ca, cert, key = make_certificates(tmp_path)
    port = free_port()
    process = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", "0", "--tls-port", str(port),
         "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
         "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", str(tmp_path),
         "--logfile", str(tmp_path / "redis.log")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"rediss://127.0.0.1:{port}/0"
    try:
        async def answers() -> bool:
            client = open_redis(url, str(ca))
            try:
                return bool(await client.ping())
            except Exception:
                return False
            finally:
                await client.aclose()

        await eventually(answers, timeout=10, what="the TLS redis-server answers")
        yield url, ca
    finally:
        process.kill()
        process.wait(timeout=10)


async def test_rediss_with_the_ca_file_connects_and_carries_the_live_path(tls_redis):
    url, ca = tls_redis
    hub = RedisLiveHub(open_redis(url, str(ca)), None, "a", prefix="tls:")
    hub.serve(Runs(), ReplayLimits())
    await hub.start()
    try:
        assert hub.listening
    finally:
        await hub.aclose()
        await hub._redis.aclose()


async def test_rediss_without_the_ca_refuses_the_certificate(tls_redis):
    url, _ = tls_redis
    client = open_redis(url)  # the system's CAs do not know the test CA
    try:
        with pytest.raises(Exception, match="certificate verify failed"):
            await client.ping()
    finally:
        await client.aclose()


class Runs:
    def run(self, task_id: str) -> None:
        return None

    def text_so_far(self, task_id: str) -> None:
        return None

    async def handle_control(self, command: str, task_id: str) -> None:
        pass
