"""Topology commands: ``ringflow cluster add|decommission|join-node`` and ``ringflow node
add|decommission``.

* ``cluster add --data CLUSTER [--dc ..] [--rack ..] [--num-tokens N] [--timeout S]``: the next
  loopback address after the cluster's last node, a new ``nodeN`` directory, a node process
  started with ``join-node`` (it learns the ring through gossip, chooses its tokens, bootstraps:
  ``ringflow.cluster.service._bootstrap``); returns once every node sees it UP and NORMAL with
  one CDC generation, its host id and tokens then saved in ``cluster.json``.
* ``node add --address A --data DIR --seeds S [--dc ..] [--rack ..]``: the same joining node in
  the foreground, outside a cluster directory (without ``--address``, ``DIR`` is a cluster
  directory and this is ``cluster add``).
* ``cluster removenode HOST_ID --data CLUSTER`` (or ``node removenode HOST_ID --data NODE_DIR``
  of a live node): a running node coordinates the removal of the dead node (asked over its
  request channel, ``ringflow.node._control``): every live node pulls what it gains from
  surviving replicas, the dead node is dropped from the ring and ``system.peers``, a new CDC
  generation is made.
* ``node decommission ADDRESS --data DIR`` (and ``cluster decommission``): ``DIR`` is a cluster
  directory (the node is found by address) or the node's data directory. The request goes over
  the node's request channel, the owner-only Unix socket ``control.sock`` in its data directory
  (a local channel: no extra port, nothing reachable from outside the machine;
  ``ringflow.node._control``), asked again while another topology change runs; the command
  then waits for the node to finish leaving and exit, and drops it from ``cluster.json``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from ringflow.cli import EXIT_OK
from ringflow.cli import _cluster as cluster_cli
from ringflow.cli._tls_options import add_node_tls_options, given_node_tls, node_tls_arguments
from ringflow.errors import ConfigurationError
from ringflow.node import node_config, prepare_data_dir, request_until_taken
from ringflow.runtime import run_event_loop

if TYPE_CHECKING:
    from ringflow.cli import Subcommands  # noqa: F401

RECORD_FILE = "node.json"


def register_cluster(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add = actions.add_parser("add", help="add (bootstrap) a node to the running cluster")
    add.add_argument("--data", required=True, type=Path)
    add.add_argument("--dc", help="data center (default: the first node's)")
    add.add_argument("--rack", help="rack (default: rack1)")
    add.add_argument("--num-tokens", type=int, help="vnodes (default: as the first node)")
    add.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for NORMAL")
    add.set_defaults(handler=run_cluster_add)
    leave = actions.add_parser("decommission", help="decommission a running node")
    leave.add_argument("address")
    leave.add_argument("--data", required=True, type=Path)
    leave.add_argument("--timeout", type=float, default=180.0)
    leave.set_defaults(handler=run_decommission)
    remove = actions.add_parser("removenode", help="remove a dead node (others restream)")
    remove.add_argument("host_id")
    remove.add_argument("--data", required=True, type=Path)
    remove.add_argument("--timeout", type=float, default=180.0)
    remove.set_defaults(handler=run_removenode)
    join = actions.add_parser("join-node", help="(internal) run a joining node in the foreground")
    _join_options(join)
    join.set_defaults(handler=run_join_node)


def register_node(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add = actions.add_parser("add", help="run a node that joins a running cluster (foreground)")
    _join_options(add)
    add.set_defaults(handler=run_join_node)
    leave = actions.add_parser("decommission", help="decommission a running node")
    leave.add_argument("address")
    leave.add_argument("--data", required=True, type=Path, help="node or cluster directory")
    leave.add_argument("--timeout", type=float, default=180.0)
    leave.set_defaults(handler=run_decommission)
    remove = actions.add_parser("removenode", help="remove a dead node (others restream)")
    remove.add_argument("host_id")
    remove.add_argument(
        "--data", required=True, type=Path, help="a live node's or cluster directory"
    )
    remove.add_argument("--timeout", type=float, default=180.0)
    remove.set_defaults(handler=run_removenode)


def _join_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address",
        help="loopback address (127.0.0.N); without it DIR must be a cluster directory and the "
        "node is added as 'ringflow cluster add' does",
    )
    parser.add_argument("--data", required=True, type=Path)
    parser.add_argument("--seeds", default="127.0.0.1", help="comma-separated seed addresses")
    parser.add_argument("--dc")
    parser.add_argument("--rack")
    parser.add_argument("--num-tokens", type=int)
    parser.add_argument("--log-level", default="WARNING")
    cluster_cli.add_timing_options(parser)
    cluster_cli.add_capture_options(parser)
    add_node_tls_options(parser)


def run_join_node(arguments: argparse.Namespace) -> int:
    from ringflow.cluster.service import CaptureSettings, NodeTimings
    from ringflow.node import run_cluster_node

    if arguments.address is None:
        if not (arguments.data / cluster_cli.LAYOUT_FILE).exists():
            raise ConfigurationError("--address is needed outside a cluster directory")
        arguments.timeout = getattr(arguments, "timeout", None) or 180.0
        return run_cluster_add(arguments)
    logging.basicConfig(
        level=arguments.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    client_encryption, server_encryption = given_node_tls(arguments)
    config = node_config(
        address=arguments.address,
        data_dir=arguments.data,
        dc=arguments.dc,
        rack=arguments.rack,
        num_tokens=arguments.num_tokens,
        client_encryption=client_encryption,
        server_encryption=server_encryption,
    )
    seeds = [seed for seed in arguments.seeds.split(",") if seed]
    timings = NodeTimings.of(cluster_cli.given_timings(arguments))
    capture = CaptureSettings.of(cluster_cli.given_capture(arguments))

    def announce(line: str) -> None:
        print(line, flush=True)

    run_event_loop(
        run_cluster_node(
            config,
            seeds=seeds,
            timings=timings,
            capture=capture,
            bootstrap=True,
            on_ready=announce,
        )
    )
    return EXIT_OK


# -- cluster add -------------------------------------------------------------------------------


def _next_node(layout: dict[str, object], arguments: argparse.Namespace) -> dict[str, object]:
    nodes = cluster_cli._nodes(layout)
    departed = layout.get("departed", [])
    everyone = nodes + (departed if isinstance(departed, list) else [])
    last = max(ipaddress.IPv4Address(str(node["address"])) for node in everyone)
    address = last + 1
    if not address.is_loopback or len(nodes) >= cluster_cli.MAX_NODES:
        raise ConfigurationError(f"no room for another node after {last}")
    tokens = nodes[0]["tokens"] if nodes else []
    return {
        "address": str(address),
        "dc": arguments.dc or (str(nodes[0]["dc"]) if nodes else "datacenter1"),
        "rack": arguments.rack or "rack1",
        "host_id": "",
        "tokens": [],
        "dir": f"node{len(everyone) + 1}",
        "num_tokens": arguments.num_tokens or (len(tokens) if isinstance(tokens, list) else 8),
    }


def run_cluster_add(arguments: argparse.Namespace) -> int:
    data: Path = arguments.data
    layout = cluster_cli._load_layout(data)
    node = _next_node(layout, arguments)
    directory = data / str(node["dir"])
    prepare_data_dir(directory)
    command = [
        sys.executable,
        "-c",
        cluster_cli._LAUNCH,
        "cluster",
        "join-node",
        "--address",
        str(node["address"]),
        "--data",
        str(directory),
        "--seeds",
        ",".join(cluster_cli._seeds(cluster_cli._nodes(layout))),
        "--dc",
        str(node["dc"]),
        "--rack",
        str(node["rack"]),
        "--num-tokens",
        str(node["num_tokens"]),
        *cluster_cli.timing_arguments(cluster_cli._layout_timings(layout)),
        *cluster_cli.capture_arguments(cluster_cli.layout_capture(layout)),
        *node_tls_arguments(layout.get("tls"), str(node["address"]), make=True),
    ]
    with (directory / cluster_cli.LOG_FILE).open("ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    (directory / cluster_cli.PID_FILE).write_text(str(process.pid))
    cluster_cli._nodes(layout).append(node)
    _save_layout(data, layout)
    cluster_cli.wait_ready(data, layout, arguments.timeout)
    record = json.loads((directory / RECORD_FILE).read_text())
    node["host_id"] = str(record["host_id"])
    node["tokens"] = sorted(int(token) for token in record["tokens"])
    _save_layout(data, layout)
    print(f"node {node['address']} joined the cluster in {data}", flush=True)
    return EXIT_OK


def _save_layout(data: Path, layout: dict[str, object]) -> None:
    temporary = data / (cluster_cli.LAYOUT_FILE + ".tmp")
    temporary.write_text(json.dumps(layout, indent=1))
    temporary.replace(data / cluster_cli.LAYOUT_FILE)


def _depart(data: Path, layout: dict[str, object], gone: list[dict[str, object]]) -> None:
    """Move ``gone`` from the layout's nodes to its departed list and save the layout."""
    nodes = cluster_cli._nodes(layout)
    for node in gone:
        nodes.remove(node)
    departed = layout.setdefault("departed", [])
    assert isinstance(departed, list)
    departed.extend(gone)
    _save_layout(data, layout)


# -- decommission ------------------------------------------------------------------------------


def _left(directory: Path) -> bool:
    from ringflow.cluster.service import bootstrap_state

    return bootstrap_state(directory) == "left"


def run_decommission(arguments: argparse.Namespace) -> int:
    data: Path = arguments.data
    in_cluster = (data / cluster_cli.LAYOUT_FILE).exists()
    if in_cluster:
        layout = cluster_cli._load_layout(data)
        node = cluster_cli._node_at(layout, arguments.address)
        directory = data / str(node["dir"])
    else:
        directory = data
    managed = (directory / cluster_cli.PID_FILE).exists()
    if managed and cluster_cli._pid(directory) is None:
        raise ConfigurationError(f"node {arguments.address} is not running in {directory}")
    deadline = time.monotonic() + arguments.timeout
    request = {"request": "decommission"}
    request_until_taken(directory, request, deadline, f"decommission of {arguments.address}")
    while cluster_cli._pid(directory) is not None if managed else not _left(directory):
        if time.monotonic() > deadline:
            raise ConfigurationError(
                f"node {arguments.address} did not finish leaving in {arguments.timeout} s"
            )
        time.sleep(0.2)
    if in_cluster:
        _depart(data, layout, [node])
    print(f"node {arguments.address} left the ring", flush=True)
    return EXIT_OK


# -- removenode --------------------------------------------------------------------------------


def _removal_done(directory: Path, host_id: str) -> bool:
    try:
        status = json.loads((directory / cluster_cli.STATUS_FILE).read_text())
    except (OSError, ValueError):
        return False
    topology = status.get("topology") or {}
    return bool(
        topology.get("change") == "remove"
        and topology.get("removing") == host_id
        and topology.get("phase") == "done"
    )


def run_removenode(arguments: argparse.Namespace) -> int:
    data: Path = arguments.data
    host_id = str(uuid.UUID(arguments.host_id))
    layout: dict[str, object] | None = None
    if (data / cluster_cli.LAYOUT_FILE).exists():
        layout = cluster_cli._load_layout(data)
        running = [
            data / str(node["dir"])
            for node in cluster_cli._nodes(layout)
            if node["host_id"] != host_id and cluster_cli._pid(data / str(node["dir"]))
        ]
        if not running:
            raise ConfigurationError(f"no running node in {data} to coordinate the removal")
        directory = running[0]
    else:
        directory = data
    deadline = time.monotonic() + arguments.timeout
    request = {"request": "removenode", "host_id": host_id}
    request_until_taken(directory, request, deadline, f"removenode {host_id}")
    while not _removal_done(directory, host_id):
        if time.monotonic() > deadline:
            raise ConfigurationError(f"removenode {host_id} not done in {arguments.timeout} s")
        time.sleep(0.2)
    if layout is not None:
        gone = [node for node in cluster_cli._nodes(layout) if node["host_id"] == host_id]
        _depart(data, layout, gone)
    print(f"node {host_id} removed from the ring", flush=True)
    return EXIT_OK
