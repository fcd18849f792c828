"""``ringflow replicate --to delta:DIR --to iceberg:CATALOG#ns.t`` from a real edge (issue 19).

One continuous job (``run_replication`` in a thread, the session's SparkSession) reads a
CDC-enabled table of the session's 3-node RF 3 edge cluster at QUORUM and feeds a Delta and an
Iceberg destination. While it runs:

0. inserts, updates, a column delete, a row delete, a range delete, a partition delete, a set
   column's elements added and removed, and writes with a TTL: both current-state tables, read
   by DuckDB, equal the edge table read at ALL (keys, values, write times of the atomic
   columns), and each change log holds the operations written;
1. ``ADD extra int``, then rows and updates with it: both tables take the column and equal the
   edge;
2. ``DROP note``, then rows without it: both equal the edge, and still hold ``note`` with the
   values the edge had before the drop, null in the rows written since (``_evolution``'s
   policy: a destination never loses a column).

The job never exits; at the end both channels have followed each schema change and stop
cleanly. One edge table and one job carry every assertion (CI time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from pyspark.sql import SparkSession

from ringflow.cdc import CdcOperation
from ringflow.cli._demo import driver_cluster
from ringflow.cli._demo_cluster import LocalCluster
from ringflow.pipeline import DeltaStore, IcebergStore, parse_iceberg_location
from ringflow.pipeline._replicate import cdc_options, plan_replication, source_table
from ringflow.schema import Table
from tests.spark._job_thread import JobThread, wait_until
from tests.spark._lakehouse import change_log_rows, current_rows
from tests.spark._replication import write_statement
from tests.spark._schema_evolution import Rows, cql_rows, differences

KEYSPACE = "lakehouse"
ITEMS = f"{KEYSPACE}.items"
CONFIDENCE_MS = 1000
WAIT_S = 180.0
ROWS = 20


@pytest.fixture(scope="module")
def edge(edge_cluster: LocalCluster) -> Iterator[Any]:
    """A token-aware QUORUM session on the edge with the CDC table."""
    driver = driver_cluster(
        edge_cluster.addresses, 9042, TokenAwarePolicy(DCAwareRoundRobinPolicy()), "QUORUM"
    )
    session = driver.connect()
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    session.execute(
        f"CREATE TABLE {ITEMS} (id int, seq int, name text, qty int, note text, tags set<text>, "
        "PRIMARY KEY (id, seq)) WITH cdc = {'enabled': true}"
    )
    try:
        yield session
    finally:
        driver.shutdown()


def _write(edge: Any, statements: list[tuple[str, tuple[object, ...]]]) -> None:
    prepared: dict[str, Any] = {}
    for text, values in statements:
        if text not in prepared:
            prepared[text] = edge.prepare(text)
        write_statement(edge, prepared[text], values)


def _phase_0() -> list[tuple[str, tuple[object, ...]]]:
    insert = f"INSERT INTO {ITEMS} (id, seq, name, qty, note, tags) VALUES (?, ?, ?, ?, ?, ?)"
    statements: list[tuple[str, tuple[object, ...]]] = [
        (insert, (i % 5, i, f"n{i}", i, f"note{i}", {f"t{i % 3}"})) for i in range(ROWS)
    ]
    statements += [
        (f"UPDATE {ITEMS} SET qty = ? WHERE id = ? AND seq = ?", (100 + i, i % 5, i))
        for i in range(0, ROWS, 3)
    ]
    statements += [
        (f"UPDATE {ITEMS} USING TTL 3600 SET name = ? WHERE id = ? AND seq = ?", ("ttl", 1, 1)),
        (f"INSERT INTO {ITEMS} (id, seq, name) VALUES (?, ?, ?) USING TTL 3600", (9, 0, "t")),
        (f"UPDATE {ITEMS} SET tags = tags + ? WHERE id = ? AND seq = ?", ({"x"}, 2, 2)),
        (f"UPDATE {ITEMS} SET tags = tags - ? WHERE id = ? AND seq = ?", ({"t1"}, 1, 16)),
        (f"DELETE note FROM {ITEMS} WHERE id = ? AND seq = ?", (3, 3)),
        (f"DELETE FROM {ITEMS} WHERE id = ? AND seq = ?", (4, 4)),
        (f"DELETE FROM {ITEMS} WHERE id = ? AND seq > ? AND seq < ?", (0, 4, 14)),
        (f"DELETE FROM {ITEMS} WHERE id = ?", (2,)),
        (f"INSERT INTO {ITEMS} (id, seq, name) VALUES (?, ?, ?)", (2, 99, "after")),
    ]
    return statements


class Lakehouse:
    """The two destinations' current states (DuckDB), compared with the edge at ALL."""

    def __init__(self, edge: Any, stores: dict[str, Any]) -> None:
        self.edge, self.stores = edge, stores

    def expected(self, table: Table, kept: Rows | None = None) -> Rows:
        rows = cql_rows(self.edge, table, ITEMS, "ALL")
        for key, (cells, times) in (kept or {}).items():
            row_cells, row_times = rows[key]
            rows[key] = ({**row_cells, **cells}, {**row_times, **times})
        return rows

    def problems(self, table: Table, kept: Rows | None = None) -> dict[str, list[str]]:
        expected = self.expected(table, kept)
        return {k: differences(expected, current_rows(s, table)) for k, s in self.stores.items()}

    def equal(self, table: Table, kept: Rows | None = None) -> Callable[[], bool]:
        def check() -> bool:
            try:
                return not any(self.problems(table, kept).values())
            except Exception:  # a table or column not there yet, a commit under way
                return False

        return check


def test_delta_and_iceberg_follow_a_live_edge_table(
    spark: SparkSession, edge: Any, edge_cluster: LocalCluster, tmp_path: Path
) -> None:
    location = parse_iceberg_location(f"{tmp_path / 'catalog.db'}#shop.items")
    IcebergStore(location).catalog.create_namespace("shop")
    options = cdc_options(
        edge_cluster.contact_points, ITEMS, consistency="QUORUM", confidence_window_ms=CONFIDENCE_MS
    )
    urls = [f"delta:{tmp_path / 'delta'}", f"iceberg:{tmp_path / 'catalog.db'}#shop.items"]
    plan = plan_replication(options, urls, tmp_path / "ck")
    assert [d.channel for d in plan.destinations] == ["delta", "iceberg"]
    stores = {"delta": DeltaStore(tmp_path / "delta"), "iceberg": IcebergStore(location)}
    lakehouse = Lakehouse(edge, stores)
    _write(edge, _phase_0())
    job = JobThread(spark, plan)
    try:
        table = source_table(options)
        wait_until(lakehouse.equal(table), "phase 0", WAIT_S, job)
        assert lakehouse.problems(table) == {"delta": [], "iceberg": []}
        assert (9, 0) in lakehouse.expected(table) and (2, 99) in lakehouse.expected(table)
        for kind, store in stores.items():
            operations = {CdcOperation(r["cdc$operation"]) for r in change_log_rows(store)}
            assert {
                CdcOperation.INSERT,
                CdcOperation.UPDATE,
                CdcOperation.ROW_DELETE,
                CdcOperation.RANGE_DELETE_START_EXCLUSIVE,
                CdcOperation.RANGE_DELETE_END_EXCLUSIVE,
                CdcOperation.PARTITION_DELETE,
            } <= operations, (kind, operations)

        # 1. a column added while the job runs
        edge.execute(f"ALTER TABLE {ITEMS} ADD extra int")
        _write(
            edge,
            [
                (f"INSERT INTO {ITEMS} (id, seq, name, extra) VALUES (?, ?, ?, ?)", (10, i, "e", i))
                for i in range(5)
            ]
            + [(f"UPDATE {ITEMS} SET extra = ? WHERE id = ? AND seq = ?", (77, 1, 1))],
        )
        table = source_table(options)
        assert table.has_column("extra")
        wait_until(lakehouse.equal(table), "phase 1 (added)", WAIT_S, job)
        assert lakehouse.problems(table) == {"delta": [], "iceberg": []}

        # 2. another column dropped: it stays, with the values from before the drop
        before = cql_rows(edge, table, ITEMS, "ALL")
        edge.execute(f"ALTER TABLE {ITEMS} DROP note")
        _write(
            edge,
            [
                (f"INSERT INTO {ITEMS} (id, seq, name, extra) VALUES (?, ?, ?, ?)", (11, i, "d", i))
                for i in range(5)
            ]
            + [(f"UPDATE {ITEMS} SET qty = ? WHERE id = ? AND seq = ?", (5, 1, 1))],
        )
        with_note, table = table, source_table(options)
        assert not table.has_column("note")
        wait_until(lakehouse.equal(table), "phase 2 (dropped)", WAIT_S, job)
        assert lakehouse.problems(table) == {"delta": [], "iceberg": []}
        kept: Rows = {
            key: ({"note": cells["note"]}, {"note": times["note"]})
            for key, (cells, times) in before.items()
            if "note" in cells
        }
        assert len(kept) > ROWS // 2
        since = {key for key in lakehouse.expected(table) if key[0] == 11}
        for kind, store in stores.items():
            held = current_rows(store, with_note)
            notes = {k: (v[0]["note"], v[1]["note"]) for k, v in held.items() if "note" in v[0]}
            assert notes == {k: (c["note"], t["note"]) for k, (c, t) in kept.items()}, kind
            assert not since & set(notes), kind  # null in the rows written since
            log = change_log_rows(store)
            assert "note" in log[-1] and "extra" in log[-1], kind
    finally:
        summary = job.stop()
    for stats in summary.channels:
        assert stats.status == "stopped", (stats.channel, stats.status, job.text())
        assert len(stats.schema_changes) >= 2, (stats.channel, stats.schema_changes)
    assert summary.ok
    print(f"{time.strftime('%H:%M:%S')} done", flush=True)
