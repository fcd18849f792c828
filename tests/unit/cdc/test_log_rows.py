"""Delta rows of the basic CQL operations, one case per item of scylla-cdc.md §9 item 7.

Each case is a base mutation as Scylla's CQL layer builds it for the quoted statement, and the
exact log rows Scylla documents for it (``docs/features/cdc/cdc-basic-operations.rst`` and its
``_common/*.rst``, ``cdc-log-table.rst`` "Batch sequence number" / "Time-to-live column",
``cdc/split.cc`` for ordering inside a bucket). Rows are compared whole: every non-null column,
``cdc$batch_seq_no``, the µs in ``cdc$time`` and ``cdc$end_of_batch`` on the last row only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from ringflow.schema import INT, DeltaMode, Mutation, Table
from tests.unit.cdc.test_log_rows_support import (
    T,
    bound,
    build,
    cdc,
    dead,
    expect,
    i,
    live,
    marker,
    mutation,
    range_delete,
    row,
    table,
    tombstone,
)

BASIC = table("t")
STATIC = table("s", static=[("s", INT)], regular=[("c", INT)])
MULTI = table("m3", clustering=("ck1", "ck2", "ck3"), regular=[("v", INT)])
KEYS = table("k", options=cdc(delta=DeltaMode.KEYS))
NO_CK = table("n", clustering=(), regular=[("v", INT)])


@dataclass(frozen=True)
class Case:
    statement: str
    base: Table
    mutation: Mutation
    expected: list[dict[str, Any]]


def _range(start: tuple[tuple[int, ...], bool], end: tuple[tuple[int, ...], bool]) -> Mutation:
    return mutation(
        MULTI if len(start[0]) > 1 or len(end[0]) > 1 else BASIC,
        ranges=[range_delete(bound(*start), bound(*end))],
    )


INSERTS = [
    Case(
        "INSERT INTO t (pk, ck, v1) VALUES (0, 0, 0)",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0))}, marker())]),
        expect({"op": 2, "ck": 0, "v1": 0}),
    ),
    Case(
        "INSERT INTO t (pk, ck, v2) VALUES (0, 0, NULL)",
        BASIC,
        mutation(BASIC, [row((0,), {"v2": dead()}, marker())]),
        expect({"op": 2, "ck": 0, "del_v2": True}),
    ),
    Case(
        "INSERT INTO t (pk, ck) VALUES (0, 0)",
        BASIC,
        mutation(BASIC, [row((0,), None, marker())]),
        expect({"op": 2, "ck": 0}),
    ),
]

UPDATES = [
    Case(
        "UPDATE t SET v1 = 0 WHERE pk = 0 AND ck = 0",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0))})]),
        expect({"op": 1, "ck": 0, "v1": 0}),
    ),
    Case(
        "UPDATE t SET v2 = null WHERE pk = 0 AND ck = 0",
        BASIC,
        mutation(BASIC, [row((0,), {"v2": dead()})]),
        expect({"op": 1, "ck": 0, "del_v2": True}),
    ),
    Case(
        "DELETE v2 FROM t WHERE pk = 0 AND ck = 0 (a column delete is an update to null)",
        BASIC,
        mutation(BASIC, [row((0,), {"v2": dead()})]),
        expect({"op": 1, "ck": 0, "del_v2": True}),
    ),
    Case(
        "UPDATE t SET v1 = 0, v2 = null WHERE pk = 0 AND ck = 0 (no TTL: one row)",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0)), "v2": dead()})]),
        expect({"op": 1, "ck": 0, "v1": 0, "del_v2": True}),
    ),
    Case(
        "UPDATE n SET v = 1 WHERE pk = 0 (no clustering key)",
        NO_CK,
        mutation(NO_CK, [row(None, {"v": live(i(1))})]),
        expect({"op": 1, "v": 1}),
    ),
]

DELETES = [
    Case(
        "DELETE FROM t WHERE pk = 0 AND ck = 0",
        BASIC,
        mutation(BASIC, [row((0,), deletion=tombstone(T))]),
        expect({"op": 3, "ck": 0}),
    ),
    Case(
        "DELETE FROM t WHERE pk = 0",
        BASIC,
        mutation(BASIC, partition_deletion=tombstone(T)),
        expect({"op": 4}),
    ),
    Case(
        "DELETE FROM n WHERE pk = 0 (no clustering key)",
        NO_CK,
        mutation(NO_CK, partition_deletion=tombstone(T)),
        expect({"op": 4}),
    ),
]

RANGES = [
    Case(
        "DELETE FROM t WHERE pk = 0 AND ck > 0 AND ck <= 2",
        BASIC,
        _range(((0,), False), ((2,), True)),
        expect({"op": 6, "ck": 0}, {"op": 7, "ck": 2}),
    ),
    Case(
        "DELETE FROM t WHERE pk = 0 AND ck >= 0 AND ck < 2",
        BASIC,
        _range(((0,), True), ((2,), False)),
        expect({"op": 5, "ck": 0}, {"op": 8, "ck": 2}),
    ),
    Case(
        "DELETE FROM t WHERE pk = 0 AND ck > 0 AND ck < 2",
        BASIC,
        _range(((0,), False), ((2,), False)),
        expect({"op": 6, "ck": 0}, {"op": 8, "ck": 2}),
    ),
    Case(
        "DELETE FROM t WHERE pk = 0 AND ck >= 0 AND ck <= 2",
        BASIC,
        _range(((0,), True), ((2,), True)),
        expect({"op": 5, "ck": 0}, {"op": 7, "ck": 2}),
    ),
    Case(
        "DELETE FROM t WHERE pk = 0 AND ck < 3 (open start: op 5 with null ck)",
        BASIC,
        _range(((), True), ((3,), False)),
        expect({"op": 5}, {"op": 8, "ck": 3}),
    ),
    Case(
        "DELETE FROM t WHERE pk = 0 AND ck > 3 (open end: op 7 with null ck)",
        BASIC,
        _range(((3,), False), ((), True)),
        expect({"op": 6, "ck": 3}, {"op": 7}),
    ),
    Case(
        "DELETE FROM m3 WHERE pk = 0 AND ck1 = 0 AND ck2 > 0 AND ck2 < 3",
        MULTI,
        _range(((0, 0), False), ((0, 3), False)),
        expect({"op": 6, "ck1": 0, "ck2": 0}, {"op": 8, "ck1": 0, "ck2": 3}),
    ),
    Case(
        "DELETE FROM m3 WHERE pk = 0 AND ck1 = 0 AND ck2 = 1 (a prefix: both ends inclusive)",
        MULTI,
        _range(((0, 1), True), ((0, 1), True)),
        expect({"op": 5, "ck1": 0, "ck2": 1}, {"op": 7, "ck1": 0, "ck2": 1}),
    ),
]

STATIC_ROWS = [
    Case(
        "UPDATE s SET s = 0 WHERE pk = 0",
        STATIC,
        mutation(STATIC, static={"s": live(i(0))}),
        expect({"op": 1, "s": 0}),
    ),
    Case(
        "UPDATE s SET s = 0, c = 0 WHERE pk = 0 AND ck = 0",
        STATIC,
        mutation(STATIC, [row((0,), {"c": live(i(0))})], static={"s": live(i(0))}),
        expect({"op": 1, "s": 0}, {"op": 1, "ck": 0, "c": 0}),
    ),
    Case(
        "INSERT INTO s (pk, ck, s, c) VALUES (0, 0, 0, 0)",
        STATIC,
        mutation(STATIC, [row((0,), {"c": live(i(0))}, marker())], static={"s": live(i(0))}),
        expect({"op": 1, "s": 0}, {"op": 2, "ck": 0, "c": 0}),
    ),
]

BATCHES = [
    Case(
        "BATCH UPDATE ck=0 SET v1=0; UPDATE ck=1 SET v1=0 (one timestamp)",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0))}), row((1,), {"v1": live(i(0))})]),
        expect({"op": 1, "ck": 0, "v1": 0}, {"op": 1, "ck": 1, "v1": 0}),
    ),
    Case(
        "BATCH UPDATE ck=0; INSERT ck=1 (one timestamp, unsplit: mutation order)",
        BASIC,
        mutation(BASIC, [row((1,), {"v1": live(i(1))}, marker()), row((0,), {"v1": live(i(0))})]),
        expect({"op": 1, "ck": 0, "v1": 0}, {"op": 2, "ck": 1, "v1": 1}),
    ),
    Case(
        "BATCH UPDATE ck=0; INSERT ck=1; DELETE ck=2 (split: inserts, updates, deletes)",
        BASIC,
        mutation(
            BASIC,
            [
                row((0,), {"v1": live(i(0))}),
                row((1,), {"v1": live(i(1))}, marker()),
                row((2,), deletion=tombstone(T)),
            ],
        ),
        expect(
            {"op": 2, "ck": 1, "v1": 1},
            {"op": 1, "ck": 0, "v1": 0},
            {"op": 3, "ck": 2},
        ),
    ),
    Case(
        "BATCH DELETE ck=0 (row); UPDATE ck=1 SET v1=1 (unsplit: a delete before upserts)",
        BASIC,
        mutation(BASIC, [row((0,), deletion=tombstone(T)), row((1,), {"v1": live(i(1))})]),
        expect({"op": 3, "ck": 0}, {"op": 1, "ck": 1, "v1": 1}),
    ),
    Case(
        "BATCH DELETE ck=1 (row); INSERT ck=0; UPDATE ck=2 (split: delete after an upsert)",
        BASIC,
        mutation(
            BASIC,
            [
                row((1,), deletion=tombstone(T)),
                row((2,), {"v1": live(i(2))}),
                row((0,), {"v1": live(i(0))}, marker()),
            ],
        ),
        expect({"op": 2, "ck": 0, "v1": 0}, {"op": 1, "ck": 2, "v1": 2}, {"op": 3, "ck": 1}),
    ),
    Case(
        "BATCH DELETE WHERE pk=0; DELETE WHERE pk=0 AND ck < 3 (range before partition)",
        BASIC,
        mutation(
            BASIC,
            ranges=[range_delete(bound(), bound((3,), False))],
            partition_deletion=tombstone(T),
        ),
        expect({"op": 5}, {"op": 8, "ck": 3}, {"op": 4}),
    ),
    Case(
        "BATCH UPDATE USING TIMESTAMP T ck=0; UPDATE USING TIMESTAMP T+1 ck=1",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0))}), row((1,), {"v1": live(i(0), T + 1)})]),
        expect({"op": 1, "ck": 0, "v1": 0}) + expect({"op": 1, "ck": 1, "v1": 0}, ts=T + 1),
    ),
    Case(
        "BATCH USING TIMESTAMP T SET v1 = 0; USING TIMESTAMP T+1 SET v2 = 0 (same row)",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0)), "v2": live(i(0), T + 1)})]),
        expect({"op": 1, "ck": 0, "v1": 0}) + expect({"op": 1, "ck": 0, "v2": 0}, ts=T + 1),
    ),
    Case(
        "BATCH SET s = 1 USING TIMESTAMP T+1; SET c = 0 USING TIMESTAMP T (buckets by ts)",
        STATIC,
        mutation(STATIC, [row((0,), {"c": live(i(0))})], static={"s": live(i(1), T + 1)}),
        expect({"op": 1, "ck": 0, "c": 0}) + expect({"op": 1, "s": 1}, ts=T + 1),
    ),
]

TTLS = [
    Case(
        "UPDATE t USING TTL 5 SET v1 = 0 WHERE pk = 0 AND ck = 0",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0), ttl_s=5)})]),
        expect({"op": 1, "ck": 0, "v1": 0, "ttl": 5}),
    ),
    Case(
        "UPDATE t USING TTL 5 SET v1 = null (a TTL on a dead cell is not logged)",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": dead()})]),
        expect({"op": 1, "ck": 0, "del_v1": True}),
    ),
    Case(
        "UPDATE t USING TTL 5 SET v1 = 0, v2 = null (dead cells first, then the TTL row)",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0), ttl_s=5), "v2": dead()})]),
        expect({"op": 1, "ck": 0, "del_v2": True}, {"op": 1, "ck": 0, "v1": 0, "ttl": 5}),
    ),
    Case(
        "INSERT INTO t (pk, ck, v1) VALUES (0, 0, 0) USING TTL 5",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0), ttl_s=5)}, marker(ttl_s=5))]),
        expect({"op": 2, "ck": 0, "v1": 0, "ttl": 5}),
    ),
    Case(
        "INSERT INTO t (pk, ck, v1, v2) VALUES (0, 0, 0, null) USING TTL 5 (insert first)",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0), ttl_s=5), "v2": dead()}, marker(ttl_s=5))]),
        expect({"op": 2, "ck": 0, "v1": 0, "ttl": 5}, {"op": 1, "ck": 0, "del_v2": True}),
    ),
    Case(
        "BATCH UPDATE ck=0 USING TTL 7 SET v1 = 0; UPDATE ck=0 USING TTL 5 SET v2 = 0",
        BASIC,
        mutation(BASIC, [row((0,), {"v1": live(i(0), ttl_s=7), "v2": live(i(0), ttl_s=5)})]),
        expect({"op": 1, "ck": 0, "v2": 0, "ttl": 5}, {"op": 1, "ck": 0, "v1": 0, "ttl": 7}),
    ),
]

DELTA_KEYS = [
    Case(
        "delta 'keys': UPDATE k SET v1 = 0, v2 = null WHERE pk = 0 AND ck = 0",
        KEYS,
        mutation(KEYS, [row((0,), {"v1": live(i(0)), "v2": dead()})]),
        expect({"op": 1, "ck": 0}),
    ),
    Case(
        "delta 'keys': INSERT INTO k (pk, ck, v1) VALUES (0, 0, 0) USING TTL 5 (ttl kept)",
        KEYS,
        mutation(KEYS, [row((0,), {"v1": live(i(0), ttl_s=5)}, marker(ttl_s=5))]),
        expect({"op": 2, "ck": 0, "ttl": 5}),
    ),
    Case(
        "delta 'keys': DELETE FROM k WHERE pk = 0 AND ck > 1",
        KEYS,
        mutation(KEYS, ranges=[range_delete(bound((1,), False), bound())]),
        expect({"op": 6, "ck": 1}, {"op": 7}),
    ),
]

CASES = INSERTS + UPDATES + DELETES + RANGES + STATIC_ROWS + BATCHES + TTLS + DELTA_KEYS


@pytest.mark.parametrize("case", CASES, ids=[case.statement for case in CASES])
def test_delta_rows_match_scylla(case: Case) -> None:
    """The decoded log rows equal the rows Scylla documents for the statement."""
    assert build(case.base, case.mutation).rows == case.expected


def test_range_deletions_are_logged_in_start_bound_order() -> None:
    """BATCH DELETE ... ck > 5; DELETE ... ck < 2: Scylla keeps range tombstones sorted by start."""
    later = range_delete(bound((5,), False), bound())
    earlier = range_delete(bound(), bound((2,), False))
    assert build(BASIC, mutation(BASIC, ranges=[later, earlier])).rows == expect(
        {"op": 5}, {"op": 8, "ck": 2}, {"op": 6, "ck": 5}, {"op": 7}
    )
