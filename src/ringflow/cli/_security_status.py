"""What ``ringflow cluster status`` says of a local cluster's security (issue 18).

* **Auth**: the mode each running node reports in its ``status.json`` (``auth_mode``: the
  ``authenticator/authorizer`` pair it gossips, ``ringflow.node.auth_mode``), one line for the
  cluster, naming the nodes when they differ (the cluster keeps such nodes out of its ring);
  from ``cluster.json`` when no node reports one.
* **TLS check** of each running node's native port, live, each step bounded by ``timeout_s``:
  a plaintext OPTIONS request (SUPPORTED: plaintext is served; an ERROR saying TLS is required,
  or a closed connection: refused), then a TLS handshake trusting the cluster's CA
  (``<data>/tls/ca.crt``, presenting ``client.crt`` when it exists, for a cluster that requires
  client certificates) or, without one, any certificate; the protocol version, whether the
  certificate chained to the CA and named the node's address, and its expiry (days left, from
  the certificate as sent, read with ``cryptography``). A port that only speaks plaintext fails
  the handshake: "TLS not served".

Nothing here changes a node; a node that does not answer gets one line saying so.
"""

from __future__ import annotations

import datetime
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ringflow.cql import ErrorResponse, FrameDecoder, Options, Supported, decode_message
from ringflow.cql import encode_message as encode_cql
from ringflow.errors import RingflowError
from ringflow.runtime import TLS_DIR_NAME

PROBE_TIMEOUT_S = 3.0
MAX_REPLY_BYTES = 64 * 1024
EXPIRY_WARNING_DAYS = 30


@dataclass(frozen=True, slots=True)
class TlsHandshake:
    """What a TLS handshake with a native port found (``error`` set when it failed)."""

    version: str | None = None
    verified: bool = False
    subject: str | None = None
    not_after: datetime.datetime | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class NativePortCheck:
    """One node's native port: how it answered plaintext, and its TLS handshake."""

    endpoint: str
    plaintext: str
    """``served``, ``refused (...)`` or ``no answer (...)``."""
    tls: TlsHandshake


def _read_reply(sock: socket.socket | ssl.SSLSocket) -> object:
    """The first response frame's message, or None if the connection closed first."""
    decoder = FrameDecoder(max_frame_size=MAX_REPLY_BYTES)
    received = 0
    while received < MAX_REPLY_BYTES:
        data = sock.recv(4096)
        if not data:
            return None
        received += len(data)
        decoder.feed(data)
        frame = decoder.next_frame()
        if frame is not None:
            return decode_message(frame, max_body_size=MAX_REPLY_BYTES).message
    return None


def probe_plaintext(address: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """How the port answers a plaintext OPTIONS request (module docstring)."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as sock:
            sock.sendall(encode_cql(Options(), 1))
            reply = _read_reply(sock)
    except (OSError, ValueError, RingflowError) as error:  # a reset refuses too
        return f"no answer ({type(error).__name__}: {error})"
    if isinstance(reply, Supported):
        return "served"
    if isinstance(reply, ErrorResponse):
        return f"refused ({reply.message})"
    return "refused (connection closed)"


def _tls_context(tls_dir: Path | None) -> tuple[ssl.SSLContext, bool]:
    """A client context trusting the cluster's CA (and presenting its client certificate);
    without a CA, one that takes any certificate. (context, whether it verifies)"""
    ca = None if tls_dir is None else tls_dir / "ca.crt"
    if ca is None or not ca.exists():
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context, False
    context = ssl.create_default_context(cafile=str(ca))
    assert tls_dir is not None
    client = tls_dir / "client.crt"
    if client.exists():
        context.load_cert_chain(client, tls_dir / "client.key")
    return context, True


def _certificate(der: bytes | None) -> tuple[str | None, datetime.datetime | None]:
    if not der:
        return None, None
    from cryptography import x509

    certificate = x509.load_der_x509_certificate(der)
    return certificate.subject.rfc4514_string(), certificate.not_valid_after_utc


def probe_tls(
    address: str, port: int, tls_dir: Path | None, timeout_s: float = PROBE_TIMEOUT_S
) -> TlsHandshake:
    """A TLS handshake with the port (module docstring); the certificate's subject and expiry."""
    try:
        context, verifying = _tls_context(tls_dir)
        with (
            socket.create_connection((address, port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=address) as sock,
        ):
            subject, not_after = _certificate(sock.getpeercert(binary_form=True))
            version = sock.version()
            sock.sendall(encode_cql(Options(), 1))  # a refused client certificate shows here
            if not isinstance(_read_reply(sock), Supported):
                return TlsHandshake(version, verifying, subject, not_after, "no CQL answer")
            return TlsHandshake(version, verifying, subject, not_after)
    except (OSError, ValueError, RingflowError) as error:  # ssl.SSLError is an OSError
        return TlsHandshake(error=f"{type(error).__name__}: {error}")


def check_native_port(
    address: str, port: int, tls_dir: Path | None, timeout_s: float = PROBE_TIMEOUT_S
) -> NativePortCheck:
    return NativePortCheck(
        f"{address}:{port}",
        probe_plaintext(address, port, timeout_s),
        probe_tls(address, port, tls_dir, timeout_s),
    )


def format_check(check: NativePortCheck, now: datetime.datetime) -> str:
    """One line: ``TLS check <endpoint>: TLS required|optional|not served ...``."""
    handshake = check.tls
    if handshake.error is not None:
        return (
            f"TLS check {check.endpoint}: TLS not served ({_short(handshake.error)}); "
            f"plaintext {check.plaintext}"
        )
    mode = "required" if check.plaintext.startswith("refused") else "optional"
    if check.plaintext.startswith("no answer"):
        mode = "served"
    trust = "verified by the cluster CA" if handshake.verified else "not verified (no CA)"
    expiry = ""
    if handshake.not_after is not None:
        days = (handshake.not_after - now).days
        warning = " EXPIRED" if days < 0 else " EXPIRES SOON" if days < EXPIRY_WARNING_DAYS else ""
        expiry = f", expires {handshake.not_after.date().isoformat()} ({days} days){warning}"
    return (
        f"TLS check {check.endpoint}: TLS {mode} ({handshake.version}), certificate "
        f"{handshake.subject} {trust}{expiry}; plaintext {check.plaintext}"
    )


def _short(text: str, limit: int = 120) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def tls_directory(layout: Mapping[str, object], data: Path) -> Path | None:
    """Where ``cluster start --tls`` put the CA and certificates, if it did."""
    tls = layout.get("tls")
    if isinstance(tls, Mapping):
        return Path(str(tls.get("directory", data / TLS_DIR_NAME)))
    return None


def tls_checks(
    statuses: Sequence[Mapping[str, object]],
    layout: Mapping[str, object],
    data: Path,
    now: datetime.datetime | None = None,
) -> list[str]:
    """One TLS check line per running node (``statuses``: their ``status.json``)."""
    moment = now or datetime.datetime.now(datetime.UTC)
    tls_dir = tls_directory(layout, data)
    lines = []
    for status in statuses:
        address = str(status.get("address"))
        port = status.get("native_port", 9042)
        port = port if isinstance(port, int) else 9042
        lines.append(format_check(check_native_port(address, port, tls_dir), moment))
    return lines


def auth_summary(statuses: Sequence[Mapping[str, object]], layout: Mapping[str, object]) -> str:
    """One line on the cluster's auth (module docstring)."""
    modes = {str(s.get("address")): s.get("auth_mode") for s in statuses if s.get("auth_mode")}
    if not modes:
        given = layout.get("auth")
        if isinstance(given, Mapping) and given:
            shown = ", ".join(f"{k} {v}" for k, v in sorted(given.items()))
            return f"auth: {shown} (cluster.json; no running node reports its mode)"
        return "auth: off (AllowAllAuthenticator/AllowAllAuthorizer; cluster.json)"
    distinct = set(modes.values())
    if len(distinct) > 1:
        shown = ", ".join(f"{address} {mode}" for address, mode in sorted(modes.items()))
        return f"auth: MIXED, nodes of other modes are kept out of the ring: {shown}"
    mode = str(next(iter(distinct)))
    state = "off" if mode == "AllowAllAuthenticator/AllowAllAuthorizer" else "on"
    return f"auth: {state} ({mode}) on {len(modes)} running node(s)"
