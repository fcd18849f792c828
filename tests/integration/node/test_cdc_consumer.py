"""A CDC consumer, written the way scylla-cdc-go/java/rust read, against a real node.

scylla-cdc.md §6-7: discover generations in ``system_distributed.cdc_generation_timestamps``,
read the generation's streams from ``cdc_streams_descriptions_v2`` (only after seeing its
timestamp), then read every stream's log rows in contiguous time windows with
``"cdc$stream_id" IN ... AND "cdc$time" > minTimeuuid(?) AND "cdc$time" <= maxTimeuuid(?)``,
order each stream's changes by ``(cdc$time, cdc$batch_seq_no)``, and replay them.

Proves: the first generation is published and operating as soon as the node listens (its
timestamp is not after the node's start); it has one range per vnode, ending at our tokens,
with ``shard_count`` streams each; every log row is in a published stream whose token lies in
the base partition's vnode; and the base table rebuilt from the log alone (inserts, updates,
column deletions, row and partition deletions, range deletions) equals the base table read
directly (seed 000: nothing lost, nothing invented).
"""

from __future__ import annotations

import bisect
import datetime
import random
import time
from collections import defaultdict
from typing import Any

import pytest
from cassandra.cluster import Cluster, Session
from cassandra.query import BatchStatement, BatchType, SimpleStatement

from ringflow.cli._demo_cluster import NodeProcess
from ringflow.ring import murmur3_token
from tests.integration.node.conftest import DICT_ROWS, saved_tokens

KEYSPACE = "consumer"
WINDOW_MS = 1500
SEED = 77

# cdc$operation codes (scylla-cdc.md §5).
UPDATE, INSERT, ROW_DELETE, PARTITION_DELETE = 1, 2, 3, 4
RANGE_START_INCLUSIVE, RANGE_START_EXCLUSIVE = 5, 6
RANGE_END_INCLUSIVE, RANGE_END_EXCLUSIVE = 7, 8
VALUE_COLUMNS = ("v", "n")

Key = tuple[int, int]
Row = dict[str, Any]


@pytest.fixture(scope="module")
def table(session: Session) -> str:
    session.execute(
        f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.execute(
        f"CREATE TABLE {KEYSPACE}.t (pk int, ck int, v text, n int, PRIMARY KEY (pk, ck)) "
        "WITH cdc = {'enabled': true}"
    )
    return f"{KEYSPACE}.t"


def _random_workload(session: Session, table: str, rng: random.Random) -> None:
    """Inserts, updates, column deletions, row/partition/range deletions, some in batches."""
    insert = session.prepare(f"INSERT INTO {table} (pk, ck, v, n) VALUES (?, ?, ?, ?)")
    update = session.prepare(f"UPDATE {table} SET v = ? WHERE pk = ? AND ck = ?")
    for step in range(400):
        pk, ck = rng.randrange(12), rng.randrange(8)
        kind = rng.random()
        if kind < 0.45:
            session.execute(insert, (pk, ck, f"v{step}", step))
        elif kind < 0.65:
            session.execute(update, (f"u{step}", pk, ck))
        elif kind < 0.72:
            session.execute(f"DELETE n FROM {table} WHERE pk = {pk} AND ck = {ck}")
        elif kind < 0.80:
            session.execute(
                f"UPDATE {table} SET v = null, n = {step} WHERE pk = {pk} AND ck = {ck}"
            )
        elif kind < 0.88:
            session.execute(f"DELETE FROM {table} WHERE pk = {pk} AND ck = {ck}")
        elif kind < 0.92:
            session.execute(f"DELETE FROM {table} WHERE pk = {pk}")
        elif kind < 0.96:
            low = rng.randrange(7)
            high = low + rng.randint(1, 4)
            session.execute(f"DELETE FROM {table} WHERE pk = {pk} AND ck >= {low} AND ck < {high}")
        else:
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for offset in range(3):
                batch.add(insert, (pk, (ck + offset) % 8, f"b{step}", -step))
            untouched = (ck + 3) % 8  # a cell written twice at one timestamp would be a tie
            batch.add(
                SimpleStatement(f"DELETE v FROM {table} WHERE pk = {pk} AND ck = {untouched}")
            )
            session.execute(batch)


def _generations(session: Session) -> list[datetime.datetime]:
    rows = session.execute(
        "SELECT time FROM system_distributed.cdc_generation_timestamps WHERE key = 'timestamps'"
    )
    return sorted(row.time for row in rows)


def _streams(session: Session, generation: datetime.datetime) -> dict[int, list[bytes]]:
    rows = session.execute(
        "SELECT range_end, streams FROM system_distributed.cdc_streams_descriptions_v2 "
        "WHERE time = %s",
        (generation,),
    )
    return {row.range_end: sorted(row.streams) for row in rows}


def _read_log(
    session: Session, table: str, streams: list[bytes], start_ms: int, end_ms: int
) -> list[Any]:
    """Every log row of ``streams`` in windows covering [start_ms, end_ms], each row once."""
    query = session.prepare(
        f'SELECT * FROM {table}_scylla_cdc_log WHERE "cdc$stream_id" IN ? '
        'AND "cdc$time" > minTimeuuid(?) AND "cdc$time" <= maxTimeuuid(?)'
    )
    query.fetch_size = 500
    rows: list[Any] = []
    low = start_ms
    while low <= end_ms:
        high = min(low + WINDOW_MS - 1, end_ms)
        window = (_datetime(low), _datetime(high))
        for chunk_start in range(0, len(streams), 20):
            chunk = streams[chunk_start : chunk_start + 20]
            rows.extend(session.execute(query, (chunk, *window), execution_profile=DICT_ROWS))
        low = high + 1
    return rows


def _datetime(ms: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)


def _ms(moment: datetime.datetime) -> int:
    return (moment - datetime.datetime(1970, 1, 1)) // datetime.timedelta(milliseconds=1)


class Replica:
    """The base table rebuilt from CDC deltas (non-frozen-free schema: v text, n int)."""

    def __init__(self) -> None:
        self.rows: dict[Key, Row] = {}
        self.markers: set[Key] = set()
        self.range_start: tuple[int, int, bool] | None = None

    def apply(self, change: Any) -> None:
        operation = change["cdc$operation"]
        pk, ck = change["pk"], change["ck"]
        if operation in (UPDATE, INSERT):
            row = self.rows.setdefault((pk, ck), {})
            if operation == INSERT:
                self.markers.add((pk, ck))
            for column in VALUE_COLUMNS:
                if change[column] is not None:
                    row[column] = change[column]
                elif change[f"cdc$deleted_{column}"]:
                    row.pop(column, None)
        elif operation == ROW_DELETE:
            self._delete(lambda key: key == (pk, ck))
        elif operation == PARTITION_DELETE:
            self._delete(lambda key: key[0] == pk)
        elif operation in (RANGE_START_INCLUSIVE, RANGE_START_EXCLUSIVE):
            self.range_start = (pk, ck, operation == RANGE_START_INCLUSIVE)
        elif operation in (RANGE_END_INCLUSIVE, RANGE_END_EXCLUSIVE):
            self._delete_range(pk, ck, operation == RANGE_END_INCLUSIVE)
        else:
            raise AssertionError(f"unexpected cdc$operation {operation}")

    def _delete_range(self, pk: int, end: int | None, inclusive_end: bool) -> None:
        assert self.range_start is not None and self.range_start[0] == pk
        _, start, inclusive_start = self.range_start
        self.range_start = None

        def covered(key: Key) -> bool:
            ck = key[1]
            above = start is None or ck > start or (inclusive_start and ck == start)
            below = end is None or ck < end or (inclusive_end and ck == end)
            return key[0] == pk and above and below

        self._delete(covered)

    def _delete(self, doomed: Any) -> None:
        for key in [key for key in self.rows if doomed(key)]:
            del self.rows[key]
            self.markers.discard(key)

    def visible(self) -> dict[Key, Row]:
        """What a SELECT shows: rows with a marker or at least one live value."""
        return {
            key: {column: row.get(column) for column in VALUE_COLUMNS}
            for key, row in self.rows.items()
            if key in self.markers or row
        }


def _vnode_of(token: int, ring: list[int]) -> int:
    """Index of the range ``(ring[i-1], ring[i]]`` holding ``token`` (0 = the wrap range)."""
    index = bisect.bisect_left(ring, token)
    return 0 if index == len(ring) else index


def test_first_generation_is_published_and_operating_at_start(
    session: Session, node: NodeProcess, table: str
) -> None:
    generations = _generations(session)
    assert len(generations) == 1
    assert _ms(generations[0]) <= time.time() * 1000
    ranges = _streams(session, generations[0])
    assert sorted(ranges) == sorted(saved_tokens(node))
    assert all(len(streams) == 1 for streams in ranges.values()), "shard_count 1"
    local = session.execute("SELECT streams_timestamp, uuid FROM system.cdc_local").one()
    assert local.streams_timestamp == generations[0] and local.uuid is not None


def test_base_table_rebuilt_from_the_log_equals_the_base_table(
    session: Session, cluster: Cluster, node: NodeProcess, table: str
) -> None:
    _random_workload(session, table, random.Random(SEED))
    end_ms = int(time.time() * 1000) + 1000
    (generation,) = _generations(session)
    ranges = _streams(session, generation)
    all_streams = sorted(stream for streams in ranges.values() for stream in streams)
    log_rows = _read_log(session, table, all_streams, _ms(generation), end_ms)
    assert len(log_rows) >= 400

    ring = sorted(saved_tokens(node))
    by_stream: dict[bytes, list[Any]] = defaultdict(list)
    for change in log_rows:
        stream = change["cdc$stream_id"]
        assert stream in all_streams
        stream_token = int.from_bytes(stream[:8], "big", signed=True)
        base_token = murmur3_token(change["pk"].to_bytes(4, "big", signed=True))
        assert _vnode_of(stream_token, ring) == _vnode_of(base_token, ring)
        by_stream[stream].append(change)

    replica = Replica()
    for changes in by_stream.values():
        changes.sort(key=lambda c: (c["cdc$time"].time, c["cdc$batch_seq_no"]))
        keys = {(c["cdc$time"], c["cdc$batch_seq_no"]) for c in changes}
        assert len(keys) == len(changes), "each change appears once"
        for change in changes:
            replica.apply(change)
    base = {
        (row.pk, row.ck): {"v": row.v, "n": row.n}
        for row in session.execute(SimpleStatement(f"SELECT * FROM {table}", fetch_size=1000))
    }
    assert base, "the workload leaves rows"
    assert replica.visible() == base
