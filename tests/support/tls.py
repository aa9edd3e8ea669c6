"""A test certificate authority and a server certificate it issued, as PEM files, and the
server-side TLS context to serve with them.

    ca, cert, key = write_tls_files(tmp_path, "hooks.test")
    async with serve_locally(app, tls=server_tls(cert, key)) as url:   # "https://127.0.0.1:PORT"
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(subject: str, issuer_key, issuer: str, key, *, ca: bool,
                 sans: list) -> x509.Certificate:
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


def write_tls_files(directory: Path, server_name: str) -> tuple[Path, Path, Path]:
    """``ca.pem``, ``cert.pem`` and ``key.pem`` in ``directory``: a fresh CA and a server
    certificate it issued for ``server_name`` only (a DNS name, not an address)."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("test ca", ca_key, "test ca", ca_key, ca=True, sans=[])
    cert = _certificate(server_name, ca_key, "test ca", key, ca=False,
                        sans=[x509.DNSName(server_name)])
    pem = serialization.Encoding.PEM
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "cert.pem").write_bytes(cert.public_bytes(pem))
    (directory / "key.pem").write_bytes(key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return directory / "ca.pem", directory / "cert.pem", directory / "key.pem"


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
