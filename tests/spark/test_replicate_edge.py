"""``ringflow replicate`` from a 3-node RF 3 edge cluster (issue 8 §4) through two crashes.

One scenario, so that one Spark job start and one catch-up serve both failure cases: the job runs
(``--continuous`` in a child process, source read at QUORUM) while a workload writes at QUORUM
(token-aware); an edge node is SIGKILLed, writes go on with 2 of 3 replicas, the node restarts on
its data and writes go on; then the job itself is SIGKILLed in the middle of a micro-batch (the
lake has files of a batch and no commit marker for it) and started again on the same
checkpoints (``--once``). Afterwards:

* the hub, the Parquet lake and PostgreSQL each equal the edge table read at ALL (nothing
  missing, nothing extra, write timestamps exact): no change lost to the edge node's crash;
* the lake holds every change of the table's CDC log exactly once, the very changes a batch read
  of the log gives: the effect of an uninterrupted run.

Every wait is bounded but generous (no assumption on how fast a loaded machine runs a batch).
The edge cluster and the hub node are the session's (``conftest.edge_cluster``,
``conftest.hub_node``); this module's keyspace is ``edge_crash`` on both.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from pyspark.sql import SparkSession

from ringflow.cli import main
from ringflow.cli._demo import DDL, TABLE, Workload, driver_cluster
from ringflow.cli._demo_cluster import LocalCluster, NodeProcess
from ringflow.pipeline import committed_files, uncommitted_files
from ringflow.pipeline._replicate import cdc_options
from tests.spark._replication import (
    Job,
    assert_lake_is_log,
    check_destinations,
    wait_for,
    write,
)

CONFIDENCE_MS = 1000
PHASE_WRITES = 100  # writes while the node is down, and again after its restart


@pytest.fixture(scope="module")
def stage(
    edge_cluster: LocalCluster, hub_node: NodeProcess, hub: Any, postgres_url: str
) -> Iterator[dict[str, Any]]:
    """Driver sessions on the edge (token-aware, QUORUM) and on the session's hub node."""
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy())
    driver = driver_cluster(edge_cluster.addresses, 9042, policy, "QUORUM")
    try:
        yield {
            "edge": driver.connect(),
            "hub": hub,
            "hub_node": hub_node,
            "postgres_url": postgres_url,
        }
    finally:
        driver.shutdown()


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


def _uncommitted(lake: Path, keyspace: str) -> list[Path]:
    """Data files of the lake no commit marker lists: a batch written, or being written, and
    not committed."""
    return [p for p in uncommitted_files(lake, f"{keyspace}.{TABLE}") if p.suffix == ".parquet"]


def _freeze_mid_batch(job: Job, lake: Path, keyspace: str) -> list[Path]:
    """Freeze the job (SIGSTOP) while a batch has files and no marker; those files. A batch seen
    uncommitted may commit before the freeze lands: then it thaws and waits for the next."""
    while True:
        wait_for(
            lambda: not job.running() or _uncommitted(lake, keyspace) != [],
            "a lake file not committed yet",
        )
        assert job.running(), job.output()
        job.freeze()
        left = _uncommitted(lake, keyspace)
        if left:
            return left
        job.thaw()


@pytest.mark.long  # `make test-long`: 66-85 s on a quiet machine
def test_replicate_through_an_edge_node_crash_and_its_own_kill_mid_batch(
    spark: SparkSession, stage: dict[str, Any], edge_cluster: LocalCluster, tmp_path: Path
) -> None:
    keyspace = "edge_crash"
    _create(stage, keyspace)
    arguments = _arguments(stage, edge_cluster, keyspace, tmp_path)
    workload = Workload(stage["edge"], 2000, seed=11, keyspace=keyspace)
    write(workload, 200, pause_s=0)
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
            write(workload, 1, pause_s=0.5)  # a trickle: every change costs the catch-up
        # 2. an edge node crashes; QUORUM writes go on with 2 of 3 replicas
        phase("the lake channel committed batch 0")
        edge_cluster.kill(victim)
        write(workload, PHASE_WRITES)
        # 3. it restarts on its data; until it has loaded the CDC generation it refuses the CDC
        # writes it coordinates ("could not find any CDC stream"), so wait for UP + generation
        phase(f"{PHASE_WRITES} writes with {victim} down")
        edge_cluster.restart(victim)
        edge_cluster.wait_ready()
        phase(f"{victim} restarted and UP")
        write(workload, PHASE_WRITES)
        assert job.running(), job.output()
        # 4. the job itself crashes in the middle of a micro-batch
        left = _freeze_mid_batch(job, tmp_path / "lake", keyspace)
        job.kill()
        phase("job SIGKILLed with a batch written, not committed")
    finally:
        job.kill()
        edge_cluster.wait_ready()  # the victim is UP again even if the test failed half-way
    assert left == _uncommitted(tmp_path / "lake", keyspace)  # killed as it was frozen

    # 5. started again on the same checkpoints, it catches up exactly once
    time.sleep(CONFIDENCE_MS / 1000 + 1.6)  # past the window, and the 1 s TTLs have run out
    assert main([*arguments, "--once"]) == 0
    phase("caught up (--once)")
    table, rows = check_destinations(
        stage["edge"],
        edge_cluster.contact_points,
        keyspace,
        tmp_path,
        stage["postgres_url"],
        stage["hub"],
    )
    assert rows > 50
    options = cdc_options(edge_cluster.contact_points, f"{keyspace}.{TABLE}")
    options.update(confidence_window_ms=str(CONFIDENCE_MS))
    assert_lake_is_log(spark, table, tmp_path / "lake", options)
    assert set(left) & set(committed_files(tmp_path / "lake", table)) == set()  # not reused
