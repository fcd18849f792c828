"""``ringflow cluster status``'s security lines from given facts (``cli._security_status``):
the auth line for one mode, mixed modes and no running node; the TLS check line for a required,
an optional and a missing TLS, with the expiry warnings. The live probes are tested against
real clusters in ``tests/integration/cluster/test_tls.py`` and ``test_auth.py``."""

from __future__ import annotations

import datetime

from ringflow.cli._security_status import (
    NativePortCheck,
    TlsHandshake,
    auth_summary,
    format_check,
)

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
ON = "PasswordAuthenticator/CassandraAuthorizer"
OFF = "AllowAllAuthenticator/AllowAllAuthorizer"


def test_the_auth_line_says_the_mode_or_names_the_nodes_that_differ() -> None:
    nodes = [{"address": "127.0.0.1", "auth_mode": ON}, {"address": "127.0.0.2", "auth_mode": ON}]
    assert auth_summary(nodes, {}) == f"auth: on ({ON}) on 2 running node(s)"
    assert auth_summary(nodes[:1], {}) == f"auth: on ({ON}) on 1 running node(s)"
    mixed = [nodes[0], {"address": "127.0.0.2", "auth_mode": OFF}]
    assert auth_summary(mixed, {}) == (
        f"auth: MIXED, nodes of other modes are kept out of the ring: 127.0.0.1 {ON}, "
        f"127.0.0.2 {OFF}"
    )
    assert auth_summary([], {}).startswith("auth: off")
    layout = {"auth": {"authenticator": "PasswordAuthenticator"}}
    assert auth_summary([], layout).startswith("auth: authenticator PasswordAuthenticator")


def _handshake(days: int) -> TlsHandshake:
    return TlsHandshake("TLSv1.3", True, "CN=127.0.0.1", NOW + datetime.timedelta(days=days))


def test_the_tls_check_line_says_required_or_optional_and_warns_of_expiry() -> None:
    required = NativePortCheck("127.0.0.1:9042", "refused (requires TLS)", _handshake(400))
    assert format_check(required, NOW) == (
        "TLS check 127.0.0.1:9042: TLS required (TLSv1.3), certificate CN=127.0.0.1 verified by "
        "the cluster CA, expires 2031-02-05 (400 days); plaintext refused (requires TLS)"
    )
    optional = NativePortCheck("127.0.0.1:9042", "served", _handshake(10))
    assert "TLS optional" in format_check(optional, NOW)
    assert "(10 days) EXPIRES SOON" in format_check(optional, NOW)
    assert "EXPIRED" in format_check(NativePortCheck("a:1", "served", _handshake(-2)), NOW)
    plain = NativePortCheck("127.0.0.1:9042", "served", TlsHandshake(error="SSLError: wrong"))
    assert format_check(plain, NOW) == (
        "TLS check 127.0.0.1:9042: TLS not served (SSLError: wrong); plaintext served"
    )
