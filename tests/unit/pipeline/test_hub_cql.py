"""The hub sink's statements: every operation kind to its exact CQL text and bound values."""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Mapping

import pytest

from ringflow.cdc import CdcOperation
from ringflow.pipeline import Change, InvalidChange
from ringflow.pipeline._hub_cql import (
    HubCql,
    HubStatement,
    driver_value,
    pair_range_bounds,
    range_slices,
)
from ringflow.schema import (
    BIGINT,
    INET,
    INT,
    TEXT,
    ClusteringOrder,
    ListType,
    MapType,
    SetType,
    Table,
    UserType,
    timeuuid_from_micros,
)

Op = CdcOperation
TS = 1_700_000_000_000_000
NOW_S = TS // 1_000_000 + 10
ADDRESS = UserType("ks", "address", ("street", "zip"), (TEXT, INT))
TABLE = Table.create(
    "ks",
    "t",
    partition_key=[("p", TEXT)],
    clustering=[("a", INT, ClusteringOrder.ASC), ("b", TEXT, ClusteringOrder.DESC)],
    static=[("s", TEXT)],
    regular=[
        ("v", BIGINT),
        ("ip", INET),
        ("tags", SetType(TEXT)),
        ("attrs", MapType(TEXT, INT)),
        ("hist", ListType(INT)),
        ("addr", ADDRESS),
    ],
)
T = "ks.hub_t"
ROW = {"p": "k", "a": 1, "b": "x"}
KEY = ("k", 1, "x")
PATH_1 = timeuuid_from_micros(TS, 1)
PATH_2 = timeuuid_from_micros(TS + 5, 2)


def change(
    operation: CdcOperation,
    key: Mapping[str, object] = ROW,
    values: Mapping[str, object] | None = None,
    deleted: frozenset[str] = frozenset(),
    removed: Mapping[str, frozenset[object]] | None = None,
    ttl_s: int | None = None,
    seq: int = 0,
    time: uuid.UUID | None = None,
) -> Change:
    return Change(
        "ks",
        "t",
        operation,
        time or timeuuid_from_micros(TS, 7),
        dict(key),
        seq,
        dict(values or {}),
        deleted,
        dict(removed or {}),
        ttl_s,
        b"\x01",
    )


SET_CLAUSE_KEY = "WHERE p = ? AND a = ? AND b = ?"
CASES: list[tuple[str, Change, list[HubStatement]]] = [
    (
        "insert: key, values, a null, an overwritten set",
        change(
            Op.INSERT,
            values={"v": 5, "tags": frozenset({"x"})},
            deleted=frozenset({"ip", "tags"}),
        ),
        [
            HubStatement(
                f"INSERT INTO {T} (p, a, b, v, ip, tags) VALUES (?, ?, ?, ?, ?, ?) "
                "USING TIMESTAMP ? AND TTL ?",
                (*KEY, 5, None, {"x"}, TS, 0),
            )
        ],
    ),
    (
        "insert with TTL: the remaining TTL",
        change(Op.INSERT, values={"v": 5}, ttl_s=100),
        [
            HubStatement(
                f"INSERT INTO {T} (p, a, b, v) VALUES (?, ?, ?, ?) USING TIMESTAMP ? AND TTL ?",
                (*KEY, 5, TS, 90),
            )
        ],
    ),
    (
        "insert with map elements added: the insert, then an update at the same timestamp",
        change(Op.INSERT, values={"v": 1, "attrs": {"k": 2}}),
        [
            HubStatement(
                f"INSERT INTO {T} (p, a, b, v) VALUES (?, ?, ?, ?) USING TIMESTAMP ? AND TTL ?",
                (*KEY, 1, TS, 0),
            ),
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET attrs = attrs + ? {SET_CLAUSE_KEY}",
                (TS, 0, {"k": 2}, *KEY),
            ),
        ],
    ),
    (
        "update: atomic value, null, inet as text",
        change(
            Op.UPDATE,
            values={"v": 7, "ip": ipaddress.ip_address("10.0.0.1")},
            deleted=frozenset(),
        ),
        [
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET v = ?, ip = ? {SET_CLAUSE_KEY}",
                (TS, 0, 7, "10.0.0.1", *KEY),
            )
        ],
    ),
    (
        "update: deleted column",
        change(Op.UPDATE, deleted=frozenset({"v"})),
        [
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET v = ? {SET_CLAUSE_KEY}",
                (TS, 0, None, *KEY),
            )
        ],
    ),
    (
        "update: set elements added and removed, map keys removed",
        change(
            Op.UPDATE,
            values={"tags": frozenset({"n"})},
            removed={"tags": frozenset({"o"}), "attrs": frozenset({"k"})},
        ),
        [
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET tags = tags + ?, tags = tags - ?, "
                f"attrs = attrs - ? {SET_CLAUSE_KEY}",
                (TS, 0, {"n"}, {"o"}, {"k"}, *KEY),
            )
        ],
    ),
    (
        "update: map overwrite (tombstone at ts - 1 by the hub) and collection set to null",
        change(Op.UPDATE, values={"attrs": {"c": 3}}, deleted=frozenset({"attrs", "tags"})),
        [
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET tags = ?, attrs = ? {SET_CLAUSE_KEY}",
                (TS, 0, None, {"c": 3}, *KEY),
            )
        ],
    ),
    (
        "update: list appends in path order; removal by path skipped",
        change(
            Op.UPDATE,
            values={"hist": {PATH_2: 6, PATH_1: 5}},
            removed={"hist": frozenset({timeuuid_from_micros(TS - 9, 3)})},
        ),
        [
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET hist = hist + ? {SET_CLAUSE_KEY}",
                (TS, 0, [5, 6], *KEY),
            )
        ],
    ),
    (
        "update: list overwrite",
        change(Op.UPDATE, values={"hist": {PATH_1: 5}}, deleted=frozenset({"hist"})),
        [
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET hist = ? {SET_CLAUSE_KEY}",
                (TS, 0, [5], *KEY),
            )
        ],
    ),
    (
        "update: UDT fields set and removed",
        change(
            Op.UPDATE,
            values={"addr": {"street": "main", "zip": None}},
            removed={"addr": frozenset({1})},
        ),
        [
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET addr.street = ?, addr.zip = ? "
                f"{SET_CLAUSE_KEY}",
                (TS, 0, "main", None, *KEY),
            )
        ],
    ),
    (
        "update: UDT overwrite as a tuple in field order",
        change(Op.UPDATE, values={"addr": {"street": "a", "zip": 9}}, deleted=frozenset({"addr"})),
        [
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET addr = ? {SET_CLAUSE_KEY}",
                (TS, 0, ("a", 9), *KEY),
            )
        ],
    ),
    (
        "static row update: partition key only",
        change(Op.UPDATE, key={"p": "k"}, values={"s": "o"}),
        [
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET s = ? WHERE p = ?",
                (TS, 0, "o", "k"),
            )
        ],
    ),
    (
        # The expired marker is replayed as one expiring in a second at the same timestamp, so
        # it shadows any older live marker of the row on the hub (found by the demo).
        "expired TTL'd insert: tombstones, then a marker expiring at once",
        change(Op.INSERT, values={"v": 5, "tags": frozenset({"x"})}, ttl_s=5),
        [
            HubStatement(
                f"UPDATE {T} USING TIMESTAMP ? AND TTL ? SET v = ?, tags = tags - ? "
                f"{SET_CLAUSE_KEY}",
                (TS, 0, None, {"x"}, *KEY),
            ),
            HubStatement(
                f"INSERT INTO {T} (p, a, b) VALUES (?, ?, ?) USING TIMESTAMP ? AND TTL ?",
                (*KEY, TS, 1),
            ),
        ],
    ),
    (
        "row delete",
        change(Op.ROW_DELETE),
        [HubStatement(f"DELETE FROM {T} USING TIMESTAMP ? {SET_CLAUSE_KEY}", (TS, *KEY))],
    ),
    (
        "partition delete",
        change(Op.PARTITION_DELETE, key={"p": "k"}),
        [HubStatement(f"DELETE FROM {T} USING TIMESTAMP ? WHERE p = ?", (TS, "k"))],
    ),
    ("pre-image: nothing", change(Op.PRE_IMAGE, values={"v": 1}), []),
    ("post-image: nothing", change(Op.POST_IMAGE, values={"v": 1}), []),
]


@pytest.mark.parametrize(("name", "source", "expected"), CASES, ids=[c[0] for c in CASES])
def test_change_to_statements(name: str, source: Change, expected: list[HubStatement]) -> None:
    assert HubCql(TABLE, "ks", "hub_t").statements(source, NOW_S) == expected


def test_list_removals_are_counted_and_shapes_cached() -> None:
    builder = HubCql(TABLE, "ks", "hub_t")
    removal = change(Op.UPDATE, removed={"hist": frozenset({PATH_1, PATH_2})})
    assert builder.statements(removal, NOW_S) == []
    assert builder.skipped_list_removals == 2
    for value in (1, 2, 3):
        builder.statements(change(Op.UPDATE, values={"v": value}), NOW_S)
    builder.statements(change(Op.ROW_DELETE), NOW_S)
    assert builder.shapes == 2


def _range(
    start: dict[str, object], start_op: Op, end: dict[str, object], end_op: Op
) -> tuple[Change, Change]:
    time = timeuuid_from_micros(TS, 42)
    return (
        change(start_op, key={"p": "k", **start}, seq=0, time=time),
        change(end_op, key={"p": "k", **end}, seq=1, time=time),
    )


RANGE_CASES: list[tuple[str, tuple[Change, Change], list[tuple[str, tuple[object, ...]]]]] = [
    (
        "a >= 4 AND a < 6",
        _range({"a": 4}, Op.RANGE_DELETE_START_INCLUSIVE, {"a": 6}, Op.RANGE_DELETE_END_EXCLUSIVE),
        [("a >= ? AND a < ?", (4, 6))],
    ),
    (
        "a > 4 AND a <= 6",
        _range({"a": 4}, Op.RANGE_DELETE_START_EXCLUSIVE, {"a": 6}, Op.RANGE_DELETE_END_INCLUSIVE),
        [("a > ? AND a <= ?", (4, 6))],
    ),
    (
        "open start: a < 3",
        _range({}, Op.RANGE_DELETE_START_INCLUSIVE, {"a": 3}, Op.RANGE_DELETE_END_EXCLUSIVE),
        [("a < ?", (3,))],
    ),
    (
        "open end: a > 3",
        _range({"a": 3}, Op.RANGE_DELETE_START_EXCLUSIVE, {}, Op.RANGE_DELETE_END_INCLUSIVE),
        [("a > ?", (3,))],
    ),
    (
        "prefix equality: a = 7",
        _range({"a": 7}, Op.RANGE_DELETE_START_INCLUSIVE, {"a": 7}, Op.RANGE_DELETE_END_INCLUSIVE),
        [("a = ?", (7,))],
    ),
    (
        "DESC column flips: a = 7 AND b before 'b' in clustering order is b > 'b'",
        _range(
            {"a": 7},
            Op.RANGE_DELETE_START_INCLUSIVE,
            {"a": 7, "b": "b"},
            Op.RANGE_DELETE_END_EXCLUSIVE,
        ),
        [("a = ? AND b > ?", (7, "b"))],
    ),
    (
        "DESC slice both sides",
        _range(
            {"a": 7, "b": "y"},
            Op.RANGE_DELETE_START_EXCLUSIVE,
            {"a": 7, "b": "c"},
            Op.RANGE_DELETE_END_INCLUSIVE,
        ),
        [("a = ? AND b < ? AND b >= ?", (7, "y", "c"))],
    ),
    (
        "multi-column bounds: split into slices of one timestamp",
        _range(
            {"a": 1, "b": "m"},
            Op.RANGE_DELETE_START_INCLUSIVE,
            {"a": 3, "b": "f"},
            Op.RANGE_DELETE_END_EXCLUSIVE,
        ),
        [
            ("a > ? AND a < ?", (1, 3)),
            ("a = ? AND b <= ?", (1, "m")),
            ("a = ? AND b > ?", (3, "f")),
        ],
    ),
    (
        "empty range (exclusive equal bounds): nothing",
        _range({"a": 7}, Op.RANGE_DELETE_START_EXCLUSIVE, {"a": 7}, Op.RANGE_DELETE_END_INCLUSIVE),
        [],
    ),
]


@pytest.mark.parametrize(("name", "bounds", "slices"), RANGE_CASES, ids=[c[0] for c in RANGE_CASES])
def test_range_delete_statements(
    name: str, bounds: tuple[Change, Change], slices: list[tuple[str, tuple[object, ...]]]
) -> None:
    expected = [
        HubStatement(f"DELETE FROM {T} USING TIMESTAMP ? WHERE p = ? AND {where}", (TS, "k", *v))
        for where, v in slices
    ]
    assert HubCql(TABLE, "ks", "hub_t").range_delete(*bounds) == expected


def test_range_unbounded_on_both_sides_is_refused() -> None:
    with pytest.raises(InvalidChange):
        range_slices((), True, (), True)


def test_bounds_pair_in_log_order_and_duplicates_drop() -> None:
    first = _range(
        {"a": 1}, Op.RANGE_DELETE_START_INCLUSIVE, {"a": 2}, Op.RANGE_DELETE_END_INCLUSIVE
    )
    second = (
        change(Op.RANGE_DELETE_START_INCLUSIVE, key={"p": "k", "a": 5}, time=PATH_2, seq=0),
        change(Op.RANGE_DELETE_END_INCLUSIVE, key={"p": "k", "a": 9}, time=PATH_2, seq=1),
    )
    lonely = change(Op.RANGE_DELETE_END_EXCLUSIVE, key={"p": "k", "a": 3}, time=PATH_1, seq=1)
    shuffled = [second[1], first[1], lonely, first[0], second[0], first[1]]
    pairs, alone = pair_range_bounds(TABLE, shuffled)
    assert pairs == [first, second]
    assert alone == [lonely]


def test_driver_values() -> None:
    assert driver_value(MapType(TEXT, SetType(INT, frozen=True)), {"a": frozenset({1})}) == {
        "a": {1}
    }
    assert driver_value(ADDRESS, {"street": "s"}) == ("s", None)
    assert driver_value(INET, ipaddress.ip_address("::1")) == "::1"
