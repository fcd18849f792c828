"""The node side of transmission on a 3-node RF 3 cluster of real processes, through the Scylla
driver (issue 14 §1-3; REPLICATION.md decisions 4-6), with slices of 1 s x 2 by default and
the channels' slicing (2 s x 2, 8 s x 2) for their tables.

Proves: every node publishes each slice it seals to ``system_replication.slices`` (read at
QUORUM through another node: every node's copy, equal digests with every node up) and raises
its seal watermark of an idle table too; a table is sliced as its channels say on every node;
``captured_rows`` through a driver pinned to one node returns exactly that node's captured
rows of a slice, paged by ``seq`` and by the driver, and bad queries are Invalid; synch-delete
drops a slice on every node whose copy has the digest a channel was sent, not on the node
whose copy differs, keeps slices nothing was sent of, and holds nothing for a paused channel
or a table without channels; a slice sealed while QUORUM was impossible, its node then killed
(-9), is published after the restart. The stores are read read-only while the nodes run.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cassandra import ConsistencyLevel, InvalidRequest
from cassandra.cluster import Session
from cassandra.query import SimpleStatement

from ringflow.replication import decode_canonical_row
from tests.integration.cluster.conftest import LocalCluster, started_cluster, wait_until
from tests.integration.node.test_cqlsh import _cqlsh_path

pytestmark = pytest.mark.timeout(300)
QUORUM = ConsistencyLevel.QUORUM
KEY = (
    "keyspace_name = ? AND table_name = ? AND slice_start_ms = ? AND range_start = ? "
    "AND range_end = ? AND out_of_sequence = ?"
)
ROWS = f"SELECT seq, row_digest, row FROM system_replication.captured_rows WHERE {KEY}"
DESCRIBE = "DESCRIBE KEYSPACE system_replication"
Slice = tuple[str, str, int, int, int, bool]
"""A slice key as the tables' columns: keyspace, table, slice start, range start, end, oos."""


def channel(name: str, table: str, width_s: int, *, collecting: bool = True) -> str:
    return (
        "INSERT INTO system_replication.channels (name, source_keyspace, source_table, "
        "destination, priority, transmission_order, collection_enabled, transmission_enabled, "
        f"slice_width_s, slice_count) VALUES ('{name}', 'ks', '{table}', 'parquet:/tmp/{name}', "
        f"50, 'fifo', {str(collecting).lower()}, true, {width_s}, 2)"
    )


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data = tmp_path_factory.mktemp("publication")
    options = ("--slice-width-s", "1", "--slice-count", "2", "--num-tokens", "4")
    with started_cluster(data, *options) as cluster:
        session = cluster.session()
        session.execute(
            "CREATE KEYSPACE ks WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 3}"
        )
        for table in ("events", "idle", "loose", "faults"):
            session.execute(
                f"CREATE TABLE ks.{table} (k int, c int, v text, PRIMARY KEY (k, c)) "
                "WITH cdc = {'enabled': true}"
            )
        assert session.wait_for_schema_agreement(wait_time=20)
        for text in (
            channel("hub", "events", 2),
            channel("paused", "events", 2, collecting=False),
            channel("fhub", "faults", 8),
        ):
            session.execute(SimpleStatement(text, consistency_level=QUORUM))
        wanted = {"ks.events": "2 s x 2", "ks.faults": "8 s x 2"}
        wait_until(
            lambda: all(
                capture(cluster, i)["channels"]["sliced_by_channels"] == wanted for i in range(3)
            ),
            30,
            "every node slices events and faults as their channels say",
        )
        yield cluster


def capture(cluster: LocalCluster, index: int) -> dict[str, Any]:
    document = json.loads((cluster.data / f"node{index + 1}" / "status.json").read_text())
    found = document["capture"]
    assert isinstance(found, dict)
    return found


def host_id(cluster: LocalCluster, index: int) -> uuid.UUID:
    document = json.loads((cluster.data / f"node{index + 1}" / "status.json").read_text())
    return uuid.UUID(document["host_id"])


def insert(session: Session, table: str, keys: range, *, timestamp_us: int | None = None) -> None:
    using = "" if timestamp_us is None else f" USING TIMESTAMP {timestamp_us}"
    statement = session.prepare(f"INSERT INTO ks.{table} (k, c, v) VALUES (?, 1, ?){using}")
    statement.consistency_level = QUORUM
    for key in keys:
        session.execute(statement, (key, f"v{key}"))


def local_slices(session: Session, table: str) -> dict[Slice, Any]:
    """The node's own slices of ``ks.table`` (``local_slices``), by key."""
    rows = session.execute(
        "SELECT * FROM system_replication.local_slices WHERE keyspace_name = 'ks' "
        "AND table_name = %s",
        (table,),
    )
    return {
        ("ks", table, r.slice_start_ms, r.range_start, r.range_end, r.out_of_sequence): r
        for r in rows
    }


def published(session: Session, table: str) -> dict[Slice, dict[uuid.UUID, Any]]:
    """Every node's published copies of ``ks.table`` (``slices``, read at QUORUM), by key."""
    query = SimpleStatement("SELECT * FROM system_replication.slices", consistency_level=QUORUM)
    found: dict[Slice, dict[uuid.UUID, Any]] = {}
    for r in session.execute(query):
        if (r.keyspace_name, r.table_name) == ("ks", table):
            key = ("ks", table, r.slice_start_ms, r.range_start, r.range_end, r.out_of_sequence)
            found.setdefault(key, {})[r.node] = r
    return found


def stored_rows(cluster: LocalCluster, index: int, key: Slice) -> list[tuple[int, int, bytes]]:
    """(seq, digest, canonical bytes) of one slice, read-only from the node's store file."""
    uri = f"file:{cluster.data / f'node{index + 1}' / 'store.sqlite'}?mode=ro"
    database = sqlite3.connect(uri, uri=True, timeout=10)
    try:
        rows = database.execute(
            "SELECT r.seq, r.digest, r.row FROM capture_rows AS r JOIN capture_slices AS s "
            "ON r.sid = s.sid WHERE s.keyspace = ? AND s.table_name = ? AND s.slice_start_ms = ? "
            "AND s.range_start = ? AND s.range_end = ? AND s.out_of_sequence = ? ORDER BY r.seq",
            key,
        ).fetchall()
    finally:
        database.close()
    return [(seq, digest, bytes(row)) for seq, digest, row in rows]


def read_by_seq(session: Session, key: Slice, page: int) -> list[tuple[int, int, bytes]]:
    statement = session.prepare(f"{ROWS} AND seq > ? LIMIT ?")
    found: list[tuple[int, int, bytes]] = []
    after = -1
    while rows := list(session.execute(statement, (*key, after, page))):
        assert len(rows) <= page
        found.extend((r.seq, r.row_digest, r.row) for r in rows)
        after = rows[-1].seq
    return found


def sealed_and_published(session: Session, table: str, rows: int) -> bool:
    held = local_slices(session, table).values()
    return sum(r.row_count for r in held) == rows and all(r.sealed and r.published for r in held)


def test_every_node_publishes_its_slices_and_raises_its_watermarks(edge: LocalCluster) -> None:
    insert(edge.session(), "events", range(120))
    pinned = [edge.session(only=address) for address in edge.addresses]
    for session in pinned:
        wait_until(lambda s=session: sealed_and_published(s, "events", 120), 30, "published")
    copies = published(pinned[1], "events")
    hosts = {host_id(edge, i) for i in range(3)}
    assert len(copies) >= 4  # 12 vnodes: several ranges
    for key, by_node in copies.items():
        assert set(by_node) == hosts, key
        assert len({r.digest for r in by_node.values()}) == 1, f"{key}: digests differ"
        assert key[2] % 2000 == 0  # sliced 2 s x 2, as the channels say (default 1 s)
    for index, session in enumerate(pinned):
        mine = {k: (r.digest, r.row_count) for k, r in local_slices(session, "events").items()}
        me = host_id(edge, index)
        assert mine == {k: (v[me].digest, v[me].row_count) for k, v in copies.items()}
        widths = {r.due_ms - r.slice_start_ms for r in local_slices(session, "events").values()}
        assert widths == {4000}  # due at start + 2 widths of 2 s
    marks_query = SimpleStatement(
        "SELECT node, sealed_through_ms FROM system_replication.seal_watermarks "
        "WHERE keyspace_name = 'ks' AND table_name = 'idle'",
        consistency_level=QUORUM,
    )
    first = dict(list(pinned[2].execute(marks_query)))
    assert set(first) == hosts  # an idle table's watermarks are published too
    wait_until(
        lambda: all(mark > first[node] for node, mark in pinned[0].execute(marks_query)),
        15,
        "every node raised its watermark of the idle table",
    )


def test_captured_rows_come_from_the_node_asked_alone(edge: LocalCluster) -> None:
    index = 1
    session = edge.session(only=edge.addresses[index])
    held = local_slices(session, "events")
    key = max(held, key=lambda k: held[k].row_count)
    expected = stored_rows(edge, index, key)
    assert len(expected) == held[key].row_count >= 3
    assert read_by_seq(session, key, page=2) == expected
    paged = SimpleStatement(ROWS.replace("?", "%s"), fetch_size=2)
    result = session.execute(paged, key)
    assert [(r.seq, r.row_digest, r.row) for r in result] == expected
    decoded = [decode_canonical_row(row) for _, _, row in expected]
    assert all({"cdc$stream_id", "cdc$time", "k", "v"} <= set(row) for row in decoded)
    missing = (*key[:2], key[2] + 1000, *key[3:])
    assert read_by_seq(session, missing, page=5) == []
    for bad in (
        "SELECT * FROM system_replication.captured_rows",
        "SELECT * FROM system_replication.captured_rows WHERE keyspace_name = 'ks' "
        "AND table_name = 'events' ALLOW FILTERING",
        "INSERT INTO system_replication.captured_rows (keyspace_name, table_name, "
        "slice_start_ms, range_start, range_end, out_of_sequence, seq) "
        "VALUES ('ks', 'events', 0, 0, 1, false, 1)",
    ):
        with pytest.raises(InvalidRequest):
            session.execute(bad)
    described = subprocess.run(
        [_cqlsh_path(), edge.addresses[index], "9042", "-e", DESCRIBE],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "HOME": str(edge.data), "CQLSH_NO_BUNDLED": "TRUE"},
    )  # fmt: skip
    assert described.returncode == 0, described.stderr
    assert "CREATE TABLE system_replication.captured_rows" in described.stdout
    assert "CREATE TABLE system_replication.local_slices" in described.stdout


def test_synch_delete_drops_what_every_collecting_channel_has(edge: LocalCluster) -> None:
    pinned = [edge.session(only=address) for address in edge.addresses]
    insert(edge.session(), "loose", range(30))  # no channel: nothing holds it
    hosts = {host_id(edge, i) for i in range(3)}
    wait_until(
        lambda: (
            all(set(v) == hosts for v in published(pinned[0], "loose").values())
            and sum(r.row_count for v in published(pinned[0], "loose").values() for r in v.values())
            == 3 * 30
        ),
        20,
        "every node published its slices of the table without channels",
    )
    held = local_slices(pinned[0], "events")
    key = min(held)
    sent = SimpleStatement(
        "INSERT INTO system_replication.sent (keyspace_name, table_name, channel, "
        "slice_start_ms, range_start, range_end, out_of_sequence, node, digest, sent_at_ms) "
        "VALUES (%s, %s, 'hub', %s, %s, %s, %s, %s, %s, 1)",
        consistency_level=QUORUM,
    )  # sent by node 1: nodes 2 and 3 drop their copies by digest (synch-delete)
    pinned[0].execute(sent, (*key, host_id(edge, 0), held[key].digest))
    for session in pinned:
        wait_until(lambda s=session: key not in local_slices(s, "events"), 20, "sent: dropped")
        wait_until(lambda s=session: not local_slices(s, "loose"), 20, "no channel: dropped")
        rest = local_slices(session, "events")
        assert set(rest) == set(held) - {key}  # nothing sent of them: kept ('paused' holds none)
    wait_until(
        lambda: all(capture(edge, i)["synch_delete"]["dropped_slices"] >= 2 for i in range(3)),
        5,
        "the drops counted in status.json (rewritten every second)",
    )


def test_a_mismatching_copy_stays_and_a_restart_publishes_what_was_not(
    edge: LocalCluster,
) -> None:
    """Rows of one partition and one 8 s slice written with every node up, then with C killed:
    A and B hold the same copy, C a shorter one. B killed too, A seals its copy with QUORUM out
    of reach; A killed, all restarted: A's copy is published. A channel was sent B's digest: A
    and B drop theirs, C keeps its own and still serves it; A serves nothing of it any more."""
    a, b, c = edge.addresses
    for _attempt in range(PRECONDITION_ATTEMPTS):
        start_ms, session = _copies_that_differ(edge)
        sealed = _sealed_unpublished_or_published(edge, session, start_ms)
        if sealed:
            break
        # A published the slice with B before B died (the slice stays open 16 s; under load
        # the writes, captures and kills above took longer): the precondition of this test
        # did not hold, which says nothing of the outcome. B and C back, the next slice.
        edge.close_drivers()
        edge.wait_ready()
    else:
        pytest.fail(f"A published its copy before B was killed, {PRECONDITION_ATTEMPTS} times")
    edge.kill(a)
    edge.close_drivers()
    edge.wait_ready()  # A, B and C restarted
    hosts = [host_id(edge, i) for i in range(3)]
    reader = edge.session(only=b)

    def copies_of_the_slice() -> dict[Slice, dict[uuid.UUID, Any]]:
        found = published(reader, "faults").items()
        return {k: v for k, v in found if k[2] == start_ms and not k[5]}

    wait_until(
        lambda: [len(v) for v in copies_of_the_slice().values()] == [3],
        30,
        "every node's copy of the slice published",
    )
    ((key, copies),) = copies_of_the_slice().items()
    assert copies[hosts[0]].digest == copies[hosts[1]].digest != copies[hosts[2]].digest
    assert (copies[hosts[0]].row_count, copies[hosts[2]].row_count) == (40, 20)
    reader.execute(
        SimpleStatement(
            "INSERT INTO system_replication.sent (keyspace_name, table_name, channel, "
            "slice_start_ms, range_start, range_end, out_of_sequence, node, digest, sent_at_ms) "
            "VALUES (%s, %s, 'fhub', %s, %s, %s, %s, %s, %s, 1)",
            consistency_level=QUORUM,
        ),
        (*key, hosts[1], copies[hosts[1]].digest),
    )
    pinned = [edge.session(only=address) for address in (a, b, c)]
    for session in pinned[:2]:
        wait_until(lambda s=session: key not in local_slices(s, "faults"), 20, "A, B dropped")
    rounds = capture(edge, 2)["synch_delete"]["rounds"]
    wait_until(lambda: capture(edge, 2)["synch_delete"]["rounds"] >= rounds + 2, 20, "C's rounds")
    assert key in local_slices(pinned[2], "faults")  # its digest was never sent
    assert read_by_seq(pinned[0], key, page=10) == []  # A's copy is gone: nothing from C
    on_c_store = stored_rows(edge, 2, key)
    assert read_by_seq(pinned[2], key, page=10) == on_c_store and len(on_c_store) == 20


PRECONDITION_ATTEMPTS = 3


def _copies_that_differ(edge: LocalCluster) -> tuple[int, Session]:
    """Rows of one partition in one 8 s slice written at QUORUM through A: 20 with every node
    up (C captured them), 20 more with C killed; then B killed. The slice's start and a
    session pinned to A."""
    a, b, c = edge.addresses
    # The slice must stay open (16 s) until B is killed, or A and B publish it with QUORUM.
    start_ms = _slice_start_with_room(8000, room_ms=1000)
    session = edge.session(only=a)
    write = session.prepare("INSERT INTO ks.faults (k, c, v) VALUES (7, ?, 'f') USING TIMESTAMP ?")
    write.consistency_level = QUORUM
    for number in range(20):
        session.execute(write, (number, start_ms * 1000 + 1))
    on_c = edge.session(only=c)
    wait_until(lambda: _rows_in(on_c, start_ms) == 20, 5, "C captured the first 20 rows")
    edge.kill(c)
    for number in range(20, 40):
        session.execute(write, (number, start_ms * 1000 + 2))
    edge.kill(b)
    return start_ms, session


def _sealed_unpublished_or_published(edge: LocalCluster, session: Session, start_ms: int) -> bool:
    """True once A has sealed its copy of the slice and cannot publish it (QUORUM out of
    reach: its publication failing); False if A's copy turns out published (B was killed
    too late)."""
    outcome: list[bool] = []

    def settled() -> bool:
        held = [r for k, r in local_slices(session, "faults").items() if k[2] == start_ms]
        if any(r.published for r in held):
            outcome.append(False)
            return True
        if capture(edge, 0)["publication"]["failing"] and any(r.sealed for r in held):
            outcome.append(True)
            return True
        return False

    wait_until(settled, 45, "A sealed its copy and could not publish it, or published it")
    return outcome[-1]


def _rows_in(session: Session, start_ms: int) -> int:
    held = local_slices(session, "faults")
    return sum(r.row_count for k, r in held.items() if k[2] == start_ms and not k[5])


def _slice_start_with_room(width_ms: int, room_ms: int) -> int:
    """The start of the current slice of ``width_ms`` if at most ``room_ms`` of it passed,
    else of the next one (waited for): the rows written must arrive while their slice is
    still open (its start plus two widths)."""
    now_ms = int(time.time() * 1000)
    start = now_ms // width_ms * width_ms
    if now_ms - start > room_ms:
        time.sleep((start + width_ms - now_ms) / 1000 + 0.05)
        start += width_ms
    return start
