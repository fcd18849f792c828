"""``ringflow replicate`` on a real Spark standalone cluster (issue 14 §3), not only ``local[*]``.

A master and two workers are started from the pyspark package (``_standalone``), each on its own
loopback address; the driver runs on another one. The job replicates the session's 3-node edge
(RF 3, read at QUORUM) to the hub, a Parquet lake and PostgreSQL twice, from the same
checkpoints:

1. ``ringflow replicate --master spark://... --driver-host D --conf ...`` (a child process: a
   second SparkContext in the test process is not allowed);
2. after more writes, ``spark-submit --master spark://... --conf spark.driver.host=D ...
   ringflow/cli/replicate_job.py`` with the job's options (the lake channel only).

The lake is given as ``/proc/self/cwd/lake``: every process resolves it in its own working
directory, so the driver (run in ``driver/``) sees a lake directory that never holds a data file,
while each executor writes in its own working directory on its worker. The lake's commit is
shown not to need the executors' files: the driver only ever holds markers and schemas, and the
views together (the driver's metadata, every executor's data files) are one lake.

Afterwards:

* each run was an application of the cluster whose executors, on both workers, connected to
  the driver at ``D`` and ran with the run's executor memory (``--conf`` of the CLI, a
  spark-submit setting of the other): the master, driver host and settings were honoured, by
  ringflow and under spark-submit; the spark-submit run kept spark-submit's application name
  (the file's), which ringflow's default would have replaced before;
* the driver's view of the lake holds no Parquet file; each file a marker lists is in exactly
  one executor's view; no executor holds a marker;
* the hub, PostgreSQL and the joined lake after run 1, and the joined lake after run 2, each
  equal the edge table read at ALL (keys, values, write times), and the lake holds every
  change of the CDC log exactly once, under one query id (run 2 went on from run 1's
  checkpoint).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from pyspark.sql import SparkSession

import ringflow.cli.replicate_job
from ringflow.cli._demo import DDL, TABLE, Workload, driver_cluster
from ringflow.cli._demo_cluster import (
    LocalCluster,
    NodeProcess,
    free_loopback_block,
    loopback_block,
)
from ringflow.pipeline import committed_files
from ringflow.pipeline._replicate import cdc_options
from tests.spark._replication import assert_lake_is_log, check_destinations, group_gone, write
from tests.spark._standalone import StandaloneCluster, child_environment, spark_home

KEYSPACE = "spark_cluster"
CONFIDENCE_MS = 1000
JOB_TIMEOUT_S = 600.0  # a bound on a loaded machine, not an expectation
EXECUTOR_JAVA_OPTIONS = (  # short-lived executors on 2 busy cores start faster (as the driver)
    "spark.executor.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
)
LAKE = "/proc/self/cwd/lake"  # each process's own working directory (module docstring)


@pytest.fixture(scope="module")
def edge(edge_cluster: LocalCluster) -> Iterator[Any]:
    """A token-aware QUORUM session on the session's edge cluster."""
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy())
    driver = driver_cluster(edge_cluster.addresses, 9042, policy, "QUORUM")
    try:
        yield driver.connect()
    finally:
        driver.shutdown()


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[tuple[StandaloneCluster, str]]:
    """A master and two workers (2 cores, 1 GiB each) on 127.a.b.c..c+2, starting in the
    background (the test waits for it after its writes); the driver's address is the next one.
    Always stopped."""
    addresses = loopback_block(free_loopback_block(4, ports=(7077,)), 4)
    cluster = StandaloneCluster(tmp_path / "spark", addresses[:3])
    try:
        cluster.start_in_background()
        yield cluster, addresses[3]
    finally:
        cluster.stop()


def _run(command: list[str], cwd: Path, log: Path, extra: dict[str, str]) -> None:
    """``command`` in its own process group, to its end (killed with its group if it outlives
    ``JOB_TIMEOUT_S``); AssertionError with its output unless it exits 0."""
    cwd.mkdir(exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_environment(extra),
            start_new_session=True,
        )
    try:
        code = process.wait(JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if not group_gone(process.pid):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    assert code == 0, (
        f"exit {code}: {' '.join(command)}\n" + log.read_text(errors="replace")[-6000:]
    )


def _job_options(edge_cluster: LocalCluster, tmp_path: Path, destinations: list[str]) -> list[str]:
    options = ["--source", edge_cluster.contact_points, "--table", f"{KEYSPACE}.{TABLE}"]
    options += ["--consistency", "QUORUM", "--confidence-window-ms", str(CONFIDENCE_MS)]
    for destination in destinations:
        options += ["--to", destination]
    return [*options, "--checkpoint", str(tmp_path / "checkpoints"), "--once"]


def _joined_lake(driver_view: Path, executor_dirs: list[Path], into: Path) -> None:
    """The lake as one directory: the driver's markers and schemas, and every executor's data
    files (hard links). Each file a marker lists must be in exactly one executor's view, and
    the driver's view must hold no data file."""
    assert sorted(p.name for p in driver_view.rglob("*.parquet")) == []
    shutil.copytree(driver_view, into)
    listed = {str(p.relative_to(into)) for p in _committed(into)}
    holders: dict[str, list[Path]] = {}
    for executor in executor_dirs:
        view = executor / "lake"
        assert list(view.rglob("_commits/*/*.json")) == [], f"{view} holds a marker"
        for path in view.rglob("date=*/*.parquet"):
            holders.setdefault(str(path.relative_to(view)), []).append(path)
    assert listed <= set(holders), sorted(listed - set(holders))[:3]
    for name in listed:
        assert len(holders[name]) == 1, holders[name]
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        os.link(holders[name][0], into / name)


def _committed(lake: Path) -> list[Path]:
    return [p for t in lake.glob("table=*") for p in committed_files(lake, t.name[len("table=") :])]


def _check_applications(
    cluster: StandaloneCluster, driver_host: str, names: list[str], memories: list[str]
) -> None:
    """One application per run, in order, with that run's name, each with an executor on every
    worker, connected to the driver at ``driver_host`` and started with that run's executor
    memory."""
    assert [name for _, name in cluster.applications()] == names
    applications = sorted(cluster.executor_logs().items())
    assert [app_id for app_id, _ in applications] == [a for a, _ in cluster.applications()]
    for (name, logs), memory in zip(applications, memories, strict=True):
        workers = {d.name for d in cluster.work_dirs if (d / name).is_dir()}
        assert workers == {d.name for d in cluster.work_dirs}, (name, workers)
        for text in logs:
            command = text.split("\n", 2)[:2]
            assert f"CoarseGrainedScheduler@{driver_host}:" in text, command
            assert f'"-Xmx{memory}"' in text, command


@pytest.mark.long  # `make test-long`: 66-85 s on a quiet machine
def test_replication_runs_on_a_standalone_cluster_and_through_spark_submit(
    spark: SparkSession,
    spark_cluster: tuple[StandaloneCluster, str],
    edge_cluster: LocalCluster,
    edge: Any,
    hub_node: NodeProcess,
    hub: Any,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    cluster, driver_host = spark_cluster
    for session, rf, cdc in ((edge, 3, " WITH cdc = {'enabled': true}"), (hub, 1, "")):
        session.execute(
            f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
        )
        session.execute(DDL.format(ks=KEYSPACE, t=TABLE, cdc=cdc))
    workload = Workload(edge, 400, seed=14, keyspace=KEYSPACE)
    python = {"PYSPARK_PYTHON": sys.executable}
    started = time.monotonic()

    def phase(text: str) -> None:  # shown when the test fails (or with -s)
        print(f"{time.monotonic() - started:6.1f}s {text}", flush=True)

    # 1. the CLI, with --master, --driver-host and --conf
    write(workload, 150, pause_s=0)
    time.sleep(CONFIDENCE_MS / 1000 + 1.6)  # past the window; the workload's 1 s TTLs ran out
    cluster.wait_started()
    phase(f"150 writes; standalone cluster {cluster.url} up (it took {cluster.start_s:.1f}s)")
    hub_url = f"ringflow://{hub_node.endpoint}?consistency=ONE"
    options = _job_options(edge_cluster, tmp_path, [hub_url, f"parquet:{LAKE}", postgres_url])
    settings = ["--master", cluster.url, "--driver-host", driver_host]
    settings += ["--conf", "spark.executor.memory=512m", "--conf", EXECUTOR_JAVA_OPTIONS]
    command = [str(Path(sys.executable).parent / "ringflow"), "replicate", *options, *settings]
    _run(command, tmp_path / "driver", tmp_path / "cli.log", python)
    phase("run 1 (ringflow replicate --master spark://...) done")
    base = tmp_path / "joined-1"
    base.mkdir()
    _joined_lake(tmp_path / "driver" / "lake", cluster.executor_dirs(), base / "lake")
    check_destinations(edge, edge_cluster.contact_points, KEYSPACE, base, postgres_url, hub)

    # 2. spark-submit of the job file, the lake channel only, from the same checkpoints
    write(workload, 100, pause_s=0)
    time.sleep(CONFIDENCE_MS / 1000 + 1.6)
    submit = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.url]
    for setting in (
        f"spark.driver.host={driver_host}",
        "spark.executor.memory=600m",
        EXECUTOR_JAVA_OPTIONS,
        f"spark.pyspark.python={sys.executable}",
    ):
        submit += ["--conf", setting]
    job = ringflow.cli.replicate_job.__file__
    options = _job_options(edge_cluster, tmp_path, [f"parquet:{LAKE}"])
    _run([*submit, job, *options], tmp_path / "driver", tmp_path / "submit.log", python)
    phase("run 2 (spark-submit replicate_job.py) done")

    # spark-submit names its application after the file: ringflow's default name did not win
    _check_applications(
        cluster, driver_host, ["ringflow-replicate", "replicate_job.py"], ["512M", "600M"]
    )
    base = tmp_path / "joined-2"
    base.mkdir()
    _joined_lake(tmp_path / "driver" / "lake", cluster.executor_dirs(), base / "lake")
    table, rows = check_destinations(edge, edge_cluster.contact_points, KEYSPACE, base, None)
    assert rows > 50
    log_options = cdc_options(edge_cluster.contact_points, f"{KEYSPACE}.{TABLE}")
    log_options.update(confidence_window_ms=str(CONFIDENCE_MS))
    assert_lake_is_log(spark, table, base / "lake", log_options)
    markers = sorted((base / "lake").rglob("_commits/*/*.json"))
    assert len({m.parent for m in markers}) == 1  # one query id across both runs (checkpoint)
    phase("checked")
