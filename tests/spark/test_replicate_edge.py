"""``ringflow replicate`` from a 3-node RF 3 edge cluster (issue 8 §4) through two crashes.

One scenario, so that one Spark job start and one catch-up serve both failure cases: the job runs
(``--continuous`` in a child process, source read at QUORUM) while a workload writes at QUORUM
(token-aware); an edge node is SIGKILLed, writes go on with 2 of 3 replicas, the node restarts on
its data and writes go on; then the job itself is SIGKILLed in the middle of a micro-batch (the
lake has staged files of a batch and no commit marker for it) and started again on the same
checkpoints (``--once``). Afterwards:

* the hub, the Parquet lake and PostgreSQL each equal the edge table read at ALL (nothing
  missing, nothing extra, write timestamps exact): no change lost to the edge node's crash;
* the lake holds every change of the table's CDC log exactly once, the very changes a batch read
  of the log gives: the effect of an uninterrupted run.

Every wait is bounded but generous (no assumption on how fast a loaded machine runs a batch).
The edge cluster is the session's (``conftest.edge_cluster``); the hub is one ``node start``
process for this module.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cassandra.policies import DCAwareRoundRobinPolicy, RoundRobinPolicy, TokenAwarePolicy
from pyspark.sql import SparkSession

from ringflow.cli import main
from ringflow.cli._demo import (
    DDL,
    TABLE,
    Workload,
    compare,
    driver_cluster,
    live_rows,
    read_cql_table,
)
from ringflow.cli._demo_cluster import LocalCluster, NodeProcess, random_loopback_address
from ringflow.pipeline import change_from_row, materialize, read_lake_changes
from ringflow.pipeline._cdc_source import read_changes
from ringflow.pipeline._postgres import read_postgres_live
from ringflow.pipeline._replicate import cdc_options, source_table

CONFIDENCE_MS = 1000
PHASE_WRITES = 100  # writes while the node is down, and again after its restart
WAIT_S = 300.0  # upper bound of every wait (the machine is shared and may be loaded)


@pytest.fixture(scope="module")
def stage(edge_cluster: LocalCluster, postgres_url: str) -> Iterator[dict[str, Any]]:
    """Driver sessions on the edge (token-aware, QUORUM) and on a hub node of this module."""
    base = Path(tempfile.mkdtemp(prefix="ringflow-edge-hub-"))
    hub = NodeProcess(base / "hub", random_loopback_address(), "--num-tokens", "4")
    drivers: list[Any] = []
    try:
        hub.start()
        policy = TokenAwarePolicy(DCAwareRoundRobinPolicy())
        drivers.append(driver_cluster(edge_cluster.addresses, 9042, policy, "QUORUM"))
        drivers.append(driver_cluster([hub.address], hub.port, RoundRobinPolicy(), "ONE"))
        edge_session, hub_session = (d.connect() for d in drivers)
        yield {
            "edge": edge_session,
            "hub": hub_session,
            "hub_node": hub,
            "postgres_url": postgres_url,
        }
    finally:
        for driver in drivers:
            driver.shutdown()
        hub.kill()


def _create(stage: dict[str, Any], keyspace: str) -> None:
    for name, rf, cdc in (("edge", 3, " WITH cdc = {'enabled': true}"), ("hub", 1, "")):
        stage[name].execute(
            f"CREATE KEYSPACE {keyspace} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
        )
        stage[name].execute(DDL.format(ks=keyspace, t=TABLE, cdc=cdc))


def _arguments(stage: dict[str, Any], edge: LocalCluster, keyspace: str, base: Path) -> list[str]:
    hub: NodeProcess = stage["hub_node"]
    return [
        "replicate",
        *("--source", edge.contact_points, "--table", f"{keyspace}.{TABLE}"),
        *("--consistency", "QUORUM"),
        *("--to", f"ringflow://{hub.endpoint}?consistency=ONE"),
        *("--to", f"parquet:{base / 'lake'}", "--to", stage["postgres_url"]),
        *("--checkpoint", str(base / "checkpoints")),
        *("--confidence-window-ms", str(CONFIDENCE_MS)),
    ]


def _check_all_equal(
    stage: dict[str, Any], edge: LocalCluster, keyspace: str, base: Path
) -> tuple[Any, int]:
    """Every destination equals the edge table read at ALL; (the table, its row count)."""
    table = source_table(cdc_options(edge.contact_points, f"{keyspace}.{TABLE}"))
    now_s = int(time.time())
    expected = read_cql_table(stage["edge"], table, "ALL")
    name = f"{keyspace}.{TABLE}"
    destinations = {
        "hub": read_cql_table(stage["hub"], table),
        "lake": live_rows(materialize(table, read_lake_changes(base / "lake", name), now_s)),
        "postgres": live_rows(
            read_postgres_live(stage["postgres_url"], f"{keyspace}_{TABLE}", table, now_s)
        ),
    }
    for destination, rows in destinations.items():
        _, problems = compare(expected, rows)
        assert problems == [], f"{destination}: {len(problems)} mismatches, e.g. {problems[:3]}"
    return table, len(expected)


def _wait_for(condition: Any, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        time.sleep(0.01)


def _staged_file(lake: Path) -> Path | None:
    return next(iter(lake.glob("table=*/_staging/*/*/*.parquet")), None)


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


class Job:
    """``ringflow replicate --continuous`` in a child process with its own process group (its
    JVM and Python workers too), so SIGKILL of the group is a crash of the whole job."""

    def __init__(self, arguments: list[str], log: Path) -> None:
        script = Path(sys.executable).parent / "ringflow"
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(script), *arguments, "--continuous"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if not _group_gone(self.process.pid):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        _wait_for(lambda: _group_gone(self.process.pid), "the killed job's processes gone", 30)


def _write(workload: Workload, count: int, pause_s: float = 0.02) -> None:
    for _ in range(count):
        _, statement, values = workload.next_operation()
        workload.session.execute(statement, values, timeout=30.0)
        time.sleep(pause_s)


def test_replicate_through_an_edge_node_crash_and_its_own_kill_mid_batch(
    spark: SparkSession, stage: dict[str, Any], edge_cluster: LocalCluster, tmp_path: Path
) -> None:
    keyspace = "edge_crash"
    _create(stage, keyspace)
    arguments = _arguments(stage, edge_cluster, keyspace, tmp_path)
    workload = Workload(stage["edge"], 2000, seed=11, keyspace=keyspace)
    _write(workload, 200, pause_s=0)
    job = Job(arguments, tmp_path / "job.log")
    victim = edge_cluster.addresses[2]
    started = time.monotonic()

    def phase(text: str) -> None:  # shown when the test fails (or with -s)
        print(f"{time.monotonic() - started:6.1f}s {text}", flush=True)

    try:
        # 1. the job runs: a workload at QUORUM until the lake channel committed a batch
        commits = tmp_path / "checkpoints" / "lake" / "commits"
        while not (commits / "0").exists():  # Spark's commit log of batch 0
            assert job.running(), job.output()
            _write(workload, 1, pause_s=0.5)  # a trickle: every change costs the catch-up
        # 2. an edge node crashes; QUORUM writes go on with 2 of 3 replicas
        phase("the lake channel committed batch 0")
        edge_cluster.kill(victim)
        _write(workload, PHASE_WRITES)
        # 3. it restarts on its data; until it has loaded the CDC generation it refuses the CDC
        # writes it coordinates ("could not find any CDC stream"), so wait for UP + generation
        phase(f"{PHASE_WRITES} writes with {victim} down")
        edge_cluster.restart(victim)
        edge_cluster.wait_ready()
        phase(f"{victim} restarted and UP")
        _write(workload, PHASE_WRITES)
        assert job.running(), job.output()
        # 4. the job itself crashes in the middle of a micro-batch
        _wait_for(
            lambda: not job.running() or _staged_file(tmp_path / "lake") is not None,
            "a staged lake file",
        )
        job.kill()
        phase("job SIGKILLed with a batch staged")
    finally:
        job.kill()
        edge_cluster.wait_ready()  # the victim is UP again even if the test failed half-way
    staged = _staged_file(tmp_path / "lake")
    assert staged is not None, job.output()
    batch_dir = staged.parent  # <lake>/table=<ks>.<t>/_staging/<query id>/<batch id>
    markers = batch_dir.parents[2] / "_commits" / f"stream-{batch_dir.parent.name}"
    assert not (markers / f"{int(batch_dir.name):020d}.json").exists()  # staged, not committed

    # 5. started again on the same checkpoints, it catches up exactly once
    time.sleep(CONFIDENCE_MS / 1000 + 1.6)  # past the window, and the 1 s TTLs have run out
    assert main([*arguments, "--once"]) == 0
    phase("caught up (--once)")
    table, rows = _check_all_equal(stage, edge_cluster, keyspace, tmp_path)
    assert rows > 50
    lake = read_lake_changes(tmp_path / "lake", f"{keyspace}.{TABLE}")
    options = cdc_options(edge_cluster.contact_points, f"{keyspace}.{TABLE}")
    options.update(consistency="QUORUM", confidence_window_ms=str(CONFIDENCE_MS))
    log = [change_from_row(table, row) for row in read_changes(spark, options).collect()]

    def identity(change: Any) -> tuple[bytes, Any, int]:
        return (change.stream_id, change.time, change.batch_seq_no)

    assert len({identity(c) for c in lake}) == len(lake)  # nothing twice
    assert sorted(lake, key=identity) == sorted(log, key=identity)  # nothing missing or extra
