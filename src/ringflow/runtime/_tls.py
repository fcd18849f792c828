"""TLS settings of a node, from PEM files, and the ``ssl`` contexts they make.

Owns the two option maps a node takes, with Cassandra's names (``EncryptionOptions.java``,
``cassandra.yaml``) and Scylla's PEM file keys (``certificate``, ``keyfile``, ``truststore``,
as in ``scylla.yaml``):

* ``client_encryption_options`` (``ClientEncryptionOptions``), the native (CQL) port:
  ``enabled``, ``optional`` (serve TLS and plaintext on the same port, told apart by the first
  byte), ``certificate``, ``keyfile``, ``truststore`` (the CAs a client certificate must chain
  to) and ``require_client_auth``;
* ``server_encryption_options`` (``ServerEncryptionOptions``), internode: ``internode_encryption``
  ``none`` or ``all`` (Cassandra's ``dc`` and ``rack`` are refused: every node of a local cluster
  shares one DC rule), ``certificate``, ``keyfile``, ``truststore``. Internode TLS is always
  mutual: each side's certificate must chain to the truststore, and the listener checks that
  the certificate's IP SANs name the node the connection's hello claims (``peer_addresses``,
  used by ``_asyncio_inbound``).

A key's passphrase never appears on a command line: ``keyfile_password_file`` names a file that
holds it (Cassandra 5's ``keystore_password_file``). ``to_map`` gives the options back in the
``key=value,...`` form (``parse_option_map``) that a local cluster passes to its nodes: paths
only, never a secret.

Rules: every value is checked here (``ConfigurationError`` naming the option); contexts are TLS
1.2 or later; a file that cannot be read or a key that does not match its certificate is a
``ConfigurationError`` at start-up, never at the first connection.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from ringflow.errors import ConfigurationError

INTERNODE_ENCRYPTION = ("none", "all")
"""Cassandra also has ``dc`` and ``rack``; a local cluster has no use for them."""
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
DEFAULT_MAX_PENDING_HANDSHAKES = 128
"""Internode TLS handshakes a listener runs at once: a node has one inbound connection a peer,
so this leaves room for a cluster's worth of peers reconnecting together while a flood of
stalled handshakes cannot hold more than this many sockets and TLS states."""
MAX_PASSWORD_BYTES = 4096


def parse_option_map(text: str, what: str) -> dict[str, str]:
    """``key=value,key=value`` as a dict; ConfigurationError naming ``what`` when malformed."""
    found: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"{what}: {item!r} is not key=value")
        found[key.strip()] = value.strip()
    return found


def _flag(what: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(f"{what} must be true or false, got {value!r}")
    return text == "true"


def _path(what: str, value: object) -> Path | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str | Path):
        raise ConfigurationError(f"{what} must be a file path, got {value!r}")
    return Path(value)


def _password(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        data = path.read_bytes()[: MAX_PASSWORD_BYTES + 1]
    except OSError as error:
        raise ConfigurationError(f"keyfile_password_file {path}: {error.strerror}") from None
    if len(data) > MAX_PASSWORD_BYTES:
        raise ConfigurationError(f"keyfile_password_file {path} is over {MAX_PASSWORD_BYTES} B")
    return data.rstrip(b"\r\n")


def _load_chain(
    context: ssl.SSLContext, certificate: Path, keyfile: Path, password_file: Path | None
) -> None:
    try:
        context.load_cert_chain(certificate, keyfile, password=_password(password_file))
    except (OSError, ssl.SSLError) as error:  # never echo the password: it is not in the error
        raise ConfigurationError(
            f"cannot load certificate {certificate} with key {keyfile}: {error}"
        ) from None


def _load_trust(context: ssl.SSLContext, truststore: Path) -> None:
    try:
        context.load_verify_locations(cafile=truststore)
    except (OSError, ssl.SSLError) as error:
        raise ConfigurationError(f"cannot load truststore {truststore}: {error}") from None


def _new_context(purpose: int) -> ssl.SSLContext:
    context = ssl.SSLContext(purpose)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def client_context(
    ca_file: Path | str | None,
    *,
    certificate: Path | str | None = None,
    keyfile: Path | str | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A client context that trusts ``ca_file`` (the system's CAs when None) and checks the
    server's name or IP SAN; with ``certificate``/``keyfile``, presents them (mutual TLS)."""
    context = _new_context(ssl.PROTOCOL_TLS_CLIENT)
    if ca_file is None:
        context.load_default_certs()
    else:
        _load_trust(context, Path(ca_file))
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if certificate is not None:
        _load_chain(context, Path(certificate), Path(keyfile or certificate), None)
    return context


def peer_addresses(peercert: object) -> frozenset[str]:
    """The IP addresses a verified peer certificate names (``getpeercert()`` form)."""
    if not isinstance(peercert, Mapping):
        return frozenset()
    found: set[str] = set()
    for entry in peercert.get("subjectAltName", ()):
        if isinstance(entry, tuple) and len(entry) == 2 and entry[0] == "IP Address":
            try:
                found.add(str(ipaddress.ip_address(str(entry[1]).strip())))
            except ValueError:
                continue
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class ClientEncryptionOptions:
    """``client_encryption_options``: TLS on the native (CQL) port."""

    enabled: bool = False
    optional: bool = False
    certificate: Path | None = None
    keyfile: Path | None = None
    truststore: Path | None = None
    require_client_auth: bool = False
    keyfile_password_file: Path | None = None

    def __post_init__(self) -> None:
        if not self.enabled:
            return
        if self.certificate is None or self.keyfile is None:
            raise ConfigurationError(
                "client_encryption_options: enabled needs certificate and keyfile (PEM files)"
            )
        if self.require_client_auth and self.truststore is None:
            raise ConfigurationError(
                "client_encryption_options: require_client_auth needs a truststore (PEM CAs)"
            )

    @classmethod
    def from_map(cls, options: Mapping[str, object]) -> ClientEncryptionOptions:
        return cls(**_typed(cls, "client_encryption_options", options))  # type: ignore[arg-type]

    def to_map(self) -> dict[str, str]:
        return _as_map(self)

    def server_context(self) -> ssl.SSLContext:
        """The context the native port serves TLS with (files read now)."""
        if self.certificate is None or self.keyfile is None:
            raise ConfigurationError("client_encryption_options is not enabled")
        context = _new_context(ssl.PROTOCOL_TLS_SERVER)
        _load_chain(context, self.certificate, self.keyfile, self.keyfile_password_file)
        if self.truststore is not None:
            _load_trust(context, self.truststore)
            context.verify_mode = (
                ssl.CERT_REQUIRED if self.require_client_auth else ssl.CERT_OPTIONAL
            )
        return context


@dataclass(frozen=True, slots=True)
class ServerEncryptionOptions:
    """``server_encryption_options``: TLS between nodes, mutual, from PEM files."""

    internode_encryption: str = "none"
    certificate: Path | None = None
    keyfile: Path | None = None
    truststore: Path | None = None
    require_client_auth: bool = True
    keyfile_password_file: Path | None = None

    def __post_init__(self) -> None:
        if self.internode_encryption not in INTERNODE_ENCRYPTION:
            raise ConfigurationError(
                "server_encryption_options: internode_encryption must be one of "
                f"{list(INTERNODE_ENCRYPTION)}, got {self.internode_encryption!r}"
            )
        if not self.enabled:
            return
        if self.certificate is None or self.keyfile is None or self.truststore is None:
            raise ConfigurationError(
                "server_encryption_options: internode_encryption all needs certificate, keyfile "
                "and truststore (PEM files)"
            )
        if not self.require_client_auth:
            raise ConfigurationError(
                "server_encryption_options: internode TLS is always mutual in ringflow "
                "(require_client_auth must be true)"
            )

    @property
    def enabled(self) -> bool:
        return self.internode_encryption != "none"

    @classmethod
    def from_map(cls, options: Mapping[str, object]) -> ServerEncryptionOptions:
        return cls(**_typed(cls, "server_encryption_options", options))  # type: ignore[arg-type]

    def to_map(self) -> dict[str, str]:
        return _as_map(self)

    def contexts(self) -> InternodeTls:
        """The listening and connecting contexts (files read now)."""
        if not self.enabled or self.certificate is None or self.keyfile is None:
            raise ConfigurationError("server_encryption_options: internode_encryption is none")
        if self.truststore is None:
            raise ConfigurationError("server_encryption_options: no truststore")
        server = _new_context(ssl.PROTOCOL_TLS_SERVER)
        _load_chain(server, self.certificate, self.keyfile, self.keyfile_password_file)
        _load_trust(server, self.truststore)
        server.verify_mode = ssl.CERT_REQUIRED
        client = _new_context(ssl.PROTOCOL_TLS_CLIENT)
        _load_chain(client, self.certificate, self.keyfile, self.keyfile_password_file)
        _load_trust(client, self.truststore)
        client.check_hostname = True  # the peer's IP SAN must be the address we dial
        client.verify_mode = ssl.CERT_REQUIRED
        return InternodeTls(server, client)


@dataclass(frozen=True, slots=True)
class InternodeTls:
    """The contexts of ``AsyncioNetwork`` with internode TLS: ``server`` requires a client
    certificate; ``client`` checks the peer's IP SAN against the address it dials. A listener
    runs at most ``max_pending_handshakes`` handshakes at once (a connection accepted beyond
    them is closed at once), each for at most ``handshake_timeout_s``."""

    server: ssl.SSLContext
    client: ssl.SSLContext
    handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S
    max_pending_handshakes: int = DEFAULT_MAX_PENDING_HANDSHAKES

    def __post_init__(self) -> None:
        if not self.handshake_timeout_s > 0:
            raise ConfigurationError(
                f"InternodeTls: handshake_timeout_s must be > 0, got {self.handshake_timeout_s}"
            )
        if type(self.max_pending_handshakes) is not int or self.max_pending_handshakes < 1:
            raise ConfigurationError(
                "InternodeTls: max_pending_handshakes must be an integer >= 1, got "
                f"{self.max_pending_handshakes!r}"
            )


_Options = ClientEncryptionOptions | ServerEncryptionOptions


def _typed(
    cls: type[_Options], what: str, options: Mapping[str, object]
) -> dict[str, bool | str | Path | None]:
    known = {f.name: f.type for f in fields(cls)}
    values: dict[str, bool | str | Path | None] = {}
    for name, value in options.items():
        kind = known.get(name)
        if kind is None:
            raise ConfigurationError(f"{what}: unknown option {name!r} (known: {sorted(known)})")
        if kind == "bool":
            values[name] = _flag(f"{what}: {name}", value)
        elif kind == "Path | None":
            values[name] = _path(f"{what}: {name}", value)
        else:
            values[name] = str(value).strip().lower()
    return values


def _as_map(options: _Options) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in fields(options):
        value = getattr(options, item.name)
        if value is None:
            continue
        found[item.name] = str(value).lower() if isinstance(value, bool) else str(value)
    return found


def format_option_map(options: Mapping[str, str]) -> str:
    """The ``key=value,...`` text ``parse_option_map`` reads."""
    for key, value in options.items():
        if "," in value or "=" in key:
            raise ConfigurationError(f"option {key}={value!r}: a comma cannot be passed")
    return ",".join(f"{key}={value}" for key, value in options.items())
