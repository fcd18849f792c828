"""What the cluster benches share: the ``ringflow`` CLI, a free loopback block, a local cluster
started and stopped with ``ringflow cluster start/stop`` (node pids SIGKILLed if a stop left
them running), the CPU the node processes used, and a token-aware QUORUM driver session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import RoundRobinPolicy, TokenAwarePolicy

from ringflow.cli._demo_cluster import free_loopback_block

START_TIMEOUT_S = 90
REQUEST_TIMEOUT_S = 30.0


def ringflow(*arguments: str, timeout_s: float = 180.0) -> str:
    """Run ``ringflow ARGUMENTS`` (the console script of this venv); its stdout, or
    RuntimeError with its output if it failed."""
    script = Path(sys.executable).parent / "ringflow"
    result = subprocess.run(
        [str(script), *arguments], capture_output=True, text=True, timeout=timeout_s
    )
    if result.returncode != 0:
        raise RuntimeError(f"ringflow {arguments} failed: {result.stdout}{result.stderr}")
    return result.stdout


def free_block(count: int, avoid: str = "") -> str:
    """A random loopback block 127.a.b.(c..c+count-1) whose CQL and internode ports are free,
    not in the /24 of ``avoid``."""
    while True:
        first = free_loopback_block(count)
        if not avoid or first.rsplit(".", 1)[0] != avoid.rsplit(".", 1)[0]:
            return first


def node_pids(data: Path) -> list[int]:
    pids = []
    for pid_file in sorted(data.glob("node*/pid")):
        try:
            pids.append(int(pid_file.read_text()))
        except (OSError, ValueError):
            continue
    return pids


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU of the processes so far (all their threads)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def kill_leftovers(pids: Sequence[int]) -> None:
    """SIGKILL any node process ``cluster stop`` left running (by its pid, nothing else)."""
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            print(f"node pid {pid} still running after stop: SIGKILL", flush=True)
            os.kill(pid, signal.SIGKILL)


@contextmanager
def local_cluster(
    data: Path, nodes: int, first: str, options: Sequence[str] = ()
) -> Iterator[list[int]]:
    """``ringflow cluster start`` (gossip every 200 ms, ``options`` added) of ``nodes`` nodes
    from ``first``; yields their pids; stops them (and SIGKILLs any left) on exit."""
    started = time.perf_counter()
    try:
        try:
            ringflow(
                "cluster", "start", "--nodes", str(nodes), "--data", str(data),
                "--first-address", first, "--gossip-interval-ms", "200",
                "--timeout", str(START_TIMEOUT_S), *options, timeout_s=START_TIMEOUT_S + 60,
            )  # fmt: skip
        except RuntimeError:
            for log in sorted(data.glob("node*/node.log")):
                print(f"--- {log}\n" + "\n".join(log.read_text().splitlines()[-15:]))
            raise
        pids = node_pids(data)
        print(
            f"{nodes} node(s) at {first}.. up in {time.perf_counter() - started:.1f} s", flush=True
        )
        yield pids
    finally:
        pids = node_pids(data)
        try:
            ringflow("cluster", "stop", "--data", str(data), timeout_s=60)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            print(f"cluster stop: {error}", flush=True)
        time.sleep(1.0)
        kill_leftovers(pids)


def make_session(contact: str, port: int = 9042) -> tuple[Cluster, Session]:
    """A connected driver session on ``contact`` (and ``port``): token-aware, QUORUM (one
    replica on a one-node cluster), 30 s requests."""
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(RoundRobinPolicy()),
        consistency_level=ConsistencyLevel.QUORUM,
        request_timeout=REQUEST_TIMEOUT_S,
    )
    cluster = Cluster(
        [contact],
        port=port,
        protocol_version=4,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=10,
        control_connection_timeout=10,
        max_schema_agreement_wait=30,
    )
    return cluster, cluster.connect()
