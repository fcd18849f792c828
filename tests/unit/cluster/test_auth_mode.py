"""Nodes of one cluster agree on authentication (issue 18 part 1): a peer gossiping another
AUTH_MODE is named by ``auth_mismatches`` (the node keeps it out of its ring and logs it), an
older peer gossiping none is not refused; the node settings take cassandra.yaml's names."""

from __future__ import annotations

import pytest

from ringflow.cluster._gossip_state import (
    ApplicationState,
    EndpointState,
    HeartBeatState,
    VersionedValue,
)
from ringflow.cluster.service._membership import auth_mismatches
from ringflow.cql import AuthSettings
from ringflow.errors import ConfigurationError
from ringflow.node import auth_mode, auth_settings

SECURED = "PasswordAuthenticator/CassandraAuthorizer"
OPEN = "AllowAllAuthenticator/AllowAllAuthorizer"


def _state(mode: str | None) -> EndpointState:
    values = {} if mode is None else {ApplicationState.AUTH_MODE: VersionedValue(mode, 1)}
    return EndpointState(HeartBeatState(1, 1), values)


def test_peers_with_another_auth_mode_are_named() -> None:
    states = {"a:7000": _state(SECURED), "b:7000": _state(OPEN), "c:7000": _state(None)}
    assert auth_mismatches(states, SECURED) == {"b:7000": OPEN}
    assert auth_mismatches(states, OPEN) == {"a:7000": SECURED}
    assert auth_mismatches(states, None) == {}


def test_settings_take_cassandra_names() -> None:
    assert auth_settings() == AuthSettings()
    secured = auth_settings(
        "org.apache.cassandra.auth.PasswordAuthenticator", "CassandraAuthorizer",
        validity_ms="5s",
    )  # fmt: skip
    assert secured == AuthSettings(authenticate=True, authorize=True, validity_ms=5000)
    assert auth_mode(secured) == SECURED and auth_mode(AuthSettings()) == OPEN
    with pytest.raises(ConfigurationError, match="authenticator must be one of"):
        auth_settings("LdapAuthenticator")
    with pytest.raises(ConfigurationError, match="needs authenticator PasswordAuthenticator"):
        auth_settings("AllowAllAuthenticator", "CassandraAuthorizer")
