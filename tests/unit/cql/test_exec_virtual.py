"""The node-local virtual tables ``system_replication.captured_rows`` and ``local_slices``
through the executor (issue 14 §3): answered from the processor's own store's capture.

Proves: a prepared ``seq > ? LIMIT ?`` read of one slice returns exactly the rows the store
holds for it (sequence, digest, canonical bytes), page after page by ``seq`` and by the
protocol's paging; a slice not held reads as no rows; queries that do not name one slice are
Invalid, as are ORDER BY DESC and every write (Modification is not supported), DDL is
Unauthorized; ``local_slices`` lists the slices with their seal and publication state, read by
partition, by clustering bounds and by a paged scan; both tables are described in
``system_schema`` and registered in no store.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql._exec_system import VIRTUAL_TABLES
from ringflow.cql._results import RowsResult
from ringflow.errors import ErrorCode
from ringflow.replication import SliceKey, SliceSettings, decode_canonical_row
from ringflow.schema import BIGINT, BOOLEAN, TEXT
from ringflow.storage import CaptureConfig
from tests.unit.cql._exec_harness import ExecNode, decode_rows, node_with_keyspace, value

NODE = uuid.UUID(int=9)
RANGE = (-100, 100)
KEY_COLUMNS = (
    "keyspace_name = ? AND table_name = ? AND slice_start_ms = ? AND range_start = ? "
    "AND range_end = ? AND out_of_sequence = ?"
)
ROWS_QUERY = (
    f"SELECT seq, row_digest, row FROM system_replication.captured_rows WHERE {KEY_COLUMNS} "
    "AND seq > ? LIMIT ?"
)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExecNode]:
    """A node capturing ``ks.events`` and ``ks.other`` (1 s x 1 slices, every stream in one
    range), with 25 + 3 writes in one slice each, sealed, one of them marked published."""
    node = node_with_keyspace(tmp_path_factory.mktemp("virtual"))
    clock = node.clock
    node.store.capture.enable(
        CaptureConfig(NODE, lambda *_: RANGE, lambda: clock.now_us // 1000, SliceSettings(1, 1))
    )
    for table in ("events", "other"):
        node.ok(f"CREATE TABLE {table} (k int, c int, v text, PRIMARY KEY (k, c)) "
                "WITH cdc = {'enabled': true}")  # fmt: skip
    for number in range(25):
        node.ok("INSERT INTO events (k, c, v) VALUES (?, 1, ?)", value_int(number), b"x" * number)
    for number in range(3):
        node.ok("INSERT INTO other (k, c, v) VALUES (?, 1, 'o')", value_int(number))
    clock.advance(2)
    sealed = node.store.capture.seal_due()
    assert len(sealed) == 2
    node.store.capture.mark_published([s.key for s in sealed if s.key.table == "other"])
    yield node
    assert node.processor.internal_errors == 0
    node.close()


def value_int(number: int) -> bytes:
    return number.to_bytes(4, "big", signed=True)


def key_values(key: SliceKey) -> list[bytes]:
    return [
        value(TEXT, key.keyspace), value(TEXT, key.table), value(BIGINT, key.slice_start_ms),
        value(BIGINT, key.range_start), value(BIGINT, key.range_end),
        value(BOOLEAN, key.out_of_sequence),
    ]  # fmt: skip


def events_slice(node: ExecNode) -> SliceKey:
    (captured,) = node.store.capture.slices(table="events")
    return captured.key


def test_a_slice_is_read_by_seq_pages_exactly_as_the_store_holds_it(node: ExecNode) -> None:
    key = events_slice(node)
    held = node.store.capture.rows(key, limit=1000)
    assert len(held) == 25
    prepared = node.prepare(ROWS_QUERY)
    read: list[tuple[int, int, bytes]] = []
    after = -1
    while True:
        response = node.execute(
            prepared.statement_id, [*key_values(key), value(BIGINT, after), value_int(10)]
        )
        assert isinstance(response, RowsResult), response
        page = decode_rows(response)
        if not page:
            break
        assert len(page) <= 10
        read.extend(page)
        after = page[-1][0]
    assert [(seq, digest) for seq, digest, _ in read] == [(r.seq, r.digest) for r in held]
    assert [decode_canonical_row(row) for _, _, row in read] == [r.columns for r in held]


def test_the_protocol_pages_a_whole_slice(node: ExecNode) -> None:
    key = events_slice(node)
    text = f"SELECT seq, origin FROM system_replication.captured_rows WHERE {KEY_COLUMNS}"
    rows, pages = node.all_pages(text, *key_values(key), page_size=7)
    assert pages == 4
    assert [seq for seq, _ in rows] == [r.seq for r in node.store.capture.rows(key)]
    assert {origin for _, origin in rows} == {"write"}


def test_a_slice_not_held_reads_as_no_rows(node: ExecNode) -> None:
    key = events_slice(node)
    for other in (
        SliceKey(key.keyspace, key.table, key.range_start, key.range_end, key.slice_start_ms, True),
        SliceKey("ks", "nope", 1, 2, 1000),
    ):
        assert node.ok(ROWS_QUERY, *key_values(other), value(BIGINT, 0), value_int(5)) == []
    negative = [*key_values(key)[:2], value(BIGINT, -5), *key_values(key)[3:]]
    assert node.ok(ROWS_QUERY, *negative, value(BIGINT, 0), value_int(5)) == []


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("SELECT * FROM system_replication.captured_rows", ErrorCode.INVALID),
        ("SELECT * FROM system_replication.captured_rows WHERE keyspace_name = 'ks'",
         ErrorCode.INVALID),
        ("SELECT * FROM system_replication.captured_rows WHERE keyspace_name = 'ks' "
         "ALLOW FILTERING", ErrorCode.INVALID),
        ("SELECT * FROM system_replication.captured_rows WHERE keyspace_name = 'ks' AND "
         "table_name = 'events' AND slice_start_ms = 0 AND range_start = 0 AND range_end = 1 "
         "AND out_of_sequence = false ORDER BY seq DESC", ErrorCode.INVALID),
        ("INSERT INTO system_replication.captured_rows (keyspace_name, table_name, "
         "slice_start_ms, range_start, range_end, out_of_sequence, seq) "
         "VALUES ('ks', 't', 0, 0, 1, false, 1)", ErrorCode.INVALID),
        ("UPDATE system_replication.local_slices SET row_count = 1 WHERE keyspace_name = 'ks' "
         "AND table_name = 't' AND slice_start_ms = 0 AND range_start = 0 AND range_end = 1 "
         "AND out_of_sequence = false", ErrorCode.INVALID),
        ("DELETE FROM system_replication.local_slices WHERE keyspace_name = 'ks' AND "
         "table_name = 't'", ErrorCode.INVALID),
        ("BEGIN BATCH DELETE FROM system_replication.local_slices WHERE keyspace_name = 'ks' "
         "AND table_name = 't'; APPLY BATCH", ErrorCode.INVALID),
        ("DROP TABLE system_replication.captured_rows", ErrorCode.UNAUTHORIZED),
        ("ALTER TABLE system_replication.local_slices ADD x int", ErrorCode.UNAUTHORIZED),
        ("TRUNCATE system_replication.captured_rows", ErrorCode.INVALID),
    ],
)  # fmt: skip
def test_bad_queries_and_writes_are_refused(node: ExecNode, text: str, code: int) -> None:
    error = node.error(text)
    assert error.code == code, error
    if text.startswith(("INSERT", "UPDATE", "DELETE", "BEGIN")):
        assert "Modification is not supported by table system_replication." in error.message


def test_local_slices_lists_the_slices_with_their_state(node: ExecNode) -> None:
    rows = node.ok(
        "SELECT keyspace_name, table_name, row_count, sealed, published, digest, sealed_at_ms "
        "FROM system_replication.local_slices"
    )
    held = {s.key.table: s for s in node.store.capture.slices()}
    assert sorted((r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows) == sorted(
        (s.key.table, s.row_count, True, s.published, s.digest, s.sealed_ms) for s in held.values()
    )
    assert {r[1]: r[4] for r in rows} == {"events": False, "other": True}
    paged, pages = node.all_pages("SELECT * FROM system_replication.local_slices", page_size=1)
    assert len(paged) == 2 and pages >= 2
    start = held["events"].key.slice_start_ms
    one = node.ok(
        "SELECT row_count FROM system_replication.local_slices WHERE keyspace_name = 'ks' "
        "AND table_name = 'events' AND slice_start_ms >= ?",
        value(BIGINT, start),
    )
    assert one == [(25,)]
    later = node.ok(
        "SELECT row_count FROM system_replication.local_slices WHERE keyspace_name = 'ks' "
        "AND table_name = 'events' AND slice_start_ms > ?",
        value(BIGINT, start),
    )
    assert later == []


def test_the_virtual_tables_are_described_and_in_no_store(node: ExecNode) -> None:
    described = node.ok(
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = 'system_replication'"
    )
    assert {"captured_rows", "local_slices"} <= {name for (name,) in described}
    columns = node.ok(
        "SELECT column_name, kind FROM system_schema.columns "
        "WHERE keyspace_name = 'system_replication' AND table_name = 'captured_rows'"
    )
    kinds = dict(columns)
    assert kinds["seq"] == "clustering" and kinds["out_of_sequence"] == "partition_key"
    assert kinds["row"] == "regular"
    registered = {(t.keyspace, t.name) for t in node.store.tables()}
    assert not set(VIRTUAL_TABLES) & registered


def test_a_store_that_does_not_capture_answers_empty(tmp_path: Path) -> None:
    plain = ExecNode(tmp_path)
    assert plain.ok("SELECT * FROM system_replication.local_slices") == []
    key = SliceKey("ks", "events", *RANGE, 1000)
    assert plain.ok(ROWS_QUERY, *key_values(key), value(BIGINT, 0), value_int(5)) == []
    plain.close()
