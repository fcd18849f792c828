"""The native transport limits as ``ringflow node start`` options, with Cassandra's names.

One option per ``NATIVE_TRANSPORT_OPTIONS`` entry: ``--native-transport-max-concurrent-connections
N``, ``--native-transport-idle-timeout 30s``, ``--native-transport-max-frame-size 16MiB`` ...
(sizes and durations as in ``cassandra.yaml``; defaults and why: ``ringflow.cql``'s
``ServerLimits``). A bad value is a usage error (``ConfigurationError``, exit 2).
"""

from __future__ import annotations

import argparse

from ringflow.cql import ServerLimits
from ringflow.node import NATIVE_TRANSPORT_OPTIONS, server_limits

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
