"""The native transport limits as ``ringflow node start`` options, with Cassandra's names.

One option per ``NATIVE_TRANSPORT_OPTIONS`` entry: ``--native-transport-max-concurrent-connections
N``, ``--native-transport-idle-timeout 30s``, ``--native-transport-max-frame-size 16MiB`` ...
(sizes and durations as in ``cassandra.yaml``; defaults and why: ``ringflow.cql``'s
``ServerLimits``). A bad value is a usage error (``ConfigurationError``, exit 2).
"""

from __future__ import annotations

import argparse

from ringflow.cql import AuthSettings, ServerLimits
from ringflow.node import NATIVE_TRANSPORT_OPTIONS, auth_settings, server_limits

SWITCH_INTERVAL_S = 0.001
"""The GIL switch interval of a node process (Python's default is 5 ms). The event loop and
the storage worker share the GIL; while the loop is busy (a client streaming a large frame),
every GIL hand-off to the worker waited up to 5 ms, so each small request of every other
client paid several of those (issue 16 bench, ``bench/bench_hostile.py``)."""

_METAVARS = {"count": "N", "size": "SIZE", "duration": "DURATION", "flag": "true|false"}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_native_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("native transport limits (cassandra.yaml names)")
    defaults = ServerLimits()
    for name, (field_name, kind) in NATIVE_TRANSPORT_OPTIONS.items():
        group.add_argument(
            _flag(name),
            dest=name,
            metavar=_METAVARS[kind],
            help=f"default {getattr(defaults, field_name)}"
            + (" s" if kind == "duration" else " bytes" if kind == "size" else ""),
        )


def given_native_limits(arguments: argparse.Namespace) -> ServerLimits | None:
    """The limits the command line sets, or ``None`` when it sets none."""
    given: dict[str, object] = {
        name: getattr(arguments, name)
        for name in NATIVE_TRANSPORT_OPTIONS
        if getattr(arguments, name, None) is not None
    }
    return server_limits(given) if given else None


def given_native_options(arguments: argparse.Namespace) -> dict[str, str]:
    """The native transport options given, as given (validated), to save in a cluster layout."""
    given = {
        name: str(getattr(arguments, name))
        for name in NATIVE_TRANSPORT_OPTIONS
        if getattr(arguments, name, None) is not None
    }
    server_limits(dict(given))
    return given


def native_arguments(options: object) -> list[str]:
    """Saved native transport options as a node command line (``run-node``)."""
    if not isinstance(options, dict):
        return []
    return [part for name, value in sorted(options.items()) for part in (_flag(name), str(value))]


# -- authentication (cassandra.yaml's authenticator / authorizer / roles_validity) ----------------

AUTH_OPTIONS = ("authenticator", "authorizer", "roles_validity")


def add_auth_options(parser: argparse.ArgumentParser, *, shorthand: bool = False) -> None:
    """``--authenticator PasswordAuthenticator --authorizer CassandraAuthorizer
    --roles-validity 2000ms``; with ``shorthand`` also ``--auth`` (both on)."""
    group = parser.add_argument_group("authentication and authorization (cassandra.yaml names)")
    group.add_argument(
        "--authenticator", help="AllowAllAuthenticator (default) or PasswordAuthenticator"
    )
    group.add_argument("--authorizer", help="AllowAllAuthorizer (default) or CassandraAuthorizer")
    group.add_argument(
        "--roles-validity", dest="roles_validity", metavar="DURATION",
        help="how long roles and permissions are cached (default 2000ms)",
    )  # fmt: skip
    if shorthand:
        group.add_argument(
            "--auth",
            action="store_true",
            help="PasswordAuthenticator + CassandraAuthorizer; the default superuser is "
            "cassandra/cassandra (change its password)",
        )


def given_auth_options(arguments: argparse.Namespace) -> dict[str, str]:
    """The auth options given (validated), to save in a cluster layout."""
    given = {
        name: str(getattr(arguments, name))
        for name in AUTH_OPTIONS
        if getattr(arguments, name, None) is not None
    }
    if getattr(arguments, "auth", False):
        given.setdefault("authenticator", "PasswordAuthenticator")
        given.setdefault("authorizer", "CassandraAuthorizer")
    auth_settings_of(given)
    return given


def auth_settings_of(options: object) -> AuthSettings:
    if not isinstance(options, dict):
        return AuthSettings()
    return auth_settings(
        str(options.get("authenticator", "AllowAllAuthenticator")),
        str(options.get("authorizer", "AllowAllAuthorizer")),
        validity_ms=options.get("roles_validity"),
    )


def auth_arguments(options: object) -> list[str]:
    """Saved auth options as a node command line (``run-node``)."""
    if not isinstance(options, dict):
        return []
    return [
        part
        for name, value in sorted(options.items())
        if name in AUTH_OPTIONS
        for part in ("--" + name.replace("_", "-"), str(value))
    ]
