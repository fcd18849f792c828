"""A 3-node RF=3 cluster of real ``ringflow cluster run-node`` processes, shared by the module.

Nodes listen on 127.a.b.(c..c+2), a random loopback block (other engineers' tests use other
addresses at the same time), gossip every 200 ms so failure detection takes seconds, and are
always stopped (SIGTERM, then SIGKILL) in teardown. Every wait is bounded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("cassandra")

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import (
    FallthroughRetryPolicy,
    LoadBalancingPolicy,
    RoundRobinPolicy,
    TokenAwarePolicy,
    WhiteListRoundRobinPolicy,
)

from ringflow.cli._demo_cluster import free_loopback_block

START_TIMEOUT_S = 60.0
NODES = 3


def ringflow(*arguments: str, timeout_s: float = 90.0) -> str:
    script = Path(sys.executable).parent / "ringflow"
    result = subprocess.run(
        [str(script), *arguments], capture_output=True, text=True, timeout=timeout_s
    )
    assert result.returncode == 0, f"ringflow {arguments} failed: {result.stdout}{result.stderr}"
    return result.stdout


def free_block(count: int) -> str:
    """The first of ``count`` loopback addresses whose CQL and internode ports are free."""
    return free_loopback_block(count)


@dataclass
class LocalCluster:
    data: Path
    addresses: list[str]

    def kill(self, address: str) -> None:
        ringflow("cluster", "kill", address, "--data", str(self.data))

    def restart(self, address: str) -> None:
        ringflow("cluster", "restart", address, "--data", str(self.data))

    def wait_ready(self) -> None:
        # ``start`` on a laid-out cluster restarts nothing running and waits for UP + schema.
        ringflow("cluster", "start", "--data", str(self.data), "--timeout", str(START_TIMEOUT_S))

    def session(self, *, only: str | None = None, timeout_s: float = 15.0) -> Session:
        """A driver session: token-aware over all nodes, or pinned to ``only``."""
        policy = (
            WhiteListRoundRobinPolicy([only])
            if only is not None
            else TokenAwarePolicy(RoundRobinPolicy())
        )
        return self.connect(only or self.addresses[0], policy, timeout_s=timeout_s)

    def connect(
        self, contact: str, policy: LoadBalancingPolicy, *, timeout_s: float, **options: Any
    ) -> Session:
        """A driver session through ``contact`` routed by ``policy``, never retrying (the tests
        see every failure); ``options`` go to the driver's ``Cluster``, shut down at teardown."""
        profile = ExecutionProfile(
            load_balancing_policy=policy,
            retry_policy=FallthroughRetryPolicy(),
            request_timeout=timeout_s,
        )
        cluster = Cluster(
            [contact],
            protocol_version=4,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            connect_timeout=10,
            **options,
        )
        self._drivers.append(cluster)
        return cluster.connect()

    def __post_init__(self) -> None:
        self._drivers: list[Cluster] = []

    def close_drivers(self) -> None:
        for cluster in self._drivers:
            cluster.shutdown()
        self._drivers.clear()


_C = TypeVar("_C", bound=LocalCluster)


@contextmanager
def started_cluster(
    data: Path,
    *options: str,
    nodes: int = NODES,
    gossip_ms: int = 200,
    kind: type[_C] = LocalCluster,  # type: ignore[assignment]
    log_lines: int = 5,
) -> Iterator[_C]:
    """``ringflow cluster start`` of ``nodes`` nodes on a free loopback block (``options``
    passed on); afterwards the drivers closed, the cluster stopped and each node log's last
    ``log_lines`` lines printed."""
    first = free_block(nodes)
    prefix, last = first.rsplit(".", 1)
    cluster = kind(data, [f"{prefix}.{int(last) + i}" for i in range(nodes)])
    try:
        ringflow(
            "cluster", "start", "--nodes", str(nodes), *options, "--data", str(data),
            "--first-address", first, "--gossip-interval-ms", str(gossip_ms),
            "--timeout", str(START_TIMEOUT_S),
        )  # fmt: skip
        yield cluster
    finally:
        cluster.close_drivers()
        try:
            ringflow("cluster", "stop", "--data", str(data), timeout_s=30)
        finally:
            for log in sorted(data.glob("node*/node.log")):
                tail = log.read_text(errors="replace").splitlines()[-log_lines:]
                print(f"--- {log}", *tail, sep="\n")


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with started_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


def wait_until(condition: object, timeout_s: float, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception as error:  # the cluster is converging: retry until the deadline
            last = error
        time.sleep(0.3)
    raise AssertionError(f"{what}: not true after {timeout_s} s (last error: {last!r})")


CONVICTION_TIMEOUT_S = 60.0
"""How long a test waits for every node's failure detector to convict (or clear) a node."""


def node_views(data: Path) -> dict[str, dict[str, str]]:
    """``{viewer address: {address: "UN"|"DN"}}`` from each node's ``status.json``."""
    layout = json.loads((data / "cluster.json").read_text())
    views: dict[str, dict[str, str]] = {}
    for node in layout["nodes"]:
        try:
            status = json.loads((data / node["dir"] / "status.json").read_text())
        except (OSError, ValueError):
            continue
        views[node["address"]] = {n["address"]: n["state"] for n in status["nodes"]}
    return views


def wait_seen(cluster: LocalCluster, viewers: list[str], states: dict[str, str]) -> None:
    """Wait until every viewer's failure detector reports ``states`` (bounded)."""

    def seen() -> bool:
        views = node_views(cluster.data)
        return all(
            all(views.get(viewer, {}).get(address) == state for address, state in states.items())
            for viewer in viewers
        )

    wait_until(seen, CONVICTION_TIMEOUT_S, f"{viewers} see {states}")
