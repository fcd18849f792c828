"""CDC through the executor: writes to a CDC table produce their log rows in the same apply.

Proves: each kind of base write gives the log rows of scylla-cdc.md §5 (``cdc$operation``, keys,
values, ``cdc$deleted_*``, ``cdc$ttl``, ``cdc$batch_seq_no``/``cdc$end_of_batch``), in the stream
``CdcMetadata.get_stream`` picks for the write's timestamp and token, with ``cdc$time`` carrying
the write timestamp; the consumer libraries' queries read them back; rejected writes (from the
future, no generation) are Invalid and write neither base nor log rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringflow.cql._results import RowsResult
from ringflow.cql._wire import UNSET
from ringflow.errors import ErrorCode
from ringflow.ring import murmur3_token
from ringflow.schema import (
    BLOB,
    INT,
    TIMESTAMP,
    ListType,
    SetType,
    serialize,
    timeuuid_to_micros,
)
from tests.unit.cql._exec_harness import (
    START_US,
    ExecNode,
    cdc_metadata,
    decode_rows,
    node_with_keyspace,
    value,
)

LOG_COLUMNS = (
    '"cdc$stream_id", "cdc$time", "cdc$batch_seq_no", "cdc$end_of_batch", "cdc$operation", '
    '"cdc$ttl", k, c, v, "cdc$deleted_v"'
)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ExecNode]:
    node = node_with_keyspace(tmp_path)
    node.ok(
        "CREATE TABLE t (k int, c int, v text, PRIMARY KEY (k, c)) "
        "WITH cdc = {'enabled': true, 'ttl': 600}"
    )
    yield node
    assert node.processor.internal_errors == 0
    node.close()


def log_rows(node: ExecNode) -> list[tuple[object, ...]]:
    rows = node.ok(f"SELECT {LOG_COLUMNS} FROM t_scylla_cdc_log")
    return sorted(rows, key=lambda r: (timeuuid_to_micros(r[1]), r[2]))  # type: ignore[arg-type]


def operations(node: ExecNode) -> list[tuple[object, ...]]:
    """(operation, k, c, v, deleted_v, ttl) of every log row, in write order."""
    return [(r[4], r[6], r[7], r[8], r[9], r[5]) for r in log_rows(node)]


def test_insert_is_logged_in_the_stream_of_its_token(node: ExecNode) -> None:
    node.ok("INSERT INTO t (k, c, v) VALUES (1, 2, 'a') USING TTL 50")
    ((stream, time, seq, end, operation, ttl, k, c, v, deleted),) = log_rows(node)
    written = node.ok("SELECT writetime(v) FROM t WHERE k = 1")[0][0]
    expected = cdc_metadata().get_stream(written, murmur3_token(serialize(INT, 1)), START_US)
    assert stream == expected.to_bytes()
    assert timeuuid_to_micros(time) == written  # type: ignore[arg-type]
    assert (seq, end, operation, ttl, k, c, v, deleted) == (0, True, 2, 50, 1, 2, "a", None)
    assert node.ok('SELECT ttl("cdc$operation") FROM t_scylla_cdc_log') == [(600,)]


CHANGE_CASES = [
    # (statement, expected (operation, k, c, v, deleted_v, ttl) rows)
    ("UPDATE t SET v = 'b' WHERE k = 1 AND c = 1", [(1, 1, 1, "b", None, None)]),
    ("UPDATE t SET v = null WHERE k = 1 AND c = 1", [(1, 1, 1, None, True, None)]),
    ("DELETE v FROM t WHERE k = 1 AND c = 1", [(1, 1, 1, None, True, None)]),
    ("DELETE FROM t WHERE k = 1 AND c = 1", [(3, 1, 1, None, None, None)]),
    ("DELETE FROM t WHERE k = 1", [(4, 1, None, None, None, None)]),
    ("DELETE FROM t WHERE k = 1 AND c > 0 AND c <= 2",
     [(6, 1, 0, None, None, None), (7, 1, 2, None, None, None)]),
    ("DELETE FROM t WHERE k = 1 AND c < 3",
     [(5, 1, None, None, None, None), (8, 1, 3, None, None, None)]),
]  # fmt: skip


@pytest.mark.parametrize(("statement", "expected"), CHANGE_CASES)
def test_each_change_kind_has_its_operation(
    node: ExecNode, statement: str, expected: list[tuple[object, ...]]
) -> None:
    node.ok(statement)
    assert operations(node) == expected


def test_batch_on_one_partition_is_one_log_bucket(node: ExecNode) -> None:
    node.ok(
        "BEGIN BATCH INSERT INTO t (k, c, v) VALUES (1, 1, 'a'); "
        "INSERT INTO t (k, c, v) VALUES (1, 2, 'b'); DELETE FROM t WHERE k = 1 AND c = 3; "
        "APPLY BATCH"
    )
    rows = log_rows(node)
    assert len({r[1] for r in rows}) == 1  # one cdc$time
    assert [(r[2], r[3], r[4], r[7]) for r in rows] == [
        (0, None, 2, 1),
        (1, None, 2, 2),
        (2, True, 3, 3),
    ]


def test_base_and_log_rows_of_many_partitions(node: ExecNode) -> None:
    for key in range(20):
        node.ok(f"INSERT INTO t (k, c, v) VALUES ({key}, 0, 'x')")
    rows = log_rows(node)
    assert sorted(r[6] for r in rows) == list(range(20))
    metadata = cdc_metadata()
    for row in rows:
        token = murmur3_token(serialize(INT, row[6]))
        assert row[0] == metadata.get_stream(START_US, token, START_US).to_bytes()


def test_consumer_queries_read_windows_of_streams(node: ExecNode) -> None:
    for key in range(6):
        node.clock.advance(1)
        node.ok(f"INSERT INTO t (k, c, v) VALUES ({key}, 0, 'x')")
    streams = sorted({r[0] for r in log_rows(node)})
    go = node.prepare(
        'SELECT * FROM t_scylla_cdc_log WHERE "cdc$stream_id" IN ? AND "cdc$time" > ? '
        'AND "cdc$time" <= ? BYPASS CACHE'
    )
    assert [c.name for c in go.bind_metadata.columns] == [
        "in(cdc$stream_id)", "cdc$time", "cdc$time",
    ]  # fmt: skip
    rust = node.prepare(
        'SELECT * FROM t_scylla_cdc_log WHERE "cdc$stream_id" IN ? AND '
        '"cdc$time" >= minTimeuuid(?) AND "cdc$time" < minTimeuuid(?) BYPASS CACHE'
    )
    assert [c.type for c in rust.bind_metadata.columns[1:]] == [TIMESTAMP, TIMESTAMP]
    window = (START_US + 2_000_000) // 1000, (START_US + 5_000_000) // 1000
    response = node.execute(
        rust.statement_id,
        [
            value(ListType(BLOB, True), streams),
            value(TIMESTAMP, window[0]),
            value(TIMESTAMP, window[1]),
        ],
    )
    assert isinstance(response, RowsResult)
    keys = sorted(node_rows_column(response, "k"))
    assert keys == [1, 2, 3]
    java = node.ok(
        'SELECT "cdc$time" FROM t_scylla_cdc_log WHERE "cdc$stream_id" = ? AND "cdc$time" > '
        "minTimeuuid(0)",
        streams[0],
    )
    assert len(java) >= 1


def node_rows_column(response: RowsResult, name: str) -> list[object]:
    assert response.metadata.columns is not None
    index = [c.name for c in response.metadata.columns].index(name)
    return [row[index] for row in decode_rows(response)]


def test_write_from_the_future_is_rejected_and_writes_nothing(node: ExecNode) -> None:
    future = START_US + 60_000_000
    error = node.error(f"INSERT INTO t (k, c, v) VALUES (1, 1, 'a') USING TIMESTAMP {future}")
    assert error.code == ErrorCode.INVALID
    assert 'attempted to get a stream "from the future"' in error.message
    assert node.ok("SELECT * FROM t") == []
    assert node.ok("SELECT * FROM t_scylla_cdc_log") == []


def test_write_too_far_in_the_past_is_rejected(node: ExecNode) -> None:
    error = node.error("INSERT INTO t (k, c, v) VALUES (1, 1, 'a') USING TIMESTAMP 1000")
    assert error.code == ErrorCode.INVALID and "cdc" in error.message


def test_cdc_table_without_generation_metadata(tmp_path: Path) -> None:
    node = node_with_keyspace(tmp_path, with_cdc=False)
    node.ok("CREATE TABLE t (k int PRIMARY KEY, v int) WITH cdc = {'enabled': true}")
    error = node.error("INSERT INTO t (k, v) VALUES (1, 1)")
    assert error.code == ErrorCode.INVALID and "no CDC generation" in error.message
    node.ok("CREATE TABLE plain (k int PRIMARY KEY, v int)")
    node.ok("INSERT INTO plain (k, v) VALUES (1, 1)")
    node.close()


def test_preimage_and_postimage(node: ExecNode) -> None:
    node.ok("CREATE TABLE i (k int PRIMARY KEY, v int, w int) WITH cdc = {'enabled': true, "
            "'preimage': true, 'postimage': true}")  # fmt: skip
    node.ok("INSERT INTO i (k, v, w) VALUES (1, 1, 1)")
    node.clock.advance(1)
    node.ok("UPDATE i SET v = 2 WHERE k = 1")
    rows = node.ok(
        'SELECT "cdc$time", "cdc$batch_seq_no", "cdc$operation", v, w FROM i_scylla_cdc_log'
    )
    last = sorted((r for r in rows), key=lambda r: (timeuuid_to_micros(r[0]), r[1]))[-3:]  # type: ignore[arg-type]
    assert [(r[2], r[3]) for r in last] == [(0, 1), (1, 2), (9, 2)]
    assert last[2][4] == 1


def test_log_tables_refuse_direct_writes(node: ExecNode) -> None:
    error = node.error('INSERT INTO t_scylla_cdc_log ("cdc$stream_id", "cdc$time", '
                       '"cdc$batch_seq_no") VALUES (0x00, now(), 0)')  # fmt: skip
    assert error.code == ErrorCode.INVALID and "directly" in error.message


def test_description_tables_are_readable_and_writable(node: ExecNode) -> None:
    node.ok(
        "INSERT INTO system_distributed.cdc_generation_timestamps (key, time) "
        "VALUES ('timestamps', 1600000000000)"
    )
    rows = node.ok(
        "SELECT time FROM system_distributed.cdc_generation_timestamps WHERE key = 'timestamps'"
    )
    assert [r[0].isoformat() for r in rows] == ["2020-09-13T12:26:40"]
    stream = uuid.uuid4().bytes
    node.ok(
        "INSERT INTO system_distributed.cdc_streams_descriptions_v2 (time, range_end, streams) "
        "VALUES (1600000000000, 5, ?)",
        value(SetType(BLOB, True), [stream]),
    )
    assert node.ok(
        "SELECT range_end, streams FROM system_distributed.cdc_streams_descriptions_v2"
    ) == [(5, frozenset({stream}))]
    assert (
        node.ok("SELECT * FROM system_distributed_everywhere.cdc_generation_descriptions_v2") == []
    )


def test_writes_that_change_nothing_need_no_stream(node: ExecNode) -> None:
    node.ok("CREATE TABLE col (k int PRIMARY KEY, m map<text, int>) WITH cdc = {'enabled': true}")
    node.ok("UPDATE col SET m = m + {} WHERE k = 1")
    node.ok("UPDATE col SET m = m - {} WHERE k = 1")
    node.ok("UPDATE col SET m = ? WHERE k = 1", UNSET)
    assert node.ok("SELECT * FROM col") == []
    assert node.ok("SELECT * FROM col_scylla_cdc_log") == []
