"""``ringflow replicate`` (continuous) through schema changes of the edge table (issue 15).

One job, run in a thread of this process (``run_replication(once=False)`` with a stop
condition, the session's SparkSession), reads a CDC-enabled table of the session's 3-node RF 3
edge cluster at QUORUM and feeds three channels: the hub table ``evolve.items`` (which ringflow
may not alter), the Parquet lake and PostgreSQL (which it may alter). (The hub altered by
ringflow, and PostgreSQL's statements for the operator: ``test_sink_evolution``.) While it runs:

0. rows are written; every destination equals the edge;
1. ``ADD price double`` and ``ADD tags set<text>``, then new rows and updates of old ones with
   them: PostgreSQL gets the columns, the lake a second schema version, and they equal the
   edge; the hub channel, which may not alter, stops with a message listing the exact
   statements while the others go on; the test runs those statements as printed, and the hub
   channel resumes and catches up with nothing lost;
2. ``DROP note``, then rows without it (and a row delete): every destination equals the edge,
   and still holds ``note`` with the values the edge had before the drop;
3. ``ADD note`` again, then rows with it: every destination equals the edge.

After each phase each destination equals the edge table read at ALL (keys, values, write times
of the atomic columns) and holds the phase's rows (counted per phase). The job never exits; at
the end every channel has followed each schema change (none as a failure) and stops cleanly.

A second test plans a job after the source changed while none ran: the hub channel, behind and
not allowed to alter, is planned waiting with the statement; allowed, the planner alters it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cassandra import InvalidRequest
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from pyspark.sql import SparkSession

from ringflow.cdc import CdcOperation
from ringflow.cli._demo import driver_cluster
from ringflow.cli._demo_cluster import LocalCluster, NodeProcess
from ringflow.pipeline import PipelineConfigError, read_lake_changes
from ringflow.pipeline._replicate import cdc_options, plan_replication, source_table
from ringflow.schema import Table
from tests.spark._job_thread import JobThread, printed_statements, wait_until
from tests.spark._replication import write_statement
from tests.spark._schema_evolution import (
    Rows,
    cql_rows,
    differences,
    lake_rows,
    postgres_rows,
)

KEYSPACE = "evolve"
CONFIDENCE_MS = 1000
WAIT_S = 180.0
PHASE_ROWS = 30
DDL = (
    "CREATE TABLE {name} (id int, seq int, name text, qty int, note text, "
    "PRIMARY KEY (id, seq)){cdc}"
)


@pytest.fixture(scope="module")
def stage(
    edge_cluster: LocalCluster, hub_node: NodeProcess, hub: Any, postgres_url: str
) -> Iterator[dict[str, Any]]:
    """The edge (token-aware, QUORUM) and hub sessions with the tables."""
    driver = driver_cluster(
        edge_cluster.addresses, 9042, TokenAwarePolicy(DCAwareRoundRobinPolicy()), "QUORUM"
    )
    edge = driver.connect()
    for session, rf in ((edge, 3), (hub, 1)):
        session.execute(
            f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
        )
    edge.execute(DDL.format(name=f"{KEYSPACE}.items", cdc=" WITH cdc = {'enabled': true}"))
    hub.execute(DDL.format(name=f"{KEYSPACE}.items", cdc=""))
    try:
        yield {
            "edge": edge,
            "hub": hub,
            "postgres": postgres_url,
            "hub_endpoint": hub_node.endpoint,
        }
    finally:
        driver.shutdown()


class Destinations:
    """Each destination's rows, read for a version of the source table."""

    def __init__(self, stage: dict[str, Any], lake: Path) -> None:
        self.stage, self.lake = stage, lake

    def readers(self) -> dict[str, Callable[[Table], Rows]]:
        hub, target = self.stage["hub"], f"{KEYSPACE}_items"
        return {
            "hub": lambda t: cql_rows(hub, t, f"{KEYSPACE}.items"),
            "lake": lambda t: lake_rows(self.lake, t),
            "postgres": lambda t: postgres_rows(self.stage["postgres"], target, t),
        }

    def expected(self, table: Table, kept: Rows | None) -> Rows:
        """The edge's rows, with ``kept`` (cells and write times the destinations keep and the
        edge no longer shows) laid over them."""
        rows = cql_rows(self.stage["edge"], table, f"{KEYSPACE}.items", "ALL")
        for key, (cells, times) in (kept or {}).items():
            row_cells, row_times = rows[key]
            rows[key] = ({**row_cells, **cells}, {**row_times, **times})
        return rows

    def equal_to_edge(
        self, table: Table, channels: list[str], kept: Rows | None = None
    ) -> Callable[[], bool]:
        """A check that each of ``channels`` equals the edge (False while a destination has
        not got the table or its columns yet: reading them fails), ``kept`` laid over it."""

        def check() -> bool:
            expected = self.expected(table, kept)
            readers = self.readers()
            try:
                return all(not differences(expected, readers[c](table)) for c in channels)
            except (InvalidRequest, psycopg.Error, PipelineConfigError):  # not there yet
                return False

        return check

    def assert_phase(
        self, table: Table, channels: list[str], phase: int, count: int, kept: Rows | None = None
    ) -> None:
        """Each of ``channels`` equals the edge (``kept`` laid over it) and holds ``count``
        rows of ``phase``."""
        expected = self.expected(table, kept)
        for channel in channels:
            rows = self.readers()[channel](table)
            assert differences(expected, rows) == [], channel
            held = [key for key in rows if phase * 100 <= int(key[0]) < phase * 100 + 100]  # type: ignore[call-overload]
            assert len(held) == count, (channel, phase, len(held))


def _write(edge: Any, statements: list[tuple[str, tuple[object, ...]]]) -> None:
    started = time.monotonic()
    prepared: dict[str, Any] = {}
    for text, values in statements:
        if text not in prepared:
            prepared[text] = edge.prepare(text)
        write_statement(edge, prepared[text], values)
    print(f"{len(statements)} writes: {time.monotonic() - started:.1f} s", flush=True)


ALL = ["hub", "lake", "postgres"]


def test_replication_follows_add_drop_and_add_again_without_loss(
    spark: SparkSession, stage: dict[str, Any], edge_cluster: LocalCluster, tmp_path: Path
) -> None:
    edge, items = stage["edge"], f"{KEYSPACE}.items"
    hub_url = f"ringflow://{stage['hub_endpoint']}"
    options = cdc_options(
        edge_cluster.contact_points, items, consistency="QUORUM", confidence_window_ms=CONFIDENCE_MS
    )
    urls = [
        f"{hub_url}?consistency=ONE",
        f"parquet:{tmp_path / 'lake'}",
        stage["postgres"],
    ]
    plan = plan_replication(options, urls, tmp_path / "ck", alter_destinations=["postgres"])
    assert [d.channel for d in plan.destinations] == ALL
    destinations = Destinations(stage, tmp_path / "lake")
    insert = f"INSERT INTO {items} (id, seq, name, qty, note) VALUES (?, 0, ?, ?, ?)"
    _write(edge, [(insert, (i, f"n{i}", i, f"note{i}")) for i in range(PHASE_ROWS)])
    job = JobThread(spark, plan)
    try:
        table = source_table(options)
        wait_until(destinations.equal_to_edge(table, ALL), "phase 0", WAIT_S, job)
        destinations.assert_phase(table, ALL, 0, PHASE_ROWS)

        # 1. two new columns: the channel that may not alter stops, the others go on
        edge.execute(f"ALTER TABLE {items} ADD price double")
        edge.execute(f"ALTER TABLE {items} ADD tags set<text>")
        insert = f"INSERT INTO {items} (id, seq, name, price, tags) VALUES (?, 0, ?, ?, ?)"
        _write(
            edge,
            [(insert, (100 + i, f"p{i}", i + 0.5, {f"t{i % 3}"})) for i in range(PHASE_ROWS)]
            + [
                (f"UPDATE {items} SET price = ? WHERE id = ? AND seq = 0", (9.25, i))
                for i in range(10)
            ]
            + [
                (f"UPDATE {items} SET tags = tags + ? WHERE id = ? AND seq = 0", ({"x"}, i))
                for i in range(10, 15)
            ],
        )
        table = source_table(options)
        going_on = ["lake", "postgres"]
        wait_until(destinations.equal_to_edge(table, going_on), "phase 1 (altering)", WAIT_S, job)
        destinations.assert_phase(table, going_on, 1, PHASE_ROWS)
        hub_expected = [
            f'ALTER TABLE "{KEYSPACE}"."items" ADD "price" double',
            f'ALTER TABLE "{KEYSPACE}"."items" ADD "tags" set<text>',
        ]
        wait_until(
            lambda: set(hub_expected) <= set(printed_statements(job.text(), "ALTER")),
            "the statements for both new columns",
            WAIT_S,
            job,
        )
        assert "hub: stopped, the other channels go on" in job.text(), job.text()
        manual = stage["hub"].execute(
            "SELECT column_name FROM system_schema.columns "
            "WHERE keyspace_name = %s AND table_name = 'items'",
            (KEYSPACE,),
        )
        assert "price" not in {row["column_name"] for row in manual}  # nothing altered it
        held = [r["id"] for r in stage["hub"].execute(f"SELECT id FROM {items}")]
        assert not [i for i in held if i >= 100]  # stopped before the first change it cannot take
        for statement in hub_expected:  # the operator runs what was printed
            stage["hub"].execute(statement)
        wait_until(destinations.equal_to_edge(table, ALL), "phase 1 (resumed)", WAIT_S, job)
        destinations.assert_phase(table, ALL, 1, PHASE_ROWS)
        assert "hub: its destination takes the source table now: resumed" in job.text()

        # 2. post-images turned on (log rows, not columns: no restart), then a column dropped:
        # it stops arriving and every destination keeps it
        edge.execute(f"ALTER TABLE {items} WITH cdc = {{'enabled': true, 'postimage': true}}")
        before = cql_rows(edge, table, items, "ALL")
        edge.execute(f"ALTER TABLE {items} DROP note")
        insert = f"INSERT INTO {items} (id, seq, name, qty) VALUES (?, 0, ?, ?)"
        _write(
            edge,
            [(insert, (200 + i, f"d{i}", i)) for i in range(PHASE_ROWS)]
            + [
                (f"UPDATE {items} SET qty = ? WHERE id = ? AND seq = 0", (7, 100 + i))
                for i in range(5)
            ]
            + [(f"DELETE FROM {items} WHERE id = ? AND seq = 0", (20,))],
        )
        with_note, table = table, source_table(options)
        assert not table.has_column("note")
        wait_until(destinations.equal_to_edge(table, ALL), "phase 2", WAIT_S, job)
        destinations.assert_phase(table, ALL, 2, PHASE_ROWS)
        kept = {k: v[0]["note"] for k, v in before.items() if "note" in v[0] and k != (20, 0)}
        assert len(kept) == PHASE_ROWS - 1
        for channel, read in destinations.readers().items():
            notes = {k: v[0].get("note") for k, v in read(with_note).items() if k in kept}
            assert notes == kept, channel
        images = [
            c
            for c in read_lake_changes(tmp_path / "lake", items)
            if c.operation is CdcOperation.POST_IMAGE
        ]
        touched = {*range(200, 200 + PHASE_ROWS), *range(100, 105), 20}  # phase 2's writes
        imaged = {c.key["id"] for c in images}
        assert set(range(200, 200 + PHASE_ROWS)) <= imaged <= touched  # only since it is on

        # 3. the dropped column added back
        edge.execute(f"ALTER TABLE {items} ADD note text")
        insert = f"INSERT INTO {items} (id, seq, name, note) VALUES (?, 0, ?, ?)"
        _write(
            edge,
            [(insert, (300 + i, f"a{i}", f"back{i}")) for i in range(PHASE_ROWS)]
            + [
                (f"UPDATE {items} SET note = ? WHERE id = ? AND seq = 0", ("late", 200 + i))
                for i in range(5)
            ],
        )
        table = source_table(options)
        # The edge never shows a re-added column's cells from before its drop (Cassandra's
        # dropped_columns, issue 20); the destinations kept them (a destination never loses a
        # column, issue 15) and still show them. Every other cell agrees.
        edge_now = cql_rows(edge, table, items, "ALL")
        assert all("note" not in edge_now[key][0] for key in kept)
        kept_notes: Rows = {
            key: ({"note": before[key][0]["note"]}, {"note": before[key][1]["note"]})
            for key in kept
        }
        check = destinations.equal_to_edge(table, ALL, kept_notes)
        wait_until(check, "phase 3", WAIT_S, job)
        destinations.assert_phase(table, ALL, 3, PHASE_ROWS, kept_notes)
        for phase, count in ((0, PHASE_ROWS - 1), (1, PHASE_ROWS), (2, PHASE_ROWS)):
            destinations.assert_phase(table, ALL, phase, count, kept_notes)
        assert job.alive()
    finally:
        summary = job.stop()
    for stats in summary.channels:
        assert stats.status == "stopped", (stats.channel, stats.status, job.text())
        assert len(stats.schema_changes) >= 3, (stats.channel, stats.schema_changes)
    assert summary.ok
    versions = sorted(p.name for p in (tmp_path / "lake" / f"table={items}").glob("_schema*.json"))
    assert versions == ["_schema.2.json", "_schema.3.json", "_schema.json"]


def test_a_job_started_after_the_source_changed_waits_only_for_a_destination_behind(
    stage: dict[str, Any], edge_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The source table gained a column while no job ran: planning the job finds the hub
    target without it; that channel is planned waiting, with the statement, and the others
    start; allowed to alter, the planner adds the column instead (no Spark needed)."""
    edge, hub = stage["edge"], stage["hub"]
    edge.execute(
        f"CREATE TABLE {KEYSPACE}.later (id int PRIMARY KEY, a text, b int) "
        "WITH cdc = {'enabled': true}"
    )
    hub.execute(f"CREATE TABLE {KEYSPACE}.later (id int PRIMARY KEY, a text)")
    options = cdc_options(edge_cluster.contact_points, f"{KEYSPACE}.later")
    urls = [f"ringflow://{stage['hub_endpoint']}?consistency=ONE", f"parquet:{tmp_path / 'lake'}"]
    hub_channel, lake_channel = plan_replication(options, urls, tmp_path / "ck").destinations
    assert hub_channel.blocked is not None and lake_channel.blocked is None
    assert f'\n  ALTER TABLE "{KEYSPACE}"."later" ADD "b" int;' in hub_channel.blocked
    assert "altering it is not allowed" in hub_channel.blocked
    planned = plan_replication(options, urls, tmp_path / "ck", alter_destinations=True)
    assert [d.blocked for d in planned.destinations] == [None, None]
    columns = hub.execute(
        "SELECT column_name FROM system_schema.columns "
        "WHERE keyspace_name = %s AND table_name = 'later'",
        (KEYSPACE,),
    )
    assert {row["column_name"] for row in columns} == {"id", "a", "b"}
