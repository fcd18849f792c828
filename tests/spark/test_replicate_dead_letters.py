"""``ringflow replicate --once`` to PostgreSQL meets a row PostgreSQL cannot hold (a CQL ``text``
value with U+0000): the run succeeds, every other row is at PostgreSQL, and the refused row is a
dead letter of the channel in the edge cluster (REPLICATION.md decision 8; before, the batch
failed and the channel retried it for ever). ``ringflow replication dead-letters`` lists it;
replaying it to PostgreSQL is refused again and keeps it, with the reason; dropping deletes it.

The edge cluster, PostgreSQL and Spark are the session's (``conftest``); keyspace ``dead_ks``.
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
from ringflow.cli._demo import driver_cluster
from ringflow.cli._demo_cluster import LocalCluster
from ringflow.pipeline import read_postgres_live
from ringflow.pipeline._replicate import cdc_options, source_table

KEYSPACE = "dead_ks"
ROWS = 20
BAD_ID = 7
CONFIDENCE_MS = 1000


@pytest.fixture(scope="module")
def edge(edge_cluster: LocalCluster) -> Iterator[Any]:
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy())
    driver = driver_cluster(edge_cluster.addresses, 9042, policy, "QUORUM")
    try:
        yield driver.connect()
    finally:
        driver.shutdown()


def test_a_row_postgres_refuses_becomes_a_dead_letter_and_the_run_succeeds(
    spark: SparkSession,
    edge: Any,
    edge_cluster: LocalCluster,
    postgres_url: str,
    tmp_path: Path,
    capsys: Any,
) -> None:
    edge.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    edge.execute(
        f"CREATE TABLE {KEYSPACE}.notes (id int PRIMARY KEY, note text) "
        "WITH cdc = {'enabled': true}"
    )
    insert = edge.prepare(f"INSERT INTO {KEYSPACE}.notes (id, note) VALUES (?, ?)")
    for key in range(ROWS):
        edge.execute(insert, (key, f"note\x00{key}" if key == BAD_ID else f"note {key}"))
    time.sleep(2 * CONFIDENCE_MS / 1000)
    source = edge_cluster.contact_points

    code = main(
        [
            "replicate",
            *("--source", source, "--table", f"{KEYSPACE}.notes"),
            *("--to", postgres_url, "--checkpoint", str(tmp_path / "checkpoints")),
            *("--once", "--confidence-window-ms", str(CONFIDENCE_MS)),
        ]
    )
    assert code == 0, capsys.readouterr().out

    table = source_table(cdc_options(source, f"{KEYSPACE}.notes"))
    live = read_postgres_live(postgres_url, f"{KEYSPACE}_notes", table)
    assert {key[0]: row.values["note"] for key, row in live.items()} == {
        key: f"note {key}" for key in range(ROWS) if key != BAD_ID
    }
    capsys.readouterr()

    channel = ("--source", source, "--channel", "postgres")
    assert main(["replication", "dead-letters", "list", *channel]) == 0
    listed = capsys.readouterr().out
    assert f"{KEYSPACE}.notes" in listed and "DataError" in listed, listed
    assert "1 dead letter(s)" in listed, listed

    assert main(["replication", "dead-letters", "replay", *channel, "--to", postgres_url]) == 0
    replayed = capsys.readouterr().out
    assert "0 applied (deleted), 1 refused again (kept)" in replayed, replayed
    assert "NUL" in replayed, replayed
    assert main(["replication", "dead-letters", "list", *channel]) == 0
    assert "1 dead letter(s)" in capsys.readouterr().out

    assert main(["replication", "dead-letters", "drop", *channel]) == 0
    assert "1 dead letter(s) dropped" in capsys.readouterr().out
    assert main(["replication", "dead-letters", "list", *channel]) == 2  # nothing left: unknown
