"""CDC admin command: ``ringflow cluster new-cdc-generation ADDRESS --data CLUSTER``.

Asks the node at ``ADDRESS`` to create a new CDC generation over the current ring (as Scylla's
``nodetool checkAndRepairCdcStreams`` regenerates streams). The request goes over the node's
request channel (the owner-only Unix socket ``control.sock`` in its data directory, as
``decommission``: no extra port; ``ringflow.node._control``). The node proposes
the generation once the cluster is ready and settled: a v1 generation while some node lacks
``CDC_GENERATIONS_V2``, else a v2 one (``ringflow.cluster.service._cdc_generations``). The
command returns once the node has taken the request; ``ringflow cluster status`` then shows the
new generation id on every node.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ringflow.cli import EXIT_OK
from ringflow.cli import _cluster as cluster_cli
from ringflow.errors import ConfigurationError
from ringflow.node import request_until_taken

if TYPE_CHECKING:
    from ringflow.cli import Subcommands  # noqa: F401


def register_cdc_admin(actions: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sub = actions.add_parser(
        "new-cdc-generation", help="ask a node to create a new CDC generation over the ring"
    )
    sub.add_argument("address")
    sub.add_argument("--data", required=True, type=Path)
    sub.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the node")
    sub.set_defaults(handler=run_new_cdc_generation)


def run_new_cdc_generation(arguments: argparse.Namespace) -> int:
    data: Path = arguments.data
    layout = cluster_cli._load_layout(data)
    node = cluster_cli._node_at(layout, arguments.address)
    directory = data / str(node["dir"])
    if cluster_cli._pid(directory) is None:
        raise ConfigurationError(f"node {arguments.address} is not running")
    deadline = time.monotonic() + arguments.timeout
    request = {"request": "new-cdc-generation"}
    request_until_taken(directory, request, deadline, f"new CDC generation at {arguments.address}")
    print(f"node {arguments.address} will propose a new CDC generation", flush=True)
    return EXIT_OK
