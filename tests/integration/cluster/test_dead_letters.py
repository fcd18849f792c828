"""Dead letters with real processes (issue 14 §3, REPLICATION.md decision 8): a real PostgreSQL
server and a 3-node RF 3 edge cluster, no Spark (the sink's task writer is called directly).

A task whose changes include a ``text`` value holding U+0000 (PostgreSQL text cannot hold it)
applies every other change, keeps the refused one in ``system_replication.dead_letters`` with
the reason, and succeeds. ``ringflow replication dead-letters`` lists it; ``replay`` applies
what PostgreSQL now takes (deleted) and keeps what it refuses again (with the reason); ``drop``
deletes; bad input exits 2 before anything changes."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from ringflow.cdc import CdcOperation
from ringflow.cli._demo_postgres import PostgresServer, PostgresUnavailable, postgres_binary
from ringflow.pipeline import (
    Change,
    change_arrow_schema,
    change_to_arrow_row,
    dead_letter_options,
    drop_dead_letters,
    list_dead_letters,
    postgres_options,
    read_postgres_live,
    record_dead_letters,
    replay_dead_letters,
)
from ringflow.pipeline._hub import _write_batches as _write_hub_batches
from ringflow.pipeline._hub import hub_options
from ringflow.pipeline._hub import parse_options as parse_hub_options
from ringflow.pipeline._postgres import _write_batches, parse_options
from ringflow.schema import INT, TEXT, Table, timeuuid_from_micros
from tests.integration.cluster.conftest import LocalCluster, wait_until

pytestmark = pytest.mark.timeout(300)

TABLE = Table.create("shop", "orders", partition_key=[("id", INT)], regular=[("note", TEXT)])
TARGET = "shop_orders"


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    try:
        postgres_binary("initdb")
    except PostgresUnavailable as error:
        pytest.skip(str(error))
    with PostgresServer() as server:
        yield server.url


def change(key: int, note: str) -> Change:
    time = timeuuid_from_micros(1_700_000_000_000_000 + key, key)
    return Change("shop", "orders", CdcOperation.INSERT, time, {"id": key}, values={"note": note})


def dead_letters(cluster: LocalCluster, channel: str) -> list[dict[str, object]]:
    query = SimpleStatement(
        "SELECT * FROM system_replication.dead_letters WHERE channel = %s",
        consistency_level=ConsistencyLevel.QUORUM,
    )
    return [row._asdict() for row in cluster.session().execute(query, [channel])]


def dead_letters_command(*arguments: str) -> tuple[int, str]:
    script = Path(sys.executable).parent / "ringflow"
    done = subprocess.run(
        [str(script), "replication", "dead-letters", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


def test_a_refused_row_is_kept_listed_replayed_and_dropped(
    local_cluster: LocalCluster, postgres_url: str
) -> None:
    first, second, _ = local_cluster.addresses
    setup = local_cluster.session()
    setup.execute(
        "CREATE KEYSPACE shop WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}"
    )
    setup.execute("CREATE TABLE shop.orders (id int PRIMARY KEY, note text)")
    assert setup.wait_for_schema_agreement(wait_time=20)
    wait_until(lambda: dead_letters(local_cluster, "none") == [], 30, "dead_letters readable")

    options = postgres_options(postgres_url, TARGET, TABLE)
    config = parse_options({**options, "dead_letters": f"{first},{second}", "channel": "pg"})
    bad = change(3, "before\x00after")
    changes = [change(1, "a"), change(2, "b"), bad, change(4, "d")]
    rows = [change_to_arrow_row(TABLE, c) for c in changes]
    batches = pa.Table.from_pylist(rows, schema=change_arrow_schema(TABLE)).to_batches()

    report = _write_batches(config, iter(batches))

    assert (report.rows, report.dead_letters) == (3, 1)
    live = read_postgres_live(postgres_url, TARGET, TABLE)
    assert {key[0]: row.values["note"] for key, row in live.items()} == {1: "a", 2: "b", 4: "d"}
    (letter,) = dead_letters(local_cluster, "pg")
    assert (letter["keyspace_name"], letter["table_name"]) == ("shop", "orders")
    assert "DataError" in str(letter["reason"]) and "NUL" in str(letter["reason"])
    assert "before\\u0000after" in str(letter["change"]) or "before\x00after" in str(
        letter["change"]
    )

    source = ("--source", first, "--channel", "pg")
    code, out = dead_letters_command("list", *source)
    assert code == 0, out
    assert "shop.orders" in out and "DataError" in out and "1 dead letter(s)" in out

    # bad input: exit 2, nothing changed
    for arguments, message in [
        (("list", "--source", first, "--channel", "nope"), "unknown channel 'nope'"),
        (("replay", *source), "give its destination with --to"),
        (("replay", *source, "--to", "mysql://x"), "expected"),
        (("replay", *source, "--to", f"parquet:{postgres_url}"), "a lake takes every change"),
        (("drop", *source, "--before", "yesterday"), "--before"),
    ]:
        code, out = dead_letters_command(*arguments)
        assert code == 2, (arguments, out)
        assert message in out, (arguments, out)
    assert len(dead_letters(local_cluster, "pg")) == 1

    # a dead letter PostgreSQL takes now (recorded as a sink would), next to the refused one
    fine = change(5, "fine")
    edge = dead_letter_options([first], 9042)
    assert record_dead_letters(edge, "pg", [(fine, "PostgreSQL was in maintenance")]) == 1
    code, out = dead_letters_command("replay", *source, "--to", postgres_url)
    assert code == 0, out
    assert "1 applied (deleted), 1 refused again (kept)" in out, out
    live = read_postgres_live(postgres_url, TARGET, TABLE)
    assert live[(5,)].values["note"] == "fine"
    (kept,) = dead_letters(local_cluster, "pg")
    assert kept["failed_at"] == letter["failed_at"] and "NUL" in str(kept["reason"])

    code, out = dead_letters_command("drop", *source, "--before", "2000-01-01T00:00:00")
    assert (code, "0 dead letter(s) dropped" in out) == (0, True), out
    code, out = dead_letters_command("drop", *source)
    assert (code, "1 dead letter(s) dropped" in out) == (0, True), out
    assert dead_letters(local_cluster, "pg") == []


def test_replay_and_drop_walk_a_channel_a_page_at_a_time(local_cluster: LocalCluster) -> None:
    """Pages of 2 over 7 dead letters: replay deletes what ``apply`` takes (odd keys) and keeps
    the rest with the new reason, every page read after the previous one was used; drop then
    deletes the kept ones."""
    first = local_cluster.addresses[0]
    edge = dead_letter_options([first], 9042)
    wait_until(lambda: dead_letters(local_cluster, "none") == [], 30, "dead_letters readable")
    recorded = [(change(key, f"n{key}"), "first refusal") for key in range(7)]
    assert record_dead_letters(edge, "paged", recorded) == 7
    session = local_cluster.session()
    listed = list(list_dead_letters(session, "paged", page_size=2))
    assert sorted(int(str(d.change.key["id"])) for d in listed) == list(range(7))
    assert [d.failed_at_us for d in listed] == sorted(d.failed_at_us for d in listed)

    def apply(taken: Change) -> str | None:
        return None if int(str(taken.key["id"])) % 2 else f"even {taken.key['id']}"

    report = replay_dead_letters(session, "paged", apply, page_size=2)
    assert (report.applied, report.kept) == (3, 4)
    kept = list(list_dead_letters(session, "paged", page_size=2))
    assert sorted(int(str(d.change.key["id"])) for d in kept) == [0, 2, 4, 6]
    assert {d.reason for d in kept} == {"even 0", "even 2", "even 4", "even 6"}
    assert drop_dead_letters(session, "paged", page_size=2) == 4
    assert dead_letters(local_cluster, "paged") == []


HUB_SOURCE = Table.create(
    "shop", "counted", partition_key=[("id", INT)], regular=[("note", TEXT), ("qty", INT)]
)


def test_a_change_the_hub_refuses_is_kept_and_replayed_once_the_hub_is_fixed(
    local_cluster: LocalCluster,
) -> None:
    """The hub sink: an operator dropped a column on the hub after the job checked it; the
    changes writing that column are refused (InvalidRequest), kept as dead letters, the others
    applied; once the column is back, ``replay`` applies them. (The edge cluster is the hub
    too, in a keyspace of its own.)"""
    first, second, _ = local_cluster.addresses
    setup = local_cluster.session()
    for statement in (
        "CREATE KEYSPACE IF NOT EXISTS shop WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 3}",
        "CREATE TABLE shop.counted (id int PRIMARY KEY, note text, qty int)",
        "CREATE KEYSPACE hubside WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        "CREATE TABLE hubside.counted (id int PRIMARY KEY, note text, qty int)",
    ):
        setup.execute(statement)
    assert setup.wait_for_schema_agreement(wait_time=20)
    options = hub_options([first], "hubside", "counted", HUB_SOURCE, consistency="ONE")
    config = parse_hub_options({**options, "dead_letters": f"{first},{second}", "channel": "hub"})
    setup.execute("ALTER TABLE hubside.counted DROP qty")  # the operator, after the check
    assert setup.wait_for_schema_agreement(wait_time=20)

    written_us = time.time_ns() // 1000  # after the DROP: a cell written before a column's
    # drop never shows once it is added back (Cassandra's dropped_columns), replayed or not

    def counted(key: int, qty: int | None) -> Change:
        at = timeuuid_from_micros(written_us + key, key)
        values: dict[str, object] = {"note": f"n{key}"}
        if qty is not None:
            values["qty"] = qty
        return Change("shop", "counted", CdcOperation.INSERT, at, {"id": key}, values=values)

    changes = [counted(1, None), counted(2, 7), counted(3, None)]
    rows = [change_to_arrow_row(HUB_SOURCE, c) for c in changes]
    batches = pa.Table.from_pylist(rows, schema=change_arrow_schema(HUB_SOURCE)).to_batches()

    report = _write_hub_batches(config, iter(batches))

    assert report.dead_letters == 1
    hub = {row.id: row.note for row in setup.execute("SELECT id, note FROM hubside.counted")}
    assert hub == {1: "n1", 3: "n3"}
    (letter,) = dead_letters(local_cluster, "hub")
    assert "qty" in str(letter["reason"]), letter

    setup.execute("ALTER TABLE hubside.counted ADD qty int")  # the fix
    assert setup.wait_for_schema_agreement(wait_time=20)
    to = f"ringflow://{first}:9042/hubside.counted?consistency=ONE"
    code, out = dead_letters_command("replay", "--source", first, "--channel", "hub", "--to", to)
    assert code == 0, out
    assert "1 applied (deleted), 0 refused again (kept)" in out, out
    row = setup.execute("SELECT note, qty FROM hubside.counted WHERE id = 2").one()
    assert (row.note, row.qty) == ("n2", 7)
    assert dead_letters(local_cluster, "hub") == []
