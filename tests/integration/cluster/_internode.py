"""Speaking the internode protocol to real nodes from a test: forged connections, the nodes'
views of each other, QUORUM through each node (issue 16).

A forged connection is a raw socket bound to a chosen loopback address (any 127.x address is
ours to bind), a hello naming whatever endpoint the test wants to claim, then messages made
with ``ringflow.cluster.service.encode_internode_message``. Every wait is bounded.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from ringflow.runtime import encode_hello
from ringflow.schema import Cell, Mutation, Row
from tests.integration.cluster.conftest import LocalCluster

INTERNODE_PORT = 7000
CLUSTER_NAME = "ringflow"
WATCH_S = 40.0
"""How long a test watches the cluster after an attack: the issue's partition showed after 30 s."""


def endpoint(address: str) -> str:
    return f"{address}:{INTERNODE_PORT}"


def outsider(cluster: LocalCluster, index: int = 0) -> str:
    """A loopback address of the cluster's block that no node uses."""
    prefix, last = cluster.addresses[0].rsplit(".", 1)
    used = {int(a.rsplit(".", 1)[1]) for a in cluster.addresses}
    free = [n for n in range(2, 255) if n not in used and abs(n - int(last)) > 8]
    return f"{prefix}.{free[index % len(free)]}"


def forge(
    target: str,
    *,
    bind: str,
    claim: str,
    data: bytes,
    hello: bytes | None = None,
    wait_close_s: float = 0.0,
) -> bool:
    """Connect from ``bind`` to ``target``'s internode port, say hello as ``claim`` (an
    endpoint), send ``data`` and close; with ``wait_close_s``, first wait that long for the
    node to close on us. True when the node closed the connection."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((bind, 0))
        sock.settimeout(10)
        sock.connect((target, INTERNODE_PORT))
        greeting = encode_hello(claim, endpoint(target)) if hello is None else hello
        try:
            sock.sendall(greeting + data)
        except OSError:
            return True  # closed on us while we wrote
        if wait_close_s <= 0:
            return False
        sock.settimeout(wait_close_s)
        try:
            return sock.recv(1) == b""
        except TimeoutError:
            return False
        except OSError:
            return True


def int32(value: int) -> bytes:
    return value.to_bytes(4, "big", signed=True)


def row_mutation(keyspace: str, table: str, key: int, value: int) -> Mutation:
    """The mutation of ``INSERT INTO keyspace.table (k, v) VALUES (key, value)`` (int columns)."""
    row = Row((), None, None, {"v": Cell.live(time.time_ns() // 1000, int32(value))})
    return Mutation(keyspace, table, (int32(key),), rows=(row,))


def status(cluster: LocalCluster, address: str) -> dict[str, Any]:
    index = cluster.addresses.index(address)
    document: dict[str, Any] = json.loads(
        (cluster.data / f"node{index + 1}" / "status.json").read_text()
    )
    return document


def views(cluster: LocalCluster) -> dict[str, dict[str, str]]:
    """``{viewer: {address: "UN"|"DN"}}`` from each node's ``status.json``."""
    return {
        address: {n["address"]: n["state"] for n in status(cluster, address)["nodes"]}
        for address in cluster.addresses
    }


def all_up(cluster: LocalCluster) -> bool:
    expected = set(cluster.addresses)
    return all(
        set(seen) == expected and all(state == "UN" for state in seen.values())
        for seen in views(cluster).values()
    )


def internode(cluster: LocalCluster, address: str) -> dict[str, int]:
    counters: dict[str, int] = status(cluster, address).get("internode", {})
    return counters


def watch_all_up(cluster: LocalCluster, seconds: float = WATCH_S) -> None:
    """Every node sees every other UP for ``seconds``: checked twice a second, failing at the
    first node seen DOWN (with who saw whom)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen = views(cluster)
        down = {viewer: v for viewer, v in seen.items() if any(s != "UN" for s in v.values())}
        assert not down, f"nodes seen down: {down}"
        time.sleep(0.5)


def quorum_through_each(cluster: LocalCluster, sessions: dict[str, Any], table: str) -> None:
    """A QUORUM write then a QUORUM read of it through each node."""
    marker = uuid.uuid4().int % 1_000_000
    for index, address in enumerate(cluster.addresses):
        session = sessions[address]
        key = 1_000_000 + marker * 10 + index
        write = SimpleStatement(
            f"INSERT INTO {table} (k, v) VALUES (%s, %s)",
            consistency_level=ConsistencyLevel.QUORUM,
        )
        session.execute(write, (key, index))
        read = SimpleStatement(
            f"SELECT v FROM {table} WHERE k = %s", consistency_level=ConsistencyLevel.QUORUM
        )
        assert [row.v for row in session.execute(read, (key,))] == [index], address


def read_at_all(session: Any, table: str, key: int) -> list[Any]:
    statement = SimpleStatement(
        f"SELECT v FROM {table} WHERE k = %s", consistency_level=ConsistencyLevel.ALL
    )
    return list(session.execute(statement, (key,)))
