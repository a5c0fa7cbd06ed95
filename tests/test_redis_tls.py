"""``rediss://`` against a real TLS server: a throwaway ``redis-server`` with a certificate made
for the test (a private CA signing a certificate for 127.0.0.1), reached with the CA given in
the URL's query, refused without it, and the TLS options refused where they would be ignored."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentsession as ags
from agentsession.errors import StoreUnavailable, UsageError

from .redis_servers import SERVER_SKIP, RedisProcess, free_port

pytestmark = pytest.mark.skipif(bool(SERVER_SKIP), reason=SERVER_SKIP)


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate and key for 127.0.0.1 signed by it (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentsession test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = (
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
    )
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return ca_path, cert_path, key_path


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    directory = tmp_path_factory.mktemp("redis-tls")
    ca, cert, key = _certificates(directory)
    port = free_port()
    # The plain port is the one the helper pings; the TLS port is what the tests use.
    server = RedisProcess(
        directory / "data",
        free_port(),
        "--tls-port", str(port),
        "--tls-cert-file", str(cert),
        "--tls-key-file", str(key),
        "--tls-ca-cert-file", str(ca),
        "--tls-auth-clients", "no",
    )  # fmt: skip
    server.start()
    try:
        yield port, ca
    finally:
        server.kill()


def test_a_store_over_tls_appends_reads_and_lists(tls_server: tuple[int, Path]) -> None:
    port, ca = tls_server
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"
    with ags.open_store(url) as store:
        session = store.get("tls:1")
        session.append(ags.Event.new("user/message", ags.Message.user("over TLS")))
        assert session.messages()[0].text == "over TLS"
        assert [i.id for i in store.list()] == ["tls:1"]
    with ags.open_store(url) as again:
        assert [e.seq for e in again.get("tls:1").read()] == [1]


def test_the_async_store_over_tls(tls_server: tuple[int, Path]) -> None:
    import asyncio

    from agentsession.aio import open_async_store

    port, ca = tls_server
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}&prefix=aio:"

    async def run() -> list[int]:
        store = await open_async_store(url)
        try:
            session = await store.get("tls:a")
            await session.append(ags.Event.new("user/message", ags.Message.user("async")))
            return [e.seq for e in await session.read()]
        finally:
            await store.close()

    assert asyncio.run(run()) == [1]


def test_a_server_whose_certificate_is_not_trusted_is_refused(
    tls_server: tuple[int, Path],
) -> None:
    port, _ = tls_server
    with pytest.raises(StoreUnavailable):
        ags.open_store(f"rediss://127.0.0.1:{port}/0", connect_timeout=5)


def test_tls_options_are_refused_where_they_would_be_ignored() -> None:
    with pytest.raises(UsageError, match="use rediss://"):
        ags.open_store("redis://127.0.0.1:1/0?ssl_ca_certs=/x.pem")
    with pytest.raises(UsageError, match="ssl_cert_reqs"):
        ags.open_store("rediss://127.0.0.1:1/0?ssl_cert_reqs=sometimes")
    with pytest.raises(UsageError, match="unknown option"):
        ags.open_store("redis://127.0.0.1:1/0?tls=yes")
