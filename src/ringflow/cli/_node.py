"""``ringflow node start``: run one node in the foreground until SIGTERM or SIGINT.

A thin shell over ``ringflow.node``: the options become a ``NodeConfig`` (omitted identity
settings come from the data directory's saved record, so a restart needs only ``--address``
and ``--data``), then ``run_node`` opens the store, publishes the first CDC generation if the
node is new, and serves CQL on ``address:port``. When the server listens it prints one line,
``ringflow node <host id> listening on <address>:<port>``, which scripts and tests wait for.
Exit code 0 after a clean shutdown; configuration mistakes are usage errors (2).

With ``--seeds`` the node runs as a cluster node (gossip with the seeds, coordinated reads and
writes), and accepts the node timing and replica capture options (``--write-timeout-ms``,
``--slice-width-s`` ..., see ``ringflow cluster start``); without seeds it is a single node,
which has no use for them (usage error).

The native transport limits take Cassandra's names (``--native-transport-max-concurrent-
connections-per-ip 256``, ``--native-transport-idle-timeout 30s``, ... see ``_native_options``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ringflow.cli import EXIT_OK
from ringflow.cli._cluster import (
    LOG_LEVELS,
    add_capture_options,
    add_timing_options,
    given_capture,
    given_timings,
)
from ringflow.cli._native_options import (
    SWITCH_INTERVAL_S,
    add_auth_options,
    add_native_options,
    auth_settings_of,
    given_auth_options,
    given_native_limits,
)
from ringflow.cli._tls_options import add_node_tls_options, given_node_tls
from ringflow.errors import ConfigurationError
from ringflow.node import node_config, run_node
from ringflow.runtime import run_event_loop

if TYPE_CHECKING:
    from ringflow.cli import Subcommands


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser("node", help="run a ringflow node")
    actions = parser.add_subparsers(dest="node_command", metavar="<action>", required=True)
    start = actions.add_parser(
        "start",
        help="start a node in the foreground (stop it with SIGTERM or Ctrl-C)",
        description="Start a single ringflow node serving CQL (native protocol v4).",
    )
    start.add_argument("--address", required=True, help="loopback address to bind (127.0.0.x)")
    start.add_argument("--data", required=True, type=Path, help="data directory")
    start.add_argument("--port", type=int, help="native (CQL) port (default 9042)")
    start.add_argument("--cluster-name", help="cluster name (default: saved, else 'ringflow')")
    start.add_argument("--num-tokens", type=int, help="vnodes (default: saved, else 16)")
    start.add_argument("--dc", help="data center (default: saved, else 'datacenter1')")
    start.add_argument("--rack", help="rack (default: saved, else 'rack1')")
    start.add_argument("--shards", type=int, help="shards advertised (default: saved, else 1)")
    start.add_argument(
        "--ignore-msb", type=int, help="sharding ignore_msb (default: saved, else 12)"
    )
    start.add_argument("--log-level", default="WARNING", choices=LOG_LEVELS)
    start.add_argument("--seeds", help="comma-separated seed addresses: run as a cluster node")
    add_timing_options(start)
    add_capture_options(start)
    add_native_options(start)
    add_node_tls_options(start)
    add_auth_options(start)
    start.set_defaults(handler=run_start)
    from ringflow.cli._topology import register_node

    register_node(actions)  # add, decommission


def run_start(arguments: argparse.Namespace) -> int:
    timings = given_timings(arguments)
    capture = given_capture(arguments)
    seeds = [seed for seed in (arguments.seeds or "").split(",") if seed]
    if (timings or capture) and not seeds:
        names = [*timings, *("replica_capture" if n == "enabled" else n for n in capture)]
        flags = ", ".join("--" + name.replace("_", "-") for name in sorted(names))
        raise ConfigurationError(
            f"{flags}: timing and capture options configure a cluster node (give --seeds)"
        )
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    logging.basicConfig(
        level=arguments.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    client_encryption, server_encryption = given_node_tls(arguments)
    config = node_config(
        address=arguments.address,
        data_dir=arguments.data,
        native_port=arguments.port,
        cluster_name=arguments.cluster_name,
        num_tokens=arguments.num_tokens,
        dc=arguments.dc,
        rack=arguments.rack,
        shard_count=arguments.shards,
        ignore_msb=arguments.ignore_msb,
        limits=given_native_limits(arguments),
        client_encryption=client_encryption,
        server_encryption=server_encryption,
        auth=auth_settings_of(given_auth_options(arguments)),
    )

    def announce(line: str) -> None:
        print(line, flush=True)

    if seeds:
        from ringflow.cluster.service import CaptureSettings, NodeTimings
        from ringflow.node import run_cluster_node

        run_event_loop(
            run_cluster_node(
                config,
                seeds=seeds,
                timings=NodeTimings.of(timings),
                capture=CaptureSettings.of(capture),
                on_ready=announce,
            )
        )
    else:
        run_event_loop(run_node(config, on_ready=announce))
    print("ringflow node stopped", file=sys.stderr, flush=True)
    return EXIT_OK
