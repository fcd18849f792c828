"""A scripted change workload with its expected LWW state, shared by the sink tests.

Covers inserts, updates, per-column LWW with late older writes, column deletes, row deletes,
range deletes (ASC and DESC clustering), partition deletes, static rows, TTL expiry, non-frozen
set/map/list/UDT-free collections with element deletes and overwrites, images (ignored) and
Cassandra's tie rules at equal timestamps (greater value, tombstone over value, expiring over
plain). Timestamps are µs from ``T0``; the state is read at ``NOW_S``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping

from ringflow.cdc import CdcOperation
from ringflow.pipeline import Change
from ringflow.schema import (
    BIGINT,
    INT,
    TEXT,
    ClusteringOrder,
    ListType,
    MapType,
    SetType,
    Table,
    timeuuid_from_micros,
)

T0 = 1_700_000_000_000_000
NOW_S = T0 // 1_000_000 + 100

TABLE = Table.create(
    "shop",
    "items",
    partition_key=[("tenant", TEXT), ("bucket", INT)],
    clustering=[("seq", INT, ClusteringOrder.ASC), ("tag", TEXT, ClusteringOrder.DESC)],
    static=[("owner", TEXT)],
    regular=[
        ("amount", BIGINT),
        ("note", TEXT),
        ("tags", SetType(TEXT)),
        ("attrs", MapType(TEXT, INT)),
        ("hist", ListType(INT)),
        ("frozen_l", ListType(INT, frozen=True)),
    ],
)

Op = CdcOperation
_low_bits = iter(range(1, 10**6))


def change(
    operation: CdcOperation,
    offset_us: int,
    key: Mapping[str, object],
    values: Mapping[str, object] | None = None,
    deleted: frozenset[str] = frozenset(),
    deleted_elements: Mapping[str, frozenset[object]] | None = None,
    ttl_s: int | None = None,
    seq: int = 0,
    time: uuid.UUID | None = None,
) -> Change:
    """A change of :data:`TABLE` at ``T0 + offset_us``."""
    return Change(
        TABLE.keyspace,
        TABLE.name,
        operation,
        time or timeuuid_from_micros(T0 + offset_us, next(_low_bits)),
        dict(key),
        seq,
        dict(values or {}),
        deleted,
        dict(deleted_elements or {}),
        ttl_s,
        b"\x01" * 16,
    )


def row(
    tenant: str, bucket: int, seq: int | None = None, tag: str | None = None
) -> dict[str, object]:
    key: dict[str, object] = {"tenant": tenant, "bucket": bucket}
    if seq is not None:
        key["seq"] = seq
    if tag is not None:
        key["tag"] = tag
    return key


def range_delete(
    offset_us: int,
    tenant: str,
    bucket: int,
    start: dict[str, object],
    start_op: Op,
    end: dict[str, object],
    end_op: Op,
) -> list[Change]:
    """The two log rows of one range delete: same time, consecutive batch_seq_no."""
    time = timeuuid_from_micros(T0 + offset_us, next(_low_bits))
    return [
        change(start_op, offset_us, {**row(tenant, bucket), **start}, seq=0, time=time),
        change(end_op, offset_us, {**row(tenant, bucket), **end}, seq=1, time=time),
    ]


LIST_PATH_1 = timeuuid_from_micros(T0 + 50, 11)
LIST_PATH_2 = timeuuid_from_micros(T0 + 50, 12)


def workload() -> list[Change]:
    """The changes, in a plausible log order (tests shuffle and duplicate them); the same
    changes (and timeuuids) on every call."""
    global _low_bits
    _low_bits = iter(range(1, 10**6))
    p1 = ("acme", 1)
    changes = [
        # (1, a): per-column LWW, late older writes, column delete, collections
        change(
            Op.INSERT,
            10,
            row(*p1, 1, "a"),
            {"amount": 10, "note": "first", "tags": frozenset({"x", "y"})},
            deleted=frozenset({"tags"}),
        ),
        change(Op.UPDATE, 20, row(*p1, 1, "a"), {"amount": 11, "frozen_l": [1, 2, 3]}),
        change(Op.UPDATE, 15, row(*p1, 1, "a"), {"amount": 999, "note": "late"}),
        change(Op.UPDATE, 30, row(*p1, 1, "a"), deleted=frozenset({"note"})),
        change(Op.UPDATE, 25, row(*p1, 1, "a"), {"note": "older"}),
        change(Op.UPDATE, 35, row(*p1, 1, "a"), {"tags": frozenset({"z"})}),
        change(Op.UPDATE, 36, row(*p1, 1, "a"), deleted_elements={"tags": frozenset({"x"})}),
        change(Op.UPDATE, 40, row(*p1, 1, "a"), {"attrs": {"a": 1, "b": 2}}),
        change(Op.UPDATE, 45, row(*p1, 1, "a"), {"attrs": {"c": 3}}, deleted=frozenset({"attrs"})),
        change(Op.UPDATE, 41, row(*p1, 1, "a"), {"attrs": {"d": 4}}),
        change(Op.UPDATE, 50, row(*p1, 1, "a"), {"hist": {LIST_PATH_1: 5, LIST_PATH_2: 6}}),
        change(
            Op.UPDATE, 51, row(*p1, 1, "a"), deleted_elements={"hist": frozenset({LIST_PATH_1})}
        ),
        change(Op.PRE_IMAGE, 51, row(*p1, 1, "a"), {"amount": 12345}),
        # TTL: (2, b) expires before NOW_S, (2, c) does not
        change(Op.INSERT, 10, row(*p1, 2, "b"), {"amount": 20}, ttl_s=50),
        change(Op.INSERT, 10, row(*p1, 2, "c"), {"amount": 21}, ttl_s=1000),
        # row delete shadows an older insert; a newer update revives only its column
        change(Op.ROW_DELETE, 50, row(*p1, 3, "a")),
        change(Op.INSERT, 40, row(*p1, 3, "a"), {"amount": 30, "note": "gone"}),
        change(Op.UPDATE, 60, row(*p1, 3, "a"), {"amount": 33}),
        # range delete seq >= 4 AND seq < 6, with a newer and an older insert inside
        *[
            change(Op.INSERT, 10, row(*p1, s, t), {"amount": a})
            for s, t, a in [(4, "x", 4), (5, "y", 5), (6, "z", 6)]
        ],
        *range_delete(
            70,
            *p1,
            {"seq": 4},
            Op.RANGE_DELETE_START_INCLUSIVE,
            {"seq": 6},
            Op.RANGE_DELETE_END_EXCLUSIVE,
        ),
        change(Op.INSERT, 80, row(*p1, 5, "w"), {"amount": 55}),
        change(Op.INSERT, 65, row(*p1, 4, "q"), {"amount": 44}),
        # DESC clustering: seq = 7 AND tag > 'b' deletes (7, c) only
        *[
            change(Op.INSERT, 10, row(*p1, 7, t), {"amount": a})
            for t, a in [("a", 71), ("b", 72), ("c", 73)]
        ],
        *range_delete(
            75,
            *p1,
            {"seq": 7},
            Op.RANGE_DELETE_START_INCLUSIVE,
            {"seq": 7, "tag": "b"},
            Op.RANGE_DELETE_END_EXCLUSIVE,
        ),
        # static row: newer wins
        change(Op.UPDATE, 10, row(*p1), {"owner": "alice"}),
        change(Op.UPDATE, 5, row(*p1), {"owner": "bob"}),
        # partition delete, then a newer static write: one static-only row
        change(Op.INSERT, 10, row("acme", 2, 1, "a"), {"amount": 1}),
        change(Op.UPDATE, 10, row("acme", 2), {"owner": "carol"}),
        change(Op.PARTITION_DELETE, 90, row("acme", 2)),
        change(Op.UPDATE, 95, row("acme", 2), {"owner": "dave"}),
        change(Op.INSERT, 85, row("acme", 2, 9, "z"), {"amount": 9}),
        # ties at equal timestamps
        change(Op.UPDATE, 12, row("beta", 1, 1, "a"), {"amount": 5}),
        change(Op.UPDATE, 12, row("beta", 1, 1, "a"), {"amount": 7}),
        change(Op.UPDATE, 13, row("beta", 1, 1, "a"), {"note": "abd"}),
        change(Op.UPDATE, 13, row("beta", 1, 1, "a"), {"note": "abc"}),
        change(Op.UPDATE, 14, row("beta", 1, 1, "b"), {"amount": 100, "note": "n"}, ttl_s=1000),
        change(Op.UPDATE, 14, row("beta", 1, 1, "b"), deleted=frozenset({"amount"})),
        change(Op.UPDATE, 16, row("beta", 1, 1, "c"), {"amount": 9}),
        change(Op.UPDATE, 16, row("beta", 1, 1, "c"), {"amount": 2}, ttl_s=1000),
        # an expired TTL'd value leaves nothing
        change(Op.UPDATE, 10, row("beta", 2, 1, "a"), {"note": "ttl"}, ttl_s=30),
    ]
    return changes


def _us(offset: int) -> int:
    return T0 + offset


def expected_rows() -> dict[tuple[object, ...], tuple[dict[str, object], dict[str, int]]]:
    """Key → (values, write times) of the live rows at NOW_S."""
    owner = ({"owner": "alice"}, {"owner": _us(10)})

    def with_owner(
        values: dict[str, object], times: dict[str, int]
    ) -> tuple[dict[str, object], dict[str, int]]:
        return {**owner[0], **values}, {**owner[1], **times}

    return {
        ("acme", 1, 1, "a"): with_owner(
            {
                "amount": 11,
                "tags": frozenset({"y", "z"}),
                "attrs": {"c": 3},
                "hist": [6],
                "frozen_l": [1, 2, 3],
            },
            {
                "amount": _us(20),
                "tags": _us(35),
                "attrs": _us(45),
                "hist": _us(50),
                "frozen_l": _us(20),
            },
        ),
        ("acme", 1, 2, "c"): with_owner({"amount": 21}, {"amount": _us(10)}),
        ("acme", 1, 3, "a"): with_owner({"amount": 33}, {"amount": _us(60)}),
        ("acme", 1, 5, "w"): with_owner({"amount": 55}, {"amount": _us(80)}),
        ("acme", 1, 6, "z"): with_owner({"amount": 6}, {"amount": _us(10)}),
        ("acme", 1, 7, "a"): with_owner({"amount": 71}, {"amount": _us(10)}),
        ("acme", 1, 7, "b"): with_owner({"amount": 72}, {"amount": _us(10)}),
        ("acme", 2, None, None): ({"owner": "dave"}, {"owner": _us(95)}),
        ("beta", 1, 1, "a"): ({"amount": 7, "note": "abd"}, {"amount": _us(12), "note": _us(13)}),
        ("beta", 1, 1, "b"): ({"note": "n"}, {"note": _us(14)}),
        ("beta", 1, 1, "c"): ({"amount": 2}, {"amount": _us(16)}),
    }


def shuffled_with_duplicates(changes: list[Change], seed: int) -> list[Change]:
    """The changes in a random order, a third of them twice."""
    rng = random.Random(seed)
    doubled = changes + rng.sample(changes, len(changes) // 3)
    rng.shuffle(doubled)
    return doubled


def as_comparable(
    rows: Mapping[tuple[object, ...], object],
) -> dict[tuple[object, ...], tuple[dict[str, object], dict[str, int]]]:
    """LiveRows (from materialize or PostgreSQL) as the shape of :func:`expected_rows`."""
    return {
        key: (dict(live.values), dict(live.write_times_us))  # type: ignore[attr-defined]
        for key, live in rows.items()
    }
