"""A local certificate authority and per-node certificates, as PEM files, for a local cluster.

``ringflow cluster start --tls`` makes, under the cluster's data directory (``tls/``): a CA
(``ca.crt``, ``ca.key``), and for each node a certificate whose IP SAN is the node's address
(``<address>.crt``/``.key``), good both as a server certificate (native port, internode
listener) and as a client certificate (internode connections are mutual), and one client
certificate (``client.crt``/``.key``) for drivers that must present one. Keys are EC P-256
(fast handshakes, fast to make), unencrypted, written with mode 0600; certificates 0644.

Scylla and Cassandra take such PEM files as they are (``certificate``, ``keyfile``,
``truststore``); the Python driver takes the CA through an ``ssl.SSLContext``, cqlsh through
``--ssl`` with ``SSL_CERTFILE`` (or cqlshrc ``[ssl] certfile``).

``cryptography`` is imported when a certificate is made, never when a node starts.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ringflow.errors import ConfigurationError

CA_VALIDITY_DAYS = 3650
CERT_VALIDITY_DAYS = 825
TLS_DIR_NAME = "tls"


@dataclass(frozen=True, slots=True)
class PemPair:
    """A certificate and its private key, PEM-encoded."""

    certificate: bytes
    key: bytes


def _new_key() -> object:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(  # type: ignore[attr-defined, no-any-return]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca(common_name: str = "ringflow local CA") -> PemPair:
    """A self-signed CA certificate (path length 0) and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()  # type: ignore[attr-defined]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())  # type: ignore[arg-type]
    )
    return PemPair(certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_certificate(
    ca: PemPair,
    common_name: str,
    *,
    ip_addresses: Sequence[str] = (),
    dns_names: Sequence[str] = (),
) -> PemPair:
    """A certificate signed by ``ca`` for ``common_name``, with the given IP and DNS SANs,
    usable as a TLS server and a TLS client certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert = x509.load_pem_x509_certificate(ca.certificate)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    try:
        sans: list[x509.GeneralName] = [
            x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses
        ]
    except ValueError as error:
        raise ConfigurationError(f"certificate for {common_name}: {error}") from None
    sans.extend(x509.DNSName(name) for name in dns_names)
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())  # type: ignore[attr-defined]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return PemPair(certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def write_pem(path: Path, data: bytes, *, private: bool) -> None:
    """Write ``data`` to ``path``; a key is created 0600 (never readable by others, even for a
    moment), a certificate 0644."""
    mode = 0o600 if private else 0o644
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.write(descriptor, data)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)


def write_pair(directory: Path, stem: str, pair: PemPair) -> tuple[Path, Path]:
    """``<stem>.crt`` and ``<stem>.key`` in ``directory``; their paths."""
    certificate, key = directory / f"{stem}.crt", directory / f"{stem}.key"
    write_pem(certificate, pair.certificate, private=False)
    write_pem(key, pair.key, private=True)
    return certificate, key


@dataclass(frozen=True, slots=True)
class LocalTls:
    """Where a local cluster's TLS files are: the CA, one pair per node address, a client."""

    directory: Path

    @property
    def ca_certificate(self) -> Path:
        return self.directory / "ca.crt"

    def node_certificate(self, address: str) -> Path:
        return self.directory / f"{address}.crt"

    def node_key(self, address: str) -> Path:
        return self.directory / f"{address}.key"

    @property
    def client_certificate(self) -> Path:
        return self.directory / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"


def make_local_tls(directory: Path, addresses: Sequence[str]) -> LocalTls:
    """A CA and a certificate per node address (IP SAN = the address) under ``directory``;
    files that exist already are kept (a later ``start`` reuses the cluster's CA)."""
    tls = LocalTls(directory)
    if tls.ca_certificate.exists() and (directory / "ca.key").exists():
        ca = PemPair(tls.ca_certificate.read_bytes(), (directory / "ca.key").read_bytes())
    else:
        ca = make_ca()
        write_pair(directory, "ca", ca)
    for address in addresses:
        if not tls.node_certificate(address).exists() or not tls.node_key(address).exists():
            write_pair(directory, address, issue_certificate(ca, address, ip_addresses=[address]))
    if not tls.client_certificate.exists() or not tls.client_key.exists():
        write_pair(directory, "client", issue_certificate(ca, "ringflow client"))
    return tls
