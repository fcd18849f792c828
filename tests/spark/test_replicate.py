"""``ringflow replicate`` end to end: a real edge node (CDC on), a real hub node, a Parquet lake
and a throwaway PostgreSQL, driven through the CLI's ``main`` in this process (sharing the
session's SparkSession, which the command then leaves running).

Proves: after a workload (inserts, TTL'd inserts and updates, set additions, column, row and
range deletes), ``--once`` leaves every destination equal to the edge table (keys, values and
the write times of atomic columns); a second ``--once`` continues from the checkpoints and picks
up only what was written since; ``--continuous`` runs until stopped (here by ``--timeout``) and
exits 0; bad destinations and an unreachable source exit non-zero with a
one-line message before any streaming query starts.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cassandra.cluster import Cluster
from cassandra.query import dict_factory
from pyspark.sql import SparkSession

from ringflow.cli import main
from ringflow.cli._demo import (
    DDL,
    KEYSPACE,
    TABLE,
    Workload,
    compare,
    live_rows,
    read_cql_table,
)
from ringflow.cli._demo_cluster import NodeProcess, random_loopback_address
from ringflow.pipeline import PipelineConfigError, materialize, read_lake_changes
from ringflow.pipeline._postgres import read_postgres_live
from ringflow.pipeline._replicate import cdc_options, parse_hosts, source_table

CONFIDENCE_MS = 1000


def _session(node: NodeProcess) -> tuple[Any, Any]:
    cluster = Cluster([node.address], port=node.port, protocol_version=4, connect_timeout=10)
    session = cluster.connect()
    session.row_factory = dict_factory
    return cluster, session


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, Any]]:
    """An edge node with shop.orders (CDC on) and a hub node with the same table."""
    base = Path(tempfile.mkdtemp(prefix="ringflow-replicate-"))
    edge = NodeProcess(base / "edge", random_loopback_address(), "--num-tokens", "4")
    hub = NodeProcess(base / "hub", random_loopback_address(), "--num-tokens", "4")
    clusters: list[Any] = []
    try:
        found: dict[str, Any] = {"edge": edge.start(), "hub": hub.start(), "base": base}
        for name, node, cdc in (("edge", edge, " WITH cdc = {'enabled': true}"), ("hub", hub, "")):
            cluster, session = _session(node)
            clusters.append(cluster)
            session.execute(
                f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
            session.execute(DDL.format(ks=KEYSPACE, t=TABLE, cdc=cdc))
            found[name + "_session"] = session
        yield found
    finally:
        for cluster in clusters:
            cluster.shutdown()
        edge.kill()
        hub.kill()


def _write(session: Any, rows: int, seed: int) -> None:
    workload = Workload(session, rows, seed)
    for _ in range(rows):
        _, statement, values = workload.next_operation()
        session.execute(statement, values)


def _replicate(nodes: dict[str, Any], postgres_url: str, *extra: str) -> int:
    edge, hub, base = nodes["edge"], nodes["hub"], nodes["base"]
    return main(
        [
            "replicate",
            *("--source", f"{edge.address}:{edge.port}", "--table", f"{KEYSPACE}.{TABLE}"),
            *("--to", f"ringflow://{hub.address}:{hub.port}?consistency=ONE"),
            *("--to", f"parquet:{base / 'lake'}", "--to", postgres_url),
            *("--checkpoint", str(base / "checkpoints")),
            *("--confidence-window-ms", str(CONFIDENCE_MS), "--query-window-ms", "5000"),
            *extra,
        ]
    )


def _check_all_equal(nodes: dict[str, Any], postgres_url: str) -> int:
    options = cdc_options(f"{nodes['edge'].address}:{nodes['edge'].port}", "shop.orders")
    table = source_table(options)
    now_s = int(time.time())
    edge = read_cql_table(nodes["edge_session"], table)
    destinations = {
        "hub": read_cql_table(nodes["hub_session"], table),
        "lake": live_rows(
            materialize(table, read_lake_changes(nodes["base"] / "lake", "shop.orders"), now_s)
        ),
        "postgres": live_rows(read_postgres_live(postgres_url, "shop_orders", table, now_s)),
    }
    for name, rows in destinations.items():
        _, problems = compare(edge, rows)
        assert problems == [], f"{name}: {len(problems)} mismatches, e.g. {problems[:3]}"
    return len(edge)


def test_once_replicates_everything_and_a_second_run_continues(
    spark: SparkSession, nodes: dict[str, Any], postgres_url: str, capsys: Any
) -> None:
    _write(nodes["edge_session"], 400, seed=1)
    time.sleep(CONFIDENCE_MS / 1000 + 1.6)  # past the window, and the 1 s TTLs have run out
    assert _replicate(nodes, postgres_url, "--once") == 0
    out = capsys.readouterr().out
    assert "replication summary" in out and "done" in out
    assert _check_all_equal(nodes, postgres_url) > 50
    assert spark.streams.active == []

    _write(nodes["edge_session"], 150, seed=2)
    time.sleep(CONFIDENCE_MS / 1000 + 1.6)
    assert _replicate(nodes, postgres_url) == 0  # --once is the default
    _check_all_equal(nodes, postgres_url)
    lake_changes = read_lake_changes(nodes["base"] / "lake", "shop.orders")
    keys = {(bytes(c.stream_id), c.time, c.batch_seq_no) for c in lake_changes}
    assert len(keys) == len(lake_changes)  # the second run did not re-deliver the first's


def test_continuous_runs_until_stopped(
    spark: SparkSession, nodes: dict[str, Any], postgres_url: str, capsys: Any
) -> None:
    _write(nodes["edge_session"], 50, seed=3)
    started = time.monotonic()
    code = _replicate(nodes, postgres_url, "--continuous", "--timeout", "20")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "stopped" in out and "replication summary" in out
    assert spark.streams.active == []
    assert time.monotonic() - started < 120


@pytest.mark.parametrize(
    ("destination", "message"),
    [
        ("kafka://127.0.0.1:9092", "expected ringflow://host"),
        ("postgresql://nobody@127.0.0.1:1/none", "cannot connect to PostgreSQL"),
        ("ringflow://127.0.0.1:1", "cannot connect to the hub"),
        ("parquet:", "lake directory is missing"),
        ("parquet:/proc/ringflow-lake", "cannot be created"),
    ],
)
def test_bad_destinations_fail_before_any_query(
    spark: SparkSession, nodes: dict[str, Any], capsys: Any, destination: str, message: str
) -> None:
    edge, base = nodes["edge"], nodes["base"]
    started = time.monotonic()
    code = main(
        [
            "replicate",
            *("--source", f"{edge.address}:{edge.port}", "--table", f"{KEYSPACE}.{TABLE}"),
            *("--to", destination, "--checkpoint", str(base / "bad-checkpoints")),
        ]
    )
    error = capsys.readouterr().err
    assert code == 2
    assert message in error and error.startswith("ringflow replicate: error:")
    assert len(error.strip().splitlines()) == 1
    assert spark.streams.active == []
    assert time.monotonic() - started < 30


def test_unreachable_source_and_unknown_table_fail_clearly(
    nodes: dict[str, Any], capsys: Any, tmp_path: Path
) -> None:
    lake = f"parquet:{tmp_path / 'lake'}"
    unreachable = ["--source", "127.0.0.1:1", "--table", "shop.orders"]
    assert main(["replicate", *unreachable, "--to", lake, "--checkpoint", str(tmp_path)]) == 2
    assert "cannot reach ringflow at 127.0.0.1 port 1" in capsys.readouterr().err
    edge = nodes["edge"]
    unknown = ["--source", f"{edge.address}:{edge.port}", "--table", "shop.missing"]
    assert main(["replicate", *unknown, "--to", lake, "--checkpoint", str(tmp_path)]) == 2
    assert "unknown table shop.missing" in capsys.readouterr().err
    bad_table = ["--source", f"{edge.address}:{edge.port}", "--table", "nodot"]
    assert main(["replicate", *bad_table, "--to", lake, "--checkpoint", str(tmp_path)]) == 2
    assert "is not keyspace.table" in capsys.readouterr().err


def test_host_lists_parse() -> None:
    assert parse_hosts("127.0.0.1", "source") == (("127.0.0.1",), 9042)
    assert parse_hosts("127.0.0.1,127.0.0.2:9043", "source") == (("127.0.0.1", "127.0.0.2"), 9043)
    with pytest.raises(PipelineConfigError, match="host"):
        parse_hosts(":9042", "source")
    with pytest.raises(PipelineConfigError, match="host"):
        parse_hosts("a/b", "source")


def test_the_wait_between_polls_ends_when_a_query_ends(spark: SparkSession, tmp_path: Path) -> None:
    """The job's wait between progress polls returns when a running query terminates (a
    ``--once`` run's end is seen at once, not rounded up to the next poll), and sleeps the
    whole period when no query runs."""
    from ringflow.pipeline._replicate import wait_for_change

    source = tmp_path / "in"
    source.mkdir()
    (source / "part.txt").write_text("a\nb\n")
    query = (
        spark.readStream.format("text")
        .load(str(source))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    started = time.monotonic()
    while query.isActive and time.monotonic() - started < 120:
        wait_for_change({"text": query}, 60.0)
    assert not query.isActive
    assert time.monotonic() - started < 60.0  # one wait ended with the query, not its period
    assert query.lastProgress is not None and query.lastProgress["numInputRows"] == 2

    slept = time.monotonic()
    wait_for_change({"text": query}, 0.3)  # nothing runs: the full period
    assert time.monotonic() - slept >= 0.3
